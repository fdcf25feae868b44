"""Producer throughput at its defaults, and CPU per message as a ratio to a floor, against
brokers flushing as real 0.7.2 clusters do, measured in the same run.

Every figure is taken for each of two brokers, each in its own process (its own core),
one partition, static mode (``broker.list``), interleaved (``--flush``):

* **shipped**: 0.7.2's shipped ``config/server.properties``, what real clusters run: a
  flush every 10,000 messages, or once the flusher (every second) finds a log's last
  flush a second old. A confirmation waits for the flush that shows the bytes.
* **every-message**: a flush per produce request (``log.flush.interval=1``), what quick
  starts and tests run: every produce is confirmed as soon as it is processed.

**Defaults, the row users meet first.** ``Producer(brokers=...)`` with nothing else set
(confirm on), ``await send()`` in a loop over ``--defaults-messages`` messages of 100 B,
then ``flush()``; and the same with ``confirm=False``. Measured in wall-clock time: the
rate while sending (until the last ``send()`` returned: the buffer holds back the loop
once it is full, so this is the pace at which confirmations free it) and end to end
(until ``flush()`` returned); the **tail** (from the last ``send()`` to ``flush()``
returning: with confirm, the wait for the broker's flush of the last messages, on its
timer when fewer than 10,000 follow them; the default count, 1,005,000, leaves 5,000
so); and this process's CPU time per message. Printed: each figure's median and spread,
and the ratio confirm / ``confirm=False`` per round.

Against the shipped broker each of these runs starts after a random pause within the
flusher's period (seeded), as a user's burst starts at any moment of it: run right after
a confirming run, whose end the flusher's tick set, every tail would be about 2 s.

**The confirming floor** runs in the same rounds (the three in a rotating order): a
minimal asyncio client with the same ``await send()`` shape, encoding frames of 1000
inline, whose futures resolve once OFFSETS shows the partition's flushed end grown by
their bytes (a probe behind each frame, then every 10 ms). 0.7 has no flush request and
shows only flushed bytes, so this is the least end-to-end time any client that confirms
can take; confirm's end-to-end rate and CPU are also given over it. Where the tail is
the broker's flush timer, confirm / ``confirm=False`` end to end measures that timer, and
confirm / confirming floor what the producer adds to it.

**CPU per message against floors.** ``--messages`` messages of 100 B (40 random bytes,
60 filler) per run, batches of 1000. Four clients send the same messages:

* **floor**: a minimal asyncio client with the same ``future = await send(value)`` shape,
  writing MULTIPRODUCE frames encoded before timing starts (same messages, same codec,
  1000 per frame); with confirm, an OFFSETS probe behind each frame whose answer resolves
  that frame's futures, without, the futures resolve once the frame is written. It is what
  any asyncio client must at least spend: a future per message and the socket work. Its
  futures are made the cheapest way found for Python code, ``asyncio.Future(**kw)`` with
  one ``{"loop": loop}``: measured cheaper than ``loop.create_future()`` on CPython 3.10
  to 3.13 on asyncio's loop and on 3.11 on uvloop's (no ``create_future`` frame), and no
  dearer than ``Future(loop=loop)``.
* **batch floor**: the same client with ``send_batch``'s shape: values appended to a list
  until it holds 1000, then ``future = await send_batch(values)``, one future per batch
  (and one probe per batch with confirm).
* **encoding floor** and **encoding batch floor**: the two floors with the codec's work
  inside the timed region: each frame is encoded from the messages when it is written,
  not beforehand (``encode_message_set`` with the codec, the cheapest encoder known here:
  aiokafka's C builder takes 7 to 17 times as long; the set then goes behind the
  MULTIPRODUCE header, one copy more than the producer's own frame of an uncompressed
  batch). Not a floor of the client's own work but a bound on what any client that
  encodes can reach: its ratio to the floor of the same shape is the least a producer's
  ratio can be, whatever its machinery costs.
* **send**: ``await producer.send(topic, value)`` per message, against the floor. (With
  its C accelerator the producer keeps a message's future off the cyclic garbage
  collector's lists while it holds it pending, which Python code cannot do: the floors'
  futures stay on them, and the collector walks those it finds alive.)
* **send_batch**: ``batch.append(value)`` until full, then ``await producer.send_batch()``,
  against the batch floor.
* **send_arrow**: ``await producer.send_arrow(topic, array)`` per pyarrow binary array of
  1000 values (the arrays are the input, made before timing starts, as the floors' frames
  are), against the batch floor: the Arrow path (issue 38), which encodes from the
  arrays' buffers. Measured only where pyarrow is installed (the rows say n/a otherwise).

For each codec (none, gzip, snappy) and confirm on / off, the four run interleaved, in a
rotating order, ``--rounds`` times (>= 5), each after a full garbage collection (a full
collection left due by the run before, which costs as much as thousands of messages, must
not land in the next), followed each time by encoding the same messages alone
(``encode``: the codec's share, which the floor never pays; gzip at zlib level 6 is most
of a gzip run). Measured: CPU time of this process
(``time.process_time``, all threads) from the first send until the last message is
delivered, per message; the broker's own CPU is not counted. A shared machine slows every
client alike within a round, so the figures printed are ratios to the floor of the same
round: the median over rounds, with the min-max spread, also with the codec's share taken
out, plus the medians in ns/message and the load average before and after. Every run
checks that each message was delivered; at the end every topic is read back and counted.

A second table gives the same against the encoding floors: each encoding floor over the
floor of its shape (the bound), and ``send`` / ``send_batch`` over the encoding floor of
their shape (what the client's own machinery adds), and ``send_arrow`` over the encoding
batch floor.

The script prints the ratios only, never a verdict against a fixed number.

Run: ``python benchmarks/bench_producer.py [--messages N] [--defaults-messages N]
[--rounds R] [--flush F] [--loop L] [--json]``.

``--loop``: the event loop(s), see ``common.on_each_loop``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import gc
import itertools
import json
import os
import random
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from common import add_loop_option, on_each_loop, ratios, spread, start_broker

from aiokafka07 import SimpleConsumer
from aiokafka07.producer import Producer
from aiokafka07.protocol import (
    FrameSplitter,
    decode_offsets_response,
    encode_message_set,
    encode_multiproduce_request,
    encode_offsets_request,
)
from aiokafka07.testing.flush import FLUSH

Future = asyncio.Future
PAYLOAD = 100
BATCH = 1000
CODECS = ("none", "gzip", "snappy")
#: How the brokers flush (aiokafka07.testing.flush): 0.7.2's shipped settings first.
FLUSHES = tuple(FLUSH)
#: The defaults row's three clients: the producer with confirm and without, and the
#: confirming floor (interleaved, in a rotating order).
DEFAULTS_SIDES = ("confirm", "no_confirm", "floor")
VARIANTS = ("floor", "batch_floor", "enc_floor", "enc_batch_floor", "send", "send_batch")
#: Measured where pyarrow is installed (its arrays are the input).
ARROW_VARIANT = "send_arrow"
#: Each measured variant's floor: the minimal client of the same shape.
FLOOR_OF = {"send": "floor", "send_batch": "batch_floor", "send_arrow": "batch_floor"}
#: The floor of each shape with the codec's work inline (a bound, see the docstring).
ENCODING_FLOOR_OF = {
    "send": "enc_floor",
    "send_batch": "enc_batch_floor",
    "send_arrow": "enc_batch_floor",
}


class FloorClient(asyncio.Protocol):
    """The floor: futures per message, pre-encoded frames, nothing else."""

    def __init__(self, frames: list[bytes], probe: bytes, confirm: bool) -> None:
        self.frames = frames
        self.probe = probe
        self.confirm = confirm
        self.next = 0
        self.pending: list[asyncio.Future[None]] = []
        self.waiting: collections.deque[list[asyncio.Future[None]]] = collections.deque()
        self.splitter = FrameSplitter()
        loop = asyncio.get_running_loop()
        self.create_future = loop.create_future
        #: ``Future(**future_kwargs)``: the cheapest future for Python code (docstring).
        self.future_kwargs = {"loop": loop}
        self.resumed: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        for _ in self.splitter.feed(data):
            for future in self.waiting.popleft():
                future.set_result(None)

    def pause_writing(self) -> None:
        self.resumed = self.create_future()

    def resume_writing(self) -> None:
        if self.resumed is not None:
            self.resumed.set_result(None)
            self.resumed = None

    async def send(self, value: bytes) -> asyncio.Future[None]:
        future: asyncio.Future[None] = Future(**self.future_kwargs)
        pending = self.pending
        pending.append(future)
        if len(pending) >= BATCH:
            await self.write()
        return future

    async def send_batch(self, values: list[bytes]) -> asyncio.Future[None]:
        """One future for a whole batch (its frame was encoded beforehand)."""
        future = self.create_future()
        self.pending.append(future)
        await self.write()
        return future

    def written_frame(self, pending: list[asyncio.Future[None]]) -> None:
        """The frame of ``pending`` was written: with confirm, a probe behind it whose
        answer resolves them; without, they resolve now."""
        assert self.transport is not None
        if self.confirm:
            self.transport.write(self.probe)
            self.waiting.append(pending)
        else:
            for future in pending:
                future.set_result(None)

    def frame(self) -> bytes:
        """The next frame: encoded before timing started."""
        frame = self.frames[self.next]
        self.next += 1
        return frame

    async def write(self) -> None:
        assert self.transport is not None
        self.transport.write(self.frame())
        pending, self.pending = self.pending, []
        self.written_frame(pending)
        if self.resumed is not None:
            await self.resumed
        else:
            await asyncio.sleep(0)


def floor_frame(topic: str, values: list[bytes], codec: str) -> bytes:
    """A floor's frame: ``values`` as one message set of ``codec`` in a MULTIPRODUCE."""
    return encode_multiproduce_request([(topic, -1, encode_message_set(values, compression=codec))])


