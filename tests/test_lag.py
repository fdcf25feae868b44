"""The lag evaluator (aiokafka07.monitor.lag): each Burrow rule as adapted to 0.7, and
properties over any sequence of samples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07.monitor import LagStatus, LagWindow, OffsetSample, PartitionLag, worst

INTERVAL = 1000  # the group's auto-commit interval in these tests (ms)


def feed(window: LagWindow, commits: list[tuple[int, int]], *, start: int = 0) -> int:
    """Commit ``(offset, log_end)`` pairs one interval apart; the last commit's time."""
    at = start
    for i, (offset, end) in enumerate(commits):
        at = start + i * INTERVAL
        window.observe(OffsetSample(committed=offset, log_end=end, log_start=0, at_ms=at))
    return at


def test_no_sample_is_ok_without_a_lag() -> None:
    assert LagWindow().evaluate(0) == PartitionLag(LagStatus.OK, None, "not observed yet")


def test_err_past_the_log_end() -> None:
    window = LagWindow(commits=3)
    feed(window, [(100, 100), (150, 120)])
    verdict = window.evaluate(2 * INTERVAL)
    assert verdict.status is LagStatus.ERR
    assert verdict.lag == -30
    assert "past the log end 120" in verdict.reason


def test_err_before_the_log_start() -> None:
    window = LagWindow(commits=3)
    window.observe(OffsetSample(committed=10, log_end=500, log_start=200, at_ms=0))
    verdict = window.evaluate(1)
    assert verdict.status is LagStatus.ERR
    assert "before the log start 200" in verdict.reason


def test_unknown_log_start_is_not_an_error() -> None:
    window = LagWindow(commits=3)
    window.observe(OffsetSample(committed=10, log_end=500, log_start=None, at_ms=0))
    assert window.evaluate(1).status is LagStatus.OK


def test_ok_at_lag_zero_even_long_after_the_last_commit() -> None:
    window = LagWindow(commits=3, min_stop_ms=0)
    feed(window, [(0, 10), (10, 10)])
    verdict = window.evaluate(10**9)
    assert (verdict.status, verdict.lag) == (LagStatus.OK, 0)


def test_stop_after_the_window_span_without_a_commit() -> None:
    window = LagWindow(commits=5, min_stop_ms=0)
    last = feed(window, [(0, 50), (10, 60), (20, 70), (30, 80), (40, 90)])  # span 4 INTERVAL
    assert window.evaluate(last + 4 * INTERVAL).status is LagStatus.OK  # not longer than the span
    verdict = window.evaluate(last + 4 * INTERVAL + 1)
    assert (verdict.status, verdict.lag) == (LagStatus.STOP, 50)
    assert "no commit for 4001 ms (window span 4000 ms)" in verdict.reason


def test_stop_needs_the_stated_minimum_when_nothing_moved() -> None:
    window = LagWindow(commits=5, min_stop_ms=3 * INTERVAL)
    window.observe(OffsetSample(committed=0, log_end=50, log_start=0, at_ms=0))  # span 0
    assert window.evaluate(3 * INTERVAL).status is LagStatus.OK
    assert window.evaluate(3 * INTERVAL + 1).status is LagStatus.STOP


def test_stall_when_full_window_commits_do_not_move() -> None:
    window = LagWindow(commits=4)
    last = feed(window, [(7, 20), (7, 30), (7, 40)])
    assert window.evaluate(last).status is LagStatus.OK  # 3 of 4: not full yet
    last = feed(window, [(7, 50)], start=last + INTERVAL)
    verdict = window.evaluate(last)
    assert (verdict.status, verdict.lag) == (LagStatus.STALL, 43)
    assert "offset 7 did not move over 4 commits" in verdict.reason


def test_warn_when_lag_grows_at_every_commit() -> None:
    window = LagWindow(commits=4)
    last = feed(window, [(0, 10), (5, 20), (10, 30), (15, 40)])
    verdict = window.evaluate(last)
    assert (verdict.status, verdict.lag) == (LagStatus.WARN, 25)
    assert "lag grew at every one of 4 commits (10 to 25)" in verdict.reason


