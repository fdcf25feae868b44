"""Throughput of the aiokafka07 message-set codec, as ratios to aiokafka and cramjam
measured in the same run.

What is measured, and why:

* **Workload.** Realistic 100-byte payloads (JSON-ish page-view events from a seeded
  ``random``, padded or cut to exactly 100 bytes) in uncompressed message sets of about
  1 MiB, the size of a typical consumer fetch (~9500 messages). MB means 10^6 bytes. The
  garbage collector stays on, as in a real consumer: our decoder returns a list of ~9500
  tuples, whose collections make the decode figures (the pure-Python one most) vary
  between repetitions; the spread shows it.
* **Timing.** Every operation below is a loop sized to take about 1 s in all (``--quick``:
  0.05 s), split over ``--reps`` (>= 5) repetitions; the repetitions are interleaved (each
  runs every operation once, in a rotating order), so a busy moment of the machine slows
  ours and the peer's alike. Each ratio is taken within one repetition; printed are its median and
  spread (min..max), the rates' medians and spreads, and the machine's load average before
  and after.
* **Decode** is the consumer hot path: :func:`decode_message_set` on a 1 MiB set (CRCs are
  checked inside it) with every ``value`` touched, against aiokafka's C-accelerated
  legacy record reader iterating a buffer of the same payloads as magic-1 records exactly
  as its fetcher does with ``check_crcs`` on (``MemoryRecords`` -> ``next_batch`` ->
  ``validate_crc`` -> iterate). aiokafka is the natural peer: the most used asyncio Kafka
  client, whose legacy (0.10) format is the closest relative of the 0.7 one.
* **Encode** is the producer hot path: :func:`encode_message_set` of the same payloads,
  against aiokafka's ``LegacyRecordBatchBuilder`` (magic 1, no compression).
* **Compression.** A compressed set costs compression plus framing and CRCs, so the
  baseline is cramjam's raw speed on the same bytes: compressing the uncompressed inner
  message set (``gzip.compress(level=6)``, ``snappy.compress_raw``) and decompressing the
  very compressed payload our wrapper carries (for snappy, each raw block of its xerial
  framing, split off beforehand). Our decode includes expanding the wrapper and checking
  every inner CRC. Figures are MB/s of uncompressed data, and our time over cramjam's.
* The decode and encode figures are repeated with the pure-Python implementation (the
  fallback when the C accelerator is not built), against the same peer.
* **By codec and set size.** Decode and encode of sets of 1,000 and 100,000 of the same
  payloads, uncompressed, gzip and snappy (one wrapper holding the whole set), against
  aiokafka's C legacy records on the same payloads: ``LegacyRecordBatchBuilder`` with
  magic 1 and compression_type 0, 1 or 2 to encode, and to decode the same reader as
  above (``MemoryRecords`` -> ``next_batch`` -> ``validate_crc`` -> iterate, which
  decompresses the wrapper and walks its inner records) over what that builder wrote.
  Each row's ratio is our speed over aiokafka's (its time over ours), per repetition.
  Our decode is timed twice per row: into records (:func:`decode_message_set`, a list
  of messages, every value touched as above) and into columns
  (:func:`~aiokafka07.protocol.columns.decode_columns_into`: offsets, value ends and
  all values back to back in three buffers, what ``RecordBatch`` and the Spark source
  hold; no Python object per message, the count and the byte total read off the
  columns), each against the same aiokafka reader.
  The compressed rows do not ask the same work of both: our decoder checks the CRC of
  every message inside a wrapper, aiokafka's reader only the wrapper's (its
  ``validate_crc`` is the batch's). The header says so each run, from a trial on a
  wrapper around a corrupt message (:func:`peer_checks_inner_crcs`), not from this text.

This prints figures and ratios, never a verdict; it asserts no thresholds (it only checks
that each side decodes what was encoded, so that the right work is timed). ``--json``
prints one JSON object instead of the table. Without aiokafka installed (the ``bench``
extra) only our figures and the cramjam ratios are printed.

Run: ``python benchmarks/bench_codec.py [--quick] [--reps R] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import cramjam
from common import load, ratios, spread

from aiokafka07.errors import ProtocolError
from aiokafka07.protocol import (
    Compression,
    _accel,
    _pure,
    compress,
    decode_message_set,
    encode_message_set,
    encode_wrapper,
    entry_size,
    implementation,
)
from aiokafka07.protocol.columns import MessageColumns, decode_columns_into
from aiokafka07.protocol.compression import decompress_buffer

PAYLOAD_SIZE = 100
SET_BYTES = 1 << 20
MESSAGES = SET_BYTES // entry_size(PAYLOAD_SIZE)
REPS = 5
SECONDS = 1.0
QUICK_SECONDS = 0.05
MB = 1e6

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


@contextmanager
def pure_python() -> Iterator[None]:
    """Run the codec on its pure-Python twin for the duration of the block."""
    saved = _accel.impl
    _accel.impl = _pure
    try:
        yield
    finally:
        _accel.impl = saved


@dataclass
class Operation:
    """One timed operation: ``fn`` handles ``messages`` messages (``wire_bytes`` bytes of
    message set; ``data_bytes`` of uncompressed data) per call, and is run ``loops`` times
    per repetition (on the pure-Python codec if ``pure``)."""

    fn: Callable[[], object]
    messages: int
    wire_bytes: int
    data_bytes: int = 0
    pure: bool = False
    loops: int = 1
    seconds: list[float] = field(default_factory=list)  # per call, one per repetition

    def _context(self) -> contextlib.AbstractContextManager[None]:
        return pure_python() if self.pure else contextlib.nullcontext()

    def calibrate(self, seconds: float) -> None:
        """Size the loop to take about ``seconds`` (after a warm-up call)."""
        with self._context():
            self.fn()  # warm-up (caches, allocator)
            start = time.perf_counter()
            self.fn()
            once = max(time.perf_counter() - start, 1e-9)
        self.loops = max(1, round(seconds / once))

    def time(self) -> None:
        """One repetition: the seconds per call of ``loops`` calls."""
        fn, loops = self.fn, self.loops
        with self._context():
            start = time.perf_counter()
            for _ in range(loops):
                fn()
            self.seconds.append((time.perf_counter() - start) / loops)

    def rates(self) -> dict[str, dict[str, float]]:
        return {
            "seconds_per_call": spread(self.seconds),
            "messages_per_s": spread([self.messages / t for t in self.seconds]),
            "payload_mb_per_s": spread(
                [self.messages * PAYLOAD_SIZE / t / MB for t in self.seconds]
            ),
            "wire_mb_per_s": spread([self.wire_bytes / t / MB for t in self.seconds]),
        }

    def data_mb_per_s(self) -> dict[str, float]:
        return spread([self.data_bytes / t / MB for t in self.seconds])


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


def our_columns_decoder(buf: bytes) -> Callable[[], int]:
    """Decode ``buf`` into columns (every CRC checked, wrappers expanded, each value
    copied into the values buffer); the count and byte total come off the columns."""

    def run() -> int:
        columns = MessageColumns()
        decode_columns_into(columns, buf)
        return len(columns) + len(columns.values)

    return run


def our_encoder(payloads: list[bytes]) -> Callable[[], bytes]:
    def run() -> bytes:
        return encode_message_set(payloads)

    return run


def our_operations(payloads: list[bytes], pure: bool = False) -> dict[str, Operation]:
    with pure_python() if pure else contextlib.nullcontext():
        buf = encode_message_set(payloads)
        decoded = decode_message_set(buf)
    _check([m.value for m in decoded.messages] == payloads, "our decode round trip")
    _check(decoded.valid_bytes == len(buf), "our set has a partial tail")
    n = len(payloads)
    return {
        "decode": Operation(our_decoder(buf), n, len(buf), pure=pure),
        "encode": Operation(our_encoder(payloads), n, len(buf), pure=pure),
    }


# --------------------------------------------------------------------------- aiokafka


@dataclass(frozen=True)
class Peer:
    version: str
    module: str  # where LegacyRecordBatch comes from
    #: Whether its reader, as its fetcher calls it, refuses a compressed wrapper holding
    #: a corrupt message (found out by :func:`peer_checks_inner_crcs`, never assumed).
    checks_inner_crcs: bool

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
    return Peer(aiokafka.__version__, LegacyRecordBatch.__module__, peer_checks_inner_crcs())


#: The messages of the inner-CRC trials: the second one is corrupted inside the wrapper.
_TRIAL_VALUES = [b"first message", b"second message"]


def _corrupt_value(inner: bytes, value: bytes) -> bytes:
    """``inner`` with the first byte of ``value`` flipped where it lies, its CRC left."""
    at = inner.index(value)
    return inner[:at] + bytes([inner[at] ^ 1]) + inner[at + 1 :]


def peer_checks_inner_crcs() -> bool:
    """Whether aiokafka's reader, called as by its fetcher with ``check_crcs`` on (see
    :func:`peer_reader`), refuses a gzip wrapper with a valid CRC of its own around a
    message whose CRC does not match its value: tried here on such a wrapper, built by
    hand (magic 1: offset, size, CRC, magic, attributes, timestamp, null key, value),
    after the same wrapper around the intact messages was read right."""
    import gzip
    import struct
    import zlib

    values = _TRIAL_VALUES

    def wrapper(inner: bytes) -> bytes:
        payload = gzip.compress(inner)
        body = struct.pack(">bbqii", 1, 1, 0, -1, len(payload)) + payload
        return struct.pack(">qiI", len(values) - 1, 4 + len(body), zlib.crc32(body)) + body

    inner = bytes(peer_builder(values)())
    _check(peer_values(wrapper(inner)) == values, "aiokafka misread a hand-built wrapper")
    corrupt = wrapper(_corrupt_value(inner, values[1]))
    try:
        peer_reader(corrupt)()
    except Exception:  # whatever its way of refusing, it refused
        return True
    _check(peer_values(corrupt)[1] != values[1], "the corruption did not reach aiokafka")
    return False


def ours_checks_inner_crcs() -> bool:
    """The same question of our decoder (it does, unless something broke: shown, not
    assumed), on a gzip wrapper of our format around a message with a wrong CRC."""
    values = _TRIAL_VALUES
    inner = _corrupt_value(encode_message_set(values), values[1])
    try:
        our_decoder(encode_wrapper(Compression.GZIP, inner))()
    except ProtocolError:
        return True
    return False


def peer_operations(payloads: list[bytes]) -> dict[str, Operation]:
    build = peer_builder(payloads)
    buf = bytes(build())
    _check(peer_values(buf) == payloads, "aiokafka decode round trip")
    n = len(payloads)
    return {
        "decode": Operation(peer_reader(buf), n, len(buf)),
        "encode": Operation(build, n, len(buf)),
    }


#: Set sizes (messages) of the rows by codec and size.
ROW_SIZES = (1_000, 100_000)
#: The codecs of those rows, with aiokafka's compression_type for each.
ROW_CODECS = {"none": 0, "gzip": 1, "snappy": 2}
#: Our operations in those rows: decode into records, into columns, and encode.
ROW_OPS = ("decode", "decode_columns", "encode")
#: The peer's operation each of ours is compared with (both decodes: its one reader).
PEER_OP = {"decode": "decode", "decode_columns": "decode", "encode": "encode"}
#: How each row operation is named in the table.
ROW_LABELS = {"decode": "records", "decode_columns": "columns", "encode": "encode"}


def peer_reader(buf: bytes) -> Callable[[], int]:
    """aiokafka's fetcher path over ``buf``, with ``check_crcs`` on: every value touched."""
    from aiokafka.record.memory_records import MemoryRecords

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

    return read


