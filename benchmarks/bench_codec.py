"""Throughput of the aiokafka07 message-set codec, against aiokafka and cramjam.

What is measured, and why:

* **Workload.** Realistic 100-byte payloads (JSON-ish page-view events from a seeded
  ``random``, padded or cut to exactly 100 bytes) in uncompressed message sets of about
  1 MiB, the size of a typical consumer fetch (~9500 messages). Every figure is the best
  of several repeats (``time.perf_counter``) of a loop sized to take about one second in
  all (``--quick``: 0.2 s); taking the best filters out most noise from other processes
  (noise only ever makes a repeat slower). MB means 10^6 bytes. The garbage collector
  stays on, as in a real consumer: our decoder returns a list of ~9500 tuples, whose
  collections make the decode figures (the pure-Python one most) vary by up to ~1.5x
  between runs.
* **Decode** is the consumer hot path: :func:`decode_message_set` on a 1 MiB set (CRCs are
  checked inside it) with every ``value`` touched, against aiokafka's C-accelerated
  legacy record reader iterating a buffer of the same payloads as magic-1 records exactly
  as its fetcher does with ``check_crcs`` on (``MemoryRecords`` -> ``next_batch`` ->
  ``validate_crc`` -> iterate). aiokafka is the natural peer: the most used asyncio Kafka
  client, whose legacy (0.10) format is the closest relative of the 0.7 one. Target: at
  least as fast (1.0x), 1.5x aimed.
* **Encode** is the producer hot path: :func:`encode_message_set` of the same payloads,
  against aiokafka's ``LegacyRecordBatchBuilder`` (magic 1, no compression). Target 1.5x.
* **Compression.** A compressed set costs compression plus framing and CRCs, so the
  baseline is cramjam's raw speed on the same bytes: compressing the uncompressed inner
  message set (``gzip.compress(level=6)``, ``snappy.compress_raw``) and decompressing the
  very compressed payload our wrapper carries (for snappy, each raw block of its xerial
  framing, split off beforehand). Our decode includes expanding the wrapper and checking
  every inner CRC. Figures are MB/s of uncompressed data; target: our time within 20 %
  of cramjam's.
* The decode and encode figures are repeated with the pure-Python implementation (the
  fallback when the C accelerator is not built) for information.

This prints figures; it asserts no thresholds (it only checks that each side decodes what
was encoded, so that the right work is timed). ``--json`` prints one JSON object instead
of the table. Without aiokafka installed only our figures are printed.

Run: ``python benchmarks/bench_codec.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import cramjam

from aiokafka07.protocol import (
    Compression,
    _accel,
    _pure,
    compress,
    decode_message_set,
    encode_message_set,
    entry_size,
    implementation,
)
from aiokafka07.protocol.compression import decompress_buffer

PAYLOAD_SIZE = 100
SET_TARGET_BYTES = 1 << 20
MESSAGES = SET_TARGET_BYTES // entry_size(PAYLOAD_SIZE)
REPEATS = 5
SECONDS = 1.0
QUICK_SECONDS = 0.2
MB = 1e6

DECODE_REQUIRED = 1.0
DECODE_AIMED = 1.5
ENCODE_AIMED = 1.5
COMPRESSION_MAX_OVERHEAD = 1.20

_XERIAL_HEADER_SIZE = 16


# --------------------------------------------------------------------------- workload

_PAGES = ("/", "/search", "/cart", "/checkout", "/account", "/product/", "/category/")
_REFERRERS = ("google.com", "bing.com", "t.co", "facebook.com", "-", "yahoo.com")
_AGENTS = ("Mozilla/5.0 Firefox/9.0", "Chrome/16.0.912", "Safari/534.52", "MSIE 9.0; Win")


def make_payloads(count: int, seed: int = 20120101) -> list[bytes]:
    """``count`` distinct page-view events of exactly PAYLOAD_SIZE bytes each."""
    rng = random.Random(seed)
    ts = 1_325_376_000_000  # 2012, when Kafka 0.7 was current
    payloads = []
    for _ in range(count):
        ts += rng.randrange(1, 40)
        page = rng.choice(_PAGES)
        if page.endswith("/") and page != "/":
            page += str(rng.randrange(100_000))
        doc = (
            f'{{"t":{ts},"u":{rng.randrange(1_000_000)},"s":"{rng.getrandbits(32):08x}",'
            f'"p":"{page}","r":"{rng.choice(_REFERRERS)}"}}'
        ).encode()
        payloads.append(_fit(doc, rng.choice(_AGENTS).encode()))
    return payloads


def _fit(doc: bytes, filler: bytes) -> bytes:
    """Pad a JSON object to PAYLOAD_SIZE with an ``"a"`` field of ``filler``, or cut it."""
    room = PAYLOAD_SIZE - len(doc) - len(b',"a":""')
    if room >= 0:
        doc = doc[:-1] + b',"a":"' + (filler * (room // len(filler) + 1))[:room] + b'"}'
    return doc[:PAYLOAD_SIZE]


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Rate:
    """The best time of one call that handles ``messages`` messages / ``wire_bytes`` bytes."""

    seconds: float
    messages: int
    wire_bytes: int

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def payload_mb_per_s(self) -> float:
        return self.messages * PAYLOAD_SIZE / self.seconds / MB

    @property
    def wire_mb_per_s(self) -> float:
        return self.wire_bytes / self.seconds / MB

    def as_dict(self) -> dict[str, float]:
        return {
            "seconds_per_call": self.seconds,
            "messages_per_s": self.messages_per_s,
            "payload_mb_per_s": self.payload_mb_per_s,
            "wire_mb_per_s": self.wire_mb_per_s,
        }


def best_time(fn: Callable[[], object], budget: float, repeats: int = REPEATS) -> float:
    """Best seconds per call of ``fn`` over ``repeats`` loops sharing ``budget`` seconds."""
    fn()  # warm-up (caches, allocator)
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    loops = max(1, round(budget / repeats / once))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - start) / loops)
    return best


@contextmanager
def pure_python() -> Iterator[None]:
    """Run the codec on its pure-Python twin for the duration of the block."""
    saved = _accel.impl
    _accel.impl = _pure
    try:
        yield
    finally:
        _accel.impl = saved


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"benchmark set-up is wrong: {what}")


# --------------------------------------------------------------------------- ours


def our_decoder(buf: bytes) -> Callable[[], int]:
    def run() -> int:
        total = 0
        for m in decode_message_set(buf).messages:
            total += len(m.value)
        return total

    return run


def our_encoder(payloads: list[bytes]) -> Callable[[], bytes]:
    def run() -> bytes:
        return encode_message_set(payloads)

    return run


def measure_ours(payloads: list[bytes], budget: float) -> dict[str, Rate]:
    buf = encode_message_set(payloads)
    decoded = decode_message_set(buf)
    _check([m.value for m in decoded.messages] == payloads, "our decode round trip")
    _check(decoded.valid_bytes == len(buf), "our set has a partial tail")
    n = len(payloads)
    return {
        "decode": Rate(best_time(our_decoder(buf), budget), n, len(buf)),
        "encode": Rate(best_time(our_encoder(payloads), budget), n, len(buf)),
    }


# --------------------------------------------------------------------------- aiokafka


@dataclass(frozen=True)
class Peer:
    version: str
    module: str  # where LegacyRecordBatch comes from

    @property
    def is_c(self) -> bool:
        return "_crecords" in self.module


def load_peer() -> Peer | str:
    """aiokafka's description, or why it cannot be used."""
    try:
        import aiokafka
        from aiokafka.record.legacy_records import LegacyRecordBatch
    except ImportError as exc:
        return f"aiokafka is not importable ({exc})"
    return Peer(aiokafka.__version__, LegacyRecordBatch.__module__)


