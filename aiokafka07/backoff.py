"""One backoff policy for every retry in the library.

Reconnecting to a broker, routing a produce again, re-reading the cluster view, retrying a
rebalance, restarting a crashed fetcher: each waits ``base * 2**(n-1)`` seconds after its
n-th consecutive failure, capped at ``cap``, spread by +-``jitter`` (a fraction) so that
many clients failing together do not retry together. A success resets the count.

``max_attempts`` bounds a retry loop: :attr:`Backoff.exhausted` says when the caller must
stop and fail the work with the last error instead of trying again.
"""

from __future__ import annotations

import asyncio
import random

__all__ = ["Backoff"]


class Backoff:
    """Exponential backoff with jitter, counting consecutive failures.

    ``base`` and ``cap`` are seconds (``base > 0``, ``cap >= base``); ``jitter`` is the
    fraction each delay may vary by, in [0, 1). ``max_attempts`` (None: unbounded count;
    the delay is still capped) is how many failures :attr:`exhausted` tolerates.
    """

    __slots__ = ("base", "cap", "failures", "jitter", "max_attempts")

    def __init__(
        self,
        base: float,
        cap: float,
        jitter: float = 0.2,
        *,
        max_attempts: int | None = None,
    ) -> None:
        if not isinstance(base, (int, float)) or not base > 0:
            raise ValueError(f"backoff base must be a positive number of seconds, not {base!r}")
        if not isinstance(cap, (int, float)) or not cap >= base:
            raise ValueError(f"backoff cap must be at least the base {base}, not {cap!r}")
        if not isinstance(jitter, (int, float)) or not 0 <= jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), not {jitter!r}")
        if max_attempts is not None and (not isinstance(max_attempts, int) or max_attempts < 0):
            raise ValueError(f"max_attempts must be None or >= 0, not {max_attempts!r}")
        self.base = float(base)
        self.cap = float(cap)
        self.jitter = float(jitter)
        self.max_attempts = max_attempts
        self.failures = 0

    def __repr__(self) -> str:
        return (
            f"Backoff(base={self.base}, cap={self.cap}, jitter={self.jitter}, "
            f"max_attempts={self.max_attempts}, failures={self.failures})"
        )

    def delay(self, failures: int) -> float:
        """The nominal delay (no jitter) after ``failures`` consecutive failures."""
        if failures <= 0:
            return 0.0
        # 2**n overflows float for huge n: the cap is reached long before.
        return min(self.cap, self.base * 2.0 ** min(failures - 1, 64))

    def jittered(self, failures: int) -> float:
        """The delay to wait after ``failures`` consecutive failures, jittered, without
        counting anything (for work that keeps its own count, e.g. a message's
        attempts)."""
        nominal = self.delay(failures)
        if not self.jitter:
            return nominal
        return nominal * random.uniform(1 - self.jitter, 1 + self.jitter)

    def failed(self) -> float:
        """Count a failure; return how long to wait before the next attempt (jittered)."""
        self.failures += 1
        return self.jittered(self.failures)

    def succeeded(self) -> None:
        """An attempt worked: the next failure starts from ``base`` again."""
        self.failures = 0

    @property
    def exhausted(self) -> bool:
        """True once ``max_attempts`` failures were counted: stop retrying."""
        return self.max_attempts is not None and self.failures >= self.max_attempts

    async def sleep_after_failure(self) -> float:
        """Count a failure and sleep for its delay; return the delay slept."""
        wait = self.failed()
        await asyncio.sleep(wait)
        return wait
