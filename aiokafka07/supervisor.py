"""The owner of every background task a component starts.

A producer's senders, a consumer's fetchers and coordinator, a cluster view's watch loop, a
broker's housekeeping: each component creates one :class:`Supervisor` and starts its tasks
through :meth:`Supervisor.spawn`, naming each task and choosing what happens when it
crashes (an exception other than cancellation escapes it):

* :attr:`CrashPolicy.ESCALATE`: the task ends and ``on_crash(exc)`` is called. The owner
  fails the futures of the work the task was doing, or hands the error to the user. Use it
  for tasks whose work has someone waiting for it.
* :attr:`CrashPolicy.RESTART`: ``on_crash(exc)`` is called (to hand the error to whoever
  reads that task's output, once), then the task is started again after a
  :class:`~aiokafka07.backoff.Backoff` delay. After ``max_restarts`` consecutive crashes
  (a run lasting ``healthy_after`` seconds resets the count) it gives up, which is logged
  and reported to ``on_crash`` like any crash, then to ``on_give_up`` if given (so the
  owner can stop relying on the task): a restart loop is always bounded.
* :attr:`CrashPolicy.LOG`: the crash is logged and the task ends. Only for best-effort
  work whose loss has no other consequence (a periodic statistics line, say).

Whatever the policy, a crash is never silent: it is logged once, at ERROR, with its
traceback, under the owner's logger, and no task ever ends with an exception nobody
retrieves ("Task exception was never retrieved"). An exception raised by ``on_crash``
itself is logged and survived.

:meth:`Supervisor.aclose` cancels every task and waits for all of them (up to a timeout,
after which the stragglers are named in a warning); afterwards :meth:`spawn` refuses, so
nothing can start work on a closed component.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .backoff import Backoff

__all__ = ["CrashPolicy", "Supervisor", "SupervisorClosedError", "mark_retrieved"]

_log = logging.getLogger("aiokafka07.supervisor")

Target = Coroutine[Any, Any, Any] | Callable[[], Awaitable[Any]]
CrashHandler = Callable[[BaseException], object]


class CrashPolicy(enum.Enum):
    """What a supervisor does when a task raises (see the module docstring)."""

    ESCALATE = "escalate"
    RESTART = "restart"
    LOG = "log"


class SupervisorClosedError(RuntimeError):
    """:meth:`Supervisor.spawn` after :meth:`Supervisor.aclose`: an internal ordering
    error (work started on a closed component), never silently ignored."""


class Supervisor:
    """Named background tasks of one component, each with a crash policy.

    ``name`` prefixes task names and log lines; ``logger`` is the owner's logger (crashes
    are logged there, so an application filtering by module sees them).
    """

    #: How many crashes :attr:`crashes` keeps (a long-lived component must not grow).
    KEPT_CRASHES = 100

    def __init__(self, name: str, logger: logging.Logger | None = None) -> None:
        self.name = name
        self.log = logger or _log
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        #: The latest crashes, oldest first (task name, exception), at most
        #: :attr:`KEPT_CRASHES` of them: for metrics and tests. ``crash_count`` counts all.
        self.crashes: collections.deque[tuple[str, BaseException]] = collections.deque(
            maxlen=self.KEPT_CRASHES
        )
        self.crash_count = 0

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._tasks)} tasks"
        return f"<Supervisor {self.name}: {state}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def tasks(self) -> frozenset[asyncio.Task[None]]:
        """The tasks still running."""
        return frozenset(self._tasks)

    def spawn(
        self,
        name: str,
        target: Target,
        *,
        policy: CrashPolicy,
        on_crash: CrashHandler | None = None,
        backoff: Backoff | None = None,
        max_restarts: int = 10,
        healthy_after: float | None = None,
        on_give_up: CrashHandler | None = None,
    ) -> asyncio.Task[None]:
        """Start ``target`` (a coroutine, or for RESTART a function returning one) as a
        supervised task named ``<supervisor>/<name>``.

        ESCALATE requires ``on_crash``. RESTART requires a function (a coroutine can run
        only once) and restarts after ``backoff`` delays (default 0.1 s doubling to 5 s);
        ``healthy_after`` (default: the backoff cap) is how long a run must last for its
        crash not to count as consecutive. ``on_give_up(exc)`` is called (after
        ``on_crash``) when a RESTART task stops restarting.
        """
        refusal: Exception | None = None
        if self._closed:
            refusal = SupervisorClosedError(f"{self.name} is closed: cannot start {name}")
        elif policy is CrashPolicy.ESCALATE and on_crash is None:
            refusal = ValueError(f"{name}: CrashPolicy.ESCALATE needs an on_crash handler")
        elif policy is CrashPolicy.RESTART and asyncio.iscoroutine(target):
            refusal = TypeError(
                f"{name}: CrashPolicy.RESTART needs a function returning a coroutine"
            )
        elif max_restarts < 0:
            refusal = ValueError(f"max_restarts must be >= 0, not {max_restarts}")
        if refusal is not None:
            if asyncio.iscoroutine(target):
                target.close()  # never awaited: no "coroutine was never awaited" warning
            raise refusal
        full_name = f"{self.name}/{name}"
        runner = self._run(
            full_name,
            target,
            policy,
            on_crash,
            backoff or Backoff(0.1, 5.0),
            max_restarts,
            healthy_after,
            on_give_up,
        )
        task = asyncio.get_running_loop().create_task(runner, name=full_name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(
        self,
        name: str,
        target: Target,
        policy: CrashPolicy,
        on_crash: CrashHandler | None,
        backoff: Backoff,
        max_restarts: int,
        healthy_after: float | None,
        on_give_up: CrashHandler | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        healthy = backoff.cap if healthy_after is None else healthy_after
        while True:
            started = loop.time()
            try:
                await (target if asyncio.iscoroutine(target) else target())
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.crashes.append((name, exc))
                self.crash_count += 1
                if policy is not CrashPolicy.RESTART:
                    self.log.error("%s crashed", name, exc_info=exc)
                    self._notify(name, on_crash, exc)
                    return
                if loop.time() - started >= healthy:
                    backoff.succeeded()
                if backoff.failures >= max_restarts:
                    self.log.error(
                        "%s crashed %d times in a row; giving up",
                        name,
                        backoff.failures + 1,
                        exc_info=exc,
                    )
                    self._notify(name, on_crash, exc)
                    self._notify(name, on_give_up, exc)
                    return
                delay = backoff.failed()
                self.log.error("%s crashed; restarting in %.2f s", name, delay, exc_info=exc)
                self._notify(name, on_crash, exc)
                await asyncio.sleep(delay)

    def _notify(self, name: str, on_crash: CrashHandler | None, exc: BaseException) -> None:
        if on_crash is None:
            return
        try:
            on_crash(exc)
        except Exception:
            self.log.exception("the crash handler of %s raised", name)

    async def aclose(self, timeout: float | None = 10.0) -> None:
        """Refuse new tasks, cancel every task and wait for all of them to end.

        Tasks still running after ``timeout`` seconds (they suppressed cancellation) are
        named in a warning and left behind.
        """
        self._closed = True
        tasks = list(self._tasks)
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            self.log.warning(
                "%s: %d tasks did not stop within %s s: %s",
                self.name,
                len(pending),
                timeout,
                ", ".join(sorted(t.get_name() for t in pending)),
            )

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def mark_retrieved(future: asyncio.Future[Any]) -> None:
    """A done callback for a future whose failure is reported another way (nobody awaits
    it): marks its exception as seen, so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()
