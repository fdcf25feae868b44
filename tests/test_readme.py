"""Every Python block of README.md runs, as a reader would run it.

The quick starts are written for ``aiokafka07 cluster`` with its defaults (ZooKeeper at
127.0.0.1:2181, brokers at 127.0.0.1:9092 and 9093). Here that command runs on free ports
instead, and each block gets those addresses in place of the defaults; the blocks then
run in README order against that one cluster, as someone pasting them one after another
would (the consumer quick start reads what the producer quick start sent). Each block
runs as a script in a fresh directory, with this checkout first on the path and a time
bound; a block must print nothing on stderr unless it configures logging itself or runs
Spark (whose JVM writes its banner there).

A block's fence says how it runs:

- ```` ```python ````: a script, ``python block.py``;
- ```` ```python pytest ````: a test module, run by pytest without any configuration (so
  without ``asyncio_mode = auto``);
- ```` ```python no-run ````: shown only (the text around it must say why); a block is
  almost never this.

A block that imports an optional extra's module (PySpark, aiohttp) is skipped only when
that module is not installed, and says so.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: Optional extras, by the top-level module a block would import.
EXTRAS = {"pyspark": "spark", "aiohttp": "examples"}
#: Per block (Spark starts a JVM).
TIMEOUT = 240


@dataclass(frozen=True)
class Block:
    section: str
    line: int
    mode: str
    code: str

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")
        return f"{slug}-line-{self.line}"

    def needs(self) -> list[str]:
        imported = re.findall(r"^\s*(?:from|import)\s+(\w+)", self.code, re.MULTILINE)
        return sorted({module for module in imported if module in EXTRAS})


def python_blocks() -> list[Block]:
    blocks, section = [], ""
    lines = README.read_text().splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        fence = re.fullmatch(r"```python(?:\s+(\S+))?\s*", line)
        if fence:
            end = lines.index("```", number + 1)
            mode = fence[1] or "script"
            assert mode in ("script", "pytest", "no-run"), f"README.md:{number + 1}: {line}"
            code = "\n".join(lines[number + 1 : end]) + "\n"
            blocks.append(Block(section, number + 1, mode, code))
            number = end
        number += 1
    return blocks


BLOCKS = python_blocks()


def test_blocks_are_found_and_almost_all_run() -> None:
    assert len(BLOCKS) >= 8
    assert sum(block.mode == "no-run" for block in BLOCKS) <= 1


@dataclass
class Cluster:
    zookeeper: str
    ports: list[str]

    def rewrite(self, code: str) -> str:
        """The block for this cluster: its addresses in place of the defaults."""
        code = code.replace("127.0.0.1:2181", self.zookeeper)
        for default, port in zip(("9092", "9093"), self.ports, strict=True):
            code = re.sub(rf"\b{default}\b", port, code)
        return code


@pytest.fixture(scope="module")
def cluster(zookeeper_installed: str) -> Iterator[Cluster]:
    """``aiokafka07 cluster`` on free ports, for every block of the module."""
    process = subprocess.Popen(
        [sys.executable, "-m", "aiokafka07", "cluster", "--zookeeper-port", "0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=_env(),
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert "Ctrl-C stops everything" in lines[-1], lines
        fields = dict(line.rstrip("\n").split(": ", 1) for line in lines[:2])
        ports = [entry.rpartition(":")[2] for entry in fields["brokers"].split(",")]
        yield Cluster(fields["zookeeper"], ports)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.mode != "no-run"], ids=lambda b: b.id)
def test_readme_block_runs(block: Block, cluster: Cluster, tmp_path: Path) -> None:
    for module in block.needs():
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (the {EXTRAS[module]} extra), which is not installed")
    source = tmp_path / ("test_block.py" if block.mode == "pytest" else "block.py")
    source.write_text(cluster.rewrite(block.code))
    if block.mode == "pytest":
        # As a project of the reader's would configure it: pytest-asyncio warns on stderr
        # (some versions only) when the fixture loop scope is left unset.
        options = ["-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"]
        command = [sys.executable, "-m", "pytest", "-q", *options, source.name]
    else:
        command = [sys.executable, source.name]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=_env(),
    )
    where = f"README.md:{block.line}"
    assert result.returncode == 0, f"{where}\n{result.stdout}\n{result.stderr}"
    if block.mode == "pytest":
        assert re.search(r"\b1 passed\b", result.stdout), result.stdout
    # The library prints nothing by itself; Spark's JVM writes its banner to stderr, and a
    # block that configures logging may well print there on purpose.
    if "pyspark" not in block.needs() and "import logging" not in block.code:
        assert result.stderr == "", f"{where}\n{result.stderr}"
