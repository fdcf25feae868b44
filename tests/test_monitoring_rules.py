"""The repository's monitoring files, tested: deploy/prometheus/aiokafka07-rules.yml (alert
and recording rules) with ``promtool check rules`` and its unit tests
(deploy/prometheus/aiokafka07-rules.test.yml, ``promtool test rules``), the Grafana
dashboard deploy/grafana/aiokafka07.json (its structure, its queries valid PromQL), every
metric either of them names served by a real exporter, and a real Prometheus server
scraping a real exporter that sees the STOP alert fire for a stopped group and the
unknown-partitions alert for a SIGSTOPped broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from aiokafka07 import LATEST, Producer, SimpleConsumer
from aiokafka07.bridge.collector import METRICS as BRIDGE_METRICS
from aiokafka07.connection import BrokerAddress
from aiokafka07.monitor.cluster_state import ClusterMonitor
from aiokafka07.monitor.collector import METRICS
from aiokafka07.monitor.server import ExporterServer
from aiokafka07.monitor.status import LagTracker
from aiokafka07.testing.process import start_broker_process, stop_broker_process
from aiokafka07.znodes import GroupRegistry
from aiokafka07.zookeeper import ZooKeeper

from .groups import own_zookeeper, produce
from .prometheus_tools import (
    DASHBOARD,
    RULE_TESTS,
    RULES,
    dashboard,
    dashboard_queries,
    metric_names,
    open_log,
    panels,
    prometheus_binaries,
    prometheus_server,
    rules,
    with_for_zero,
)
from .wire import eventually, sigstop

#: The alerts the rules file defines.
ALERTS = {
    "Kafka07ConsumerGroupStopped",
    "Kafka07ConsumerGroupStalled",
    "Kafka07ConsumerGroupLagGrowing",
    "Kafka07ConsumerOffsetOutOfRange",
    "Kafka07ConsumerGroupLagUnknown",
    "Kafka07BrokerDown",
    "Kafka07ExporterStale",
    "Kafka07ExporterNotRefreshing",
    "Kafka07ExporterDown",
    "Kafka07BridgeBehind",
    "Kafka07BridgeLagUnknown",
    "Kafka07BridgeStalled",
    "Kafka07BridgeNotCopying",
    "Kafka07BridgeTopicNotCopied",
    "Kafka07BridgeRestarting",
}

#: The kafka_exporter names the recording rules give, each with its labels (beyond the
#: scrape's job and instance).
KAFKA_EXPORTER_SERIES = {
    "kafka_brokers": set(),
    "kafka_consumergroup_members": {"consumergroup"},
    "kafka_consumergroup_lag": {"consumergroup", "topic", "partition"},
    "kafka_consumergroup_lag_sum": {"consumergroup", "topic"},
}

TOPIC = "events"
PARTS = [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.fixture
def promtool(pytestconfig: pytest.Config) -> str:
    return prometheus_binaries(pytestconfig)[1]


def seconds(duration: str) -> float:
    """A Prometheus duration of one unit (``90s``, ``5m``, ``1h``) in seconds."""
    match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", duration)
    assert match, duration
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    return int(match.group(1)) * unit


def run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow  # runs promtool
def test_rules_pass_promtool_check(promtool: str) -> None:
    """``promtool check rules``: valid YAML, valid PromQL, valid templates, every rule."""
    done = run([promtool, "check", "rules", str(RULES)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


@pytest.mark.slow  # runs promtool
def test_rules_unit_tests_pass_and_cover_every_rule(promtool: str) -> None:
    """``promtool test rules`` passes and has a case for every rule: a recording rule's
    series, and an alert firing (labels and annotations exact)."""
    done = run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    cases = [case for group in tests["tests"] for case in group.get("alert_rule_test", [])]
    exprs = {c["expr"] for group in tests["tests"] for c in group.get("promql_expr_test", [])}
    for rule in rules():
        if "record" in rule:
            assert rule["record"] in exprs, f"no promql_expr_test for {rule['record']}"
        else:
            firing = [c for c in cases if c["alertname"] == rule["alert"] and c.get("exp_alerts")]
            assert firing, f"no case expects {rule['alert']} firing"


@pytest.mark.slow  # runs promtool
def test_rules_unit_tests_pin_every_for_duration(promtool: str, tmp_path: Path) -> None:
    """The unit tests check each alert's ``for:``: with any one alert's duration set to
    0s, or doubled, ``promtool test rules`` fails on that alert."""
    original = RULES.read_text()
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    for rule in rules():
        if "alert" not in rule:
            continue
        for changed in ("0s", f"{int(seconds(rule['for']) * 2)}s"):
            pattern = rf"(- alert: {rule['alert']}\n(?:.*\n)*?\s+for: ){rule['for']}\n"
            text, count = re.subn(pattern, rf"\g<1>{changed}\n", original)
            assert count == 1, rule["alert"]
            (tmp_path / RULES.name).write_text(text)
            done = run([promtool, "test", "rules", RULE_TESTS.name], cwd=tmp_path)
            assert done.returncode != 0, f"{rule['alert']} passes with for: {changed}"
            assert f"alertname: {rule['alert']}," in done.stdout + done.stderr


def test_rules_are_the_documented_alerts_and_series() -> None:
    """The alerts are the ones listed (each with a severity, a summary and a description,
    and a ``for:`` of a minute or more); the recording rules give kafka_exporter's names,
    each from the exporter's series; the docs name every alert."""
    alerts = {r["alert"]: r for r in rules() if "alert" in r}
    assert set(alerts) == ALERTS
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert set(rule["annotations"]) == {"summary", "description"}, name
        assert seconds(rule["for"]) >= 60, name
    records = {r["record"]: r["expr"] for r in rules() if "record" in r}
    assert set(records) == set(KAFKA_EXPORTER_SERIES)
    for name, expr in records.items():
        assert all(n.startswith("kafka07_") for n in metric_names(expr)), (name, expr)
    page = (Path(__file__).parent.parent / "docs" / "operations" / "monitoring.md").read_text()
    for name in [*ALERTS, *KAFKA_EXPORTER_SERIES]:
        assert f"`{name}`" in page, f"docs/operations/monitoring.md does not name {name}"


