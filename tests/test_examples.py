"""Every example runs (so none can rot), and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def check_codec_tour(lines: list[str]) -> None:
    assert lines[0].startswith("client writes a 396-byte MULTIPRODUCE")
    offsets = [int(line.split()[1]) for line in lines if line.startswith("  offset")]
    # Three plain messages, then a gzip wrapper: start, start, end (0.7.2 offsets).
    assert offsets == [40, 80, 121, 121, 121, 219]
    assert "fetch next at offset 219 (log end 328)" in lines[-2]
    assert lines[-1] == "the next fetch returns 3 more, ending at 328"


CHECKS = {"codec_tour.py": check_codec_tour}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example(example: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines, f"{example.name} printed nothing"
    CHECKS[example.name](lines)
