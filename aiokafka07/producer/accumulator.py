"""The accumulator: accepted messages wait here, in batches, until a sender takes them.

Batches are kept per broker (a :class:`BrokerQueue`), per (topic, partition): *open* ones
still filling, *ready* ones sealed and waiting for the broker's sender, in order. A batch
is sealed when it holds ``batch_size`` messages or ``batch_bytes`` of payload, when its
first message is ``linger`` seconds old, or when someone hurries it (``flush()``, or
``send_and_wait()`` for the one batch its message is in).

**Space.** The buffer holds at most ``max_messages`` messages and ``max_bytes`` bytes
between acceptance and outcome; :meth:`Accumulator.wait_for_space` waits while it is full
and wakes once it drained to 80 %, so blocked callers do not wake for every message.

**The hot path.** Messages without a key go to one random target per batch (0.7.2 picks a
random partition; keeping it for a batch fills batches). That batch is the topic's
*sticky* batch, and while there is room it is also *hot*: ``Accumulator.hot_path.append``
(:class:`HotPath`, in C when the accelerator was built) then accepts a message with two
list appends and two comparisons, no per-message object but its future and no global
counter. To keep the buffer limit exact, a hot batch reserves the room it
may use when it becomes hot (``count_cap``, ``byte_cap``); its messages are folded into
the counters when it cools (it filled up, was sealed, or another path touched it) and
whenever the counters are read (:meth:`Accumulator.settle`).
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ProducerClosedError
from ..timeouts import wait_for
from .batch import Batch, Route, _accelerated, untrack_future

__all__ = ["Accumulator", "BrokerQueue", "HotPath"]

#: A MULTIPRODUCE carries at most 32767 entries; compression may split a batch in a few.
MAX_BATCHES_PER_REQUEST = 1000


class _PureHotPath:
    """The hot path of ``send()`` (the pure-Python twin of the C ``HotPath`` in
    ``_appender.c``): a keyless bytes payload within ``max_message_size`` for a topic
    with a hot batch in ``hot`` is appended to it with a future from ``create_future``
    (called with the keywords of ``future_kwargs`` when it is a dict, see
    :func:`future_maker`); ``capped(batch)`` is called once the batch reached
    ``count_cap`` or ``byte_cap``. :meth:`append` returns the future, or None having
    taken nothing (the producer's general path then takes the message, and explains any
    refusal)."""

    __slots__ = ("_capped", "_hot", "_max_message", "create_future", "future_kwargs")

    def __init__(
        self,
        hot: dict[str, Batch],
        create_future: Callable[[], asyncio.Future[Any]],
        capped: Callable[[Batch], None],
        max_message_size: int,
    ) -> None:
        self._hot = hot
        self.create_future = create_future
        self.future_kwargs: dict[str, Any] | None = None
        self._capped = capped
        self._max_message = max_message_size

    def append(self, topic: str, value: bytes, /) -> asyncio.Future[Any] | None:
        if type(value) is not bytes:
            return None
        batch = self._hot.get(topic)
        size = len(value)
        if batch is None or size > self._max_message:
            return None
        kwargs = self.future_kwargs
        if kwargs is None:
            future = self.create_future()
        elif isinstance(kwargs, dict):
            future = self.create_future(**kwargs)
        else:
            raise TypeError("future_kwargs must be a dict or None")
        batch.futures.append(future)
        values = batch.values
        values.append(value)
        size = batch.size = batch.size + size
        if len(values) >= batch.count_cap or size >= batch.byte_cap:
            self._capped(batch)
        return future


def future_maker(
    loop: asyncio.AbstractEventLoop,
) -> tuple[Callable[..., asyncio.Future[Any]], dict[str, Any] | None]:
    """How the hot path makes each message's future on ``loop``: (a callable, the
    keywords it is called with or None).

    ``loop.create_future`` is the rule (a loop may make futures of its own, and a subclass
    may instrument them), and is what this returns unless the loop's class keeps a
    ``create_future`` known to be exactly ``asyncio.Future(loop=self)``
    (:func:`_makes_plain_futures`): then that call itself, ``asyncio.futures.Future``
    with one ``{"loop": loop}`` made here. The future is the same; the C hot path passes
    the one dict to every call, where ``loop.create_future()`` costs a new keyword dict
    per message, and on asyncio's loop a Python frame too (a large share of ``send()``'s
    CPU on either loop: see ``benchmarks/bench_producer.py``)."""
    if _makes_plain_futures(loop):
        return asyncio.futures.Future, {"loop": loop}
    return loop.create_future, None


def _makes_plain_futures(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``type(loop).create_future`` is one whose whole work is
    ``asyncio.Future(loop=self)``: asyncio's own (``BaseEventLoop.create_future``,
    ``return futures.Future(loop=self)``), or uvloop's (``uvloop/loop.pyx``:
    ``return self._new_future()``, which is ``aio_Future(loop=self)`` with ``aio_Future``
    bound to ``asyncio.Future`` in ``includes/stdlib.pxi``; the same from 2015 to uvloop
    0.23, and checked as behaviour by tests/test_producer.py wherever uvloop is
    installed). Any other ``create_future``, a subclass's own included, is called for
    every future."""
    method = type(loop).create_future
    if method is asyncio.BaseEventLoop.create_future:
        return True
    # Never imported here: a loop of uvloop's has imported it already.
    uvloop_loop = sys.modules.get("uvloop.loop")
    return method is getattr(getattr(uvloop_loop, "Loop", None), "create_future", None)