def test_dashboard_structure() -> None:
    """The Grafana dashboard: a current schema, a uid, unique panel ids, panels inside a
    24-column grid that do not overlap, every panel and query on the ``datasource``
    variable and on the ``cluster`` one, every query with an expression and a unique
    refId, every ``$variable`` used defined, and panels for what an operator looks at
    first."""
    document = dashboard()
    assert document["schemaVersion"] >= 36
    assert document["uid"]
    assert document["title"]
    variables = {v["name"]: v for v in document["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    source = {"type": "prometheus", "uid": "${datasource}"}
    every = list(panels(document))
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == source, panel["title"]
            assert target["expr"].strip(), panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == source
    # Several clusters in one Prometheus (the exporter's --cluster): every query but the
    # cluster variable's own is on the cluster chosen (all of them, by default).
    assert variables["cluster"]["allValue"] == ".*"
    for query in dashboard_queries(document):
        if query != variables["cluster"]["definition"]:
            assert 'cluster=~"$cluster"' in query, query
    builtin = {"__rate_interval", "__interval", "__range"}
    for query in dashboard_queries(document):
        for used in re.findall(r"\$(\w+)", query):
            assert used in variables or used in builtin, f"${used} undefined in {query}"
    exprs = " ".join(dashboard_queries(document))
    for wanted in (
        "kafka07_group_lag_bytes",
        "kafka07_group_lag_messages",
        "kafka07_group_status",
        "kafka07_group_partition_status",
        "kafka07_group_partitions_unknown",
        "kafka07_broker_up",
        "kafka07_exporter_stale",
        "kafka07_exporter_state_age_seconds",
        "kafka07_exporter_refresh_duration_seconds",
    ):
        assert wanted in metric_names(exprs), f"no panel shows {wanted}"


@pytest.mark.slow  # runs promtool
def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Every query of the dashboard, its variables replaced as Grafana would, is valid
    PromQL: promtool checks them as the expressions of recording rules."""
    fill = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
    recorded = []
    for i, query in enumerate(dashboard_queries(dashboard())):
        values = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
        expr = values.group(1) if values else query
        for variable, value in fill.items():
            expr = expr.replace(variable, value)
        expr = re.sub(r"\$\w+", ".*", expr)
        recorded.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    done = run([promtool, "check", "rules", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr


def names_used() -> dict[str, set[str]]:
    """Every metric name the rules (expressions and annotations) and the dashboard (its
    queries) use, each with where."""
    used: dict[str, set[str]] = {}
    for rule in rules():
        where = rule.get("alert") or rule["record"]
        texts = [rule["expr"], *rule.get("annotations", {}).values()]
        for name in metric_names(" ".join(texts)):
            used.setdefault(name, set()).add(f"rule {where}")
    for query in dashboard_queries(dashboard()):
        for name in metric_names(query):
            used.setdefault(name, set()).add(f"dashboard {DASHBOARD.name}")
    return used


async def test_every_metric_named_is_served_by_a_real_exporter(
    kafka_cluster: Any, zookeeper: str
) -> None:
    """Every ``kafka07_*`` name the rules and the dashboard use is one a real exporter
    serves, with samples (a cluster where each has some: a group with lag and an owner,
    a second group beyond ``max_groups`` for an error count, a scrape before the one
    read); each ``kafka_*`` name is one the rules record; each ``kafka07_bridge_*`` one the
    bridge declares (tests/test_bridge.py scrapes them); ``up`` is Prometheus' own.
    (A name misspelt in a rule would leave its alert silent forever; promtool cannot
    tell.)"""
    used = names_used()
    async with (
        kafka_cluster(2, zookeeper=zookeeper, num_partitions=2),
        Producer(zookeeper=zookeeper) as producer,
        ZooKeeper(zookeeper) as zk,
    ):
        await produce(producer, TOPIC, PARTS, 3, "a")
        for group in ("a-group", "b-left-out"):
            registry = GroupRegistry(zk, group)
            for broker, partition in PARTS:
                await registry.commit(TOPIC, f"{broker}-{partition}", 0)
        await GroupRegistry(zk, "a-group").claim(TOPIC, "0-0", "a-group_host-1-0")
        tracker = LagTracker()
        monitor = ClusterMonitor(
            zookeeper,
            on_refresh=tracker.observe,
            interval_ms=200.0,
            min_interval_ms=50.0,
            max_groups=1,
        )
        server = ExporterServer(monitor, tracker, port=0)
        async with monitor, server:
            for _ in range(3):  # bytes in per second needs two refreshes
                assert await monitor.wait_refreshed(10)
            await produce(producer, TOPIC, PARTS, 1, "b")
            assert await monitor.wait_refreshed(10)
            assert await monitor.wait_refreshed(10)
            await scrape_text(server.url + "/metrics")  # the scrape duration is the previous one's
            text = await scrape_text(server.url + "/metrics")
    served = {
        sample.name for family in text_string_to_metric_families(text) for sample in family.samples
    }
    records = {r["record"] for r in rules() if "record" in r}
    for name, where in sorted(used.items()):
        if name == "up":
            continue
        if name.startswith("kafka07_bridge_") or name == "process_start_time_seconds":
            # The bridge's (`aiokafka07 bridge --metrics-port`): its own test scrapes a
            # real bridge and finds every name it declares, and the process collector's.
            assert name in BRIDGE_METRICS or name.startswith("process_"), (name, where)
            continue
        if name.startswith("kafka_"):
            assert name in records, f"{name} ({', '.join(sorted(where))}) is recorded by no rule"
            continue
        assert name in METRICS, f"{name} ({', '.join(sorted(where))}) is no exporter metric"
        assert name in served, f"{name} ({', '.join(sorted(where))}) has no sample in a scrape"


async def scrape_text(url: str) -> str:
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as response:
        assert response.status == 200
        return await response.text()


@contextlib.asynccontextmanager
async def broker_processes(
    tmp_path: Path, connect: str
) -> AsyncIterator[dict[int, tuple[asyncio.subprocess.Process, BrokerAddress]]]:
    """Brokers 0 and 1, 2 partitions each, in processes of their own (one is SIGSTOPped)."""
    brokers = {}
    try:
        for broker_id in (0, 1):
            brokers[broker_id] = await start_broker_process(
                tmp_path / f"b{broker_id}", broker_id=broker_id, partitions=2, zookeeper=connect
            )
        yield brokers
    finally:
        for process, _ in brokers.values():
            await stop_broker_process(process)


async def log_ends(addresses: list[BrokerAddress]) -> dict[str, int]:
    """The log end of every partition ("b-p") of ``TOPIC`` on the brokers."""
    ends = {}
    for address in addresses:
        assert address.broker_id is not None
        async with SimpleConsumer(address.host, address.port, broker_id=address.broker_id) as c:
            for partition in (0, 1):
                (end,) = await c.offsets_before(TOPIC, partition, LATEST, 1)
                ends[f"{address.broker_id}-{partition}"] = end
    return ends


@contextlib.asynccontextmanager
async def exporter_process(connect: str, log: Path, *options: str) -> AsyncIterator[str]:
    """``aiokafka07 exporter`` as an operator runs it, on a free loopback port; yields its
    ``host:port`` once it says where it serves (30 s at most); Ctrl-C at the end."""
    with open_log(log) as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aiokafka07", "exporter", "--zookeeper", connect,
            "--port", "0", *options,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
        )  # fmt: skip
    try:

        def serving() -> str | None:
            found = re.search(r"serving http://(127\.0\.0\.1:\d+)/metrics", log.read_text())
            assert process.returncode is None, log.read_text()
            return found.group(1) if found else None

        yield await eventually(serving, 30)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()


@pytest.mark.slow  # ZooKeeper, brokers, the exporter and Prometheus as processes
async def test_prometheus_fires_stop_and_unknown_partitions_alerts(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    """End to end, as an operator runs it: ZooKeeper and two broker processes, the
    ``aiokafka07 exporter`` command, and Debian's Prometheus (loopback, its own data
    directory) scraping it every second and evaluating the repository's rules every
    second. A group that committed once, behind the log end, and stopped: its STOP alert
    fires (for it alone: a group at the log end does not). Broker 1 SIGSTOPped: the
    unknown-partitions alert fires for the group with partitions there (not for the one
    without), the broker alert fires, and the stopped group's STOP alert stays.

    The rules are the repository's file with every ``for:`` set to 0s (the alerts'
    durations, minutes, are what the promtool unit tests check, a test each), so this test
    waits seconds: the exporter's STOP needs 2 s without a commit (``--min-stop-ms``), an
    unknown lag the broker probe's 5 s timeout."""
    prometheus, _ = prometheus_binaries(pytestconfig)
    rules_text, changed = with_for_zero(RULES.read_text())
    assert changed == len(ALERTS)
    started = time.monotonic()
    async with (
        own_zookeeper() as zk_server,
        broker_processes(tmp_path, zk_server.connect_string) as brokers,
        Producer(zookeeper=zk_server.connect_string) as producer,
        ZooKeeper(zk_server.connect_string) as zk,
    ):
        connect = zk_server.connect_string
        await produce(producer, TOPIC, PARTS, 3, "a")
        ends = await log_ends([address for _, address in brokers.values()])
        stopped, reader = GroupRegistry(zk, "stopped"), GroupRegistry(zk, "reader")
        for name, end in ends.items():
            if name.startswith("0-"):
                await stopped.commit(TOPIC, name, 0)  # behind, then never again
            await reader.commit(TOPIC, name, end)  # at the log end: OK
        async with (
            exporter_process(
                connect, tmp_path / "exporter.log",
                "--interval-ms", "500", "--window", "2", "--min-stop-ms", "2000",
            ) as target,
            prometheus_server(prometheus, tmp_path / "prometheus", rules_text, [target]) as server,
        ):  # fmt: skip
            stop = await eventually(lambda: server.firing("Kafka07ConsumerGroupStopped"), 60)
            assert [(a["group"], a["topic"], a["severity"]) for a in stop] == [
                ("stopped", TOPIC, "critical")
            ]
            assert await server.firing("Kafka07ConsumerGroupLagUnknown") == []
            assert await server.firing("Kafka07BrokerDown") == []
            fired_stop = time.monotonic() - started
            process, _ = brokers[1]
            await sigstop(process.pid)
            try:
                unknown = await eventually(
                    lambda: server.firing("Kafka07ConsumerGroupLagUnknown"), 60
                )
                fired_unknown = time.monotonic() - started
                assert [(a["group"], a["severity"]) for a in unknown] == [("reader", "warning")]
                down = await eventually(lambda: server.firing("Kafka07BrokerDown"), 30)
                assert [a["broker"] for a in down] == ["1"]
                stop = await server.firing("Kafka07ConsumerGroupStopped")
                assert [a["group"] for a in stop] == ["stopped"]
                samples = await server.api("query", query="kafka07_group_partitions_unknown")
                values = {s["metric"]["group"]: s["value"][1] for s in samples["result"]}
                assert values == {"reader": "2", "stopped": "0"}
            finally:
                process.send_signal(signal.SIGCONT)
    print(
        f"STOP fired {fired_stop:.1f} s after the start; unknown partitions {fired_unknown:.1f} s"
    )
