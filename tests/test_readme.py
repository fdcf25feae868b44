"""Every code block of README.md and of the documentation (docs/**/*.md) runs, as a reader
would run it.

The examples are written for ``aiokafka07 cluster`` with its defaults (ZooKeeper at
127.0.0.1:2181, brokers at 127.0.0.1:9092 and 9093). Here that command runs once, on free
ports, and each block gets those addresses in place of the defaults; the blocks then run
in order (README first, then the pages by path, each page top to bottom) against that one
cluster, as someone pasting them one after another would (a page's consumer reads what
its producer sent). Each block runs in a fresh directory, with a time bound, in a fresh
virtual environment holding only what the extras the block names install, as
``pip install -e '.[extras]'`` of this checkout leaves it (``tests/environments.py``:
linked from this interpreter's installation, no download; the checkout on the path
through a ``.pth`` line, the console tools' wrappers first on ``PATH``, no
``PYTHONPATH``). A block names the extras of the modules it imports (:data:`EXTRAS`),
and a test module the ``pytest`` extra that runs it; its page must give the command
that installs them. So a block that imports a module its extras do not bring fails, as
it fails for a reader who installed what the page says. One environment serves every
block with the same extras. A Python block must print nothing on stderr unless it
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
commands for a real cluster, output. A block whose extras need a distribution this
interpreter lacks (PySpark, in the ``no-spark`` nox session) is skipped, and says so;
one the ``test`` extra brings fails instead (this environment is incomplete).
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiokafka07 import SimpleConsumer

from .environments import NotInstalled, activated, environment_with, extra_requirements
from .nested import outside_this_run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

#: The extra that brings a module a block imports, by its top-level name (the library and
#: the standard library need none). A module missing here fails the block where it runs:
#: the base environment does not have it.
EXTRAS = {
    "pyspark": "spark",
    "pyarrow": "arrow",
    "aiohttp": "examples",
    "prometheus_client": "prometheus",
    "pytest": "pytest",
    "pytest_asyncio": "pytest",
}
#: The extra a ``python pytest`` block runs with: pytest and pytest-asyncio.
PYTEST_EXTRA = "pytest"
#: The extra README's test command installs, without which this suite does not run: a
#: block needing a distribution it brings fails when that is missing, never skips.
SUITE_EXTRA = "test"
#: A page's command installing extras from a checkout: ``pip install -e '.[a,b]'``.
INSTALL = re.compile(r"pip install (?:-e )?'?\.\[([\w,-]+)\]")
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

    def imports(self) -> set[str]:
        """The top-level modules the block imports (a Python block)."""
        if self.language != "python":
            return set()
        return set(re.findall(r"^\s*(?:from|import)\s+(\w+)", self.code, re.MULTILINE))

    def extras(self) -> frozenset[str]:
        """The extras the block names: those of the modules it imports, and for a test
        module the one pytest runs it with. Empty: ``pip install -e .`` alone."""
        names = {EXTRAS[module] for module in self.imports() if module in EXTRAS}
        if self.mode == "pytest":
            names.add(PYTEST_EXTRA)
        return frozenset(names)


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


@pytest.mark.parametrize(
    ("language", "mode", "code", "extras"),
    [
        pytest.param("python", "script", "import aiokafka07 as k7\n", set(), id="library"),
        pytest.param(
            "python", "script", "from prometheus_client import Gauge\n", {"prometheus"}, id="from"
        ),
        pytest.param("python", "serve", "from aiohttp import web\n", {"examples"}, id="serve"),
        pytest.param("python", "script", "    import pyspark.sql\n", {"spark"}, id="indented"),
        pytest.param("python", "pytest", "import aiokafka07\n", {"pytest"}, id="test-module"),
        pytest.param(
            "python",
            "pytest",
            "import pytest\nimport aiohttp\n",
            {"pytest", "examples"},
            id="test-module-and-import",
        ),
        pytest.param("sh", "run", "aiokafka07 groups\n", set(), id="console-tool"),
        pytest.param("sh", "run", "import aiohttp\n", set(), id="shell-not-python"),
    ],
)
def test_a_block_names_the_extras_of_its_imports_and_its_runner(
    language: str, mode: str, code: str, extras: set[str]
) -> None:
    block = Block(README, "section", 1, language, mode, code)
    assert block.extras() == extras


def installed_extras(text: str) -> set[str]:
    """The extras the commands of ``text`` install from a checkout (a command may wrap)."""
    return {
        extra for found in INSTALL.findall(" ".join(text.split())) for extra in found.split(",")
    }


def test_each_page_installs_the_extras_of_its_blocks() -> None:
    """A block's page gives the command that installs its extras, before the block: the
    reader who follows the page has what the block imports."""
    unsaid = []
    for block in BLOCKS:
        lines = block.path.read_text().splitlines()[: block.line]
        said = installed_extras("\n".join(lines))
        unsaid += [f"{block.where}: {extra}" for extra in sorted(block.extras() - said)]
    assert unsaid == []
    assert installed_extras("`python -m pip install -e\n'.[exporter,bridge]'`") == {
        "exporter",
        "bridge",
    }


#: A fresh environment with the given extras installed (its python), made on first use.
Environments = Callable[[frozenset[str]], Path]


@pytest.fixture(scope="module")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Environments:
    """One environment per set of extras, shared by the module's blocks that name it (each
    pytest-xdist worker makes its own, in its own temporary directory). Skips a block
    whose extras need a distribution this interpreter lacks, unless the ``test`` extra
    brings it (then this interpreter is broken: that fails)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    suite = {canonicalize_name(Requirement(r).name) for r in extra_requirements({SUITE_EXTRA})}

    @functools.cache
    def made(extras: frozenset[str]) -> Path | NotInstalled:
        where = tmp_path_factory.mktemp("-".join(sorted(extras)) or "base") / "venv"
        try:
            return environment_with(extras, where)
        except NotInstalled as missing:
            return missing

    def environment(extras: frozenset[str]) -> Path:
        found = made(extras)
        if isinstance(found, NotInstalled):
            if found.name in suite:
                raise found
            pytest.skip(f"needs the {', '.join(sorted(extras))} extra: {found}")
        return found

    return environment


