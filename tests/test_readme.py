"""Every code block of README.md and of the documentation (docs/**/*.md) runs, as a reader
would run it.

The examples are written for ``aiokafka07 cluster`` with its defaults (ZooKeeper at
127.0.0.1:2181, brokers at 127.0.0.1:9092 and 9093). Here that command runs once, on free
ports, and each block gets those addresses in place of the defaults; the blocks then run
in order (README first, then the pages by path, each page top to bottom) against that one
cluster, as someone pasting them one after another would (a page's consumer reads what
its producer sent). Each block runs in a fresh directory, with this checkout first on
the path and a time bound; a Python block must print nothing on stderr unless it
configures logging itself or runs Spark (whose JVM writes its banner there).

A block's fence says how it runs:

- ```` ```python ````: a script, ``python block.py``;
- ```` ```python pytest ````: a test module, run by pytest without any configuration (so
  without ``asyncio_mode = auto``);
- ```` ```python serve ````: a server on port 8080 serving ``POST /topics/{topic}``: it
  is started on a free port, must answer a POST with 202 and deliver that message to the
  cluster, and must answer 503 with the reason when its ZooKeeper has no broker (a
  wrong chroot); then it is stopped with Ctrl-C and must exit cleanly;
- ```` ```sh run ````: shell commands against the cluster (the console tools), run with
  ``bash -e -o pipefail``;
- ```` ```python no-run ````: shown only (the text around it must say why); a block is
  almost never this.

Other fences (``sh`` without ``run``, ``text``, ``toml``) are shown only: installs,
commands for a real cluster, output. A block that imports an optional extra's module
(PySpark, pyarrow, aiohttp) is skipped only when that module is not installed, and says
so.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiokafka07 import SimpleConsumer

from .nested import outside_this_run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

#: Optional extras, by the top-level module a block would import.
EXTRAS = {
    "pyspark": "spark",
    "pyarrow": "spark",
    "aiohttp": "examples",
    "prometheus_client": "prometheus",
}
#: Per block (Spark starts a JVM).
TIMEOUT = 240
#: The port a ``python serve`` block listens on as written.
SERVE_PORT = "8080"
#: How runnable fences are spelled: language, then an optional mode.
FENCE = re.compile(r"```(python|sh)(?:[ \t]+(\S+))?[ \t]*")
MODES = {"python": ("script", "pytest", "serve", "no-run"), "sh": ("shown", "run")}


@dataclass(frozen=True)
class Block:
    path: Path
    section: str
    line: int
    language: str
    mode: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")
        page = re.sub(r"[^a-z0-9]+", "-", str(self.path.relative_to(ROOT)).lower())
        return f"{page}-{slug}-line-{self.line}"

    @property
    def runs(self) -> bool:
        return self.mode not in ("no-run", "shown")

    def needs(self) -> list[str]:
        imported = re.findall(r"^\s*(?:from|import)\s+(\w+)", self.code, re.MULTILINE)
        return sorted({module for module in imported if module in EXTRAS})


def pages() -> list[Path]:
    """README first, then every page of the site, by path."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def code_blocks(path: Path) -> list[Block]:
    blocks, section = [], ""
    lines = path.read_text().splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        fence = FENCE.fullmatch(line)
        if fence:
            end = lines.index("```", number + 1)
            language = fence[1]
            mode = fence[2] or MODES[language][0]
            assert mode in MODES[language], f"{path}:{number + 1}: {line}"
            code = "\n".join(lines[number + 1 : end]) + "\n"
            blocks.append(Block(path, section, number + 1, language, mode, code))
            number = end
        number += 1
    return blocks


BLOCKS = [block for page in pages() for block in code_blocks(page)]