class EncodingFloorClient(FloorClient):
    """The floor with the codec's work inline: each frame is encoded from its messages
    when it is written (the least any client that encodes pays on top of the floor).
    Sends go in order in frames of ``BATCH``, so frame ``i`` holds messages ``i * BATCH``
    onwards, taken by one slice of the payloads (cheaper than collecting them per call)."""

    def __init__(
        self, topic: str, codec: str, payloads: list[bytes], probe: bytes, confirm: bool
    ) -> None:
        super().__init__([], probe, confirm)
        self.topic = topic
        self.codec = codec
        self.payloads = payloads

    def frame(self) -> bytes:
        start = self.next * BATCH
        self.next += 1
        # The set behind a MULTIPRODUCE header, as the floors' frames: one copy more than
        # the producer's one-buffer PRODUCE frame for an uncompressed batch.
        return floor_frame(self.topic, self.payloads[start : start + BATCH], self.codec)


class ConfirmingFloorClient(EncodingFloorClient):
    """The defaults row's floor with confirm: the encoding floor's ``await send()`` shape
    (a future per message, frames of ``BATCH`` encoded inline, uncompressed as the
    producer's default), whose futures resolve only once the partition's flushed end has
    grown by every byte written up to their frame, read the only way 0.7 shows it
    (OFFSETS, latest: the flushed end). One probe follows each frame; while frames wait
    and no probe is under way, the end is read again every 10 ms. The least any client
    that confirms spends end to end: the broker's flush, on its count or its timer, is
    waited for here as by the producer."""

    def __init__(self, topic: str, payloads: list[bytes], probe: bytes) -> None:
        super().__init__(topic, "none", payloads, probe, True)
        self.base: int | None = None
        self.based: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.written = 0
        #: (bytes written up to and including the frame, its futures), oldest first.
        self.claims: collections.deque[tuple[int, list[asyncio.Future[None]]]] = collections.deque()
        self.probes = 0
        self.poll: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.read_end()

    def read_end(self) -> None:
        """The poll's timer (or the connection's start): one probe."""
        self.poll = None
        self.send_probe()

    def send_probe(self) -> None:
        assert self.transport is not None
        self.transport.write(self.probe)
        self.probes += 1

    def data_received(self, data: bytes) -> None:
        for frame in self.splitter.feed(data):
            self.probes -= 1
            answer = decode_offsets_response(frame)
            if answer.error_code:
                raise RuntimeError(f"OFFSETS answered error {answer.error_code}")
            end = max(answer.offsets, default=0)
            if self.base is None:
                self.base = end
                self.based.set_result(None)
                continue
            claims = self.claims
            while claims and claims[0][0] <= end - self.base:
                for future in claims.popleft()[1]:
                    future.set_result(None)
        if self.claims and not self.probes and self.poll is None:
            self.poll = asyncio.get_running_loop().call_later(0.01, self.read_end)

    def frame(self) -> bytes:
        start = self.next * BATCH
        self.next += 1
        message_set = encode_message_set(self.payloads[start : start + BATCH])
        self.written += len(message_set)
        return encode_multiproduce_request([(self.topic, 0, message_set)])

    def written_frame(self, pending: list[asyncio.Future[None]]) -> None:
        """``pending`` resolve once the flushed end covers their frame: a claim, and a
        probe behind the frame."""
        self.claims.append((self.written, pending))
        self.send_probe()


