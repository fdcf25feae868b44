"""The exporter and the bridge as services (docs/operations/services.md): the systemd
units (``systemd-analyze verify``, their keys, the example environment files parsed by
the tools' own parsers), the container build file (what it copies exists and is what the
package is built from, the extras it installs exist, its health check run against a real
exporter; the image itself is not built here: no container daemon), and the exporter's
``--topics`` / ``--groups`` / ``--cluster`` through a real ZooKeeper and broker process,
run as an operator runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from aiokafka07 import Producer
from aiokafka07.cli import command_parser, main
from aiokafka07.testing.process import start_broker_process, stop_broker_process
from aiokafka07.znodes import GroupRegistry, offset_path
from aiokafka07.zookeeper import ZooKeeper

from .environments import load_toml
from .groups import produce
from .wire import eventually

ROOT = Path(__file__).parent.parent
SYSTEMD = ROOT / "deploy" / "systemd"
CONTAINERFILE = ROOT / "deploy" / "container" / "Containerfile"
PYPROJECT = load_toml(ROOT / "pyproject.toml")

#: Each tool's unit, its environment file, the variable holding its options, and the
#: longest its clean stop can take (seconds), which the unit's TimeoutStopSec must exceed:
#: the exporter gives its HTTP thread 30 s and its refresher 10 s, then closes its
#: connections; the bridge ends its transaction (begin, send, checkpoint, commit: 30 s
#: each at most), an abort 10 s, its producer's stop 10 s.
UNITS = {
    "exporter": ("AIOKAFKA07_EXPORTER_OPTIONS", 45),
    "bridge": ("AIOKAFKA07_BRIDGE_OPTIONS", 140),
}

#: Hardening every unit has (key → value).
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "CapabilityBoundingSet": "",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
}


def unit_keys(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections → key → values (a key may be given more than once)."""
    sections: dict[str, dict[str, list[str]]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
            continue
        assert section is not None, line
        key, equals, value = line.partition("=")
        assert equals, line
        section.setdefault(key, []).append(value)
    return sections


def environment_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines, as systemd reads an EnvironmentFile (comments skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


@pytest.mark.parametrize("tool", sorted(UNITS))
def test_systemd_unit_keys_and_its_example_options(tool: str) -> None:
    """The unit runs the tool under a user of its own with the options of its
    EnvironmentFile, stops it with SIGTERM and gives it longer than its clean stop takes,
    restarts it on failure but not for bad options, and is hardened; the example
    environment file's options are ones the tool's own parser accepts."""
    variable, stop_bound = UNITS[tool]
    service = unit_keys(SYSTEMD / f"aiokafka07-{tool}.service")["Service"]
    assert service["Type"] in (["exec"], ["simple"])
    assert service["DynamicUser"] == ["yes"]
    assert service["User"] == [f"aiokafka07-{tool}"]
    assert service["EnvironmentFile"] == [f"/etc/aiokafka07/{tool}.env"]
    command = shlex.split(service["ExecStart"][0])
    assert command == ["/opt/aiokafka07/bin/aiokafka07", tool, f"${variable}"]
    assert service["KillSignal"] == ["SIGTERM"]
    assert int(service["TimeoutStopSec"][0]) > stop_bound
    assert service["Restart"] == ["on-failure"]
    assert service["RestartPreventExitStatus"] == ["2"]  # bad options: exit 2
    for key, value in HARDENING.items():
        assert service[key] == [value], key
    assert "ReadWritePaths" not in service  # neither writes a file (the bridge's state
    assert "StateDirectory" not in service  # is in the target cluster)
    options = environment_file(SYSTEMD / f"aiokafka07-{tool}.env")
    assert set(options) == {variable}
    args = command_parser(tool).parse_args(options[variable].split())
    assert args.zookeeper


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="needs systemd-analyze: apt-get install systemd, as CI's .ci/run does",
)
def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """``systemd-analyze verify`` accepts both units without a warning (an unknown key or
    a bad value is only a warning there, so any output fails). verify checks that
    ExecStart's program exists: the units are verified as installed, with the program
    at a path of the test's own."""
    program = tmp_path / "opt" / "aiokafka07" / "bin" / "aiokafka07"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    units = []
    for tool in sorted(UNITS):
        text = (SYSTEMD / f"aiokafka07-{tool}.service").read_text()
        assert text.count("/opt/aiokafka07/bin/aiokafka07") == 1
        unit = tmp_path / f"aiokafka07-{tool}.service"
        unit.write_text(text.replace("/opt/aiokafka07/bin/aiokafka07", str(program)))
        units.append(str(unit))
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Containerfile's instructions (name, arguments), continuation lines joined,
    comments skipped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        name, _, rest = pending.partition(" ")
        found.append((name.upper(), rest.strip()))
        pending = ""
    assert not pending, pending
    return found


def ignored(patterns: list[str], path: str) -> bool:
    """Whether a ``.dockerignore`` leaves ``path`` out of the build context: the last
    pattern matching it or a directory above it decides, ``!`` patterns keep (Docker's
    rules: ``*`` and ``?`` stay within a path element, ``**/`` spans any directories,
    none included)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    decision = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        body = pattern.removeprefix("!").strip("/")
        regex = "".join(
            {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token)
            or re.escape(token)
            for token in re.findall(r"\*\*/|\*\*|\*|\?|[^*?]+", body)
        )
        if any(re.fullmatch(regex, candidate) for candidate in candidates):
            decision = not keep
    return decision


def test_dockerignore_sends_the_builder_only_what_the_image_is_built_from() -> None:
    """The build context (the checkout's root) keeps every path the Containerfile copies
    and every file in the package, and leaves out the checkout's own trees and caches
    and the accelerators built in place (the image builds its own)."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    copied = [
        source
        for name, rest in instructions(CONTAINERFILE)
        if name == "COPY" and not rest.startswith("--from")
        for source in rest.split()[:-1]
    ]
    assert copied
    for source in copied:
        assert not ignored(patterns, source), source
    sources = subprocess.run(
        ["git", "ls-files", "aiokafka07"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "aiokafka07/protocol/_speedups.c" in sources
    for path in sources:
        assert not ignored(patterns, path), path
    for path in (
        ".git/config",
        ".venv/bin/python",
        "build/lib/aiokafka07/__init__.py",
        "aiokafka07.egg-info/PKG-INFO",
        ".bytecode_cache/x.pyc",
        "docs/_build/html/index.html",
        "tests/test_services.py",
        "aiokafka07/protocol/_speedups.cpython-311-x86_64-linux-gnu.so",
        "aiokafka07/__pycache__/cli.cpython-311.pyc",
        "aiokafka07/spark/__pycache__/reader.cpython-311.pyc",
    ):
        assert ignored(patterns, path), path


def test_containerfile_copies_what_the_package_is_built_from() -> None:
    """What the build stage copies exists and is everything setuptools builds the
    package from (readme, license, modules, packages, C sources); the image installs
    the exporter and bridge extras, which pyproject.toml defines; it runs as a user
    without privileges, ``aiokafka07`` (the package's script) as its entry point, and
    stops with SIGTERM."""
    steps = instructions(CONTAINERFILE)
    names = [name for name, _ in steps]
    assert names.count("FROM") == 2
    assert all("-slim" in rest for name, rest in steps if name == "FROM")
    copied: set[str] = set()
    for name, rest in steps:
        if name == "COPY" and not rest.startswith("--from"):
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), source
                copied.add(source)
    tool = PYPROJECT["tool"]["setuptools"]
    needed = {
        PYPROJECT["project"]["readme"],
        *PYPROJECT["project"]["license-files"],
        *(f"{module}.py" for module in tool["py-modules"]),
        *(source for ext in tool["ext-modules"] for source in ext["sources"]),
        "pyproject.toml",
    }
    for path in sorted(needed):
        assert any(path == c or path.startswith(c + "/") for c in copied), path
    packages = tool["packages"]["find"]["include"]
    assert packages == ["aiokafka07*"]
    assert "aiokafka07" in copied
    extras = PYPROJECT["project"]["optional-dependencies"]
    runs = [rest for name, rest in steps if name == "RUN"]
    installs = re.findall(r"'aiokafka07\[([\w,]+)\]'|'\.\[([\w,]+)\]'", " ".join(runs))
    assert len(installs) == 2, installs
    for wheel, image in installs:
        wanted = set((wheel or image).split(","))
        assert wanted == {"exporter", "bridge"}
        assert wanted <= set(extras)
    (user,) = [rest for name, rest in steps if name == "USER"]
    assert not user.startswith(("0", "root"))
    (entry,) = [rest for name, rest in steps if name == "ENTRYPOINT"]
    assert json.loads(entry) == ["aiokafka07"]
    assert "aiokafka07" in PYPROJECT["project"]["scripts"]
    assert ("STOPSIGNAL", "SIGTERM") in steps


def health_check() -> tuple[list[str], dict[str, str]]:
    """The Containerfile's HEALTHCHECK command (exec form) and the ENV it reads."""
    steps = instructions(CONTAINERFILE)
    (check,) = [rest for name, rest in steps if name == "HEALTHCHECK"]
    _, _, command = check.partition(" CMD ")
    argv = json.loads(command)
    env: dict[str, str] = {}
    for name, rest in steps:
        if name == "ENV":
            env.update(dict(item.split("=", 1) for item in shlex.split(rest)))
    assert argv[0] == "python", argv
    return [sys.executable, *argv[1:]], env


def run_health_check(url: str) -> int:
    """The health check's exit status against ``url``, as the image runs it."""
    argv, env = health_check()
    assert env["AIOKAFKA07_HEALTH_URL"] == "http://127.0.0.1:9307/metrics"
    environ = {**os.environ, **env, "AIOKAFKA07_HEALTH_URL": url}
    done = subprocess.run(argv, env=environ, capture_output=True, timeout=30, check=False)
    return done.returncode


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--topics", "orders("], "topics 'orders(' is not a regular expression: missing )"),
        (["--groups", "*"], "groups '*' is not a regular expression: nothing to repeat"),
        (["--groups", " "], "groups ' ' matches no name"),
        (["--cluster", "my cluster"], "cluster name 'my cluster': 1 to 128 letters"),
    ],
)
def test_bad_filters_and_cluster_names_are_usage_errors(
    options: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A filter that is not a regular expression, or a cluster name that is not one, is
    refused with the reason (exit 2) before anything connects."""
    assert main(["exporter", "--zookeeper", "127.0.0.1:1", *options]) == 2
    assert f"aiokafka07 exporter: error: {said}" in capsys.readouterr().err


async def scrape(session: aiohttp.ClientSession, url: str) -> list[Any]:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
        assert response.status == 200
        text = await response.text()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


@pytest.mark.slow  # a broker process and the exporter's
async def test_exporter_filters_and_cluster_label(zookeeper: str, tmp_path: Path) -> None:
    """``aiokafka07 exporter --topics --groups --cluster`` against ZooKeeper and a broker
    process: only the matching topics and groups are served, a group's partitions of the
    other topics are left out (not unknown), and what is left out is not read at all (it
    counts toward neither --max-partitions nor --max-groups, and a bad offset znode in a
    group left out is no error); every series has the cluster label; the image's health
    check passes against it, and fails once it stopped with SIGTERM (exit 0, its closing
    line)."""
    parts = [(0, 0), (0, 1)]
    broker, _ = await start_broker_process(
        tmp_path / "b0", broker_id=0, partitions=2, zookeeper=zookeeper
    )
    try:
        async with Producer(zookeeper=zookeeper) as producer, ZooKeeper(zookeeper) as zk:
            # At once: a new topic takes seconds to be produced to (its registration).
            topics = ("orders.eu", "orders.us", "audit")
            await asyncio.gather(*(produce(producer, t, parts, 2, t) for t in topics))
            billing, other = GroupRegistry(zk, "billing"), GroupRegistry(zk, "reporting")
            for topic in ("orders.eu", "audit"):
                for name in ("0-0", "0-1"):
                    await billing.commit(topic, name, 0)
                    await other.commit(topic, name, 0)
            # Read, it would count as a bad_znode error.
            await zk.write_persistent(offset_path("reporting", "orders.eu", "0-0"), "garbage")
        log = tmp_path / "exporter.log"
        with log.open("w") as out:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aiokafka07", "exporter", "--zookeeper", zookeeper,
                "--port", "0", "--interval-ms", "300", "--topics", "orders[.].*",
                "--groups", "billing", "--cluster", "eu-1", "--max-partitions", "4",
                "--max-groups", "1", stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        try:

            def serving() -> str | None:
                assert process.returncode is None, log.read_text()
                found = re.search(r"serving (http://127\.0\.0\.1:\d+)/metrics", log.read_text())
                return found.group(1) if found else None

            url = await eventually(serving, 30)
            async with aiohttp.ClientSession() as session:

                async def billed() -> list[Any] | None:
                    samples = await scrape(session, url + "/metrics")
                    names = {s.name for s in samples}
                    return samples if "kafka07_group_partition_lag_bytes" in names else None

                samples = await eventually(billed, 30)
            assert {s.labels.get("cluster") for s in samples} == {"eu-1"}
            topics = {s.labels["topic"] for s in samples if "topic" in s.labels}
            groups = {s.labels["group"] for s in samples if "group" in s.labels}
            assert topics == {"orders.eu", "orders.us"}
            assert groups == {"billing"}
            values = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
            newest = [s for s in samples if s.name == "kafka07_topic_partition_newest_offset"]
            assert len(newest) == 4
            lagging = [s for s in samples if s.name == "kafka07_group_partition_lag_bytes"]
            assert sorted((s.labels["topic"], s.labels["partition"]) for s in lagging) == [
                ("orders.eu", "0"),
                ("orders.eu", "1"),
            ]
            cluster = ("cluster", "eu-1")
            unknown = ("kafka07_group_partitions_unknown", (cluster, ("group", "billing")))
            assert values[unknown] == 0
            for kind in ("limit", "bad_znode"):
                key = ("kafka07_exporter_errors_total", (cluster, ("kind", kind)))
                assert values[key] == 0, kind
            assert await asyncio.to_thread(run_health_check, url + "/metrics") == 0
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 30) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        last = log.read_text().rstrip("\n").rsplit("\n", 1)[-1]
        assert re.match(r"aiokafka07 exporter: stopped by SIGTERM after [0-9.]+ s: ", last), last
        assert await asyncio.to_thread(run_health_check, url + "/metrics") != 0
    finally:
        await stop_broker_process(broker)
