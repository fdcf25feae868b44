"""Streaming reads: micro-batches of offset ranges, offsets checkpointed as JSON.

A streaming offset is ``{"<topic>": {"<broker>-<partition>": offset}}``: every
broker-partition's next offset. At each micro-batch the brokers and partitions are
discovered again: a broker-partition seen for the first time enters the map at its
earliest offset (its data is read from the next micro-batch on, so the plan for each
batch depends only on the checkpointed offsets); one whose broker left keeps its offset
and resumes when the broker returns.

``maxBytesPerTrigger`` caps a micro-batch. As 0.7 offsets are byte positions, the cut
must fall between messages: a segment start where one lies close enough, otherwise the
end of the last whole message within the allowance, found by fetching that prefix on
the driver and reading only the entry headers (the one cost of a rate limit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from ..errors import ProtocolError
from ..fetch_size import FetchSizer
from ..protocol import decode_message_set
from ..protocol.responses import FetchResponse
from ..znodes import GroupRegistry
from .options import ReadOptions, max_fetch_size
from .planning import PartitionState, resolve
from .reader import (
    DataLossError,
    OffsetRange,
    check_given,
    columns_for,
    ranges_for,
    read_partition,
    state_of_partitions,
)
from .runtime import WorkerRuntime

try:  # PySpark >= 4.2: read limits and Trigger.AvailableNow
    from pyspark.sql.streaming import datasource as _limits
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - older PySpark
    _limits = None  # type: ignore[assignment, unused-ignore]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef, unused-ignore]
        """Stand-in base class where PySpark has no AvailableNow support."""


__all__ = ["RefusedStream", "StreamReader", "allot"]

log = logging.getLogger("aiokafka07.spark")

Offsets = dict[str, dict[str, int]]
K = TypeVar("K")


def allot(pending: dict[K, int], budget: int) -> dict[K, int]:
    """Share ``budget`` bytes among partitions with ``pending`` bytes, evenly, handing
    what a small partition does not need to the others (water filling)."""
    share: dict[K, int] = {}
    left = sorted(pending.items(), key=lambda kv: kv[1])
    while left:
        each = budget // len(left)
        key, need = left[0]
        if need <= each:
            share[key] = need
            budget -= need
            left.pop(0)
            continue
        for key, _ in left:
            share[key] = each
        break
    return share


class StreamReader(SupportsTriggerAvailableNow, DataSourceStreamReader):
    """The ``kafka07`` micro-batch stream."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.arrow_schema = columns_for(schema)
        self._stop_at: Offsets | None = None  # Trigger.AvailableNow target
        self._current: Offsets | None = None  # for PySpark < 4.2's latestOffset()
        self._committed: dict[tuple[str, str], int] = {}
        self._states_seen: dict[tuple[str, str], PartitionState] = {}

    # -- offsets -----------------------------------------------------------------------

    def _states(self) -> list[PartitionState]:
        runtime = WorkerRuntime.get()
        states, _ = runtime.run(state_of_partitions(self.options, runtime, streaming=True))
        self._states_seen = {s.key: s for s in states}
        return states

    def initialOffset(self) -> Offsets:
        """Where a new query starts (a restart resumes from its checkpoint instead): the
        options are checked against the cluster here, so a mistake stops the query
        before its first micro-batch."""
        runtime = WorkerRuntime.get()
        options = self.options

        async def starts() -> list[tuple[PartitionState, int]]:
            states, pool = await state_of_partitions(
                options, runtime, streaming=True, checks=(options.starting,)
            )
            self._states_seen = {s.key: s for s in states}

            async def start(state: PartitionState) -> tuple[PartitionState, int]:
                offset = await resolve(options.starting, state, pool)
                await check_given(options.starting, state, offset, options, pool)
                return state, offset

            return list(await asyncio.gather(*(start(s) for s in states)))

        offsets: Offsets = {}
        for state, offset in runtime.run(starts()):
            offsets.setdefault(state.tp.topic, {})[state.name] = offset
        self._current = offsets
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        self._stop_at = {}
        for state in self._states():
            self._stop_at.setdefault(state.tp.topic, {})[state.name] = state.latest

    def getDefaultReadLimit(self) -> Any:
        limits: Any = _limits
        if limits is None:
            return None
        if self.options.max_bytes_per_trigger is not None:
            return limits.ReadMaxBytes(self.options.max_bytes_per_trigger)
        return limits.ReadAllAvailable()

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        if start is None:  # PySpark < 4.2 asks without a start or a limit
            start = self._current if self._current is not None else self.initialOffset()
            budget = self.options.max_bytes_per_trigger
        else:
            budget = getattr(limit, "max_bytes", None)
            # Spark plans a micro-batch only once the previous one is done, so ``start``
            # is processed: publishing it here also covers the last batch of a run,
            # which Spark never passes to commit().
            self.commit(start)
        end = self._plan(start, budget)
        self._current = end
        return end

    def reportLatestOffset(self) -> Offsets:
        # Spark asks right after latestOffset(), which has just read the brokers' state.
        states = self._states_seen.values() if self._states_seen else self._states()
        offsets: Offsets = {}
        for state in states:
            offsets.setdefault(state.tp.topic, {})[state.name] = state.latest
        return offsets

    def _plan(self, start: Offsets, budget: int | None) -> Offsets:
        end: Offsets = {topic: dict(offsets) for topic, offsets in start.items()}
        states = {s.key: s for s in self._states()}
        targets: dict[tuple[str, str], int] = {}
        for key, state in states.items():
            topic, name = key
            begin = start.get(topic, {}).get(name)
            if begin is None:
                # New broker-partition: enters at its earliest offset, read from the next batch.
                end.setdefault(topic, {})[name] = state.earliest
                continue
            if begin < state.earliest or begin > state.latest:
                lost = (
                    f"{topic}/{name}: offset {begin} is no longer in the log "
                    f"({state.earliest}-{state.latest})"
                )
                if self.options.fail_on_data_loss:
                    raise DataLossError(lost + " (set failOnDataLoss=false to go on)")
                if begin > state.latest:
                    targets[key] = state.latest  # the task reads the new log from its start
                    continue
            target = state.latest
            if self._stop_at is not None:
                target = min(target, self._stop_at.get(topic, {}).get(name, begin))
            if target > begin:
                targets[key] = target
        if budget is not None:
            targets = self._limit(start, targets, states, budget)
        for (topic, name), offset in targets.items():
            end.setdefault(topic, {})[name] = offset
        return end

    def _limit(
        self,
        start: Offsets,
        targets: dict[tuple[str, str], int],
        states: dict[tuple[str, str], PartitionState],
        budget: int,
    ) -> dict[tuple[str, str], int]:
        """Cut the targets so that the micro-batch holds about ``budget`` bytes."""
        begins = {key: max(start[key[0]][key[1]], states[key].earliest) for key in targets}
        pending = {k: t - begins[k] for k, t in targets.items() if t > begins[k]}
        limited = dict(targets)
        for key, share in allot(pending, budget).items():
            begin = begins[key]
            if begin + share >= targets[key]:
                continue
            limited[key] = self._cut(states[key], begin, share)
        return limited

    def _cut(self, state: PartitionState, begin: int, share: int) -> int:
        """The furthest message boundary within ``share`` bytes of ``begin`` (at least
        one whole message, so every batch makes progress)."""
        boundary = state.boundary_at_or_before(begin + share)
        if boundary is not None and boundary > begin:
            return boundary
        runtime = WorkerRuntime.get()

        async def probe(size: int) -> FetchResponse:
            c = self.options.connection
            pool = await runtime.pool(c.name, c.request_timeout_ms)
            conn = await pool.connection(state.address)
            return await conn.fetch(state.tp.topic, state.tp.partition, begin, size)

        # One message larger than the share is taken whole; a "size" that cannot be a
        # message (the offset is not a message start) is a typed error (FetchSizer).
        share = max(share, 1024)
        sizer = FetchSizer(state.tp.topic, state.name, share, max_fetch_size(share))
        while True:
            response = runtime.run(probe(sizer.size))
            if response.error_code:
                return state.latest  # the task meets the broker's error and reports it
            data = response.message_set
            try:
                valid = decode_message_set(data, begin, shallow=True).valid_bytes
            except ProtocolError as exc:
                declared = FetchSizer.incomplete_first(exc)
                if declared is None:
                    raise
                sizer.grow(begin, declared, len(data), state.latest)
                continue
            if valid or not data:
                return begin + valid
            sizer.grow(begin, None, len(data), state.latest)  # fewer than 4 bytes

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[OffsetRange]:
        wanted = {
            (topic, name)
            for topic, offsets in end.items()
            for name, stop in offsets.items()
            if start.get(topic, {}).get(name, stop) != stop
        }
        states = self._states_seen
        if not wanted <= states.keys():  # e.g. replaying a batch after a restart
            self._states()
            states = self._states_seen
        work: list[tuple[PartitionState, int, int]] = []
        for topic, offsets in end.items():
            for name, stop in offsets.items():
                begin = start.get(topic, {}).get(name)
                state = states.get((topic, name))
                if begin is None or begin == stop:
                    continue
                if state is None:
                    raise DataLossError(
                        f"{topic}/{name}: its broker is not registered now; the micro-batch "
                        "planned from it cannot be read until it returns"
                    )
                work.append((state, begin, stop))
        runtime = WorkerRuntime.get()
        c = self.options.connection

        async def plan() -> list[OffsetRange]:
            pool = await runtime.pool(c.name, c.request_timeout_ms)
            planned = await asyncio.gather(
                *(ranges_for(state, b, e, self.options, pool) for state, b, e in work)
            )
            return [r for ranges in planned for r in ranges]

        return runtime.run(plan())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # Spark's placeholder when there is nothing to read
        return read_partition(partition, self.arrow_schema)

    def commit(self, end: Offsets) -> None:
        """Spark finished the micro-batch: publish the offsets for the ``group``, in
        ZooKeeper where 0.7 consumers keep theirs, so monitoring tools and
        ``aiokafka07 groups`` show the job's progress and lag."""
        group = self.options.group
        if group is None:
            return
        changed = {
            (topic, name): offset
            for topic, offsets in end.items()
            for name, offset in offsets.items()
            if self._committed.get((topic, name)) != offset
        }
        if not changed:
            return
        runtime = WorkerRuntime.get()
        connect = self.options.connection.zookeeper
        assert connect is not None

        async def publish() -> None:
            registry = GroupRegistry(await runtime.zookeeper(connect), group)
            for (topic, name), offset in sorted(changed.items()):
                await registry.commit(topic, name, offset)

        runtime.run(publish())
        self._committed.update(changed)
        log.debug("group %s: committed %d offsets", group, len(changed))

    def stop(self) -> None:
        """Nothing of its own to release: sessions and pools belong to the process."""


class RefusedStream(SupportsTriggerAvailableNow, DataSourceStreamReader):
    """A stream whose options were refused: every call raises ``error``.

    Spark starts a stream reader in a runner that calls ``stop()`` on it in a ``finally``;
    a reader that could not be made leaves that name unbound, so the option's error was
    followed by PySpark's own ``UnboundLocalError``. This reader is made, and its first
    call (the query's start) raises the option's error alone.
    """

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _refuse(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> Offsets:
        self._refuse()

    def prepareForTriggerAvailableNow(self) -> None:
        self._refuse()

    def getDefaultReadLimit(self) -> Any:
        self._refuse()

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:
        self._refuse()

    def reportLatestOffset(self) -> Offsets:
        self._refuse()

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[OffsetRange]:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._refuse()

    def commit(self, end: Offsets) -> None:
        """Nothing was read: nothing to commit."""

    def stop(self) -> None:
        """Nothing was opened: nothing to close."""