def burst_figures(started: float, sent: float, done: float, cpu: float) -> dict[str, float]:
    """A defaults-row run's figures from its clock readings (``time.perf_counter()``):
    wall seconds until the last send() returned, until the last message was confirmed
    (end to end), between the two (the tail), and the CPU seconds of this process."""
    return {
        "sending": sent - started,
        "end_to_end": done - started,
        "tail": done - sent,
        "cpu": cpu,
    }


async def run_confirming_floor(port: int, payloads: list[bytes]) -> dict[str, float]:
    """The defaults row's confirming floor (:class:`ConfirmingFloorClient`): the same
    figures as :func:`run_defaults`."""
    topic = FLOOR_TOPIC
    probe = encode_offsets_request(topic, 0, -1, 1)
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_connection(
        lambda: ConfirmingFloorClient(topic, payloads, probe), "127.0.0.1", port
    )
    try:
        await asyncio.wait_for(client.based, 10)
        cpu, started = time.process_time(), time.perf_counter()
        last = None
        for value in payloads:
            last = await client.send(value)
        if client.pending:
            await client.write()
        sent = time.perf_counter()
        # Claims are met in the order written: the last future resolves last.
        assert last is not None
        await asyncio.wait_for(last, 60)
        done = time.perf_counter()
        cpu = time.process_time() - cpu
    finally:
        if client.poll is not None:
            client.poll.cancel()
        transport.close()
    return burst_figures(started, sent, done, cpu)


