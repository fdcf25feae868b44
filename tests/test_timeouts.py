"""The library's one bounded wait (``aiokafka07.timeouts.wait_for``): results, timeouts,
and no lost cancellation (``asyncio.wait_for`` loses one on Python 3.10 and 3.11)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiokafka07.timeouts import wait_for

WaitFor = Callable[[Awaitable[Any], "float | None"], Awaitable[Any]]


async def _cancelled_as_the_work_ends(waiter: WaitFor) -> bool:
    """Cancel a task in the very iteration the work it waits for ends (the work's wake-up
    is scheduled first); whether the task ended cancelled."""
    event = asyncio.Event()
    went_on = asyncio.Event()

    async def waiting() -> None:
        await waiter(event.wait(), 10)
        went_on.set()  # only if the cancellation was lost
        await asyncio.sleep(0.05)

    task = asyncio.ensure_future(waiting())
    for _ in range(3):
        await asyncio.sleep(0)  # the task (and its work) is waiting for the event
    event.set()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.done()
    return task.cancelled() and not went_on.is_set()


def _slow(ended: asyncio.Event) -> Awaitable[None]:
    """Ten seconds of sleep that sets ``ended`` however it ends."""

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            ended.set()

    return slow()


async def test_a_cancellation_as_the_work_ends_is_never_lost() -> None:
    for _ in range(20):
        assert await _cancelled_as_the_work_ends(wait_for)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="asyncio.wait_for is fixed on 3.12")
async def test_asyncio_wait_for_loses_that_cancellation_here() -> None:
    """What :func:`wait_for` exists for: the same race loses the cancellation with
    ``asyncio.wait_for`` on this Python (so the test above can fail)."""
    assert not await _cancelled_as_the_work_ends(asyncio.wait_for)


async def test_result_timeout_and_cancellation_of_the_work() -> None:
    assert await wait_for(asyncio.sleep(0, "done"), 1) == "done"
    assert await wait_for(asyncio.sleep(0, "no bound"), None) == "no bound"

    ended = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(asyncio.TimeoutError):
        await wait_for(_slow(ended), 0.05)
    assert loop.time() - started < 2
    assert ended.is_set()  # cancelled and awaited before the timeout is raised

    future: asyncio.Future[int] = loop.create_future()
    with pytest.raises(asyncio.TimeoutError):
        await wait_for(future, 0)
    assert future.cancelled()

    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await wait_for(fails(), 1)


async def test_cancelling_the_caller_cancels_the_work() -> None:
    ended = asyncio.Event()
    task = asyncio.ensure_future(wait_for(_slow(ended), 10))
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.cancelled()
    assert ended.is_set()
