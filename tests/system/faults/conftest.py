"""The fault tests' shared set-up.

The 10,000 randomized trials of test_replicas.py are CPU work in this process, while the
other modules mostly wait (on reclaim timers, Slack client timeouts, child processes). So
when the first test of this package runs, and the trials test is selected, the trials start
in a background thread; test_replicas.py collects their result (or starts them itself).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .harness import start_early, stop_early


@pytest.fixture(scope="session", autouse=True)
def _trials_early(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    from .test_replicas import TRIALS_TEST, trials

    if any(item.name.startswith(TRIALS_TEST) for item in request.session.items):
        start_early("trials", trials, tmp_path_factory.mktemp("trials"))
    yield
    stop_early()