def encode_only(payloads: list[bytes], codec: str) -> float:
    """CPU seconds to encode the messages as the producer's message sets (what the floor
    gets for free): the share of a run that is the codec's, not the client's."""
    started = time.process_time()
    for i in range(0, len(payloads), BATCH):
        encode_message_set(payloads[i : i + BATCH], compression=codec)
    return time.process_time() - started


def defaults_topic(confirm: bool) -> str:
    """The topic of the defaults row's runs (written, then counted)."""
    return f"defaults-{'confirm' if confirm else 'fire'}"


#: The shipped broker's flusher period, seconds (log.default.flush.scheduler.interval.ms).
FLUSHER_PERIOD = int(FLUSH["shipped"]["log.default.flush.scheduler.interval.ms"]) / 1000
#: The topic of the defaults row's confirming floor.
FLOOR_TOPIC = "defaults-floor"


def topic_of(variant: str, codec: str, confirm: bool) -> str:
    return f"{variant}-{codec}-{'confirm' if confirm else 'fire'}"


async def run_floor(port: int, payloads: list[bytes], codec: str, confirm: bool) -> float:
    return await _floor(port, payloads, codec, confirm, batched=False)


async def run_batch_floor(port: int, payloads: list[bytes], codec: str, confirm: bool) -> float:
    return await _floor(port, payloads, codec, confirm, batched=True)


async def run_enc_floor(port: int, payloads: list[bytes], codec: str, confirm: bool) -> float:
    return await _floor(port, payloads, codec, confirm, batched=False, inline=True)


async def run_enc_batch_floor(port: int, payloads: list[bytes], codec: str, confirm: bool) -> float:
    return await _floor(port, payloads, codec, confirm, batched=True, inline=True)


async def _floor(
    port: int,
    payloads: list[bytes],
    codec: str,
    confirm: bool,
    *,
    batched: bool,
    inline: bool = False,
) -> float:
    variant = "batch_floor" if batched else "floor"
    topic = topic_of(f"enc_{variant}" if inline else variant, codec, confirm)
    probe = encode_offsets_request(topic, 0, -1, 1)
    make: Callable[[], FloorClient]
    if inline:
        make = lambda: EncodingFloorClient(topic, codec, payloads, probe, confirm)  # noqa: E731
    else:
        frames = [
            floor_frame(topic, payloads[i : i + BATCH], codec)
            for i in range(0, len(payloads), BATCH)
        ]
        make = lambda: FloorClient(frames, probe, confirm)  # noqa: E731
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_connection(make, "127.0.0.1", port)
    try:
        started = time.process_time()
        last = None
        if batched:
            values: list[bytes] = []
            for value in payloads:
                values.append(value)
                if len(values) == BATCH:
                    last = await client.send_batch(values)
                    values = []
            if values:
                last = await client.send_batch(values)
        else:
            for value in payloads:
                last = await client.send(value)
        assert last is not None
        await last
        return time.process_time() - started
    finally:
        transport.close()


def producer(port: int, codec: str, confirm: bool) -> Producer:
    return Producer(
        brokers=f"0:127.0.0.1:{port}",
        compression=codec,
        confirm=confirm,
        batch_size=BATCH,
        linger_ms=5,
    )


async def run_send(port: int, payloads: list[bytes], codec: str, confirm: bool) -> float:
    topic = topic_of("send", codec, confirm)
    async with producer(port, codec, confirm) as p:
        started = time.process_time()
        last = None
        for value in payloads:
            last = await p.send(topic, value)
        assert last is not None
        await last
        elapsed = time.process_time() - started
        check(p, len(payloads))
    return elapsed


