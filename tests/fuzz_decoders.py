"""Feed mutated inputs to every decoder under a 1 GiB address-space limit.

Run as ``python -m tests.fuzz_decoders [--count N] [--seed S]`` (``tests/test_fuzz.py``
does). The limit is set first thing, before aiokafka07 is imported, so an allocation
driven by hostile bytes (the 3.3 GiB snappy block of the issue) makes the process abort
instead of merely being slow. Every decoder must return a value or raise a
:class:`~aiokafka07.errors.KafkaError`; anything else is printed with the input and ends
the run with status 1. The last line is a summary the test reads.

Inputs are mutations of seeds that reach deep: plain, gzip, snappy and nested sets;
gzip with several members and trailing bytes; the issue's 22-byte snappy block and a
gzip bomb; request and response frames. Mutations flip bits, write boundary values
into length fields, cut, insert and splice, and, for compressed wrappers, mutate the
compressed payload or the inner set and then fix the wrapper's CRC, so that the mutant
gets past the CRC check into the decompressor and the inner decoder. Where the C
accelerator is built, its inflater must also give exactly the pure twin's answer (output,
end and CRC, or the same status and message) on the deflate data of every input read as
a gzip wrapper's payload, and its CRC-32 zlib's on every input.
"""

from __future__ import annotations

import resource

LIMIT = 1 << 30  # bytes of address space
resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

import argparse  # noqa: E402  (after the limit, on purpose)
import random  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from aiokafka07.errors import KafkaError  # noqa: E402
from aiokafka07.protocol import (  # noqa: E402
    FetchRequest,
    FrameSplitter,
    _accel,
    _pure,
    decode_fetch_response,
    decode_message_set,
    decode_multifetch_response,
    decode_offsets_response,
    decode_request,
    encode_fetch_response,
    encode_message_set,
    encode_multifetch_request,
    encode_multiproduce_request,
    encode_offsets_response,
    encode_produce_request,
    encode_wrapper,
    gzip_compress,
    gzip_decompress,
    snappy_compress,
    snappy_decompress,
)
from aiokafka07.protocol.columns import MessageColumns, decode_columns_into  # noqa: E402
from aiokafka07.protocol.messages import count_messages, summarize_message_set  # noqa: E402
from aiokafka07.testing.hostile import SNAPPY_3_GIB, gzip_bomb  # noqa: E402

#: The bound the fuzzed decoders run with (the default, 64 MiB, for the bomb seeds).
BOUND = 4 << 20
INTERESTING_INT32 = [0, 1, 4, 5, 6, 9, 10, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 1 << 20, 0x7FFFFFFF]
INTERESTING_INT32 += [-1, -(1 << 31), 0x8000_0000 - 1]


def seeds(rng: random.Random) -> list[bytes]:
    values = [rng.randbytes(rng.randrange(0, 60)) for _ in range(12)] + [b"", b"x" * 300]
    plain = encode_message_set(values)
    sets = [
        plain,
        encode_message_set(values, magic=0),
        encode_message_set(values, compression="gzip"),
        encode_message_set(values, compression="snappy"),
        encode_wrapper("gzip", plain + encode_message_set(values[:3], compression="snappy")),
        encode_wrapper("snappy", encode_wrapper("gzip", plain)),
        # gzip with two members, then trailing zeros; snappy without the xerial header
        bytes(
            _accel.impl.encode_message_set(
                [gzip_compress(plain[:60]) + gzip_compress(plain[60:]) + bytes(30)], 1, 1
            )
        ),
        bytes(_accel.impl.encode_message_set([snappy_compress(plain)[16:][4:]], 1, 2)),
        encode_message_set([bytes(100_000)], compression="snappy"),  # several xerial chunks
        SNAPPY_3_GIB,  # the 22 bytes
    ]
    frames = [
        encode_produce_request("events", 0, sets[2]),
        encode_multiproduce_request([("events", 0, sets[0]), ("logs", 1, sets[3])]),
        encode_multifetch_request([FetchRequest("events", 0, 0, 1024)] * 3),
        encode_fetch_response(0, sets[4]),
        encode_offsets_response([0, 100, 200]),
    ]
    return sets + frames


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        kind = rng.randrange(8)
        if not out:
            out += rng.randbytes(rng.randrange(1, 16))
        at = rng.randrange(len(out))
        if kind == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at] = rng.choice((0, 0xFF, 0x7F, 0x80, 0x1F, 0x8B, 0x82, rng.randrange(256)))
        elif kind == 2:  # a boundary value where a length field may be
            out[at : at + 4] = struct.pack(">i", rng.choice(INTERESTING_INT32))
        elif kind == 3:
            del out[at : at + rng.randrange(1, 32)]
        elif kind == 4:
            out[at:at] = rng.randbytes(rng.randrange(1, 32))
        elif kind == 5:
            del out[at:]
        elif kind == 6:  # splice with another input
            other = rng.choice(pool)
            start = rng.randrange(len(other) + 1)
            out[at:] = other[start : start + rng.randrange(1, 200)]
        else:  # a varint declaring a huge snappy block
            out[at : at + 5] = rng.choice((b"\xff\xff\xff\xff\x0f", b"\x88\x93\xcb\xa7\x0d"))
    return bytes(out)


