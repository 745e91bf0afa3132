"""The daemon's collector setting (``daemon.util.collector``)."""

import gc
from collections.abc import Iterator

import pytest

from daemon.util.collector import DAEMON_YOUNG_THRESHOLD, tune_for_daemon


@pytest.fixture
def restore_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_a_daemon_collects_the_young_generation_less_often_and_the_older_ones_as_before(
    restore_thresholds: tuple[int, int, int],
) -> None:
    gc.set_threshold(700, 11, 12)
    tune_for_daemon()
    assert gc.get_threshold() == (DAEMON_YOUNG_THRESHOLD, 11, 12)
    assert DAEMON_YOUNG_THRESHOLD > 700