async def run_send_batch(port: int, payloads: list[bytes], codec: str, confirm: bool) -> float:
    topic = topic_of("send_batch", codec, confirm)
    async with producer(port, codec, confirm) as p:
        started = time.process_time()
        batch = p.create_batch()
        for value in payloads:
            if batch.append(value) is None:
                await p.send_batch(batch, topic)
                batch = p.create_batch()
                batch.append(value)
        last = await p.send_batch(batch, topic)
        await last
        elapsed = time.process_time() - started
        check(p, len(payloads))
    return elapsed


def arrow_arrays(payloads: list[bytes]) -> list[Any] | None:
    """The payloads as pyarrow binary arrays of ``BATCH`` values (None without pyarrow)."""
    try:
        import pyarrow
    except ImportError:
        return None
    return [
        pyarrow.array(payloads[i : i + BATCH], pyarrow.binary())
        for i in range(0, len(payloads), BATCH)
    ]


async def run_send_arrow(
    port: int, payloads: list[bytes], codec: str, confirm: bool, *, arrays: list[Any]
) -> float:
    topic = topic_of("send_arrow", codec, confirm)
    async with producer(port, codec, confirm) as p:
        started = time.process_time()
        last = None
        for array in arrays:
            last = await p.send_arrow(topic, array)
        assert last is not None
        await last
        elapsed = time.process_time() - started
        check(p, len(payloads))
    return elapsed


def check(p: Producer, messages: int) -> None:
    m = p.metrics
    if m.messages_sent != messages or m.messages_failed:
        raise RuntimeError(f"{m.messages_sent} of {messages} delivered, {m.messages_failed} failed")


RUNNERS: dict[str, Callable[[int, list[bytes], str, bool], Coroutine[Any, Any, float]]] = {
    "floor": run_floor,
    "batch_floor": run_batch_floor,
    "enc_floor": run_enc_floor,
    "enc_batch_floor": run_enc_batch_floor,
    "send": run_send,
    "send_batch": run_send_batch,
}


async def count_messages(port: int, topic: str) -> int:
    count = 0
    async with SimpleConsumer("127.0.0.1", port) as consumer:
        async for batch in consumer.batches(topic, 0, 0):
            count += len(batch.messages)
    return count


async def run_defaults(
    port: int, payloads: list[bytes], count: int, confirm: bool
) -> dict[str, float]:
    """``Producer(brokers=...)`` at its defaults (but ``confirm``): ``await send()`` in a
    loop, then ``flush()``. Wall seconds until the last send() returned and until
    flush() returned, and CPU seconds of this process."""
    topic = defaults_topic(confirm)
    async with Producer(brokers=f"0:127.0.0.1:{port}", confirm=confirm) as p:
        cpu, started = time.process_time(), time.perf_counter()
        for value in payloads:
            await p.send(topic, value)
        sent = time.perf_counter()
        await p.flush()
        done = time.perf_counter()
        cpu = time.process_time() - cpu
        check(p, count)
    return burst_figures(started, sent, done, cpu)