def test_ok_when_lag_shrinks_once_in_the_window() -> None:
    window = LagWindow(commits=4)
    last = feed(window, [(0, 10), (5, 20), (18, 30), (20, 40)])  # 10, 15, 12, 20
    assert window.evaluate(last).status is LagStatus.OK


def test_rewriting_the_same_write_is_not_a_commit() -> None:
    window = LagWindow(commits=3)
    for end in (10, 20, 30, 40):
        window.observe(OffsetSample(committed=5, log_end=end, log_start=0, at_ms=0))
    assert len(window) == 1
    assert window.evaluate(0).lag == 35  # but the log end is refreshed


def test_an_offset_reset_restarts_the_window() -> None:
    window = LagWindow(commits=3)
    last = feed(window, [(50, 60), (60, 70), (70, 80)])
    window.observe(OffsetSample(committed=0, log_end=80, log_start=0, at_ms=last + INTERVAL))
    assert len(window) == 1


def test_window_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="at least 2 commits"):
        LagWindow(commits=1)
    with pytest.raises(ValueError, match="min_stop_ms"):
        LagWindow(min_stop_ms=-1)


def test_worst_is_the_most_severe() -> None:
    assert worst([]) is LagStatus.OK
    assert worst([LagStatus.WARN, LagStatus.ERR, LagStatus.STALL]) is LagStatus.ERR
    assert worst(iter([LagStatus.STALL, LagStatus.STOP])) is LagStatus.STOP


# -- properties ------------------------------------------------------------------------

offsets = st.integers(min_value=0, max_value=10**12)
samples = st.builds(
    OffsetSample,
    committed=offsets,
    log_end=offsets,
    log_start=st.none() | offsets,
    at_ms=st.integers(min_value=0, max_value=10**9),
)


@given(st.lists(samples, max_size=40), st.integers(min_value=2, max_value=12), offsets)
def test_err_whenever_the_offset_is_outside_the_log(
    history: list[OffsetSample], size: int, now: int
) -> None:
    window = LagWindow(commits=size)
    for sample in history:
        window.observe(sample)
    if not history:
        return
    latest = history[-1]
    outside = latest.committed > latest.log_end or (
        latest.log_start is not None and latest.committed < latest.log_start
    )
    verdict = window.evaluate(now)
    assert (verdict.status is LagStatus.ERR) == outside
    assert verdict.lag == latest.log_end - latest.committed


@given(st.lists(samples, max_size=60), st.integers(min_value=2, max_value=8))
def test_a_window_never_grows_past_its_size(history: list[OffsetSample], size: int) -> None:
    window = LagWindow(commits=size)
    for sample in history:
        window.observe(sample)
        assert 1 <= len(window) <= size


@given(st.lists(samples, max_size=40), st.integers(min_value=2, max_value=12), offsets)
def test_status_is_deterministic_in_the_samples(
    history: list[OffsetSample], size: int, now: int
) -> None:
    first, second = LagWindow(commits=size), LagWindow(commits=size)
    for sample in history:
        first.observe(sample)
    for sample in history:
        second.observe(sample)
    assert first.evaluate(now) == second.evaluate(now)
    assert first.evaluate(now) == first.evaluate(now)  # evaluating changes nothing


@given(st.lists(samples, min_size=1, max_size=40), offsets)
def test_lag_zero_inside_the_log_is_ok(history: list[OffsetSample], now: int) -> None:
    window = LagWindow()
    for sample in history:
        window.observe(sample)
    latest = history[-1]
    caught_up = OffsetSample(latest.log_end, latest.log_end, None, latest.at_ms)
    window.observe(caught_up)
    assert window.evaluate(now).status is LagStatus.OK


@given(st.lists(st.sampled_from(list(LagStatus)), max_size=10))
def test_worst_is_the_max(statuses: list[LagStatus]) -> None:
    assert worst(statuses) == max(statuses, default=LagStatus.OK)
    assert all(worst(statuses) >= status for status in statuses)
