"""``aiokafka07 dump-log`` on a log directory written by the embedded broker, and on
corrupted copies of it: everything decodes, and damage is reported, never fatal."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka07.connection import BrokerConnection
from aiokafka07.testing import KafkaCluster

from .test_cli_common import ok
from .wire import address_of

Items = list[dict[str, Any]]


def json_lines(out: bytes) -> Items:
    return [json.loads(line) for line in out.decode().splitlines()]


def size_of(path: str | Path) -> int:
    return Path(path).stat().st_size


def of_type(items: Items, kind: str) -> Items:
    return [item for item in items if item["type"] == kind]


async def write_log(cluster: KafkaCluster) -> list[bytes]:
    """Plain messages and compressed sets on partition 0 of "d"; the values in log order."""
    values: list[bytes] = []
    async with await BrokerConnection.open(address_of(cluster)) as conn:
        for round_ in range(6):
            plain = [b"plain %d.%d" % (round_, i) for i in range(3)]
            packed = [b"packed %d.%d" % (round_, i) for i in range(4)]
            await conn.produce("d", 0, plain, confirm=True)
            codec = "gzip" if round_ % 2 else "snappy"
            await conn.produce("d", 0, packed, compression=codec, confirm=True)
            values += plain + packed
    return values


async def test_dump_a_log_dir_and_corrupted_copies(
    kafka_cluster: Callable[..., KafkaCluster], tmp_path: Path
) -> None:
    async with kafka_cluster(1, zookeeper=None, log_file_size=200) as cluster:
        values = await write_log(cluster)
        log_dir = cluster.log_root / "broker-0"
        segments = sorted((log_dir / "d-0").glob("*.kafka"))
        assert len(segments) > 2  # small segments: rolled several times

        items = json_lines(await ok("dump-log", str(log_dir), "--json", "--deep", "--payloads"))
        assert of_type(items, "error") == []
        messages = of_type(items, "message")
        plain_or_inner = [m for m in messages if m["codec"] == "none"]
        assert [m["payload"].encode() for m in plain_or_inner] == values
        wrappers = [m for m in messages if "wrapper" not in m and m["codec"] != "none"]
        assert [w["codec"] for w in wrappers] == ["snappy", "gzip"] * 3
        assert all(m["crc_ok"] for m in messages)
        first_inner = next(m for m in messages if "wrapper" in m)
        assert first_inner["wrapper"] == wrappers[0]["offset"]
        assert first_inner["offset"] == wrappers[0]["offset"]  # 0.7.2: the set's start
        per_segment = of_type(items, "segment")
        assert [Path(s["file"]) for s in per_segment] == segments
        assert [s["base_offset"] for s in per_segment] == [int(p.stem) for p in segments]
        for segment in per_segment:
            assert segment["valid_bytes"] == segment["bytes"] == size_of(segment["file"])
            assert segment["bad_crcs"] == segment["trailing_partial_bytes"] == 0
        (summary,) = of_type(items, "summary")
        assert summary["segments"] == len(segments)
        assert summary["messages"] == 6 * 3 + 6  # top-level entries
        assert summary["inner_messages"] == 6 * 4
        assert summary["valid_bytes"] == summary["bytes"] == sum(map(size_of, segments))

        text = (await ok("dump-log", str(log_dir / "d-0"), "--payloads")).decode()
        assert "OFFSET      SIZE  MAGIC  CODEC       CRC         VALID  PAYLOAD" in text
        assert " ok  plain 0.0" in text
        assert "<snappy set of" in text
        assert f"total: {len(segments)} segments, 24 messages," in text

        # A copy with a bad CRC in the middle and a torn write at the end.
        broken = tmp_path / "d-0"
        shutil.copytree(log_dir / "d-0", broken)
        last = sorted(broken.glob("*.kafka"))[-1]
        data = bytearray(last.read_bytes())
        entries = [m for m in messages if "wrapper" not in m and m["offset"] >= int(last.stem)]
        assert len(entries) >= 2
        victim = entries[0]
        data[victim["offset"] - int(last.stem) + 4 + 6] ^= 0xFF  # first payload byte
        data += data[:10]  # the start of an entry, cut off
        last.write_bytes(bytes(data))
        items = json_lines(await ok("dump-log", str(last), "--json"))
        rows = of_type(items, "message")
        assert [r["crc_ok"] for r in rows] == [False] + [True] * (len(rows) - 1)
        assert len(rows) == len(entries)  # decoding goes on after the bad CRC
        (segment,) = of_type(items, "segment")
        assert segment["bad_crcs"] == 1
        assert segment["valid_bytes"] == victim["offset"] - int(last.stem)
        assert segment["trailing_partial_bytes"] == 10
        errors = of_type(items, "error")
        assert len(errors) == 1
        assert errors[0]["error"].startswith("trailing partial entry: declares")
        text = (await ok("dump-log", str(last))).decode()
        assert "BAD" in text
        assert "1 bad CRCs" in text
        assert "10 trailing partial bytes" in text

        # An impossible size: the rest cannot be framed, and is reported as such.
        data[0:4] = (-7).to_bytes(4, "big", signed=True)
        last.write_bytes(bytes(data))
        items = json_lines(await ok("dump-log", str(broken), "--json", "--summary-only"))
        assert of_type(items, "message") == []
        (error,) = of_type(items, "error")
        assert (
            error["error"]
            == f"impossible entry size -7: the {len(data)} bytes from here cannot be decoded"
        )
        assert of_type(items, "segment")[-1]["undecoded_bytes"] == len(data)