def _env(python: Path) -> dict[str, str]:
    """A shell's variables with the environment of ``python`` activated, outside this
    pytest run."""
    return activated(python, outside_this_run())


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
def cluster(zookeeper_installed: str, environments: Environments) -> Iterator[Cluster]:
    """``aiokafka07 cluster`` on free ports, for every block of the module, run as a reader
    runs it: the console tool of ``pip install -e .``."""
    env = _env(environments(frozenset()))
    process = subprocess.Popen(
        ["aiokafka07", "cluster", "--zookeeper-port", "0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
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


def run_block(
    block: Block, code: str, python: Path, where: Path
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (a script, a test module or shell commands, as ``block``'s fence says)
    in the directory ``where`` with the environment of ``python`` activated."""
    if block.language == "sh":
        command = ["bash", "-e", "-o", "pipefail", "-c", code]
    elif block.mode == "pytest":
        (where / "test_block.py").write_text(code)
        # As a project of the reader's would configure it: pytest-asyncio warns on stderr
        # (some versions only) when the fixture loop scope is left unset.
        options = ["-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"]
        command = [str(python), "-m", "pytest", "-q", *options, "test_block.py"]
    else:
        (where / "block.py").write_text(code)
        command = [str(python), "block.py"]
    return subprocess.run(
        command,
        cwd=where,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=_env(python),
    )


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=lambda b: b.id)
def test_code_block_runs(
    block: Block, environments: Environments, cluster: Cluster, tmp_path: Path
) -> None:
    python = environments(block.extras())
    code = cluster.rewrite(block.code)
    if block.mode == "serve":
        _serve(block, code, cluster, python, tmp_path)
        return
    result = run_block(block, code, python, tmp_path)
    assert result.returncode == 0, f"{block.where}\n{result.stdout}\n{result.stderr}"
    if block.mode == "pytest":
        assert re.search(r"\b1 passed\b", result.stdout), result.stdout
    # The library prints nothing by itself; Spark's JVM writes its banner to stderr, a
    # block that configures logging may well print there on purpose, and the console
    # tools report on stderr.
    quiet = "spark" not in block.extras() and "logging" not in block.imports()
    if block.language == "python" and quiet:
        assert result.stderr == "", f"{block.where}\n{result.stderr}"


def test_a_block_sees_only_what_its_extras_install(
    environments: Environments, tmp_path: Path
) -> None:
    """The check can fail: the client-metrics block run where only ``pip install -e .``
    is (no prometheus extra) fails to import prometheus_client; the checkout it imports
    is this one, through the environment's ``.pth`` line, and the console tools on PATH
    are the environment's."""
    (metrics,) = [b for b in BLOCKS if "prometheus_client" in b.imports()]
    base = environments(frozenset())
    failed = run_block(metrics, metrics.code, base, tmp_path)
    assert failed.returncode != 0
    assert "No module named 'prometheus_client'" in failed.stderr, failed.stderr
    code = "command -v aiokafka07\npython -c 'import aiokafka07; print(aiokafka07.__file__)'\n"
    probe = Block(README, "probe", 1, "sh", "run", code)
    found = run_block(probe, probe.code, base, tmp_path)
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == [
        str(base.parent / "aiokafka07"),
        str(ROOT / "aiokafka07" / "__init__.py"),
    ]


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


def _run_server(
    code: str, python: Path, tmp_path: Path, post: tuple[str, bytes]
) -> tuple[int, bytes, str]:
    """Serve the block with ``python`` on a free port, POST once, stop it with Ctrl-C: the
    answer's status and body, and what the server printed on stderr."""
    port = _free_port()
    source = tmp_path / "server.py"
    source.write_text(re.sub(rf"\b{SERVE_PORT}\b", str(port), code))
    server = subprocess.Popen(
        [str(python), source.name],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(python),
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


def _serve(block: Block, code: str, cluster: Cluster, python: Path, tmp_path: Path) -> None:
    topic, body = f"served-{block.line}", b"posted to a served block"
    status, answer, err = _run_server(code, python, tmp_path, (f"/topics/{topic}?key=user-1", body))
    assert status == 202, f"{block.where}: {status} {answer!r}\n{err}"
    # Accepted means delivered: stopping the server flushed the producer.
    assert asyncio.run(_read_topic(cluster, topic)) == [body], block.where

    # The same service pointed at a chroot no broker registered in: no broker, so 503
    # with the reason, not a 500.
    chroot = f'"{cluster.zookeeper}/no-brokers-here"'
    assert f'"{cluster.zookeeper}"' in code, f"{block.where}: the ZooKeeper address is a literal"
    wrong = code.replace(f'"{cluster.zookeeper}"', chroot)
    status, answer, err = _run_server(wrong, python, tmp_path, (f"/topics/{topic}", body))
    assert status == 503, f"{block.where}: {status} {answer!r}\n{err}"
    assert "no live broker" in json.loads(answer)["error"], answer