def peer_builder(payloads: list[bytes], compression_type: int = 0) -> Callable[[], bytearray]:
    """aiokafka's producer path: a magic-1 legacy batch of ``payloads``."""
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    def build() -> bytearray:
        builder = LegacyRecordBatchBuilder(
            magic=1, compression_type=compression_type, batch_size=1 << 30
        )
        append = builder.append
        for offset, payload in enumerate(payloads):
            append(offset, timestamp=0, key=None, value=payload)
        result: bytearray = builder.build()
        return result

    return build


def peer_values(buf: bytes) -> list[bytes]:
    from aiokafka.record.memory_records import MemoryRecords

    values: list[bytes] = []
    records = MemoryRecords(buf)
    while records.has_next():
        values.extend(record.value for record in records.next_batch())
    return values


def row_operations(
    codec: str, payloads: list[bytes], peer: bool
) -> tuple[dict[str, Operation], int]:
    """Decode and encode of one row (``codec``, ``len(payloads)`` messages): ours, and
    aiokafka's if ``peer``; and the size of our set."""
    ours = encode_message_set(payloads, compression=codec)
    decoded = decode_message_set(ours)
    _check([m.value for m in decoded.messages] == payloads, f"our {codec} round trip")
    _check(decoded.valid_bytes == len(ours), f"our {codec} set has a partial tail")
    n = len(payloads)
    data = n * entry_size(PAYLOAD_SIZE)

    def encode() -> bytes:
        return encode_message_set(payloads, compression=codec)

    columns = MessageColumns()
    decode_columns_into(columns, ours)
    _check(
        bytes(columns.values) == b"".join(payloads) and len(columns) == n,
        f"our {codec} columns round trip",
    )
    operations = {
        "ours/decode": Operation(our_decoder(ours), n, len(ours), data_bytes=data),
        "ours/decode_columns": Operation(our_columns_decoder(ours), n, len(ours), data_bytes=data),
        "ours/encode": Operation(encode, n, len(ours), data_bytes=data),
    }
    if peer:
        build = peer_builder(payloads, ROW_CODECS[codec])
        theirs = bytes(build())
        _check(peer_values(theirs) == payloads, f"aiokafka {codec} round trip")
        operations["aiokafka/decode"] = Operation(
            peer_reader(theirs), n, len(theirs), data_bytes=data
        )
        operations["aiokafka/encode"] = Operation(build, n, len(theirs), data_bytes=data)
    return operations, len(ours)


