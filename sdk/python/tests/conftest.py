"""Shared test settings: every test has a wall-clock deadline (`@pytest.mark.deadline(s)`,
default 90 s), enforced with SIGALRM so that a hang fails the test instead of the run."""

from __future__ import annotations

import signal
import threading

import pytest

DEFAULT_DEADLINE = 90.0


class DeadlineExceeded(Exception):
    pass


@pytest.fixture(autouse=True)
def _deadline(request: pytest.FixtureRequest):
    marker = request.node.get_closest_marker("deadline")
    seconds = float(marker.args[0]) if marker else DEFAULT_DEADLINE
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):  # noqa: ARG001
        raise DeadlineExceeded(f"{request.node.nodeid} exceeded its deadline of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
