"""The one bounded wait of the library: :func:`wait_for`, ``asyncio.wait_for`` without its
lost cancellations.

On Python 3.10 and 3.11, ``asyncio.wait_for`` returns the awaited result when its task is
cancelled in the same event-loop iteration as the awaited work ends: the cancellation is
lost, and a task that loops (a fetcher idling between fetches, aiozk's search for a
server) goes on as if never cancelled, so that whoever cancelled it waits for its end in
vain. Python 3.12 rebuilt ``asyncio.wait_for`` on ``asyncio.timeout``, which counts
cancellations and loses none. Every bounded wait of the library goes through this
module's :func:`wait_for`, which does the same on 3.11 and, on 3.10, runs the work in a
task of its own with a timer that cancels it, where a cancellation of the caller is
delivered by the event loop after the work's end, never dropped.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")

_CONTRACT = """Await ``aw`` for at most ``timeout`` seconds (None: no bound) and return its
result, or cancel it (and wait for its end) and raise :class:`TimeoutError`. A
cancellation of the caller always raises ``CancelledError``."""

if sys.version_info >= (3, 11):

    async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
        async with asyncio.timeout(timeout):
            return await aw

else:  # pragma: no cover - Python 3.10 (run by CI's fast-3.10 session)

    async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
        work = asyncio.ensure_future(aw)
        if timeout is None:
            return await work
        expired = False

        def expire() -> None:
            nonlocal expired
            if not work.done():
                expired = True
                work.cancel()

        timer = asyncio.get_running_loop().call_later(max(timeout, 0.0), expire)
        try:
            # Cancelling this task cancels ``work``; if ``work`` has already ended, the
            # loop raises the cancellation here once this task resumes (never lost).
            return await work
        except asyncio.CancelledError:
            if expired and work.cancelled():
                raise asyncio.TimeoutError from None
            raise
        finally:
            timer.cancel()


wait_for.__doc__ = _CONTRACT  # one contract, whichever body this Python runs
