"""Hostile bytes: 100,000 mutated inputs through every decoder, in a process limited to
1 GiB of address space (tests/fuzz_decoders.py), give only values or typed errors.

Before the decompression bound, the first of the seeds (the issue's 22-byte snappy
wrapper) alone made such a process abort: cramjam tried to allocate 3.3 GiB.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COUNT = 100_000


def test_mutated_inputs_under_a_1_gib_limit_give_only_typed_errors() -> None:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, "-m", "tests.fuzz_decoders", "--count", str(COUNT), "--seed", "14"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = result.stdout.strip().splitlines()[-1]
    match = re.fullmatch(
        r"fuzzed (\d+) inputs: (\d+) values, (\d+) typed errors, in [\d.]+ s, "
        r"peak RSS (\d+) MiB, RLIMIT_AS (\d+)",
        summary,
    )
    assert match, summary
    inputs, values, errors, peak, limit = map(int, match.groups())
    assert inputs == COUNT
    assert limit == 1 << 30
    assert values > 0
    assert errors > 0
    assert peak < 1024
