"""Replay every captured exchange with a real 0.7.2 broker against the embedded broker:
same response bytes, same connection outcome, same follow-up offsets (timestamps and
random choices aside). The cases run in capture order because each builds on the log
the previous ones left."""

from __future__ import annotations

import random
import re
import struct
import time
from typing import Any

from aiokafka07.protocol import (
    FrameSplitter,
    decode_fetch_response,
    decode_message_set,
    encode_produce_request,
)

from .samples import CASES
from .wire import RawConnection, eventually

FOLLOW_UP = re.compile(r"follow-up offsets request answered ([0-9a-f]+)")

# Cases sent on the connection of the case before them (the capture pipelined them).
SAME_CONNECTION = {"a2", "f5b", "f5c", "f5d", "f5e", "f5f"}
# Produces whose effect the capture observed before the broker's periodic flush.
UNFLUSHED = {"a", "f5a"}
# Cases the capture ran after waiting for that flush.
FLUSH_FIRST = {"b", "f5d"}


def captured_set(key: str) -> bytes:
    """The complete entries of a captured FETCH response (used to seed the Java data)."""
    case = next(c for c in CASES if c["key"] == key)
    (frame,) = FrameSplitter().feed(bytes.fromhex(case["response_hex"]))
    data = bytes(decode_fetch_response(frame).message_set)
    return data[: decode_message_set(data, shallow=True).valid_bytes]


def expected_response(case: dict[str, Any]) -> bytes:
    expected = bytes.fromhex(case["response_hex"])
    if case["key"] == "m2":
        # The capture cut the Java producer's third snappy wrapper at 4096 bytes; only the
        # two complete wrappers can be seeded, so the fetch returns exactly those.
        data = captured_set("m2")
        return struct.pack(">ih", 2 + len(data), 0) + data
    return expected


def with_current_time(request: bytes) -> bytes:
    """An OFFSETS request for 'now' carries the capture's clock; ask for our now (a
    millisecond back, so it is strictly before the broker's clock, as it was there)."""
    return request[:-12] + struct.pack(">q", int(time.time() * 1000) - 1) + request[-4:]


async def test_every_capture_replays_identically(kafka_cluster: Any) -> None:
    cluster = kafka_cluster(
        1,
        num_partitions=2,
        log_flush_interval=10000,
        log_default_flush_scheduler_interval_ms=3_600_000,  # flushes only when told
    )
    async with cluster:
        broker = cluster.broker(0)
        # The broker's pick for partition -1 in case i3 was partition 0 in the capture.
        broker.rng = random.Random(1)
        seed = await RawConnection.open(broker.host, broker.port)
        for topic, key in (("console-gzip", "m1"), ("console-snappy", "m2")):
            await seed.send(encode_produce_request(topic, 0, captured_set(key)))
        assert (await seed.latest("console-gzip"))[-8:] == struct.pack(">q", 0)
        await broker.flush()
        await seed.close()

        conn: RawConnection | None = None
        for case in CASES:
            key = case["key"]
            if key not in SAME_CONNECTION or conn is None:
                if conn is not None:
                    await conn.close()
                conn = await RawConnection.open(broker.host, broker.port)
            if key in FLUSH_FIRST:
                await broker.flush()
            request = bytes.fromhex(case["request_hex"])
            if key == "c4":
                request = with_current_time(request)
            handled = broker.requests_handled
            await conn.send(request)

            status = case["recv_status"]
            after = case["connection_after"]
            if case["response_hex"] is not None:
                got = await conn.frame()
                assert got == expected_response(case), key
            elif status == "eof":
                assert await conn.closed_by_peer(), f"{key}: broker kept the connection open"
            elif key not in UNFLUSHED:
                # The capture waited a second for the produce to be handled and flushed.
                await eventually(lambda n=handled: broker.requests_handled > n)
                await broker.flush()

            if after.startswith("closed"):
                if status != "eof":
                    assert await conn.closed_by_peer(), f"{key}: broker kept the connection open"
                await conn.close()
                conn = None
                continue
            follow_up = FOLLOW_UP.search(after)
            if follow_up:
                assert (await conn.latest()).hex() == follow_up.group(1), key
            else:
                assert not await conn.closed_by_peer(timeout=0.05), key
        if conn is not None:
            await conn.close()