def test_blocks_are_found_and_almost_all_run() -> None:
    python = [b for b in BLOCKS if b.language == "python"]
    assert len([b for b in python if b.path == README]) >= 1
    assert len(python) >= 15
    assert sum(block.mode == "no-run" for block in python) <= 1
    assert [b.where for b in BLOCKS if b.mode == "serve"], "the aiohttp block must be served"
    assert [b.where for b in BLOCKS if b.mode == "run" and b.language == "sh"]


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
    """This checkout first on the path, and this interpreter's scripts (``aiokafka07``)
    first on PATH, as in an activated virtual environment."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    scripts = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    return {**outside_this_run(), "PYTHONPATH": path, "PATH": scripts}


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=lambda b: b.id)
def test_code_block_runs(block: Block, cluster: Cluster, tmp_path: Path) -> None:
    for module in block.needs():
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (the {EXTRAS[module]} extra), which is not installed")
    code = cluster.rewrite(block.code)
    if block.mode == "serve":
        _serve(block, code, cluster, tmp_path)
        return
    if block.language == "sh":
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    elif block.mode == "pytest":
        (tmp_path / "test_block.py").write_text(code)
        # As a project of the reader's would configure it: pytest-asyncio warns on stderr
        # (some versions only) when the fixture loop scope is left unset.
        options = ["-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"]
        command = [sys.executable, "-m", "pytest", "-q", *options, "test_block.py"]
    else:
        (tmp_path / "block.py").write_text(code)
        command = [sys.executable, "block.py"]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=_env(),
    )
    assert result.returncode == 0, f"{block.where}\n{result.stdout}\n{result.stderr}"
    if block.mode == "pytest":
        assert re.search(r"\b1 passed\b", result.stdout), result.stdout
    # The library prints nothing by itself; Spark's JVM writes its banner to stderr, a
    # block that configures logging may well print there on purpose, and the console
    # tools report on stderr.
    quiet = "pyspark" not in block.needs() and "import logging" not in block.code
    if block.language == "python" and quiet:
        assert result.stderr == "", f"{block.where}\n{result.stderr}"


# -- python serve ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, server: subprocess.Popen[str], timeout: float) -> None:
    """Until the server accepts connections; fails at once if it exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server exited with status {server.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listened on port {port} within {timeout} s")


def _post(port: int, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=body)
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def _run_server(code: str, tmp_path: Path, post: tuple[str, bytes]) -> tuple[int, bytes, str]:
    """Serve the block on a free port, POST once, stop it with Ctrl-C: the answer's
    status and body, and what the server printed on stderr."""
    port = _free_port()
    source = tmp_path / "server.py"
    source.write_text(re.sub(rf"\b{SERVE_PORT}\b", str(port), code))
    server = subprocess.Popen(
        [sys.executable, source.name],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        _wait_for_port(port, server, timeout=60)
        status, _, body = _post(port, *post)
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, f"the server exited with {server.returncode}\n{out}\n{err}"
    return status, body, err


async def _read_topic(cluster: Cluster, topic: str) -> list[bytes]:
    """Every message of ``topic`` on the cluster's brokers (2 partitions each)."""
    values = []
    for broker_id, port in enumerate(cluster.ports):
        async with SimpleConsumer("127.0.0.1", int(port), broker_id=broker_id) as simple:
            # A partition the broker does not have answers with its own error, unraised.
            results = await simple.multifetch([(topic, p, 0, 1 << 20) for p in (0, 1)])
            values += [m.value for result in results for m in result.messages]
    return values


def _serve(block: Block, code: str, cluster: Cluster, tmp_path: Path) -> None:
    topic, body = f"served-{block.line}", b"posted to a served block"
    status, answer, err = _run_server(code, tmp_path, (f"/topics/{topic}?key=user-1", body))
    assert status == 202, f"{block.where}: {status} {answer!r}\n{err}"
    # Accepted means delivered: stopping the server flushed the producer.
    assert asyncio.run(_read_topic(cluster, topic)) == [body], block.where

    # The same service pointed at a chroot no broker registered in: no broker, so 503
    # with the reason, not a 500.
    chroot = f'"{cluster.zookeeper}/no-brokers-here"'
    assert f'"{cluster.zookeeper}"' in code, f"{block.where}: the ZooKeeper address is a literal"
    wrong = code.replace(f'"{cluster.zookeeper}"', chroot)
    status, answer, err = _run_server(wrong, tmp_path, (f"/topics/{topic}", body))
    assert status == 503, f"{block.where}: {status} {answer!r}\n{err}"
    assert "no live broker" in json.loads(answer)["error"], answer