def mutate_wrapper(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    """Mutate inside the first entry's payload (or its decompressed set) and fix the
    CRC, so the mutant reaches the decompressor and the inner decoder."""
    if len(data) < 10 or data[4] != 1 or not data[5] & 3:
        return mutate(data, rng, pool)
    codec, payload = data[5] & 3, data[10 : 4 + struct.unpack_from(">i", data)[0]]
    if rng.random() < 0.5:
        payload = mutate(payload, rng, pool)
    else:
        try:
            inner = (gzip_decompress if codec == 1 else snappy_decompress)(payload, BOUND)
        except KafkaError:
            return mutate(data, rng, pool)
        mutated = mutate(inner, rng, pool)
        payload = gzip_compress(mutated) if codec == 1 else snappy_compress(mutated)
    return bytes(_accel.impl.encode_message_set([payload], 1, codec))


def decoders(bound: int) -> list[tuple[str, Callable[[bytes], Any]]]:
    return [
        ("decode", lambda d: decode_message_set(d, 7, max_decompressed=bound)),
        ("decode shallow", lambda d: decode_message_set(d, shallow=True)),
        ("count", lambda d: count_messages(d, max_decompressed=bound)),
        (
            "decode columns",
            lambda d: decode_columns_into(MessageColumns(), d, 7, max_decompressed=bound),
        ),
        ("summarize", summarize_message_set),
        ("gzip", lambda d: gzip_decompress(d[10:], bound)),
        ("snappy", lambda d: snappy_decompress(d[10:], bound)),
        ("request", lambda d: decode_request(d[4:])),
        ("fetch response", lambda d: decode_fetch_response(d[4:]).decode(0)),
        ("multifetch response", lambda d: decode_multifetch_response(d[4:])),
        ("offsets response", lambda d: decode_offsets_response(d[4:])),
        ("frames", lambda d: FrameSplitter().feed(d)),
    ]


def twins_agree(fast: Any, data: bytes) -> bool:
    """The C inflater gives the pure twin's answer on the deflate data of ``data`` read as
    a gzip wrapper's payload (a magic-1 entry's payload starts at 10; its member's
    deflate data 10 bytes further), with the trailer's size as the hint; and the C
    CRC-32 is zlib's, for a running value taken from the input."""
    payload = data[10:]
    pos = min(10, len(payload))
    hint = int.from_bytes(payload[-4:], "little") % (BOUND + 1)
    answers = []
    for impl in (fast, _pure):
        status, result, end, crc = impl.inflate(payload, pos, BOUND, hint)
        answers.append((status, bytes(result) if status == _pure.IN_OK else result, end, crc))
    value = int.from_bytes(data[:4], "little")
    return answers[0] == answers[1] and fast.crc32(data, value) == zlib.crc32(data, value)


def run(count: int, seed: int) -> int:
    rng = random.Random(seed)
    pool = seeds(rng)
    bred: list[bytes] = []
    bomb = gzip_bomb(256)
    fast = decoders(BOUND)
    full = decoders(64 << 20)
    implementations = [_accel.impl, _pure] if _accel.impl is not _pure else [_pure]
    values = dict.fromkeys((name for name, _ in fast), 0)
    errors = dict.fromkeys(values, 0)
    started = time.monotonic()
    for i in range(count):
        if i % 2500 == 0:  # the bomb, mutated, with the default bound
            data, calls = mutate_wrapper(bomb, rng, pool), full[:4]
        else:
            base = rng.choice(bred if bred and rng.random() < 0.3 else pool)
            change = mutate_wrapper if rng.random() < 0.4 else mutate
            data = change(base, rng, pool)
            calls = fast
            if i % 50 == 0:  # some mutants breed (the seeds stay)
                bred[(i // 50) % 64 : (i // 50) % 64 + 1] = [data]
        _accel.impl = implementations[i % len(implementations)]
        for name, call in calls:
            try:
                call(data)
                values[name] += 1
            except KafkaError:
                errors[name] += 1
            except BaseException as exc:  # the failure this fuzzer looks for
                print(f"input {i} ({name}): {type(exc).__name__}: {exc}\n{data.hex()}")
                return 1
        if len(implementations) == 2 and not twins_agree(implementations[0], data):
            print(f"input {i} (twins disagree)\n{data.hex()}")
            return 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    for name in values:
        print(f"{name:>20}: {values[name]:6} values, {errors[name]:6} typed errors")
    print(
        f"fuzzed {count} inputs: {sum(values.values())} values, {sum(errors.values())} typed "
        f"errors, in {time.monotonic() - started:.1f} s, peak RSS {peak} MiB, "
        f"RLIMIT_AS {resource.getrlimit(resource.RLIMIT_AS)[0]}"
    )
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    sys.exit(run(args.count, args.seed))


if __name__ == "__main__":
    main()
