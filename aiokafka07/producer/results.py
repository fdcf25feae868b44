"""What a producer reports: each message's result, the counters, and the ledger of outcomes.

:class:`Outcomes` is the one place a message ends. Delivered or failed, it is counted once
(a batch is marked ended), its buffer space is given back, and a failure is kept, with
its cause, for :meth:`Producer.close` to name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..errors import ProducerClosedError
from ..supervisor import mark_retrieved
from .batch import Batch

__all__ = ["EncodedMessage", "Outcomes", "ProduceResult", "ProducerMetrics"]

log = logging.getLogger("aiokafka07.producer")


class ProduceResult(NamedTuple):
    """Where a message went. ``confirmed``: the partition's log showed the bytes of the
    produce (confirm mode, :mod:`aiokafka07.confirm`); False without confirm, when
    delivered means written to the socket."""

    topic: str
    broker_id: int
    partition: int
    confirmed: bool


@dataclass
class ProducerMetrics:
    """Counters a user can read (``producer.metrics``: a snapshot taken when read)."""

    messages_sent: int = 0
    bytes_sent: int = 0
    batches_sent: int = 0
    requests_sent: int = 0
    retries: int = 0
    messages_failed: int = 0
    queued_messages: int = 0
    queued_bytes: int = 0


class EncodedMessage(Protocol):
    """A message as a consumer hands it out (:class:`~aiokafka07.protocol.Message`,
    :class:`~aiokafka07.records.ConsumerRecord`): what :meth:`Producer.send_message`
    sends on unchanged."""

    @property
    def value(self) -> bytes: ...

    @property
    def magic(self) -> int: ...

    @property
    def attributes(self) -> int: ...


Where = tuple[str, int, int]


class Outcomes:
    """The ledger: every message accepted ends here exactly once.

    ``release(messages, bytes)`` gives buffer space back (the accumulator's).
    """

    def __init__(self, metrics: ProducerMetrics, release: Callable[[int, int], None]) -> None:
        self.metrics = metrics
        self._release = release
        #: (topic, broker, partition) -> the last cause of a failure there.
        self.last_errors: dict[Where, BaseException] = {}
        #: (topic, broker, partition) -> cause (exception class) -> [messages, the first
        #: error of that class there, whose text the report quotes].
        self.failures: dict[Where, dict[type[BaseException], list[Any]]] = {}

    def deliver(self, batch: Batch, result: ProduceResult) -> None:
        """Every message of ``batch`` was delivered."""
        if batch.ended:
            return
        batch.ended = True
        futures = batch.futures
        try:
            for future in futures:
                future.set_result(result)
        except asyncio.InvalidStateError:  # a caller cancelled its future
            for future in futures:
                if not future.done():
                    future.set_result(result)
        m = self.metrics
        m.messages_sent += batch.count
        m.bytes_sent += batch.size
        m.batches_sent += 1
        self._release(batch.count, batch.size)

    def fail(self, batch: Batch, exc: BaseException) -> None:
        """Every message of ``batch`` failed with ``exc``."""
        if batch.ended:
            return
        batch.ended = True
        for future in batch.futures:
            if not future.done():
                future.set_exception(exc)
                # Nobody may be waiting for a failed message: close() reports it instead.
                mark_retrieved(future)
        self.metrics.messages_failed += batch.count
        self.last_errors[batch.where] = exc
        entry = self.failures.setdefault(batch.where, {}).setdefault(type(exc), [0, exc])
        entry[0] += batch.count
        self._release(batch.count, batch.size)

    @property
    def undelivered(self) -> int:
        return sum(count for causes in self.failures.values() for count, _ in causes.values())

    def report(self) -> ProducerClosedError | None:
        """The error :meth:`Producer.close` raises: for every place messages failed, how
        many failed of each cause (exception class), with the text of that cause's first
        error there; None when nothing failed."""
        if not self.failures:
            return None
        total = self.undelivered
        parts = []
        causes: dict[tuple[str, int | None, int], dict[str, int]] = {}
        for where in sorted(self.failures):
            topic, broker, partition = where
            counted = sorted(self.failures[where].values(), key=lambda entry: -entry[0])
            causes[where] = {type(exc).__name__: count for count, exc in counted}
            parts += [
                f"{topic}/{broker}-{partition}: {count} x {type(exc).__name__}: {exc}"
                for count, exc in counted
            ]
        return ProducerClosedError(
            f"{total} messages were not delivered ({'; '.join(parts)})",
            undelivered=total,
            errors={where: exc for where, exc in self.last_errors.items()},
            causes=causes,
        )
