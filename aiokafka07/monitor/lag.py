"""Consumer-lag status of one group partition, the way Burrow evaluates it, for 0.7.

A pure evaluator: no I/O, no clock, no ZooKeeper. Whoever reads the cluster (``aiokafka07
groups status``, the exporter) feeds each observation of a group partition to its
:class:`LagWindow` as an :class:`OffsetSample` and asks :meth:`LagWindow.evaluate` for a
:class:`PartitionLag` at a time it gives. The same samples in the same order and the same
``now_ms`` always give the same answer.

What a "commit" is in 0.7
-------------------------
0.7 keeps a group's committed offsets in ZooKeeper, one persistent znode per
broker-partition (``/consumers/<group>/offsets/<topic>/<broker>-<partition>``, holding the
byte offset in decimal). The Java consumer rewrites every owned partition's znode on its
auto-commit timer, every ``autocommit.interval.ms`` (10 s by default), *even when the offset
did not change* (ZOOKEEPER.md §5.3); aiokafka07's :class:`~aiokafka07.GroupConsumer` writes
only offsets that changed. Tools (``update-offsets``, ``import-offsets``) write it too.

A commit here is one *write* of that znode, told apart by the time it was written: the
znode's ZooKeeper modification time (``mtime``), which the sampler passes as
:attr:`OffsetSample.at_ms`. Observing the same write again (same ``at_ms``, same offset) is
not a new commit: it only refreshes the log end, so the current lag. A write of an unchanged
offset *is* a commit (a live Java consumer that is stuck keeps making them). A commit of a
smaller offset than the one before is an offset reset: the window starts again from it.

The window and the rules
------------------------
The window holds the last ``commits`` (N, default 10) commits, each with the lag seen with
it (log end minus committed offset); its *span* is the time between its first and its last
commit. Rules, first match wins (Burrow's, with 0.7's byte offsets and deleted segments):

1. **ERR**: the committed offset is past the log end, or before the log start (0.7 deletes
   old segments; a consumer there gets OffsetOutOfRange and resets).
2. **OK**: the current lag is 0.
3. **STOP**: lag > 0 and no commit for longer than the window's span, and longer than
   ``min_stop_ms`` (the stated minimum: with one commit, or commits all at one time, the
   span is 0).
4. **STALL**: a full window (N commits) whose committed offsets all equal, lag > 0.
5. **WARN**: a full window whose offset moved but whose lag grew over every interval
   between two commits.
6. **OK** otherwise (also while the window is not full yet: nothing to judge by).

In terms of the group's auto-commit interval *I*: a Java consumer commits every *I*, so a
window spans (N-1)·*I* and fills within N·*I*. A stuck but live Java consumer is STALL
after N commits of the same offset (about N·*I*); a consumer that stopped committing is
STOP once (N-1)·*I* (at least ``min_stop_ms``) have passed since its last commit. An
aiokafka07 consumer that stops moving writes nothing more, so it goes from OK to STOP after
the same time, without a STALL phase. ``min_stop_ms`` defaults to 20 s: two of 0.7's
default intervals. With an aiokafka07 consumer on a topic idle for longer than the window,
the first messages that arrive show as STOP until its next commit (at most *I* later); a
sampler that judges a partition only after the lag has been seen for longer than *I*
avoids that.

Memory is bounded: a window keeps N commits and the latest sample.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_COMMITS",
    "DEFAULT_MIN_STOP_MS",
    "LagStatus",
    "LagWindow",
    "OffsetSample",
    "PartitionLag",
    "worst",
]

#: Commits in a window, unless said otherwise (Burrow's default).
DEFAULT_COMMITS = 10

#: The smallest time without a commit that is STOP when lag > 0 (two of 0.7's default
#: ``autocommit.interval.ms``).
DEFAULT_MIN_STOP_MS = 20_000


class LagStatus(enum.IntEnum):
    """A group partition's status, in severity order: a group's status is the worst (max)
    of its partitions'."""

    OK = 0
    WARN = 1
    STALL = 2
    STOP = 3
    ERR = 4


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """One observation of one group partition."""

    committed: int
    """The group's committed offset (a 0.7 byte offset)."""
    log_end: int
    """OFFSETS latest of the partition at that moment."""
    log_start: int | None
    """OFFSETS earliest, None when not known."""
    at_ms: int
    """When the committed offset was written (the znode's mtime), in ms of one clock."""


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """The verdict on one group partition."""

    status: LagStatus
    lag: int | None
    """Log end minus committed offset of the latest sample (negative past the log end);
    None before the first sample."""
    reason: str
    """One line saying why, for humans."""


