"""What a gzip ``compression_level`` costs and saves, as ratios to level 6 (the default,
Java's) measured in the same run.

What is measured, and why:

* **Work.** What a producer does per batch with gzip: :func:`encode_message_set` of a
  batch of payloads with ``compression="gzip"`` at each level (the inner set, deflate,
  the wrapper and its CRC). What a consumer does: :func:`decode_message_set` of that
  wrapper (inflate and every inner CRC), to show whether a level changes the reader's cost.
* **Payloads.** Two kinds, since deflate's levels differ most on repetitive data: the codec
  benchmark's 100-byte JSON-ish page-view events (``bench_codec.make_payloads``), and
  log-like text lines (a seeded vocabulary of words, 60 to 200 bytes). Each batch holds
  ``--messages`` payloads (default 1,000, the producer's default ``batch_size``).
* **Timing.** ``--reps`` (>= 5) interleaved repetitions: each runs every level once, in a
  rotating order, for about ``--budget`` seconds in all per level; each ratio (time and
  bytes over level 6's) is taken within one repetition. Printed: median and spread
  (min..max), and the load average before and after. No verdict: the trade-off is the
  reader's to make.

Run: ``python benchmarks/bench_gzip_level.py [--reps R] [--messages N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from typing import Any

from bench_codec import make_payloads
from common import load, ratios, spread

from aiokafka07.protocol import GZIP_DEFAULT_LEVEL, decode_message_set, encode_message_set

LEVELS = (1, 3, 6, 9)

_WORDS = [
    "GET",
    "POST",
    "/api/v1/orders",
    "/api/v1/users",
    "/static/app.js",
    "status=200",
    "status=404",
    "status=500",
    "user_id",
    "session",
    "ms",
    "bytes",
    "cache",
    "hit",
    "miss",
    "upstream",
    "timeout",
    "retry",
    "worker",
    "queue",
    "consumer",
    "producer",
    "partition",
    "offset",
    "broker",
    "request",
    "response",
    "INFO",
    "WARN",
    "ERROR",
    "DEBUG",
    "handler",
]


def make_log_lines(count: int, seed: int = 20120102) -> list[bytes]:
    """``count`` log-like lines, 60 to 200 bytes, from a seeded vocabulary."""
    rng = random.Random(seed)
    lines = []
    ts = 1_325_376_000_000
    for _ in range(count):
        ts += rng.randrange(1, 40)
        words = [rng.choice(_WORDS) for _ in range(rng.randrange(6, 24))]
        line = f"{ts} {rng.choice(('INFO', 'WARN', 'ERROR'))} " + " ".join(words)
        lines.append(line.encode()[: rng.randrange(60, 201)])
    return lines


def _timed(fn: Callable[[], Any], budget: float) -> float:
    """Seconds per call of ``fn``, over about ``budget`` seconds."""
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / calls


def measure(payloads: list[bytes], reps: int, budget: float) -> dict[str, Any]:
    """Encode and decode times and wrapper sizes per level, ``reps`` interleaved rounds."""
    wrappers = {
        level: encode_message_set(payloads, compression="gzip", compression_level=level)
        for level in LEVELS
    }
    for wrapper in wrappers.values():  # the right work is timed: each decodes to the batch
        assert [m.value for m in decode_message_set(wrapper).messages] == payloads
    encode: dict[int, list[float]] = {level: [] for level in LEVELS}
    decode: dict[int, list[float]] = {level: [] for level in LEVELS}
    share = budget / reps
    for rep in range(reps):
        order = LEVELS[rep % len(LEVELS) :] + LEVELS[: rep % len(LEVELS)]
        for level in order:
            encode[level].append(
                _timed(
                    lambda level=level: encode_message_set(  # type: ignore[misc]
                        payloads, compression="gzip", compression_level=level
                    ),
                    share / 2,
                )
            )
            decode[level].append(
                _timed(lambda level=level: decode_message_set(wrappers[level]), share / 2)  # type: ignore[misc]
            )
    base = GZIP_DEFAULT_LEVEL
    raw = len(encode_message_set(payloads))
    return {
        "messages": len(payloads),
        "uncompressed_bytes": raw,
        "levels": {
            str(level): {
                "wrapper_bytes": len(wrappers[level]),
                "bytes_over_level_6": len(wrappers[level]) / len(wrappers[base]),
                "ratio": raw / len(wrappers[level]),
                "encode_us": spread([t * 1e6 for t in encode[level]]),
                "encode_time_over_level_6": ratios(encode[level], encode[base]),
                "decode_time_over_level_6": ratios(decode[level], decode[base]),
            }
            for level in LEVELS
        },
    }


def _r(f: dict[str, float]) -> str:
    return f"{f['median']:.2f}x ({f['min']:.2f}..{f['max']:.2f})"


def render(result: dict[str, Any]) -> str:
    lines = [
        "aiokafka07 gzip compression levels, as ratios to level 6 (the default, Java's)",
        f"  timing : {result['reps']} interleaved repetitions; median (min..max)",
        f"  load   : {' '.join(f'{x:.2f}' for x in result['load_before'])} before, "
        f"{' '.join(f'{x:.2f}' for x in result['load_after'])} after",
    ]
    for name, figures in result["payloads"].items():
        lines += [
            "",
            f"{name}: {figures['messages']} messages per batch, "
            f"{figures['uncompressed_bytes']} B uncompressed",
            f"  {'level':<6}{'bytes':>9}{'ratio':>8}{'bytes/6':>9}"
            f"{'encode time / level 6':>28}{'decode time / level 6':>28}",
        ]
        for level, f in figures["levels"].items():
            lines.append(
                f"  {level:<6}{f['wrapper_bytes']:>9}{f['ratio']:>7.1f}:1"
                f"{f['bytes_over_level_6']:>8.3f}x"
                f"{_r(f['encode_time_over_level_6']):>28}{_r(f['decode_time_over_level_6']):>28}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (>= 5)")
    parser.add_argument("--messages", type=int, default=1000, help="payloads per batch")
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per level in all")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.reps < 5:
        parser.error("--reps must be at least 5 (a median and a spread need them)")
    before = load()
    payloads = {
        "page-view events (100 B JSON)": make_payloads(args.messages),
        "log lines (60-200 B text)": make_log_lines(args.messages),
    }
    result: dict[str, Any] = {
        "reps": args.reps,
        "load_before": before,
        "payloads": {
            name: measure(values, args.reps, args.budget) for name, values in payloads.items()
        },
    }
    result["load_after"] = load()
    print(json.dumps(result, indent=2) if args.json else render(result))


if __name__ == "__main__":
    main()
