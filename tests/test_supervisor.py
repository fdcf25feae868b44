"""The supervisor and the backoff: crashes are logged once and handled per policy, restart
loops are bounded, close cancels and awaits everything."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from aiokafka07.backoff import Backoff
from aiokafka07.supervisor import CrashPolicy, Supervisor, SupervisorClosedError

# -- Backoff -------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(0.1, 1.0, jitter=0)
    assert [backoff.failed() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.succeeded()
    assert backoff.failed() == 0.1


def test_backoff_jitter_stays_within_its_fraction() -> None:
    backoff = Backoff(1.0, 1.0, jitter=0.2)
    delays = [backoff.failed() for _ in range(500)]
    assert all(0.8 <= d <= 1.2 for d in delays)
    assert max(delays) - min(delays) > 0.2  # it does vary


def test_backoff_exhausted_after_max_attempts() -> None:
    backoff = Backoff(0.01, 0.1, max_attempts=3)
    for _ in range(3):
        assert not backoff.exhausted
        backoff.failed()
    assert backoff.exhausted


def test_backoff_huge_failure_counts_stay_at_the_cap() -> None:
    backoff = Backoff(0.5, 30.0, jitter=0)
    assert backoff.delay(10_000) == 30.0


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((0, 1), {}),
        ((-1, 1), {}),
        ((1, 0.5), {}),
        (("1", 2), {}),
        ((1, 2), {"jitter": 1.0}),
        ((1, 2), {"max_attempts": -1}),
    ],
)
def test_backoff_refuses_bad_settings(args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"backoff|max_attempts"):
        Backoff(*args, **kwargs)  # type: ignore[arg-type]


# -- Supervisor ---------------------------------------------------------------------


async def test_escalate_logs_once_with_traceback_and_calls_the_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[BaseException] = []

    async def boom() -> None:
        raise KeyError("lost")

    supervisor = Supervisor("owner", logging.getLogger("aiokafka07.test"))
    with caplog.at_level(logging.ERROR, logger="aiokafka07.test"):
        task = supervisor.spawn("worker", boom(), policy=CrashPolicy.ESCALATE, on_crash=seen.append)
        await task
    assert [type(e) for e in seen] == [KeyError]
    crashes = [r for r in caplog.records if "owner/worker crashed" in r.getMessage()]
    assert len(crashes) == 1
    assert crashes[0].exc_info is not None
    assert crashes[0].exc_info[0] is KeyError
    assert task.exception() is None  # nothing left for "never retrieved"
    assert supervisor.crashes[0][0] == "owner/worker"
    await supervisor.aclose()


async def test_restart_runs_again_after_backoff_then_gives_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = 0
    errors: list[BaseException] = []

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        raise RuntimeError(f"run {runs}")

    gave_up: list[tuple[BaseException, int]] = []
    supervisor = Supervisor("owner")
    with caplog.at_level(logging.ERROR, logger="aiokafka07.supervisor"):
        task = supervisor.spawn(
            "fetcher",
            flaky,
            policy=CrashPolicy.RESTART,
            on_crash=errors.append,
            backoff=Backoff(0.001, 0.002, jitter=0),
            max_restarts=3,
            on_give_up=lambda exc: gave_up.append((exc, len(errors))),
        )
        await asyncio.wait_for(task, 5)
    assert runs == 4  # the first run and three restarts
    assert [str(e) for e in errors] == ["run 1", "run 2", "run 3", "run 4"]
    assert [(str(e), n) for e, n in gave_up] == [("run 4", 4)]  # once, after on_crash
    assert any("giving up" in r.getMessage() for r in caplog.records)
    await supervisor.aclose()


async def test_restart_ends_when_the_task_returns_normally() -> None:
    runs = 0

    async def once_bad() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("first run fails")

    supervisor = Supervisor("owner")
    task = supervisor.spawn(
        "job", once_bad, policy=CrashPolicy.RESTART, backoff=Backoff(0.001, 0.01)
    )
    await asyncio.wait_for(task, 5)
    assert runs == 2
    await supervisor.aclose()


async def test_a_raising_crash_handler_is_logged_and_survived(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def handler(exc: BaseException) -> None:
        raise ValueError("handler broke")

    async def boom() -> None:
        raise KeyError("x")

    supervisor = Supervisor("owner")
    with caplog.at_level(logging.ERROR, logger="aiokafka07.supervisor"):
        await supervisor.spawn("w", boom(), policy=CrashPolicy.ESCALATE, on_crash=handler)
    assert any("crash handler of owner/w raised" in r.getMessage() for r in caplog.records)
    await supervisor.aclose()


async def test_aclose_cancels_and_awaits_every_task_then_refuses_new_ones() -> None:
    cancelled: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    supervisor = Supervisor("owner")
    for name in ("a", "b", "c"):
        supervisor.spawn(name, forever(name), policy=CrashPolicy.LOG)
    await asyncio.sleep(0)
    await asyncio.wait_for(supervisor.aclose(), 5)
    assert sorted(cancelled) == ["a", "b", "c"]
    assert not supervisor.tasks
    with pytest.raises(SupervisorClosedError):
        supervisor.spawn("late", forever("late"), policy=CrashPolicy.LOG)
    gc.collect()  # the refused coroutine was closed: no "never awaited" warning


async def test_aclose_names_tasks_that_ignore_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    supervisor = Supervisor("owner")
    task = supervisor.spawn("stubborn", stubborn(), policy=CrashPolicy.LOG)
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="aiokafka07.supervisor"):
        await supervisor.aclose(timeout=0.05)
    assert any("owner/stubborn" in r.getMessage() for r in caplog.records)
    release.set()
    await asyncio.wait_for(task, 5)


async def test_policy_arguments_are_checked() -> None:
    supervisor = Supervisor("owner")

    async def noop() -> None:
        return None

    with pytest.raises(ValueError, match="on_crash"):
        supervisor.spawn("x", noop(), policy=CrashPolicy.ESCALATE)
    with pytest.raises(TypeError, match="function"):
        supervisor.spawn("x", noop(), policy=CrashPolicy.RESTART)
    await supervisor.aclose()


async def test_crash_records_are_bounded_but_counted() -> None:
    async def boom() -> None:
        raise RuntimeError("again")

    supervisor = Supervisor("owner")
    total = Supervisor.KEPT_CRASHES + 20
    for i in range(total):
        await supervisor.spawn(f"t{i}", boom(), policy=CrashPolicy.LOG)
    assert supervisor.crash_count == total
    assert len(supervisor.crashes) == Supervisor.KEPT_CRASHES
    assert supervisor.crashes[-1][0] == f"owner/t{total - 1}"
    await supervisor.aclose()
