"""The short load test that runs in CI (the full one: python -m tests.load.load_test)."""

import pytest

from tests.load.load_test import run

pytestmark = pytest.mark.load


def test_concurrent_sessions_cancels_and_bad_input():
    clients, races = 4, 2
    report = run(clients=clients, races=races, tokens=16, long_tokens=128)
    roles = [(i + r) % 4 for i in range(clients) for r in range(races)]
    assert report["completed"] == sum(role in (0, 3) for role in roles)
    assert report["wrong_output"] == 0  # each session got exactly its own prompt's tokens
    assert report["errors_by_kind"] == {"expected: bad input refused": roles.count(1)}
    assert report["cancelled"] == roles.count(2)
    # after a cancel or a disconnect the next race does not wait for the aborted one to finish
    assert all(seconds < 0.5 * report["long_race_uninterrupted_s"] for seconds in report["freed_after_abort_s"])
    assert report["first_token_p95_s"] is not None
    assert report["after_mib"] <= report["baseline_mib"] * 1.15 + 100
