"""The models agree with the OpenAPI document (docs/openapi.json, generated from the API's
wire types): for each response schema below, every required field of the schema is a field
of its model (under the model's name for it, where it has another), and every field of the
model is a field of the schema, or one the SDK adds, listed here with the reason.

`raw` (what the server sent, kept whole so fields of a newer node are not lost) is on most
models and stands for no field of its own."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import NamedTuple

import pytest

from warren import _models as m

DOCUMENT = Path(__file__).resolve().parents[4] / "docs" / "openapi.json"


class Pair(NamedTuple):
    schema: str
    model: type
    #: The schema's field -> the model's field, where the names differ.
    renamed: dict[str, str] = {}
    #: Fields the SDK adds, which no answer carries.
    sdk_only: frozenset[str] = frozenset()


PAIRS = [
    # `created`: the call's HTTP status (201), not a field of the body.
    Pair("Sandbox", m.SandboxInfo, sdk_only=frozenset({"created"})),
    Pair("Resources", m.Resources),
    # The exact bytes, decoded from the base64 fields.
    Pair(
        "ExecResponse",
        m.ExecResult,
        renamed={"stdout_base64": "stdout_bytes", "stderr_base64": "stderr_bytes"},
    ),
    Pair("Process", m.ProcessInfo),
    Pair("LogsResponse", m.ProcessLogs),
    # `match`: the local re.Match of the pattern on the line.
    Pair("WaitLogResponse", m.LogMatch, sdk_only=frozenset({"match"})),
    Pair("WaitPortResponse", m.PortReady),
    Pair("WriteFileResponse", m.WriteFileResult),
    Pair("Stat", m.FileInfo),
    Pair("ListEntry", m.FileEntry),
    Pair("GitCheckoutResponse", m.GitCheckoutResult),
    Pair("SessionInfo", m.SessionInfo),
    Pair("ExposedPort", m.ExposedPort),
    Pair("Context", m.CodeContext),
    Pair("ExecutionResult", m.Result),
    Pair("ExecutionError", m.ExecutionError),
    # stdout and stderr are kept chunk by chunk, as streamed runs deliver them, in `logs`.
    Pair("RunCodeResponse", m.Execution, renamed={"stdout": "logs", "stderr": "logs"}),
    Pair("Snapshot", m.Snapshot),
    Pair("Ticket", m.Ticket),
]


@pytest.fixture(scope="module")
def schemas() -> dict:
    return json.loads(DOCUMENT.read_text())["components"]["schemas"]


def model_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - {"raw"}


def disagreements(schema: dict, pair: Pair) -> list[str]:
    """What is wrong between one schema and its model (empty when they agree)."""
    props = set(schema.get("properties", {}))
    required = set(schema.get("required", []))
    fields = model_fields(pair.model)
    name = lambda wire: pair.renamed.get(wire, wire)  # noqa: E731
    wrong = [f"required field {f!r} is not in {pair.model.__name__}" for f in sorted(required) if name(f) not in fields]
    from_schema = {name(p) for p in props}
    wrong += [
        f"{pair.model.__name__}.{f} is not a field of {pair.schema}"
        for f in sorted(fields - from_schema - pair.sdk_only)
    ]
    # The exceptions stay true: a rename names real fields; an SDK-only field is not the schema's.
    wrong += [f"renamed {w!r} is not a field of {pair.schema}" for w in sorted(set(pair.renamed) - props)]
    wrong += [f"renamed to {s!r}, not a field of the model" for s in sorted(set(pair.renamed.values()) - fields)]
    wrong += [f"SDK-only {s!r} is not a field of the model" for s in sorted(pair.sdk_only - fields)]
    wrong += [f"SDK-only {s!r} is a field of {pair.schema}" for s in sorted(pair.sdk_only & props)]
    return wrong


@pytest.mark.parametrize("pair", PAIRS, ids=[p.schema for p in PAIRS])
def test_the_model_names_the_fields_of_its_schema(schemas, pair):
    assert pair.schema in schemas, f"docs/openapi.json has no schema {pair.schema}"
    assert disagreements(schemas[pair.schema], pair) == []


def test_a_missing_or_an_extra_field_is_seen(schemas):
    """The check itself: a schema with a required field the model lacks, and a model with a
    field the schema lacks, each disagree."""
    pair = Pair("Process", m.ProcessInfo)
    more = json.loads(json.dumps(schemas["Process"]))
    more["properties"]["cgroup"] = {"type": "string"}
    more["required"].append("cgroup")
    assert disagreements(more, pair) == ["required field 'cgroup' is not in ProcessInfo"]
    fewer = json.loads(json.dumps(schemas["Process"]))
    del fewer["properties"]["ended_at"]
    assert disagreements(fewer, pair) == ["ProcessInfo.ended_at is not a field of Process"]