if TYPE_CHECKING:
    HotPath = _PureHotPath
else:
    HotPath = _accelerated("HotPath", _PureHotPath)


class BrokerQueue:
    """The batches waiting for one broker: open ones filling, ready ones in order."""

    __slots__ = ("attention", "broker_id", "open", "ready", "wakeup")

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.open: dict[tuple[str, int], Batch] = {}
        self.ready: collections.deque[Batch] = collections.deque()
        #: Set when the sender should look again (a batch opened or was sealed).
        self.wakeup = asyncio.Event()
        #: The sender has work besides batches (see :meth:`Accumulator.call_sender`).
        self.attention = False

    def __bool__(self) -> bool:
        return bool(self.open or self.ready)

    def take(self, max_bytes: int) -> list[Batch]:
        """Ready batches for one request: the first, then more up to ``max_bytes`` of
        payload; an isolated batch always goes alone."""
        ready = self.ready
        first = ready.popleft()
        batches, size = [first], first.size
        if first.isolated:
            return batches
        while (
            ready
            and not ready[0].isolated
            and size + ready[0].size <= max_bytes
            and len(batches) < MAX_BATCHES_PER_REQUEST
        ):
            batch = ready.popleft()
            batches.append(batch)
            size += batch.size
        return batches


class Accumulator:
    """Batches per (broker, topic, partition), space accounting and linger (see the
    module docstring). ``on_new_queue(broker_id)`` is called when a broker gets its
    first batch, so that a sender starts for it."""

    def __init__(
        self,
        *,
        batch_size: int,
        batch_bytes: int,
        linger: float,
        max_messages: int,
        max_bytes: int,
        max_message_size: int,
        on_new_queue: Callable[[int], None],
    ) -> None:
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.linger = linger
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_message_size = max_message_size
        self._on_new_queue = on_new_queue
        self.queues: dict[int, BrokerQueue] = {}
        #: topic -> the open batch its keyless messages go to.
        self.sticky: dict[str, Batch] = {}
        #: topic -> its sticky batch, while it takes messages on the hot path.
        self.hot: dict[str, Batch] = {}
        # Messages / bytes accepted and not ended, except what hot batches took since they
        # became hot; and the room hot batches may still take.
        self.messages = 0
        self.bytes = 0
        self.reserved_messages = 0
        self.reserved_bytes = 0
        self.closing = False
        #: A batch was sealed since the producer last let its senders run.
        self.sealed = False
        self._space = asyncio.Event()
        self._space.set()
        # Set once closing and every message accepted has ended (wait_drained).
        self._drained = asyncio.Event()
        #: Makes a message's future on the general path (the loop's, once bound).
        self.create_future: Callable[[], asyncio.Future[Any]] = asyncio.Future
        #: ``hot_path.append(topic, value)``: see :class:`HotPath`.
        self.hot_path = HotPath(self.hot, asyncio.Future, self.capped, max_message_size)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create futures on ``loop`` (the producer's, once started)."""
        self.create_future = loop.create_future
        self.hot_path.create_future, self.hot_path.future_kwargs = future_maker(loop)

    # -- space -----------------------------------------------------------------------

    def full(self) -> bool:
        return (
            self.messages + self.reserved_messages >= self.max_messages
            or self.bytes + self.reserved_bytes >= self.max_bytes
        )

    async def wait_for_space(self) -> None:
        """Return once the buffer has room; raise :class:`ProducerClosedError` if the
        producer closes meanwhile. (Bounded: every message in the buffer ends within
        its retries and timeouts, and each end gives its space back.)"""
        while self.full():
            if self.closing:
                raise ProducerClosedError("the producer closed while waiting for buffer space")
            self._space.clear()
            await self._space.wait()

    def release(self, messages: int, size: int) -> None:
        """Messages ended (delivered or failed): their space is free again."""
        self.messages -= messages
        self.bytes -= size
        self._maybe_space()
        if self.closing and self.messages == 0:
            self._drained.set()

    def _maybe_space(self) -> None:
        if not self._space.is_set() and (
            self.messages + self.reserved_messages <= self.max_messages * 0.8
            and self.bytes + self.reserved_bytes <= self.max_bytes * 0.8
        ):
            self._space.set()

    def settle(self) -> tuple[int, int]:
        """Fold what hot batches took into the counters; return (messages, bytes)."""
        for batch in self.hot.values():
            self._fold(batch)
        return self.messages, self.bytes

    def _fold(self, batch: Batch) -> None:
        """Count what the hot ``batch`` took since it was last counted, out of its
        reserved room."""
        count, size = len(batch.values) - batch.base_count, batch.size - batch.base_size
        self.messages += count
        self.bytes += size
        self.reserved_messages -= count
        self.reserved_bytes -= size
        batch.base_count += count
        batch.base_size += size

    def _heat(self, batch: Batch) -> None:
        """Let the topic's sticky ``batch`` take messages on the hot path, reserving the
        room it may use (none if the buffer is full or the batch is)."""
        room_messages = self.max_messages - self.messages - self.reserved_messages
        room_bytes = self.max_bytes - self.bytes - self.reserved_bytes
        if self.closing or room_messages <= 0 or room_bytes <= 0:
            return
        count, size = len(batch.values), batch.size
        batch.count_cap = min(self.batch_size, count + room_messages)
        batch.byte_cap = min(self.batch_bytes, size + room_bytes)
        if count >= batch.count_cap or size >= batch.byte_cap:
            return
        batch.base_count, batch.base_size = count, size
        self.reserved_messages += batch.count_cap - count
        self.reserved_bytes += batch.byte_cap - size
        self.hot[batch.topic] = batch

    def _cool(self, batch: Batch) -> None:
        """``batch`` leaves the hot path: count what it took, free its unused room."""
        del self.hot[batch.topic]
        self._fold(batch)
        self.reserved_messages -= batch.count_cap - batch.base_count
        self.reserved_bytes -= batch.byte_cap - batch.base_size
        self._maybe_space()

    # -- accepting -------------------------------------------------------------------

    def capped(self, batch: Batch) -> None:
        """A hot batch used its room: sealed if full, else (the buffer is) just cooled."""
        self._cool(batch)
        if len(batch.values) >= self.batch_size or batch.size >= self.batch_bytes:
            self.seal(batch)

    def add(
        self,
        topic: str,
        target: tuple[int, int],
        value: bytes,
        route: Route | None = None,
        *,
        raw: bool = False,
    ) -> tuple[asyncio.Future[Any], Batch]:
        """The general path: add a message to the open batch of ``target`` (broker,
        partition); return its future and its batch. Keyless messages (``route`` None,
        target from :meth:`sticky_target`) make that batch the topic's sticky one."""
        broker_id, partition = target
        queue = self._queue(broker_id)
        batch = queue.open.get((topic, partition))
        if batch is None:
            batch = queue.open[(topic, partition)] = Batch(topic, broker_id, partition)
            if len(queue.open) == 1:
                queue.wakeup.set()  # the sender starts the linger clock
        elif self.hot.get(topic) is batch:
            self._cool(batch)
        future = self.create_future()
        untrack_future(future)  # pending: held by the batch (see batch.track_futures)
        batch.add(value, future, route, raw=raw)
        self.messages += 1
        self.bytes += len(value)
        if len(batch.values) >= self.batch_size or batch.size >= self.batch_bytes:
            self.seal(batch)
        elif route is None:
            self.sticky[topic] = batch
            self._heat(batch)
        elif self.sticky.get(topic) is batch:
            self._heat(batch)
        return future, batch

    def sticky_target(self, topic: str) -> tuple[int, int] | None:
        """Where the topic's keyless messages go now, if it has a sticky batch."""
        batch = self.sticky.get(topic)
        return None if batch is None else (batch.broker_id, batch.partition)

    def add_batch(self, batch: Batch) -> None:
        """A whole batch (from :meth:`Producer.send_batch`): sealed at once, behind the
        open batch of its partition (sealed too, to keep the partition's order)."""
        queue = self._queue(batch.broker_id)
        before = queue.open.get((batch.topic, batch.partition))
        if before is not None:
            self.seal(before)
        self.messages += batch.count
        self.bytes += batch.size
        queue.ready.append(batch)
        queue.wakeup.set()
        self.sealed = True

    def requeue(self, batch: Batch) -> None:
        """A batch routed again for a retry (still counted in the buffer): ready at once,
        never merged with new messages."""
        queue = self._queue(batch.broker_id)
        queue.ready.append(batch)
        queue.wakeup.set()

    def _queue(self, broker_id: int) -> BrokerQueue:
        """The broker's queue; a new one (and so a sender) for a broker seen first."""
        queue = self.queues.get(broker_id)
        if queue is None:
            queue = self.queues[broker_id] = BrokerQueue(broker_id)
            self._on_new_queue(broker_id)
        return queue

    # -- sealing ---------------------------------------------------------------------

    def seal(self, batch: Batch) -> None:
        """Close an open batch to new messages and queue it for its broker's sender."""
        queue = self.queues[batch.broker_id]
        if queue.open.get((batch.topic, batch.partition)) is not batch:
            return  # sealed already
        del queue.open[(batch.topic, batch.partition)]
        self._unstick(batch)
        queue.ready.append(batch)
        queue.wakeup.set()
        self.sealed = True

    def _unstick(self, batch: Batch) -> None:
        """``batch`` takes no more keyless messages: off the hot path, no longer sticky."""
        if self.hot.get(batch.topic) is batch:
            self._cool(batch)
        if self.sticky.get(batch.topic) is batch:
            del self.sticky[batch.topic]

    def seal_lingered(self, now: float) -> None:
        """Seal every open batch whose first message is ``linger`` old at ``now``
        (``time.monotonic()``). A sender seals them itself when it looks for its next
        request; this is for a sender waiting elsewhere (a broker it cannot reach), so
        that a batch does not take messages for longer than ``linger``: a batch ends
        within the delivery timeout of its first message, and its last one then gets
        nearly all of it too."""
        for queue in list(self.queues.values()):
            for batch in list(queue.open.values()):
                if now - batch.created >= self.linger:
                    self.seal(batch)

    def hurry(self, batch: Batch | None = None) -> None:
        """Seal ``batch`` now (if still open), or every open batch: no more lingering."""
        if batch is not None:
            self.seal(batch)
            return
        for queue in list(self.queues.values()):
            for open_batch in list(queue.open.values()):
                self.seal(open_batch)

    def call_sender(self, broker_id: int) -> None:
        """Make the broker's sender return from :meth:`next_request` (with no batches)
        as soon as it waits there: it has other work (settling a closed connection)."""
        queue = self.queues.get(broker_id)
        if queue is not None:
            queue.attention = True
            queue.wakeup.set()

    async def next_request(self, queue: BrokerQueue, max_bytes: int) -> list[Batch]:
        """Wait until batches are ready for ``queue``'s broker (sealing open ones as
        they reach ``linger``) and take them for one request; an empty list when
        :meth:`call_sender` called the sender meanwhile."""
        loop = asyncio.get_running_loop()
        while True:
            if queue.attention:
                queue.attention = False
                return []
            wait: float | None = None
            if queue.open:
                now = time.monotonic()
                for batch in list(queue.open.values()):
                    left = batch.created + self.linger - now
                    if left <= 0 or self.closing:
                        self.seal(batch)
                    elif wait is None or left < wait:
                        wait = left
            if queue.ready:
                return queue.take(max_bytes)
            queue.wakeup.clear()
            if wait is None:
                await queue.wakeup.wait()
                continue
            timer = loop.call_later(wait, queue.wakeup.set)
            try:
                await queue.wakeup.wait()
            finally:
                timer.cancel()

    def remove(self, batch: Batch) -> bool:
        """Take ``batch`` out of its queue, open or ready (its delivery time ran out);
        False if it is not there (a sender took it)."""
        queue = self.queues.get(batch.broker_id)
        if queue is None:
            return False
        key = (batch.topic, batch.partition)
        if queue.open.get(key) is batch:
            del queue.open[key]
            self._unstick(batch)
            return True
        try:
            queue.ready.remove(batch)
        except ValueError:
            return False
        return True

    def take_ready(self, broker_id: int) -> list[Batch]:
        """Every batch ready for ``broker_id``, taken at once (its sender found the
        broker unreachable: they would all fail the same way)."""
        queue = self.queues.get(broker_id)
        if queue is None:
            return []
        ready = list(queue.ready)
        queue.ready.clear()
        return ready

    # -- the end ---------------------------------------------------------------------

    def batches(self) -> Iterator[Batch]:
        """Every batch not yet taken by a sender."""
        for queue in self.queues.values():
            yield from queue.open.values()
            yield from queue.ready

    def drop_queue(self, broker_id: int) -> list[Batch]:
        """Forget a broker's queue (its sender crashed); return its batches for the caller
        to fail. The next message for that broker starts a new queue and sender."""
        queue = self.queues.pop(broker_id, None)
        if queue is None:
            return []
        for batch in queue.open.values():
            self._unstick(batch)
        left = [*queue.open.values(), *queue.ready]
        queue.open.clear()
        queue.ready.clear()
        return left

    async def wait_drained(self, timeout: float | None) -> bool:
        """After :meth:`stop_accepting`: wait (at most ``timeout`` seconds; None: as long
        as it takes, each message ends within its retries and timeouts) until every
        message accepted has ended; True if they have. One wait for all of them, however
        many there are."""
        if self.messages == 0:
            return True
        try:
            await wait_for(self._drained.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def stop_accepting(self) -> None:
        """Refuse new messages from now on (the producer is closing): the hot path is
        off, and callers waiting for space are woken to fail."""
        self.closing = True
        for topic in list(self.hot):
            self._cool(self.hot[topic])
        self.sticky.clear()
        self._space.set()

    def close(self) -> list[Batch]:
        """Stop accepting; return and forget every batch not yet taken by a sender, for
        the caller to fail."""
        self.stop_accepting()
        left = list(self.batches())
        for queue in self.queues.values():
            queue.open.clear()
            queue.ready.clear()
            queue.wakeup.set()
        return left
