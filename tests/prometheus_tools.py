"""Debian's ``prometheus`` package for the tests of the repository's monitoring files
(deploy/prometheus, deploy/grafana): finding (or installing) ``prometheus`` and
``promtool``, reading the rules and the dashboard, the metric names they use, and a real
Prometheus server on loopback with a data directory of its own.

Installing follows the ZooKeeper fixtures' rule (aiokafka07/testing/zookeeper_server.py):
only when the project opted in to its fixtures installing Debian packages
(``aiokafka07_install_zookeeper = true``, as this project's pytest configuration does)
and only as root on Debian; anywhere else a missing package skips the test, saying what to
install. CI (.ci/run) installs the package before the suite, so there they always run.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import pytest
import yaml

from aiokafka07.testing.pytest_plugin import install_opted_in
from aiokafka07.testing.zookeeper_server import apt_get_install, can_install_zookeeper

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "aiokafka07-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "aiokafka07-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "aiokafka07.json"


INSTALL_HINT = "apt-get install --no-install-recommends prometheus (Debian's package)"

#: A metric name of the exporter's, of the kafka_exporter-style series the rules record,
#: or Prometheus' own ``up``: what the rules and the dashboard may name.
_NAME = re.compile(r"(?<![\w:])(kafka07_[a-z0-9_]+|kafka_[a-z0-9_]+|up)(?![\w:(])")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _install() -> None:
    """apt-get install Debian's prometheus package, with no service started (a
    policy-rc.d refusing every start, unless the machine has one of its own): the tests
    run their own server on loopback, never the package's on every interface."""
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:
        policy.write_text("#!/bin/sh\n# written by aiokafka07's tests while installing\nexit 101\n")
        policy.chmod(0o755)
    try:
        apt_get_install("prometheus", options=("--no-install-recommends",))
    finally:
        if ours:
            policy.unlink()


def prometheus_binaries(config: pytest.Config) -> tuple[str, str]:
    """The paths of ``prometheus`` and ``promtool``; installed first when the project
    opted in and this is root on Debian, else the test is skipped with what to run."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if None in found:
        if not install_opted_in(config) or not can_install_zookeeper():
            pytest.skip(f"needs prometheus and promtool: {INSTALL_HINT}, as CI's .ci/run does")
        _install()
        found = shutil.which("prometheus"), shutil.which("promtool")
    prometheus, promtool = found
    assert prometheus is not None, f"not found after {INSTALL_HINT}"
    assert promtool is not None, f"not found after {INSTALL_HINT}"
    return prometheus, promtool


def rule_groups() -> list[dict[str, Any]]:
    """The rule groups of the repository's rules file."""
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    """Every rule (recording and alerting) of the rules file."""
    return [rule for group in rule_groups() for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard, parsed."""
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def panels(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in document["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(document: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard's panels, and its variables' queries."""
    queries = [t["expr"] for p in panels(document) for t in p.get("targets", [])]
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["definition"])
    return queries


def metric_names(text: str) -> set[str]:
    """The metric names a PromQL expression (or a rule's annotation) names: the
    exporter's (``kafka07_*``), the kafka_exporter-style ones (``kafka_*``) and ``up``;
    names inside quoted label values do not count."""
    return set(_NAME.findall(_STRING.sub('""', text)))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def with_for_zero(text: str) -> tuple[str, int]:
    """The rules file with every alert's ``for:`` set to 0s, and how many were set."""
    return re.subn(r"(?m)^(\s+)for: \S+$", r"\1for: 0s", text)


class Prometheus:
    """A running Prometheus server: its base URL and its HTTP API."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    async def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; the ``data`` of a successful answer."""
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{self.url}/api/v1/{path}", params=params) as response,
        ):
            body = await response.json()
        assert body["status"] == "success", body
        return body["data"]

    async def firing(self, alertname: str) -> list[dict[str, str]]:
        """The labels of each firing alert named ``alertname``."""
        alerts = (await self.api("alerts"))["alerts"]
        return [
            a["labels"]
            for a in alerts
            if a["labels"]["alertname"] == alertname and a["state"] == "firing"
        ]

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def write_config(directory: Path, rules_text: str, targets: list[str], interval: str) -> Path:
    """A data directory's parent with ``rules.yml`` and ``prometheus.yml`` (job
    ``kafka07`` scraping ``targets``, scrapes and evaluations every ``interval``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rules.yml").write_text(rules_text)
    config = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "rule_files": [str(directory / "rules.yml")],
        "scrape_configs": [{"job_name": "kafka07", "static_configs": [{"targets": targets}]}],
    }
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for a child process's output (the caller closes it)."""
    return open(path, "wb")


@asynccontextmanager
async def prometheus_server(
    binary: str, directory: Path, rules_text: str, targets: list[str], *, interval: str = "1s"
) -> AsyncIterator[Prometheus]:
    """Prometheus on a free loopback port, data in ``directory``, scraping ``targets``
    (job ``kafka07``) and evaluating ``rules_text`` every ``interval``; ready when this
    yields (30 s at most), stopped (SIGTERM, then SIGKILL after 10 s) at the end."""
    config = write_config(directory, rules_text, targets, interval)
    port = free_port()
    log = directory / "prometheus.log"
    with open_log(log) as out:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    try:
        await _wait_ready(server, process, 30.0)
        yield server
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 10)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()


async def _wait_ready(
    server: Prometheus, process: asyncio.subprocess.Process, limit: float
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            if process.returncode is not None:
                raise AssertionError(
                    f"prometheus exited ({process.returncode}):\n{server.log_tail()}"
                )
            with suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.get(f"{server.url}/-/ready") as response:
                    if response.status == 200:
                        return
            if loop.time() > deadline:
                raise AssertionError(f"prometheus not ready within {limit} s:\n{server.log_tail()}")
            await asyncio.sleep(0.1)
