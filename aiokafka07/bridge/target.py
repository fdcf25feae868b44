"""Writing to the target cluster: one aiokafka transaction per batch of copied messages.

:class:`TargetWriter` owns the transactional producer (``transactional_id`` is the
bridge's: starting it fences every earlier producer of the same bridge, so a process that
was killed can no longer write). :meth:`TargetWriter.write` sends a batch, waits until
the target acknowledged every record, then sends the checkpoint record and commits: the
checkpoint is written only once all the data before it is in the target's log, and on a
broker that honours transactions it becomes visible together with that data or not at
all. A transaction whose write fails is aborted before the error is raised (bounded;
:attr:`TargetWriter.aborted` counts the aborts that succeeded), so the target's
read_committed readers are not held back by it until the next start fences it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import BridgeError
from ..timeouts import wait_for
from . import _aiokafka

__all__ = ["OutRecord", "TargetWriter"]

log = logging.getLogger("aiokafka07.bridge")


class OutRecord(NamedTuple):
    """One record for the target."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


class TargetWriter:
    """The transactional producer of one bridge (an async context manager).

    ``options`` are further keyword arguments for aiokafka's ``AIOKafkaProducer``
    (security settings, ``max_request_size``, ...). Every wait is bounded by
    ``request_timeout_ms``.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        transactional_id: str,
        *,
        request_timeout_ms: float = 30000.0,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.transactional_id = transactional_id
        self.timeout = request_timeout_ms / 1000
        self._options = dict(options or {})
        self._producer: Any = None
        #: Transactions begun, and aborted after a failed write (see :meth:`write`).
        self.begun = 0
        self.aborted = 0

    async def __aenter__(self) -> TargetWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        aiokafka = _aiokafka.load()
        settings: dict[str, Any] = {"request_timeout_ms": int(self.timeout * 1000)}
        settings.update(self._options)
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            acks="all",
            **settings,
        )
        try:
            await wait_for(producer.start(), self.timeout)
        except (asyncio.TimeoutError, aiokafka.errors.KafkaError, OSError) as exc:
            await _stop(producer)
            raise BridgeError(
                f"target {self.bootstrap_servers} unreachable: {_describe(exc)}"
            ) from exc
        self._producer = producer

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await _stop(producer)

    async def partition_count(self, topic: str) -> int | None:
        """The target topic's partition count (None: the topic does not exist)."""
        try:
            partitions = await wait_for(
                _aiokafka.partitions_of(self._producer.client, topic), self.timeout
            )
        except (asyncio.TimeoutError, _aiokafka.load().errors.KafkaError) as exc:
            raise BridgeError(
                f"target {self.bootstrap_servers}: no metadata ({_describe(exc)})"
            ) from exc
        return len(partitions) if partitions else None

    async def create_topic(self, topic: str, partitions: int, replication: int) -> None:
        """Create ``topic`` on the target with ``partitions`` partitions."""
        aiokafka = _aiokafka.load()
        admin = aiokafka.admin.AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers,
            request_timeout_ms=int(self.timeout * 1000),
            **{k: v for k, v in self._options.items() if k.startswith(("security", "sasl", "ssl"))},
        )
        try:
            await wait_for(admin.start(), self.timeout)
            await wait_for(
                admin.create_topics([aiokafka.admin.NewTopic(topic, partitions, replication)]),
                self.timeout,
            )
        except (asyncio.TimeoutError, aiokafka.errors.KafkaError, AttributeError) as exc:
            # AttributeError: aiokafka's admin client when the cluster names no controller.
            raise BridgeError(
                f"creating topic {topic} on the target failed: {_describe(exc)}"
            ) from exc
        finally:
            await wait_for(admin.close(), self.timeout)
        log.info("created topic %s on the target with %d partitions", topic, partitions)

    async def _send(self, records: Sequence[OutRecord]) -> dict[tuple[str, int], int]:
        """Send ``records`` in aiokafka batches (one ``send_batch`` per full batch, not a
        ``send`` per record), in order per target partition, and wait for every
        acknowledgement; return each target partition's offset after its last record.

        aiokafka sends one batch of a partition at a time: a partition's next batch is
        queued once the one before it is on its way, so the order (and the idempotent
        producer's sequence) is the order of ``records``."""
        producer = self._producer
        by_partition: dict[tuple[str, int], list[OutRecord]] = {}
        for record in records:
            by_partition.setdefault((record.topic, record.partition), []).append(record)
        limit = self._options.get("max_request_size", _MAX_REQUEST_SIZE)
        estimate = _aiokafka.load().record.default_records.DefaultRecordBatchBuilder
        sent: list[tuple[Any, int]] = []
        for (topic, partition), partition_records in by_partition.items():
            batch = producer.create_batch()
            for record in partition_records:
                size = estimate.estimate_size_in_bytes(record.key, record.value, record.headers)
                if size > limit:
                    raise _TooLarge(f"a record of {size} bytes over max_request_size ({limit})")
                if (
                    batch.append(
                        key=record.key, value=record.value, timestamp=None, headers=record.headers
                    )
                    is None
                ):
                    full, batch = batch, producer.create_batch()
                    future = await producer.send_batch(full, topic, partition=partition)
                    sent.append((future, full.record_count()))
                    batch.append(
                        key=record.key, value=record.value, timestamp=None, headers=record.headers
                    )
            if batch.record_count():
                future = await producer.send_batch(batch, topic, partition=partition)
                sent.append((future, batch.record_count()))
        ends: dict[tuple[str, int], int] = {}
        results = await asyncio.gather(*(future for future, _ in sent))
        for meta, (_, count) in zip(results, sent, strict=True):
            where = (meta.topic, meta.partition)
            ends[where] = max(ends.get(where, 0), meta.offset + count)
        return ends

    async def write(
        self,
        records: Sequence[OutRecord],
        checkpoint_topic: str,
        checkpoint_key: bytes,
        checkpoint: Mapping[tuple[str, int], int],
        encode: Callable[[Mapping[tuple[str, int], int]], bytes],
    ) -> dict[tuple[str, int], int]:
        """Write ``records`` and a checkpoint in one transaction.

        ``checkpoint`` maps target partitions to the offset after the bridge's last
        record there; it is updated with this batch's records once the target
        acknowledged them all, ``encode`` turns it into the checkpoint's bytes, and the
        updated map is returned. A failure after the transaction began aborts it (see
        :meth:`_abort`) before the :class:`~aiokafka07.errors.BridgeError` is raised.
        """
        producer = self._producer
        aiokafka = _aiokafka.load()
        try:
            await wait_for(producer.begin_transaction(), self.timeout)
            self.begun += 1
            try:
                ends = await wait_for(self._send(records), self.timeout)
                log.debug(
                    "transaction %d: %d records acknowledged; writing the checkpoint",
                    self.begun,
                    len(records),
                )
                merged = dict(checkpoint)
                merged.update(ends)
                sent = await producer.send(
                    checkpoint_topic, encode(merged), key=checkpoint_key, partition=0
                )
                await wait_for(sent, self.timeout)
                await wait_for(producer.commit_transaction(), self.timeout)
            except (_TooLarge, asyncio.TimeoutError, aiokafka.errors.KafkaError, OSError):
                await self._abort()
                raise
        except (_TooLarge, aiokafka.errors.MessageSizeTooLargeError) as exc:
            raise BridgeError(
                f"a record is too large for the target ({_describe(exc)}); raise the "
                "target topic's max.message.bytes and the producer's max_request_size"
            ) from exc
        except (asyncio.TimeoutError, aiokafka.errors.KafkaError, OSError) as exc:
            raise BridgeError(
                f"target {self.bootstrap_servers}: transaction failed: {_describe(exc)}"
            ) from exc
        return merged

    async def _abort(self) -> None:
        """Abort the transaction in progress, best effort: within ``request_timeout_ms``
        (10 s at most: the error it follows is what the caller reports), a failure only
        logged (a transaction left open is aborted when the next start fences it)."""
        try:
            await wait_for(self._producer.abort_transaction(), min(self.timeout, 10.0))
        except Exception as exc:
            log.warning("aborting the failed transaction failed: %s", _describe(exc))
            return
        self.aborted += 1
        log.info("aborted the failed transaction")


#: aiokafka's default max_request_size: the largest record a request can carry.
_MAX_REQUEST_SIZE = 1048576


class _TooLarge(Exception):
    """A record over the producer's max_request_size (reported as a BridgeError)."""


async def _stop(producer: Any) -> None:
    try:
        await wait_for(producer.stop(), 10.0)
    except Exception:
        log.warning("stopping the target producer failed", exc_info=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    text, name = str(exc), type(exc).__name__
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"