# --------------------------------------------------------------------------- compression

#: (operation, our operation's name, cramjam's) for every compared compression figure.
COMPRESSION_OPS = (
    ("encode", "ours_encode", "cramjam_encode"),
    ("compress", "ours_compress", "cramjam_encode"),
    ("decode", "ours_decode", "cramjam_decode"),
    ("decompress", "ours_decompress", "cramjam_decode"),
)


def _xerial_blocks(stream: bytes) -> list[bytes]:
    """The raw snappy blocks of a xerial-framed stream, as our encoder writes it."""
    blocks = []
    pos = _XERIAL_HEADER_SIZE
    while pos < len(stream):
        length = int.from_bytes(stream[pos : pos + 4], "big")
        blocks.append(stream[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return blocks


def codec_operations(codec: str, payloads: list[bytes]) -> tuple[dict[str, Operation], int]:
    """The compared operations of ``codec`` (see :data:`COMPRESSION_OPS`), and the size of
    our whole compressed set."""
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

    functions = {
        "ours_encode": ours_encode,
        "cramjam_encode": base_encode,
        "ours_decode": ours_decode,
        "cramjam_decode": base_decode,
        "ours_compress": ours_compress,
        "ours_decompress": ours_decompress,
    }
    n = len(payloads)
    operations = {
        name: Operation(fn, n, len(compressed), data_bytes=len(inner))
        for name, fn in functions.items()
    }
    return operations, len(compressed)


# --------------------------------------------------------------------------- report


@dataclass
class Results:
    budget: float
    reps: int
    implementation: str
    payload_count: int
    set_bytes: int
    peer: Peer | str
    operations: dict[str, Operation]  # "<who>/<op>", run interleaved
    compressed_bytes: dict[str, int]
    row_bytes: dict[tuple[str, int], int]  # our set's size per row (codec, messages)
    ours_checks_inner_crcs: bool
    load_before: list[float]
    load_after: list[float]

    def who(self) -> list[str]:
        """The implementations measured on decode / encode, ours first."""
        names = [f"ours_{self.implementation}"]
        if "ours_python/decode" in self.operations and self.implementation != "python":
            names.append("ours_python")
        if isinstance(self.peer, Peer):
            names.append("aiokafka")
        return names

    def speed_over_peer(self, who: str, op: str) -> dict[str, float] | None:
        """Our speed over aiokafka's (its time over ours), per repetition."""
        if not isinstance(self.peer, Peer):
            return None
        return ratios(
            self.operations[f"aiokafka/{op}"].seconds, self.operations[f"{who}/{op}"].seconds
        )

    def time_over_cramjam(self, codec: str, ours: str, base: str) -> dict[str, float]:
        ops = self.operations
        return ratios(ops[f"{codec}/{ours}"].seconds, ops[f"{codec}/{base}"].seconds)

    def row(self, codec: str, size: int, who: str, op: str) -> Operation:
        return self.operations[f"rows/{codec}/{size}/{who}/{op}"]

    def row_speed_over_peer(self, codec: str, size: int, op: str) -> dict[str, float] | None:
        """Our speed over aiokafka's in one row (its time over ours), per repetition; both
        our decodes (records, columns) against the same reader."""
        if not isinstance(self.peer, Peer):
            return None
        return ratios(
            self.row(codec, size, "aiokafka", PEER_OP[op]).seconds,
            self.row(codec, size, "ours", op).seconds,
        )

    def rows_dict(self) -> dict[str, Any]:
        rows: dict[str, Any] = {}
        for codec, size in self.row_bytes:
            entry: dict[str, Any] = {"messages": size, "wire_bytes": self.row_bytes[codec, size]}
            for op in ROW_OPS:
                figures: dict[str, Any] = {"ours": self.row(codec, size, "ours", op).rates()}
                ratio = self.row_speed_over_peer(codec, size, op)
                if ratio is not None:
                    figures["aiokafka"] = self.row(codec, size, "aiokafka", PEER_OP[op]).rates()
                    figures["ours_speed_over_aiokafka"] = ratio
                entry[op] = figures
            rows.setdefault(codec, {})[str(size)] = entry
        return rows

    def as_dict(self) -> dict[str, Any]:
        peer: dict[str, Any]
        if isinstance(self.peer, Peer):
            peer = {
                "available": True,
                "version": self.peer.version,
                "module": self.peer.module,
                "c": self.peer.is_c,
                "checks_inner_crcs": self.peer.checks_inner_crcs,
            }
        else:
            peer = {"available": False, "reason": self.peer}
        figures: dict[str, Any] = {}
        for op in ("decode", "encode"):
            entry: dict[str, Any] = {
                who: self.operations[f"{who}/{op}"].rates() for who in self.who()
            }
            for who in self.who():
                ratio = self.speed_over_peer(who, op) if who != "aiokafka" else None
                if ratio is not None:
                    entry[f"{who}_speed_over_aiokafka"] = ratio
            figures[op] = entry
        compression: dict[str, Any] = {}
        for codec, size in self.compressed_bytes.items():
            some = self.operations[f"{codec}/ours_encode"]
            entry = {"uncompressed_bytes": some.data_bytes, "compressed_bytes": size}
            for op, ours, base in COMPRESSION_OPS:
                entry[op] = {
                    "ours_mb_per_s": self.operations[f"{codec}/{ours}"].data_mb_per_s(),
                    "cramjam_mb_per_s": self.operations[f"{codec}/{base}"].data_mb_per_s(),
                    "time_ratio": self.time_over_cramjam(codec, ours, base),
                }
            compression[codec] = entry
        return {
            "workload": {
                "messages_per_set": self.payload_count,
                "payload_bytes": PAYLOAD_SIZE,
                "set_bytes": self.set_bytes,
                "repetitions": self.reps,
                "seconds_per_measurement": self.budget,
            },
            "implementation": self.implementation,
            "ours_checks_inner_crcs": self.ours_checks_inner_crcs,
            "peer": peer,
            "load_before": self.load_before,
            "load_after": self.load_after,
            **figures,
            "compression": compression,
            "rows": self.rows_dict(),
        }


def _ratio(f: dict[str, float]) -> str:
    return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"


def _rate(f: dict[str, float], fmt: str = ",.0f") -> str:
    return f"{f['median']:{fmt}} ({f['min']:{fmt}}..{f['max']:{fmt}})"


def render(r: Results) -> str:
    lines: list[str] = []
    add = lines.append
    impl_name = "C accelerator" if r.implementation == "c" else "pure Python"
    add("aiokafka07 codec benchmark")
    add(
        f"  workload : {r.payload_count} messages x {PAYLOAD_SIZE} B per set; "
        f"set = {r.set_bytes} B on the wire (ours)"
    )
    add(
        f"  timing   : {r.reps} interleaved repetitions, ~{r.budget:g} s per operation in all; "
        "median (min..max); MB = 10^6 B"
    )
    add(
        "  load     : "
        f"{' '.join(f'{x:.2f}' for x in r.load_before)} before, "
        f"{' '.join(f'{x:.2f}' for x in r.load_after)} after"
    )
    add(f"  ours     : aiokafka07 {impl_name} ({_accel.impl.__name__})")
    if isinstance(r.peer, Peer):
        kind = "C" if r.peer.is_c else "pure Python (C extension NOT loaded)"
        add(f"  peer     : aiokafka {r.peer.version}, {kind} records ({r.peer.module})")
        add(
            "  CRCs in a compressed wrapper: "
            + ("ours checks each" if r.ours_checks_inner_crcs else "ours does NOT check them")
            + ", aiokafka's reader "
            + (
                "checks each"
                if r.peer.checks_inner_crcs
                else "does not (tried: a corrupt message inside a wrapper was read as it was)"
            )
        )
    else:
        add(f"  peer     : missing: {r.peer}; only our figures are shown")

    labels = {
        f"ours_{r.implementation}": f"aiokafka07 ({r.implementation})",
        "ours_python": "aiokafka07 (pure Python)",
        "aiokafka": "aiokafka legacy magic 1",
    }
    titles = {
        "decode": "Decode: one ~1 MiB uncompressed set, CRCs checked, every value touched",
        "encode": "Encode: one ~1 MiB uncompressed set from 100-byte payloads",
    }
    for op, title in titles.items():
        add("")
        add(title)
        header = f"{'msgs/s (min..max)':>36}{'payload MB/s':>14}{'wire MB/s':>11}"
        add(f"  {'implementation':<26}{header}")
        for who in r.who():
            rates = r.operations[f"{who}/{op}"].rates()
            payload, wire = rates["payload_mb_per_s"], rates["wire_mb_per_s"]
            add(
                f"  {labels[who]:<26}{_rate(rates['messages_per_s']):>36}"
                f"{payload['median']:>14.1f}{wire['median']:>11.1f}"
            )
        for who in r.who():
            ratio = r.speed_over_peer(who, op) if who != "aiokafka" else None
            if ratio is not None:
                add(f"  {labels[who]} speed / aiokafka's: {_ratio(ratio)}")
        if not isinstance(r.peer, Peer):
            add("  ours / aiokafka: n/a (aiokafka missing)")

    if r.compressed_bytes:
        add("")
        add("Compression: the whole set in one wrapper vs cramjam alone on the same bytes")
        add("  (MB/s of uncompressed data, medians; our time over cramjam's per repetition)")
        add(f"  {'codec':<8}{'op':<12}{'ours MB/s':>11}{'cramjam MB/s':>14}  ours time / cramjam's")
        for codec in r.compressed_bytes:
            for op, ours, base in COMPRESSION_OPS:
                mine = r.operations[f"{codec}/{ours}"].data_mb_per_s()
                theirs = r.operations[f"{codec}/{base}"].data_mb_per_s()
                add(
                    f"  {codec:<8}{op:<12}{mine['median']:>11.1f}{theirs['median']:>14.1f}  "
                    f"{_ratio(r.time_over_cramjam(codec, ours, base))}"
                )
        some = next(iter(r.compressed_bytes))
        uncompressed = r.operations[f"{some}/ours_encode"].data_bytes
        sizes = ", ".join(
            f"{codec} {uncompressed} -> {size} B ({uncompressed / size:.1f}:1)"
            for codec, size in r.compressed_bytes.items()
        )
        add(f"  sizes: {sizes}")
        add("  encode/decode: the whole compressed set (inner set, CRCs, messages) in one wrapper")
        add("  compress/decompress: our codec layer alone (Java gzip bytes, xerial framing)")
        add("  cramjam encode: gzip.compress(level=6) / snappy.compress_raw of the inner set")
        add("  cramjam decode: gzip.decompress / snappy.decompress_raw of our payload's blocks")

    if r.row_bytes:
        add("")
        add("By codec and set size: ours against aiokafka's legacy records (magic 1)")
        add("  (msgs/s medians; our speed over aiokafka's per repetition, median (min..max))")
        add(
            f"  {'codec':<8}{'messages':>9}  {'op':<7}{'ours msgs/s':>13}{'aiokafka msgs/s':>17}"
            "  ours speed / aiokafka's"
        )
        for codec, size in r.row_bytes:
            for op in ROW_OPS:
                mine = r.row(codec, size, "ours", op).rates()["messages_per_s"]["median"]
                ratio = r.row_speed_over_peer(codec, size, op)
                if ratio is None:
                    theirs, shown = "n/a", "n/a (aiokafka missing)"
                else:
                    rates = r.row(codec, size, "aiokafka", PEER_OP[op]).rates()
                    theirs, shown = f"{rates['messages_per_s']['median']:,.0f}", _ratio(ratio)
                label = ROW_LABELS[op]
                add(f"  {codec:<8}{size:>9,}  {label:<7}{mine:>13,.0f}{theirs:>17}  {shown}")
        add(
            "  records: the whole set decoded into a list of messages, wrapper expanded, every"
            " CRC checked (aiokafka: see 'CRCs in a compressed wrapper' above), every value"
            " touched"
        )
        add(
            "  columns: the same decode into column buffers (offsets, value ends, values),"
            " no object per message; against the same aiokafka reader"
        )
        add("  encode: the whole set from the payloads, compressed into one wrapper")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def run(budget: float, reps: int, row_sizes: Sequence[int] = ROW_SIZES) -> Results:
    load_before = load()
    payloads = make_payloads(MESSAGES)
    _check(all(len(p) == PAYLOAD_SIZE for p in payloads), "payload size")
    impl = implementation()
    operations: dict[str, Operation] = {}
    for op, operation in our_operations(payloads).items():
        operations[f"ours_{impl}/{op}"] = operation
    if impl != "python":
        for op, operation in our_operations(payloads, pure=True).items():
            operations[f"ours_python/{op}"] = operation
    peer = load_peer()
    if isinstance(peer, Peer):
        for op, operation in peer_operations(payloads).items():
            operations[f"aiokafka/{op}"] = operation
    compressed_bytes: dict[str, int] = {}
    for codec in ("gzip", "snappy"):
        codec_ops, compressed_bytes[codec] = codec_operations(codec, payloads)
        for name, operation in codec_ops.items():
            operations[f"{codec}/{name}"] = operation
    row_bytes: dict[tuple[str, int], int] = {}
    row_payloads = make_payloads(max(row_sizes))
    for codec in ROW_CODECS:
        for size in row_sizes:
            ops, row_bytes[codec, size] = row_operations(
                codec, row_payloads[:size], isinstance(peer, Peer)
            )
            for name, operation in ops.items():
                operations[f"rows/{codec}/{size}/{name}"] = operation
    for operation in operations.values():
        operation.calibrate(budget / reps)
    names = list(operations)
    for rep in range(reps):  # interleaved: each repetition runs every operation once
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            operations[name].time()
    return Results(
        budget=budget,
        reps=reps,
        implementation=impl,
        payload_count=len(payloads),
        set_bytes=operations[f"ours_{impl}/decode"].wire_bytes,
        peer=peer,
        operations=operations,
        compressed_bytes=compressed_bytes,
        row_bytes=row_bytes,
        ours_checks_inner_crcs=ours_checks_inner_crcs(),
        load_before=load_before,
        load_after=load(),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"about {QUICK_SECONDS:g} s per operation instead of {SECONDS:g} s (smoke test)",
    )
    parser.add_argument("--reps", type=int, default=REPS, help="interleaved repetitions")
    parser.add_argument(
        "--rows",
        default=",".join(map(str, ROW_SIZES)),
        help="the message counts of the per-codec rows, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    try:
        row_sizes = tuple(int(size) for size in args.rows.split(","))
    except ValueError:
        parser.error(f"--rows takes message counts separated by commas, not {args.rows!r}")
    if not row_sizes or min(row_sizes) < 1:
        parser.error("--rows needs at least one count, each at least 1")
    results = run(QUICK_SECONDS if args.quick else SECONDS, args.reps, row_sizes)
    if args.json:
        print(json.dumps(results.as_dict(), indent=2))
    else:
        print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
