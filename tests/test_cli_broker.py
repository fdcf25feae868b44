"""``python -m aiokafka07 broker`` as a user runs it: a real process, real signals."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from aiokafka07.protocol import encode_message_set, encode_produce_request
from aiokafka07.testing import KafkaCluster
from aiokafka07.zookeeper import ZooKeeper

from .test_broker import fetch_values
from .wire import RawConnection

LISTENING = re.compile(rb"broker (\d+) listening on ([\d.]+):(\d+)")


async def start(*args: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiokafka07",
        "broker",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    match = LISTENING.search(line)
    assert match, line
    return proc, int(match.group(3))


async def finish(proc: asyncio.subprocess.Process, sig: int) -> tuple[int, str, str]:
    proc.send_signal(sig)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_standalone_broker_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc, port = await start("--no-zookeeper", "--port", "0", "--log-dir", str(tmp_path))
    conn = await RawConnection.open("127.0.0.1", port)
    await conn.send(encode_produce_request("cli", 0, encode_message_set([b"hello"])))
    assert await fetch_values(conn, "cli", 0) == []  # 0.7.2 default: visible after a flush
    await conn.close()
    code, out, err = await finish(proc, signal.SIGTERM)
    assert code == 0, err
    assert "broker 0 stopped" in err  # once, logged: not also printed
    assert "stopped" not in out
    assert "Traceback" not in err
    # The clean stop flushed: the message is on disk and served after a restart.
    proc, port = await start("--no-zookeeper", "--port", "0", "--log-dir", str(tmp_path))
    conn = await RawConnection.open("127.0.0.1", port)
    assert await fetch_values(conn, "cli", 0) == [b"hello"]
    await conn.close()
    assert (await finish(proc, signal.SIGINT))[0] == 0


async def test_broker_registers_in_zookeeper(tmp_path: Path, zookeeper: str) -> None:
    proc, port = await start(
        "--zookeeper", zookeeper, "--broker-id", "3", "--port", "0", "--log-dir", str(tmp_path),
        "--set", "num.partitions=4",
    )  # fmt: skip
    async with ZooKeeper(zookeeper) as zk:
        value = await zk.get_data("/brokers/ids/3")
        assert value is not None
        assert value.endswith(f":127.0.0.1:{port}")
        code, _, err = await finish(proc, signal.SIGINT)
        assert code == 0, err
        assert not await zk.exists("/brokers/ids/3")


async def run_failing(*args: str, status: int = 1) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiokafka07", "broker", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == status
    text = err.decode()
    assert "Traceback" not in text
    # A broker that did not start did not crash either: the error line says what happened.
    assert "crashed" not in text
    assert text.splitlines()[-1].startswith("aiokafka07 broker: error: ")
    return text


async def test_bad_arguments_give_one_clear_error(tmp_path: Path) -> None:
    assert "--log-dir (log.dir) is required" in await run_failing("--no-zookeeper", status=2)
    assert "--zookeeper (zk.connect) is required" in await run_failing(
        "--log-dir", str(tmp_path), status=2
    )
    assert "unknown broker config key 'no.such.key'" in await run_failing(
        "--no-zookeeper", "--log-dir", str(tmp_path), "--set", "no.such.key=1"
    )
    assert "cannot open a ZooKeeper session at 127.0.0.1:1" in await run_failing(
        "--zookeeper", "127.0.0.1:1", "--log-dir", str(tmp_path),
        "--set", "zk.connectiontimeout.ms=500",
    )  # fmt: skip


async def test_a_port_in_use_is_one_error_line(tmp_path: Path) -> None:
    proc, port = await start("--no-zookeeper", "--port", "0", "--log-dir", str(tmp_path / "a"))
    try:
        text = await run_failing(
            "--no-zookeeper", "--port", str(port), "--log-dir", str(tmp_path / "b")
        )
        assert "address already in use" in text
    finally:
        await finish(proc, signal.SIGTERM)


async def test_a_taken_broker_id_names_its_holder_and_what_to_do(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, tmp_path: Path
) -> None:
    async with kafka_cluster(1) as cluster:
        holder = cluster.broker(0)
        text = await run_failing(
            "--zookeeper", zookeeper, "--broker-id", "0", "--port", "0", "--log-dir",
            str(tmp_path),
        )  # fmt: skip
    line = text.splitlines()[-1]
    assert line.startswith(
        "aiokafka07 broker: error: broker id 0 is taken: /brokers/ids/0 is the registration "
        f"of a broker at {holder.host}:{holder.port}. "
    ), line
    assert "If that broker is running, stop it or give this one another id" in line
    assert "--broker-id" in line
    assert (
        "if its process died, ZooKeeper removes the registration once its session expires" in line
    )


def test_keys_a_0_7_2_broker_accepts_without_reading_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from aiokafka07.broker import BrokerConfig

    config = BrokerConfig.from_properties(
        {
            "brokerid": "3",
            "log.dir": str(tmp_path),
            "enable.zookeeper": "false",
            "zk.synctime.ms": "2000",
            "mirror.topics.whitelist": "a.*",
        }
    )
    assert config.broker_id == 3
    assert "ignoring zk.synctime.ms=2000" in caplog.text
    assert "ignoring mirror.topics.whitelist=a.*" in caplog.text
    with pytest.raises(ValueError, match=r"unknown broker config key 'log\.flush\.intervall'"):
        BrokerConfig.from_properties({"brokerid": "0", "log.flush.intervall": "1"})