def measure_peer(payloads: list[bytes], budget: float) -> dict[str, Rate]:
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
    from aiokafka.record.memory_records import MemoryRecords

    def build() -> bytearray:
        builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
        append = builder.append
        for offset, payload in enumerate(payloads):
            append(offset, timestamp=0, key=None, value=payload)
        result: bytearray = builder.build()
        return result

    def read() -> int:
        total = 0
        records = MemoryRecords(buf)
        while records.has_next():
            batch = records.next_batch()
            if not batch.validate_crc():
                raise RuntimeError("aiokafka CRC check failed")
            for record in batch:
                total += len(record.value)
        return total

    buf = bytes(build())
    values: list[bytes] = []
    records = MemoryRecords(buf)
    while records.has_next():
        values.extend(record.value for record in records.next_batch())
    _check(values == payloads, "aiokafka decode round trip")
    n = len(payloads)
    return {
        "decode": Rate(best_time(read, budget), n, len(buf)),
        "encode": Rate(best_time(build, budget), n, len(buf)),
    }


# --------------------------------------------------------------------------- compression


@dataclass(frozen=True)
class CodecFigures:
    codec: str
    uncompressed_bytes: int
    compressed_bytes: int  # our whole compressed set (one wrapper entry)
    ours_encode: float  # seconds per call
    cramjam_encode: float
    ours_decode: float
    cramjam_decode: float
    ours_compress: float  # the compression layer alone: gzip_compress / snappy_compress
    ours_decompress: float  # gzip_decompress / snappy_decompress of the wrapper's payload

    def ops(self) -> tuple[tuple[str, float, float], ...]:
        """(operation, our seconds, cramjam's seconds) for every compared operation."""
        return (
            ("encode", self.ours_encode, self.cramjam_encode),
            ("compress", self.ours_compress, self.cramjam_encode),
            ("decode", self.ours_decode, self.cramjam_decode),
            ("decompress", self.ours_decompress, self.cramjam_decode),
        )

    def mb_per_s(self, seconds: float) -> float:
        return self.uncompressed_bytes / seconds / MB

    def as_dict(self) -> dict[str, Any]:
        return {
            "uncompressed_bytes": self.uncompressed_bytes,
            "compressed_bytes": self.compressed_bytes,
            **{
                op: {
                    "ours_mb_per_s": self.mb_per_s(ours),
                    "cramjam_mb_per_s": self.mb_per_s(base),
                    "time_ratio": ours / base,
                    "target_max_time_ratio": COMPRESSION_MAX_OVERHEAD,
                }
                for op, ours, base in self.ops()
            },
        }


