import json

import pytest

import warren
from warren import error_from_response


def body(code, **kw):
    return json.dumps({"code": code, "message": "m", "retryable": code in ("UNAVAILABLE",), **kw}).encode()


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (400, "INVALID_ARGUMENT", warren.InvalidArgumentError),
        (401, "UNAUTHORIZED", warren.UnauthorizedError),
        (403, "FORBIDDEN", warren.ForbiddenError),
        (403, "EGRESS_DENIED", warren.EgressDeniedError),
        (404, "SANDBOX_NOT_FOUND", warren.SandboxNotFoundError),
        (404, "FILE_NOT_FOUND", warren.WarrenFileNotFoundError),
        (404, "PROCESS_NOT_FOUND", warren.ProcessNotFoundError),
        (404, "CONTEXT_NOT_FOUND", warren.ContextNotFoundError),
        (404, "SNAPSHOT_NOT_FOUND", warren.SnapshotNotFoundError),
        (404, "INVALID_TOKEN", warren.InvalidTokenError),
        (404, "NOT_FOUND", warren.NotFoundError),
        (408, "READY_TIMEOUT", warren.ReadyTimeoutError),
        (409, "CONFLICT", warren.ConflictError),
        (409, "PROCESS_EXITED", warren.ProcessExitedError),
        (409, "IS_A_DIRECTORY", warren.WarrenIsADirectoryError),
        (409, "NOT_A_DIRECTORY", warren.WarrenNotADirectoryError),
        (409, "ALREADY_EXISTS", warren.AlreadyExistsError),
        (410, "SESSION_TERMINATED", warren.SessionTerminatedError),
        (413, "PAYLOAD_TOO_LARGE", warren.PayloadTooLargeError),
        (422, "GIT_FAILED", warren.GitFailedError),
        (422, "UNSUPPORTED_LANGUAGE", warren.UnsupportedLanguageError),
        (426, "UPGRADE_REQUIRED", warren.UpgradeRequiredError),
        (429, "RATE_LIMITED", warren.RateLimitedError),
        (500, "INTERNAL", warren.InternalError),
        (502, "PORT_NOT_LISTENING", warren.PortNotListeningError),
        (502, "BAD_GATEWAY", warren.BadGatewayError),
        (503, "UNAVAILABLE", warren.UnavailableError),
        (503, "CAPACITY_EXHAUSTED", warren.CapacityExhaustedError),
        (504, "UPSTREAM_TIMEOUT", warren.UpstreamTimeoutError),
    ],
)
def test_every_code_maps_to_its_class(status, code, cls):
    e = error_from_response(status, body(code), {"x-request-id": "r1", "x-warren-node": "n1"})
    assert type(e) is cls
    assert isinstance(e, warren.WarrenError)
    assert (e.code, e.status, e.request_id, e.node, e.message) == (code, status, "r1", "n1", "m")


def test_families_and_details():
    e = error_from_response(409, body("PROCESS_EXITED", details={"exit_code": 3}))
    assert isinstance(e, warren.ConflictError) and e.exit_code == 3
    e = error_from_response(410, body("SESSION_TERMINATED", details={"exit_code": 42, "stdout": "bye\n"}))
    assert (e.exit_code, e.stdout) == (42, "bye\n")
    assert isinstance(error_from_response(404, body("FILE_NOT_FOUND")), warren.NotFoundError)
    assert isinstance(error_from_response(503, body("CAPACITY_EXHAUSTED")), warren.UnavailableError)


def test_retryable_follows_the_body_and_the_code():
    assert error_from_response(503, body("UNAVAILABLE")).retryable
    e = error_from_response(503, json.dumps({"code": "CAPACITY_EXHAUSTED", "message": "full"}).encode())
    assert e.retryable, "no `retryable` in the body: the code decides"
    assert not error_from_response(400, body("INVALID_ARGUMENT")).retryable


def test_unknown_codes_fall_back_to_the_status_family():
    e = error_from_response(404, body("SOMETHING_NEW"))
    assert type(e) is warren.NotFoundError and e.code == "SOMETHING_NEW"
    e = error_from_response(507, body("STORAGE_FULL"))
    assert type(e) is warren.ServerError


def test_non_api_bodies_and_retry_after():
    e = error_from_response(502, b"<html>bad gateway</html>")
    assert isinstance(e, warren.BadGatewayError) and "bad gateway" in e.message
    e = error_from_response(503, b"", {"retry-after": "2"})
    assert isinstance(e, warren.UnavailableError) and e.retryable and e.retry_after == 2.0
    e = error_from_response(429, b'{"code":"RATE_LIMITED","message":"slow down"}', {"retry-after": "1.5"})
    assert e.retry_after == 1.5 and e.retryable


def test_egress_proxy_body_keeps_its_extra_fields():
    raw = json.dumps({"code": "EGRESS_DENIED", "message": "no", "host": "example.com", "sandbox": "s"}).encode()
    e = error_from_response(403, raw)
    assert isinstance(e, warren.EgressDeniedError) and e.details["host"] == "example.com"
