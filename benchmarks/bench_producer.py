"""Producer CPU per message, as a ratio to a floor measured in the same run.

Workload: ``--messages`` messages of 100 B (40 random bytes, 60 filler) per run, to one
embedded broker in its own process (its own core), static mode (``broker.list``), batches
of 1000. Four clients send the same messages:

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
* **send**: ``await producer.send(topic, value)`` per message, against the floor.
* **send_batch**: ``batch.append(value)`` until full, then ``await producer.send_batch()``,
  against the batch floor.

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
their shape (what the client's own machinery adds).

The script prints the ratios only, never a verdict against a fixed number.

Run: ``python benchmarks/bench_producer.py [--messages N] [--rounds R] [--loop L] [--json]``.

``--loop``: the event loop(s), see ``common.on_each_loop``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import random
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from common import add_loop_option, on_each_loop, spread, start_broker

from aiokafka07 import SimpleConsumer
from aiokafka07.producer import Producer
from aiokafka07.protocol import (
    FrameSplitter,
    encode_message_set,
    encode_multiproduce_request,
    encode_offsets_request,
)

Future = asyncio.Future
PAYLOAD = 100
BATCH = 1000
CODECS = ("none", "gzip", "snappy")
VARIANTS = ("floor", "batch_floor", "enc_floor", "enc_batch_floor", "send", "send_batch")
#: Each measured variant's floor: the minimal client of the same shape.
FLOOR_OF = {"send": "floor", "send_batch": "batch_floor"}
#: The floor of each shape with the codec's work inline (a bound, see the docstring).
ENCODING_FLOOR_OF = {"send": "enc_floor", "send_batch": "enc_batch_floor"}


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

    def frame(self) -> bytes:
        """The next frame: encoded before timing started."""
        frame = self.frames[self.next]
        self.next += 1
        return frame

    async def write(self) -> None:
        assert self.transport is not None
        self.transport.write(self.frame())
        pending, self.pending = self.pending, []
        if self.confirm:
            self.transport.write(self.probe)
            self.waiting.append(pending)
        else:
            for future in pending:
                future.set_result(None)
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


def encode_only(payloads: list[bytes], codec: str) -> float:
    """CPU seconds to encode the messages as the producer's message sets (what the floor
    gets for free): the share of a run that is the codec's, not the client's."""
    started = time.process_time()
    for i in range(0, len(payloads), BATCH):
        encode_message_set(payloads[i : i + BATCH], compression=codec)
    return time.process_time() - started


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


async def run(messages: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(5)
    payloads = [rng.randbytes(40) + b"p" * (PAYLOAD - 40) for _ in range(messages)]
    groups = [(codec, confirm) for codec in CODECS for confirm in (True, False)]
    cpu: dict[tuple[str, bool, str], list[float]] = collections.defaultdict(list)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-producer-") as log_dir:
        proc, port = await start_broker(log_dir, partitions=1)
        try:
            for round_ in range(rounds):
                for codec, confirm in groups:
                    shift = round_ % len(VARIANTS)
                    for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                        gc.collect()
                        seconds = await RUNNERS[variant](port, payloads, codec, confirm)
                        cpu[(codec, confirm, variant)].append(seconds / messages)
                    encoding = encode_only(payloads, codec)
                    cpu[(codec, confirm, "encode")].append(encoding / messages)
            for codec, confirm in groups:
                for variant in VARIANTS:
                    topic = topic_of(variant, codec, confirm)
                    found = await count_messages(port, topic)
                    if found != rounds * messages:
                        raise RuntimeError(f"{topic}: {found} of {rounds * messages} in the log")
        finally:
            proc.terminate()
            await proc.wait()
    load_after = os.getloadavg()
    results = []
    for codec, confirm in groups:
        entry: dict[str, Any] = {"codec": codec, "confirm": confirm}
        encode = cpu[(codec, confirm, "encode")]
        entry["encode_ns_per_message"] = statistics.median(encode) * 1e9
        for variant in VARIANTS:
            per_message = cpu[(codec, confirm, variant)]
            entry[f"{variant}_ns_per_message"] = statistics.median(per_message) * 1e9
            if variant in FLOOR_OF:
                floor = cpu[(codec, confirm, FLOOR_OF[variant])]
                entry[f"{variant}_floor"] = FLOOR_OF[variant]
                ratios = [v / f for v, f in zip(per_message, floor, strict=True)]
                entry[f"{variant}_over_floor"] = spread(ratios)
                # The same without the codec's work (encoding the same messages, timed
                # in the same round), which the floor never does.
                rest = [(v - e) / f for v, e, f in zip(per_message, encode, floor, strict=True)]
                entry[f"{variant}_less_encoding_over_floor"] = spread(rest)
                # Against the floor that encodes inline, and that floor against the
                # pre-encoded one (the least any encoding client's ratio can be).
                bound = ENCODING_FLOOR_OF[variant]
                inline = cpu[(codec, confirm, bound)]
                entry[f"{variant}_encoding_floor"] = bound
                entry[f"{variant}_over_encoding_floor"] = spread(
                    [v / e for v, e in zip(per_message, inline, strict=True)]
                )
                entry[f"{bound}_over_floor"] = spread(
                    [e / f for e, f in zip(inline, floor, strict=True)]
                )
        results.append(entry)
    return {
        "messages": messages,
        "rounds": rounds,
        "payload_bytes": PAYLOAD,
        "batch": BATCH,
        "load_before": list(load_before),
        "load_after": list(load_after),
        "runs": results,
    }


def render(r: dict[str, Any]) -> str:
    def ratio(x: dict[str, float]) -> str:
        return f"{x['median']:5.2f}x ({x['min']:.2f}-{x['max']:.2f})"

    lines = [
        f"Producer CPU per message (this process), {r['messages']:,} messages of "
        f"{r['payload_bytes']} B per run, batches of {r['batch']}, {r['rounds']} interleaved "
        "rounds, broker in its own process",
        "load average (1/5/15 min) before: {:.2f} {:.2f} {:.2f}, after: "
        "{:.2f} {:.2f} {:.2f}".format(*r["load_before"], *r["load_after"]),
        "ratios: median over rounds of (variant / its floor in the same round), (min-max):",
        "send over the floor (a future per message), send_batch over the batch floor (a",
        "future per batch); 'less encoding': the same with the codec's own CPU (encode ns,",
        "timed in the same round) taken out of the variant, since floors send pre-encoded frames",
        f"  {'codec':<7}{'confirm':<9}{'floor ns':>9}{'encode ns':>10}{'send ns':>9}  "
        f"{'send / floor':<21}{'less encoding':<21}{'b.floor ns':>11}{'batch ns':>9}  "
        f"{'send_batch / b.floor':<21}{'less encoding':<21}",
    ]
    for run in r["runs"]:
        lines.append(
            f"  {run['codec']:<7}{'on' if run['confirm'] else 'off':<9}"
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
        f"  {'codec':<7}{'confirm':<9}{'e.floor ns':>11}  {'e.floor / floor':<21}"
        f"{'send / e.floor':<21}{'e.b.floor ns':>13}  {'e.b.floor / b.floor':<21}"
        f"{'send_batch / e.b.floor':<21}",
    ]
    for run in r["runs"]:
        lines.append(
            f"  {run['codec']:<7}{'on' if run['confirm'] else 'off':<9}"
            f"{run['enc_floor_ns_per_message']:>11.0f}  "
            f"{ratio(run['enc_floor_over_floor']):<21}"
            f"{ratio(run['send_over_encoding_floor']):<21}"
            f"{run['enc_batch_floor_ns_per_message']:>13.0f}  "
            f"{ratio(run['enc_batch_floor_over_floor']):<21}"
            f"{ratio(run['send_batch_over_encoding_floor']):<21}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    add_loop_option(parser)
    args = parser.parse_args()
    if args.messages < BATCH or args.messages % BATCH:
        parser.error(f"--messages must be a positive multiple of {BATCH}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    results = on_each_loop(args.loop, lambda: run(args.messages, args.rounds))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("\n\n".join(f"on {loop}:\n{render(r)}" for loop, r in results["loops"].items()))


if __name__ == "__main__":
    main()