def _xerial_blocks(stream: bytes) -> list[bytes]:
    """The raw snappy blocks of a xerial-framed stream, as our encoder writes it."""
    blocks = []
    pos = _XERIAL_HEADER_SIZE
    while pos < len(stream):
        length = int.from_bytes(stream[pos : pos + 4], "big")
        blocks.append(stream[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return blocks


def measure_codec(codec: str, payloads: list[bytes], budget: float) -> CodecFigures:
    inner = encode_message_set(payloads)
    compressed = encode_message_set(payloads, compression=codec)
    decoded = decode_message_set(compressed)
    _check([m.value for m in decoded.messages] == payloads, f"{codec} round trip")
    (wrapper,) = decode_message_set(compressed, shallow=True).messages
    payload = wrapper.value  # the compressed bytes inside the wrapper

    base_encode: Callable[[], object]
    base_decode: Callable[[], object]
    if codec == "gzip":
        _check(bytes(cramjam.gzip.decompress(payload)) == inner, "gzip payload")

        def base_encode() -> object:
            return cramjam.gzip.compress(inner, level=6)

        def base_decode() -> object:
            return cramjam.gzip.decompress(payload)

    else:
        blocks = _xerial_blocks(payload)
        raw = b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks)
        _check(raw == inner, "snappy payload")

        def base_encode() -> object:
            return cramjam.snappy.compress_raw(inner)

        def base_decode() -> object:
            decompress_raw = cramjam.snappy.decompress_raw
            return [decompress_raw(block) for block in blocks]

    def ours_encode() -> bytes:
        return encode_message_set(payloads, compression=codec)

    def ours_decode() -> object:
        return decode_message_set(compressed)

    def ours_compress() -> object:
        return compress(codec, inner)

    def ours_decompress() -> object:
        return decompress_buffer(Compression.parse(codec), payload)

    return CodecFigures(
        codec=codec,
        uncompressed_bytes=len(inner),
        compressed_bytes=len(compressed),
        ours_encode=best_time(ours_encode, budget),
        cramjam_encode=best_time(base_encode, budget),
        ours_decode=best_time(ours_decode, budget),
        cramjam_decode=best_time(base_decode, budget),
        ours_compress=best_time(ours_compress, budget),
        ours_decompress=best_time(ours_decompress, budget),
    )


# --------------------------------------------------------------------------- report


@dataclass
class Results:
    budget: float
    implementation: str
    payload_count: int
    set_bytes: int
    peer: Peer | str
    ours: dict[str, Rate]
    pure: dict[str, Rate] | None
    theirs: dict[str, Rate] | None
    codecs: list[CodecFigures]

    def ratio(self, op: str, ours: dict[str, Rate] | None = None) -> float | None:
        """Our speed over aiokafka's (time ratio inverted) for ``op``."""
        if self.theirs is None:
            return None
        return self.theirs[op].seconds / (ours or self.ours)[op].seconds

    def as_dict(self) -> dict[str, Any]:
        peer: dict[str, Any]
        if isinstance(self.peer, Peer):
            peer = {
                "available": True,
                "version": self.peer.version,
                "module": self.peer.module,
                "c": self.peer.is_c,
            }
        else:
            peer = {"available": False, "reason": self.peer}
        ops: dict[str, Any] = {}
        targets = {"decode": (DECODE_REQUIRED, DECODE_AIMED), "encode": (None, ENCODE_AIMED)}
        for op, (required, aimed) in targets.items():
            entry: dict[str, Any] = {f"ours_{self.implementation}": self.ours[op].as_dict()}
            if self.pure is not None:
                entry["ours_python"] = self.pure[op].as_dict()
            if self.theirs is not None:
                entry["aiokafka"] = self.theirs[op].as_dict()
                entry["ratio"] = self.ratio(op)
                if self.pure is not None:
                    entry["ratio_python"] = self.ratio(op, self.pure)
            entry["target_required"] = required
            entry["target_aimed"] = aimed
            ops[op] = entry
        return {
            "workload": {
                "messages_per_set": self.payload_count,
                "payload_bytes": PAYLOAD_SIZE,
                "set_bytes": self.set_bytes,
                "repeats": REPEATS,
                "seconds_per_measurement": self.budget,
            },
            "implementation": self.implementation,
            "peer": peer,
            **ops,
            "compression": {c.codec: c.as_dict() for c in self.codecs},
        }


def _speed_target(ratio: float, required: float | None, aimed: float) -> str:
    """The target of a speed ratio and whether it is met."""
    if required is not None and ratio < required:
        verdict = "BELOW REQUIRED"
    elif ratio < aimed:
        verdict = "below aim" if required is not None else "BELOW TARGET"
    else:
        verdict = "ok"
    wanted = f">= {required:.1f}x required, {aimed:.1f}x aimed" if required else f"{aimed:.1f}x"
    return f"[target {wanted}: {verdict}]"


def render(r: Results) -> str:
    lines: list[str] = []
    add = lines.append
    impl_name = "C accelerator" if r.implementation == "c" else "pure Python"
    add("aiokafka07 codec benchmark")
    add(
        f"  workload : {r.payload_count} messages x {PAYLOAD_SIZE} B per set; "
        f"set = {r.set_bytes} B on the wire (ours)"
    )
    add(f"  timing   : best of {REPEATS} repeats, ~{r.budget:g} s per measurement; MB = 10^6 B")
    add(f"  ours     : aiokafka07 {impl_name} ({_accel.impl.__name__})")
    if isinstance(r.peer, Peer):
        kind = "C" if r.peer.is_c else "pure Python (C extension NOT loaded)"
        add(f"  peer     : aiokafka {r.peer.version}, {kind} records ({r.peer.module})")
    else:
        add(f"  peer     : missing: {r.peer}; only our figures are shown")

    header = f"  {'implementation':<26}{'msgs/s':>12}{'payload MB/s':>15}{'wire MB/s':>12}"
    titles = {
        "decode": "Decode: one ~1 MiB uncompressed set, CRCs checked, every value touched",
        "encode": "Encode: one ~1 MiB uncompressed set from 100-byte payloads",
    }
    targets = {"decode": (DECODE_REQUIRED, DECODE_AIMED), "encode": (None, ENCODE_AIMED)}
    for op, title in titles.items():
        add("")
        add(title)
        add(header)
        rows = [(f"aiokafka07 ({r.implementation})", r.ours[op])]
        if r.pure is not None:
            rows.append(("aiokafka07 (pure Python)", r.pure[op]))
        if r.theirs is not None:
            rows.append(("aiokafka legacy magic 1", r.theirs[op]))
        for label, rate in rows:
            add(
                f"  {label:<26}{rate.messages_per_s:>12,.0f}"
                f"{rate.payload_mb_per_s:>15.1f}{rate.wire_mb_per_s:>12.1f}"
            )
        ratio = r.ratio(op)
        if ratio is None:
            add("  ours / aiokafka: n/a (aiokafka missing)")
            continue
        required, aimed = targets[op]
        target = _speed_target(ratio, required, aimed)
        add(f"  ours ({r.implementation}) / aiokafka: {ratio:.2f}x  {target}")
        if r.pure is not None:
            pure_ratio = r.ratio(op, r.pure)
            add(f"  ours (pure Python) / aiokafka: {pure_ratio:.2f}x  [informational]")

    if r.codecs:
        add("")
        add("Compression: the whole set in one wrapper vs cramjam alone on the same bytes")
        add("  (MB/s of uncompressed data; ours/cramjam is the time ratio minus 1)")
        add(
            f"  {'codec':<8}{'op':<12}{'ours MB/s':>11}{'cramjam MB/s':>14}"
            f"{'ours/cramjam':>14}  target <= +{COMPRESSION_MAX_OVERHEAD - 1:.0%}"
        )
        for c in r.codecs:
            for op, ours, base in c.ops():
                ratio = ours / base
                verdict = "ok" if ratio <= COMPRESSION_MAX_OVERHEAD else "ABOVE TARGET"
                add(
                    f"  {c.codec:<8}{op:<12}{c.mb_per_s(ours):>11.1f}{c.mb_per_s(base):>14.1f}"
                    f"{ratio - 1:>+14.0%}  {verdict}"
                )
        sizes = ", ".join(
            f"{c.codec} {c.uncompressed_bytes} -> {c.compressed_bytes} B "
            f"({c.uncompressed_bytes / c.compressed_bytes:.1f}:1)"
            for c in r.codecs
        )
        add(f"  sizes: {sizes}")
        add("  encode/decode: the whole compressed set (inner set, CRCs, messages) in one wrapper")
        add("  compress/decompress: our codec layer alone (Java gzip bytes, xerial framing)")
        add("  cramjam encode: gzip.compress(level=6) / snappy.compress_raw of the inner set")
        add("  cramjam decode: gzip.decompress / snappy.decompress_raw of our payload's blocks")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def run(budget: float) -> Results:
    payloads = make_payloads(MESSAGES)
    _check(all(len(p) == PAYLOAD_SIZE for p in payloads), "payload size")
    ours = measure_ours(payloads, budget)
    pure: dict[str, Rate] | None = None
    if implementation() != "python":
        with pure_python():
            pure = measure_ours(payloads, budget)
    peer = load_peer()
    theirs = measure_peer(payloads, budget) if isinstance(peer, Peer) else None
    codecs = [measure_codec(codec, payloads, budget) for codec in ("gzip", "snappy")]
    return Results(
        budget=budget,
        implementation=implementation(),
        payload_count=len(payloads),
        set_bytes=ours["decode"].wire_bytes,
        peer=peer,
        ours=ours,
        pure=pure,
        theirs=theirs,
        codecs=codecs,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"about {QUICK_SECONDS:g} s per measurement instead of {SECONDS:g} s (smoke test)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    results = run(QUICK_SECONDS if args.quick else SECONDS)
    if args.json:
        print(json.dumps(results.as_dict(), indent=2))
    else:
        print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
