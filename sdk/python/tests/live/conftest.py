"""Live tests: they run against the node named by WARREN_URL / WARREN_API_KEY and fail
(not skip) when those are missing. Every sandbox id of a run starts with `py-<random>-`;
all of them (and their snapshots) are deleted at the end of the session."""

from __future__ import annotations

import os
import secrets
import time

import httpx
import pytest

import warren

RUN = f"py-{secrets.token_hex(3)}"


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.live)


def new_id(tag: str) -> str:
    """A sandbox id unique to this run."""
    return f"{RUN}-{tag}"


@pytest.fixture(scope="session")
def live_env() -> tuple[str, str]:
    url = os.environ.get("WARREN_URL")
    key = os.environ.get("WARREN_API_KEY")
    if not url or not key:
        pytest.fail(
            "live tests need WARREN_URL and WARREN_API_KEY (e.g. a `warren dev` node); "
            "run `pytest tests/unit` for the tests that need no node",
            pytrace=False,
        )
    return url, key


@pytest.fixture(scope="session")
def w(live_env):
    url, key = live_env
    # Bounded: no call of the suite may hang longer than this.
    client = warren.Warren(url, key, timeout=httpx.Timeout(connect=10, read=120, write=60, pool=30))
    try:
        client.health()
    except warren.WarrenError as e:
        pytest.fail(f"the node at {url} does not answer: {e}", pytrace=False)
    yield client
    _cleanup(client)
    client.close()


def _cleanup(client: warren.Warren) -> None:
    deadline = time.monotonic() + 60
    try:
        boxes = [s.id for s in client.list_sandboxes() if s.id.startswith(RUN + "-")]
    except warren.WarrenError:
        boxes = []
    for sid in boxes:
        if time.monotonic() > deadline:
            break
        try:
            client.delete_sandbox(sid)
        except warren.WarrenError as e:  # pragma: no cover - reported, not fatal
            print(f"cleanup: cannot delete {sid}: {e}")
    try:
        for snap in client.list_snapshots():
            if snap.sandbox.startswith(RUN + "-"):
                client.delete_snapshot(snap.id)
    except warren.WarrenError as e:  # pragma: no cover
        print(f"cleanup: snapshots: {e}")


@pytest.fixture(scope="session")
def sb(w):
    """The shared sandbox of the sync tests."""
    s = w.sandbox(new_id("sync"))
    s.start()
    return s


@pytest.fixture(scope="session")
def async_sandbox_id(w):
    """The shared sandbox of the async tests (made here so its start is not timed per test)."""
    sid = new_id("async")
    w.sandbox(sid).start()
    return sid


@pytest.fixture
def anyio_backend():
    return "asyncio"