async def run(
    messages: int, defaults_messages: int, rounds: int, flushes: list[str]
) -> dict[str, Any]:
    rng = random.Random(5)
    payloads = [rng.randbytes(40) + b"p" * (PAYLOAD - 40) for _ in range(messages)]
    groups = [(codec, confirm) for codec in CODECS for confirm in (True, False)]
    cpu: dict[tuple[str, str, bool, str], list[float]] = collections.defaultdict(list)
    defaults: dict[tuple[str, str], list[dict[str, float]]] = collections.defaultdict(list)
    phases = random.Random(7)
    defaults_payloads = list(itertools.islice(itertools.cycle(payloads), defaults_messages))
    runners = dict(RUNNERS)
    variants = VARIANTS
    arrays = arrow_arrays(payloads)
    if arrays is not None:
        runners[ARROW_VARIANT] = functools.partial(run_send_arrow, arrays=arrays)
        variants = (*VARIANTS, ARROW_VARIANT)
    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:
        ports: dict[str, int] = {}
        procs = []
        try:
            for flush in flushes:
                log_dir = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix=f"bench-producer-{flush}-")
                )
                proc, ports[flush] = await start_broker(log_dir, partitions=1, flush=flush)
                procs.append(proc)
            for round_ in range(rounds):
                for flush in flushes:
                    port = ports[flush]
                    for codec, confirm in groups:
                        shift = round_ % len(variants)
                        for variant in variants[shift:] + variants[:shift]:
                            gc.collect()
                            seconds = await runners[variant](port, payloads, codec, confirm)
                            cpu[(flush, codec, confirm, variant)].append(seconds / messages)
                        encoding = encode_only(payloads, codec)
                        cpu[(flush, codec, confirm, "encode")].append(encoding / messages)
                    sides = DEFAULTS_SIDES[round_ % 3 :] + DEFAULTS_SIDES[: round_ % 3]
                    for side in sides:
                        gc.collect()
                        if flush == "shipped":
                            # A burst starts at any moment of the broker's flusher period,
                            # as a user's does, not just after the last run's tail ended
                            # on its tick (which would make every tail about 2 s).
                            await asyncio.sleep(phases.uniform(0, FLUSHER_PERIOD))
                        if side == "floor":
                            figures = await run_confirming_floor(port, defaults_payloads)
                        else:
                            figures = await run_defaults(
                                port, defaults_payloads, defaults_messages, side == "confirm"
                            )
                        defaults[(flush, side)].append(figures)
            for flush in flushes:
                port = ports[flush]
                for codec, confirm in groups:
                    for variant in variants:
                        topic = topic_of(variant, codec, confirm)
                        found = await count_messages(port, topic)
                        if found != rounds * messages:
                            raise RuntimeError(
                                f"{flush}: {topic}: {found} of {rounds * messages} in the log"
                            )
                for topic in (defaults_topic(True), defaults_topic(False), FLOOR_TOPIC):
                    found = await count_messages(port, topic)
                    if found != rounds * defaults_messages:
                        raise RuntimeError(
                            f"{flush}: {topic}: {found} of {rounds * defaults_messages} in the log"
                        )
        finally:
            for proc in procs:
                proc.terminate()
                await proc.wait()
    load_after = os.getloadavg()
    results = []
    for flush in flushes:
        for codec, confirm in groups:
            results.append(cpu_entry(cpu, flush, codec, confirm, variants))
    return {
        "messages": messages,
        "defaults_messages": defaults_messages,
        "rounds": rounds,
        "payload_bytes": PAYLOAD,
        "batch": BATCH,
        "flushes": flushes,
        "variants": list(variants),
        "load_before": list(load_before),
        "load_after": list(load_after),
        "defaults": [defaults_entry(defaults, flush, defaults_messages) for flush in flushes],
        "runs": results,
    }


def defaults_entry(
    defaults: dict[tuple[str, str], list[dict[str, float]]], flush: str, count: int
) -> dict[str, Any]:
    """The defaults rows of one broker: rates, tail and CPU with confirm and without and
    of the confirming floor, and the ratios per round (confirm over ``confirm=False``,
    and confirm over the confirming floor)."""
    on, off = defaults[(flush, "confirm")], defaults[(flush, "no_confirm")]
    floor = defaults[(flush, "floor")]
    entry: dict[str, Any] = {"flush": flush}
    for name, runs in (("confirm", on), ("no_confirm", off), ("confirming_floor", floor)):
        entry[name] = {
            "sending_rate": spread([count / r["sending"] for r in runs]),
            "end_to_end_rate": spread([count / r["end_to_end"] for r in runs]),
            "tail_ms": spread([r["tail"] * 1000 for r in runs]),
            "cpu_ns_per_message": spread([r["cpu"] / count * 1e9 for r in runs]),
        }
    # Rates are messages over seconds: confirm's rate over the other's is their seconds'
    # ratio the other way round.
    entry["sending_rate_ratio"] = ratios([r["sending"] for r in off], [r["sending"] for r in on])
    entry["end_to_end_rate_ratio"] = ratios(
        [r["end_to_end"] for r in off], [r["end_to_end"] for r in on]
    )
    entry["cpu_ratio"] = ratios([r["cpu"] for r in on], [r["cpu"] for r in off])
    # Against the least a confirming client spends: its end-to-end rate over the floor's,
    # and CPU per message over the floor's.
    entry["end_to_end_rate_over_confirming_floor"] = ratios(
        [r["end_to_end"] for r in floor], [r["end_to_end"] for r in on]
    )
    entry["cpu_over_confirming_floor"] = ratios([r["cpu"] for r in on], [r["cpu"] for r in floor])
    return entry