@dataclass(frozen=True, slots=True)
class _Commit:
    offset: int
    lag: int
    at_ms: int


class LagWindow:
    """The sliding window of the last ``commits`` commits of one group partition.

    ``min_stop_ms`` is the least time without a commit that counts as STOP (see the module
    docstring for the rules and their windows).
    """

    __slots__ = ("_commits", "_latest", "min_stop_ms")

    def __init__(
        self, *, commits: int = DEFAULT_COMMITS, min_stop_ms: int = DEFAULT_MIN_STOP_MS
    ) -> None:
        if isinstance(commits, bool) or not isinstance(commits, int) or commits < 2:
            raise ValueError(f"a lag window needs at least 2 commits, not {commits!r}")
        if isinstance(min_stop_ms, bool) or not isinstance(min_stop_ms, int) or min_stop_ms < 0:
            raise ValueError(f"min_stop_ms must be an int >= 0, not {min_stop_ms!r}")
        self._commits: deque[_Commit] = deque(maxlen=commits)
        self._latest: OffsetSample | None = None
        self.min_stop_ms = min_stop_ms

    @property
    def size(self) -> int:
        """N: how many commits the window holds when full."""
        maxlen = self._commits.maxlen
        assert maxlen is not None
        return maxlen

    def __len__(self) -> int:
        """How many commits the window holds now (at most :attr:`size`)."""
        return len(self._commits)

    def observe(self, sample: OffsetSample) -> None:
        """Take one observation: a new commit when written after the last one (or with
        another offset), else a refresh of the log end."""
        self._latest = sample
        lag = sample.log_end - sample.committed
        if self._commits:
            last = self._commits[-1]
            if sample.at_ms <= last.at_ms and sample.committed == last.offset:
                return  # the same write seen again (or an older one): only the lag is new
            if sample.committed < last.offset:
                self._commits.clear()  # an offset reset: its history says nothing now
            at_ms = max(sample.at_ms, last.at_ms)  # never backwards in the window
        else:
            at_ms = sample.at_ms
        self._commits.append(_Commit(sample.committed, lag, at_ms))

    def evaluate(self, now_ms: int) -> PartitionLag:
        """The partition's status at ``now_ms`` (the clock of :attr:`OffsetSample.at_ms`)."""
        latest = self._latest
        if latest is None:
            return PartitionLag(LagStatus.OK, None, "not observed yet")
        lag = latest.log_end - latest.committed
        if latest.committed > latest.log_end:
            return PartitionLag(
                LagStatus.ERR,
                lag,
                f"committed offset {latest.committed} is past the log end {latest.log_end}",
            )
        if latest.log_start is not None and latest.committed < latest.log_start:
            return PartitionLag(
                LagStatus.ERR,
                lag,
                f"committed offset {latest.committed} is before the log start "
                f"{latest.log_start} (deleted segments)",
            )
        if lag == 0:
            return PartitionLag(LagStatus.OK, lag, "caught up (lag 0)")
        commits = self._commits
        first, last = commits[0], commits[-1]
        span = last.at_ms - first.at_ms
        idle = now_ms - last.at_ms
        if idle > span and idle > self.min_stop_ms:
            return PartitionLag(
                LagStatus.STOP,
                lag,
                f"no commit for {idle} ms (window span {span} ms) with lag {lag}",
            )
        if len(commits) < self.size:
            return PartitionLag(
                LagStatus.OK, lag, f"window not full yet ({len(commits)} of {self.size} commits)"
            )
        if all(commit.offset == first.offset for commit in commits):
            return PartitionLag(
                LagStatus.STALL,
                lag,
                f"offset {first.offset} did not move over {len(commits)} commits "
                f"({span} ms) with lag {lag}",
            )
        lags = [commit.lag for commit in commits]
        if all(later > earlier for earlier, later in itertools.pairwise(lags)):
            return PartitionLag(
                LagStatus.WARN,
                lag,
                f"lag grew at every one of {len(commits)} commits ({lags[0]} to {lags[-1]})",
            )
        return PartitionLag(LagStatus.OK, lag, f"moving (lag {lag})")


def worst(statuses: Iterable[LagStatus]) -> LagStatus:
    """The most severe of ``statuses`` (a group's status); OK when there are none."""
    return max(statuses, default=LagStatus.OK)