def cpu_entry(
    cpu: dict[tuple[str, str, bool, str], list[float]],
    flush: str,
    codec: str,
    confirm: bool,
    variants: tuple[str, ...],
) -> dict[str, Any]:
    """The CPU rows of one codec and confirm setting against one broker."""
    entry: dict[str, Any] = {"flush": flush, "codec": codec, "confirm": confirm}
    encode = cpu[(flush, codec, confirm, "encode")]
    entry["encode_ns_per_message"] = statistics.median(encode) * 1e9
    for variant in variants:
        per_message = cpu[(flush, codec, confirm, variant)]
        entry[f"{variant}_ns_per_message"] = statistics.median(per_message) * 1e9
        if variant in FLOOR_OF:
            floor = cpu[(flush, codec, confirm, FLOOR_OF[variant])]
            entry[f"{variant}_floor"] = FLOOR_OF[variant]
            entry[f"{variant}_over_floor"] = ratios(per_message, floor)
            # The same without the codec's work (encoding the same messages, timed in
            # the same round), which the floor never does.
            rest = [(v - e) / f for v, e, f in zip(per_message, encode, floor, strict=True)]
            entry[f"{variant}_less_encoding_over_floor"] = spread(rest)
            # Against the floor that encodes inline, and that floor against the
            # pre-encoded one (the least any encoding client's ratio can be).
            bound = ENCODING_FLOOR_OF[variant]
            inline = cpu[(flush, codec, confirm, bound)]
            entry[f"{variant}_encoding_floor"] = bound
            entry[f"{variant}_over_encoding_floor"] = ratios(per_message, inline)
            entry[f"{bound}_over_floor"] = ratios(inline, floor)
    return entry


def render(r: dict[str, Any]) -> str:
    def ratio(x: dict[str, float]) -> str:
        return f"{x['median']:5.2f}x ({x['min']:.2f}-{x['max']:.2f})"

    def rate(x: dict[str, float]) -> str:
        return f"{x['median'] / 1000:6.0f}k ({x['min'] / 1000:.0f}-{x['max'] / 1000:.0f})"

    def ms(x: dict[str, float]) -> str:
        return f"{x['median']:6.0f} ({x['min']:.0f}-{x['max']:.0f})"

    lines = [
        f"Producer at its defaults and CPU per message (this process), {r['rounds']} "
        "interleaved rounds, each broker in its own process, one partition, brokers "
        f"flushing as: {', '.join(r['flushes'])}",
        "load average (1/5/15 min) before: {:.2f} {:.2f} {:.2f}, after: "
        "{:.2f} {:.2f} {:.2f}".format(*r["load_before"], *r["load_after"]),
        "",
        f"defaults: Producer(brokers=...) with nothing else set, `await send()` in a loop over "
        f"{r['defaults_messages']:,} messages of {r['payload_bytes']} B, then flush(); "
        "median (min-max) over rounds;",
        "rates in messages/s of wall-clock time: while sending (until the last send() "
        "returned) and end to end (until flush() returned); tail: last send() to flush() "
        "returning;",
        "on / off: the ratio confirm / confirm=False per round, of the rates and of the "
        "CPU per message;",
        "c.floor: the confirming floor (a minimal client whose futures resolve once the "
        "flushed end shows their bytes);",
        "on / c.f.: confirm's end-to-end rate and CPU per message over the confirming "
        "floor's, per round",
        f"  {'flush':<15}{'confirm':<9}{'sending':>17}{'end to end':>17}{'tail ms':>16}"
        f"{'CPU ns':>16}",
    ]
    for entry in r["defaults"]:
        for name, label in (
            ("confirm", "on"),
            ("no_confirm", "off"),
            ("confirming_floor", "c.floor"),
        ):
            row = entry[name]
            lines.append(
                f"  {entry['flush']:<15}{label:<9}{rate(row['sending_rate']):>17}"
                f"{rate(row['end_to_end_rate']):>17}{ms(row['tail_ms']):>16}"
                f"{ms(row['cpu_ns_per_message']):>16}"
            )
        lines.append(
            f"  {entry['flush']:<15}{'on / off':<9}{ratio(entry['sending_rate_ratio']):>17}"
            f"{ratio(entry['end_to_end_rate_ratio']):>17}{'':>16}"
            f"{ratio(entry['cpu_ratio']):>16}"
        )
        lines.append(
            f"  {entry['flush']:<15}{'on / c.f.':<9}{'':>17}"
            f"{ratio(entry['end_to_end_rate_over_confirming_floor']):>17}{'':>16}"
            f"{ratio(entry['cpu_over_confirming_floor']):>16}"
        )
    lines += [
        "",
        f"CPU per message against floors, {r['messages']:,} messages of "
        f"{r['payload_bytes']} B per run, batches of {r['batch']}",
        "ratios: median over rounds of (variant / its floor in the same round), (min-max):",
        "send over the floor (a future per message), send_batch over the batch floor (a",
        "future per batch); 'less encoding': the same with the codec's own CPU (encode ns,",
        "timed in the same round) taken out of the variant, since floors send pre-encoded frames",
        f"  {'flush':<15}{'codec':<7}{'confirm':<9}{'floor ns':>9}{'encode ns':>10}{'send ns':>9}  "
        f"{'send / floor':<21}{'less encoding':<21}{'b.floor ns':>11}{'batch ns':>9}  "
        f"{'send_batch / b.floor':<21}{'less encoding':<21}",
    ]
    for run in r["runs"]:
        lines.append(
            f"  {run['flush']:<15}{run['codec']:<7}{'on' if run['confirm'] else 'off':<9}"
            f"{run['floor_ns_per_message']:>9.0f}{run['encode_ns_per_message']:>10.0f}"
            f"{run['send_ns_per_message']:>9.0f}  {ratio(run['send_over_floor']):<21}"
            f"{ratio(run['send_less_encoding_over_floor']):<21}"
            f"{run['batch_floor_ns_per_message']:>11.0f}"
            f"{run['send_batch_ns_per_message']:>9.0f}  "
            f"{ratio(run['send_batch_over_floor']):<21}"
            f"{ratio(run['send_batch_less_encoding_over_floor']):<21}"
        )
    lines += [
        "against floors that encode each frame inline (e.floor, e.b.floor): the encoding",
        "floor over the pre-encoded one is the least any client that encodes can reach;",
        "the producer over the encoding floor is what its own machinery adds",
        f"  {'flush':<15}{'codec':<7}{'confirm':<9}{'e.floor ns':>11}  {'e.floor / floor':<21}"
        f"{'send / e.floor':<21}{'e.b.floor ns':>13}  {'e.b.floor / b.floor':<21}"
        f"{'send_batch / e.b.floor':<21}",
    ]
    for run in r["runs"]:
        lines.append(
            f"  {run['flush']:<15}{run['codec']:<7}{'on' if run['confirm'] else 'off':<9}"
            f"{run['enc_floor_ns_per_message']:>11.0f}  "
            f"{ratio(run['enc_floor_over_floor']):<21}"
            f"{ratio(run['send_over_encoding_floor']):<21}"
            f"{run['enc_batch_floor_ns_per_message']:>13.0f}  "
            f"{ratio(run['enc_batch_floor_over_floor']):<21}"
            f"{ratio(run['send_batch_over_encoding_floor']):<21}"
        )
    lines += [
        "the Arrow path: send_arrow (one pyarrow binary array of "
        f"{r['batch']} values per call) over the batch floor and the encoding batch floor",
        f"  {'flush':<15}{'codec':<7}{'confirm':<9}{'arrow ns':>9}  {'send_arrow / b.floor':<21}"
        f"{'less encoding':<21}{'send_arrow / e.b.floor':<23}",
    ]
    for run in r["runs"]:
        where = f"  {run['flush']:<15}{run['codec']:<7}{'on' if run['confirm'] else 'off':<9}"
        if "send_arrow_ns_per_message" not in run:
            lines.append(f"{where}{'n/a (pyarrow is not installed)':>9}")
            continue
        lines.append(
            f"{where}{run['send_arrow_ns_per_message']:>9.0f}  "
            f"{ratio(run['send_arrow_over_floor']):<21}"
            f"{ratio(run['send_arrow_less_encoding_over_floor']):<21}"
            f"{ratio(run['send_arrow_over_encoding_floor']):<23}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--defaults-messages",
        type=int,
        default=1_005_000,
        help="messages per run of the defaults rows (default 1,005,000: the last 5,000 "
        "wait for the shipped broker's flush timer)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--flush",
        choices=(*FLUSHES, "both"),
        default="both",
        help="how the broker flushes: shipped (0.7.2's server.properties), every-message, "
        "or both (the default), interleaved",
    )
    parser.add_argument("--json", action="store_true")
    add_loop_option(parser)
    args = parser.parse_args()
    if args.messages < BATCH or args.messages % BATCH:
        parser.error(f"--messages must be a positive multiple of {BATCH}")
    if args.defaults_messages < 1:
        parser.error("--defaults-messages must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    flushes = list(FLUSHES) if args.flush == "both" else [args.flush]
    results = on_each_loop(
        args.loop, lambda: run(args.messages, args.defaults_messages, args.rounds, flushes)
    )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\n\n".join(f"on {loop}:\n{render(r)}" for loop, r in results["loops"].items()))


if __name__ == "__main__":
    main()
