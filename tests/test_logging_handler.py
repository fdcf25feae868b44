"""KafkaHandler against embedded brokers and a real ZooKeeper: records arrive formatted,
from threads and from asyncio code; with Kafka down logging stays prompt, nothing raises
and every record is accounted for (the topic holds exactly the records counted as
delivered); the handler's own records never feed back; close() and interpreter exit
deliver what waits."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from aiokafka07 import InvalidTopicError, KafkaHandler, SimpleConsumer
from aiokafka07.testing import KafkaCluster
from aiokafka07.testing.hostile import SilentBroker
from aiokafka07.znodes import register_broker, register_topic
from aiokafka07.zookeeper import ZooKeeper

from .test_cli_common import unused_port
from .wire import eventually

ROOT = Path(__file__).resolve().parents[1]
#: A logging call must return in far less than any Kafka timeout, even on a loaded machine.
PROMPT = 0.25


async def topic_values(cluster: KafkaCluster, topic: str) -> list[str]:
    """Every message of partition 0 of broker 0, decoded."""
    async with SimpleConsumer("127.0.0.1", cluster.broker(0).port) as consumer:
        return [r.value.decode() async for r in consumer.messages(topic, 0, 0)]


class Collect(logging.Handler):
    """Keeps the messages of the records it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def reports() -> Iterator[Collect]:
    """What the handler reports about itself (its logger, aiokafka07.logging_handler)."""
    collect = Collect()
    logger = logging.getLogger("aiokafka07.logging_handler")
    logger.addHandler(collect)
    saved = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield collect
    finally:
        logger.removeHandler(collect)
        logger.setLevel(saved)


@pytest.fixture
async def app_logger() -> AsyncIterator[Callable[[KafkaHandler], logging.Logger]]:
    """A fresh application logger sending to the given handler only; the handler is
    closed at the end of the test in any case."""
    handlers: list[KafkaHandler] = []
    loggers: list[logging.Logger] = []

    def attach(handler: KafkaHandler) -> logging.Logger:
        logger = logging.getLogger(f"app.test{len(loggers)}.{id(handler)}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
        handlers.append(handler)
        loggers.append(logger)
        return logger

    yield attach
    for logger, handler in zip(loggers, handlers, strict=True):
        logger.removeHandler(handler)
        await handler.aclose()


def timed_calls(calls: Callable[[int], None], count: int) -> float:
    """Run ``calls(i)`` for each i; the longest single call, in seconds."""
    longest = 0.0
    for i in range(count):
        started = time.perf_counter()
        calls(i)
        longest = max(longest, time.perf_counter() - started)
    return longest


async def test_records_arrive_formatted_from_threads_and_asyncio(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
) -> None:
    async with kafka_cluster(1, num_partitions=1) as cluster:
        handler = KafkaHandler("app-logs", zookeeper=zookeeper)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger = app_logger(handler)
        name = logger.name

        def log_from_thread(thread: int) -> None:
            for i in range(50):
                logger.info("record %d of thread %d", i, thread)

        threads = [threading.Thread(target=log_from_thread, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        # Meanwhile, from this event loop: each call is prompt and the loop keeps running.
        longest = timed_calls(lambda i: logger.warning("async record %d", i), 100)
        assert longest < PROMPT
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("it failed")
        await asyncio.to_thread(lambda: [thread.join() for thread in threads])
        assert await handler.aflush(timeout_ms=30_000)
        stats = handler.stats()
        assert (stats.accepted, stats.delivered, stats.dropped, stats.waiting) == (301, 301, 0, 0)
        values = await topic_values(cluster, "app-logs")
        expected = [f"INFO {name}: record {i} of thread {t}" for t in range(4) for i in range(50)]
        expected += [f"WARNING {name}: async record {i}" for i in range(100)]
        failure = next(v for v in values if "it failed" in v)
        assert failure.startswith(f"ERROR {name}: it failed\nTraceback (most recent call last):")
        assert failure.endswith("ValueError: boom")
        assert sorted(v for v in values if v != failure) == sorted(expected)
        # In each thread's order (one partition).
        ordered = [v for v in values if "of thread 2" in v]
        assert ordered == [f"INFO {name}: record {i} of thread 2" for i in range(50)]


async def test_broker_down_drops_are_counted_and_reported_once(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
    reports: Collect,
) -> None:
    async with kafka_cluster(1, num_partitions=1) as cluster:
        handler = KafkaHandler(
            "down-logs",
            zookeeper=zookeeper,
            max_buffered_records=20,
            producer_options={"retries": 1, "retry_backoff_ms": 20},
        )
        logger = app_logger(handler)
        for i in range(10):
            logger.info("before %d", i)
        assert await handler.aflush(timeout_ms=30_000)
        assert handler.stats().delivered == 10
        await cluster.stop_broker(0)
        # 200 records while the broker is down: every call prompt, nothing raises.
        assert timed_calls(lambda i: logger.info("while down %d", i), 200) < PROMPT
        assert await handler.aflush(timeout_ms=30_000)
        stats = handler.stats()
        assert (stats.delivered, stats.dropped, stats.waiting) == (10, 200, 0)
        drops = [m for m in reports.messages if "are being dropped" in m]
        assert len(drops) == 1, reports.messages
        # Back up: the handler recovers; probe until a record gets through.
        await cluster.start_broker(0)
        sent: list[str] = []

        async def delivered_again() -> bool:
            sent.append(f"after {len(sent)}")
            logger.info(sent[-1])
            await handler.aflush(timeout_ms=10_000)
            return handler.stats().delivered > 10

        await eventually(delivered_again, timeout=30)
        stats = handler.stats()
        assert stats.delivered + stats.dropped == 10 + 200 + len(sent)
        values = await topic_values(cluster, "down-logs")
        # Exactly the records counted as delivered, each once.
        assert len(values) == stats.delivered
        assert values[:10] == [f"before {i}" for i in range(10)]
        assert set(values[10:]) <= set(sent)
        assert not any(v.startswith("while down") for v in values)
        await handler.aclose()
        assert len([m for m in reports.messages if "are being dropped" in m]) == 1
        assert reports.messages[-1] == (
            f"{stats.dropped} log records were not sent to Kafka topic down-logs "
            f"({stats.delivered} delivered)"
        )
        # After close: dropped and counted, still nothing raised or reported.
        logger.info("too late")
        assert handler.stats().dropped == stats.dropped + 1


@pytest.mark.parametrize("where", ["zookeeper", "brokers"])
async def test_kafka_unreachable_from_the_start(
    where: str, app_logger: Callable[[KafkaHandler], logging.Logger], reports: Collect
) -> None:
    dead = f"127.0.0.1:{unused_port()}"
    address = {where: dead if where == "zookeeper" else f"0:{dead}"}
    started = time.perf_counter()
    handler = KafkaHandler("nowhere", **address, close_timeout_ms=1000)  # type: ignore[arg-type]
    assert time.perf_counter() - started < PROMPT  # no I/O in the constructor
    logger = app_logger(handler)
    assert timed_calls(lambda i: logger.error("record %d", i), 100) < PROMPT
    # On this event loop's thread flush() does not wait: it says records still wait.
    started = time.perf_counter()
    assert handler.wait_delivered(timeout_ms=10_000) is False
    assert time.perf_counter() - started < PROMPT
    started = time.perf_counter()
    await handler.aclose()  # the close timeout bounds it
    assert time.perf_counter() - started < 1.0 + 3.0
    stats = handler.stats()
    assert (stats.delivered, stats.dropped, stats.waiting) == (0, 100, 0)
    assert reports.messages[-1] == (
        "100 log records were not sent to Kafka topic nowhere (0 delivered)"
    )


async def test_asyncio_loop_keeps_running_while_kafka_is_down(
    app_logger: Callable[[KafkaHandler], logging.Logger],
) -> None:
    handler = KafkaHandler(
        "lag",
        brokers=f"0:127.0.0.1:{unused_port()}",
        max_buffered_records=100,
        close_timeout_ms=2000,
    )
    logger = app_logger(handler)
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    for i in range(2000):
        logger.info("record %d", i)
        if i % 100 == 0:
            await asyncio.sleep(0)
    await handler.aclose()  # waits up to its close timeout, in a worker thread
    stop.set()
    await ticking
    # Closing waits in a worker thread: on the loop it would stop the ticker for its 2 s.
    assert max(gaps) < 1.0, max(gaps)
    stats = handler.stats()
    assert stats.delivered == 0
    assert stats.dropped == 2000


async def test_a_crashing_sender_is_restarted(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def serialize(value: bytes) -> bytes:
        if value == b"boom":
            raise RuntimeError("a value the serializer cannot take")
        return value

    async with kafka_cluster(1, num_partitions=1) as cluster:
        handler = KafkaHandler(
            "crash-logs", zookeeper=zookeeper, producer_options={"value_serializer": serialize}
        )
        logger = app_logger(handler)
        for message in ["a", "boom", "b"]:
            logger.info(message)
        assert await handler.aflush(timeout_ms=30_000)
        stats = handler.stats()
        assert (stats.delivered, stats.dropped) == (2, 1)
        assert await topic_values(cluster, "crash-logs") == ["a", "b"]
        crashes = [r for r in caplog.records if "crashed; restarting" in r.getMessage()]
        assert len(crashes) == 1
        assert crashes[0].exc_info is not None
        assert isinstance(crashes[0].exc_info[1], RuntimeError)


async def test_truncates_and_refuses_bad_configuration(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
) -> None:
    with pytest.raises(ValueError, match="one of them"):
        KafkaHandler("t")
    with pytest.raises(ValueError, match="one of them"):
        KafkaHandler("t", zookeeper=zookeeper, brokers="0:127.0.0.1:9092")
    with pytest.raises(ValueError, match=r"broker\.list entry"):
        KafkaHandler("t", brokers="127.0.0.1")
    with pytest.raises(InvalidTopicError):
        KafkaHandler("bad/topic", zookeeper=zookeeper)
    with pytest.raises(TypeError):
        KafkaHandler("t", zookeeper=zookeeper, producer_options={"no_such_option": 1})
    with pytest.raises(ValueError, match="batch_size"):
        KafkaHandler("t", zookeeper=zookeeper, producer_options={"batch_size": 0})
    with pytest.raises(ValueError, match="cannot set"):
        KafkaHandler("t", zookeeper=zookeeper, producer_options={"cluster": None})
    async with kafka_cluster(1, num_partitions=1) as cluster:
        handler = KafkaHandler("cut", zookeeper=zookeeper, max_record_bytes=50)
        logger = app_logger(handler)
        logger.info("é" * 100)  # 200 bytes of UTF-8
        logger.info("short")
        assert await handler.aflush(timeout_ms=30_000)
        assert handler.stats().truncated == 1
        assert await topic_values(cluster, "cut") == ["é" * 25, "short"]


async def run_script(tmp_path: Path, text: str, *args: str) -> tuple[bytes, bytes]:
    """Run ``text`` as an application script with this checkout importable; it must
    exit 0 within a minute. Its (stdout, stderr)."""
    script = tmp_path / "app.py"
    script.write_text(text)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out, err


SCRIPT = """
import logging, sys, threading
from aiokafka07 import KafkaHandler

zookeeper, topic = sys.argv[1:3]


class Chatty(logging.Formatter):
    def format(self, record):
        logging.getLogger("app.formatter").debug("formatting %s", record.msg)
        return "APP " + super().format(record)


handler = KafkaHandler(topic, zookeeper=zookeeper)
handler.setFormatter(Chatty("%(levelname)s %(name)s %(message)s"))
root = logging.getLogger()
root.setLevel(logging.DEBUG)
root.addHandler(handler)
root.addHandler(logging.StreamHandler(sys.stderr))


def work(thread):
    for i in range(25):
        logging.getLogger(f"app.t{thread}").info("record %d of thread %d", i, thread)


threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("logged", flush=True)
# No close(): logging.shutdown() at exit flushes and closes the handler.
"""


async def test_a_script_at_debug_level_sends_only_its_records_and_exits(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, tmp_path: Path
) -> None:
    """The whole library logs at DEBUG into the root logger the handler sits on, and a
    formatter logs too: only the application's records reach the topic, the others reach
    the other handler, and the interpreter's exit delivers everything and ends."""
    async with kafka_cluster(1, num_partitions=1) as cluster:
        out, err = await run_script(tmp_path, SCRIPT, zookeeper, "script-logs")
        assert out == b"logged\n"
        values = await topic_values(cluster, "script-logs")
        assert sorted(values) == sorted(
            f"APP INFO app.t{t} record {i} of thread {t}" for t in range(4) for i in range(25)
        )
        stderr = err.decode()
        # The handler's producer did log (at DEBUG, in its thread): to the other handler.
        assert "producing to " in stderr
        assert "formatting record %d of thread %d" in stderr


DICT_CONFIG_SCRIPT = """
import logging, logging.config, sys, time

zookeeper, topic = sys.argv[1:3]
logging.config.dictConfig({
    "version": 1,
    "formatters": {"plain": {"format": "%(name)s %(message)s"}},
    "handlers": {
        "kafka": {"class": "aiokafka07.KafkaHandler", "topic": topic,
                  "zookeeper": zookeeper, "formatter": "plain"},
        "console": {"class": "logging.StreamHandler"},
    },
    "root": {"level": "DEBUG", "handlers": ["kafka", "console"]},
})
for i in range(50):
    logging.getLogger("app").info("record %d", i)
started = time.monotonic()
# Replacing the configuration closes the Kafka handler while holding logging's lock,
# which the handler's thread needs to log (the levels just changed): no waiting there.
logging.config.dictConfig({"version": 1, "root": {"level": "INFO", "handlers": []}})
print(f"reconfigured in {time.monotonic() - started:.1f} s", flush=True)
"""


async def test_dict_config_replacing_the_handler_neither_hangs_nor_loses_records(
    kafka_cluster: Callable[..., KafkaCluster], zookeeper: str, tmp_path: Path
) -> None:
    async with kafka_cluster(1, num_partitions=1) as cluster:
        out, _ = await run_script(tmp_path, DICT_CONFIG_SCRIPT, zookeeper, "configured-logs")
        assert out == b"reconfigured in 0.0 s\n"
        # The handler's thread finished in the background, waited for at exit.
        values = await topic_values(cluster, "configured-logs")
        assert values == [f"app record {i}" for i in range(50)]


async def test_close_against_a_broker_that_never_reads_keeps_its_timeout_and_counts(
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
    reports: Collect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker (registered in a real ZooKeeper) that accepts and never reads: close()
    at the default close_timeout_ms (5000) returns within it with the handler's thread
    ended, and the counts add up at once (no record left neither delivered nor dropped).
    A flush that timed out (aflush cancels its wait) does not break the wake-up of the
    others. (At 2000 ms the thread keeps 0.4 s for its own end, which twice in fresh
    clones with both cores kept busy was not enough: close() logged that it did not stop
    in time. At the default it keeps 1 s.)"""
    async with SilentBroker() as broker, ZooKeeper(zookeeper) as zk:
        await register_broker(zk, 0, broker.host, broker.port)
        await register_topic(zk, "deaf-logs", 0, 1)
        handler = KafkaHandler("deaf-logs", zookeeper=zookeeper)
        assert handler.close_timeout_ms == 5000
        logger = app_logger(handler)
        for i in range(20_000):
            logger.info("record %05d %s", i, "x" * 200)
        await eventually(lambda: handler.stats().accepted == 10_000)  # the buffer is full
        assert not await handler.aflush(timeout_ms=200)  # timed out: its future cancelled
        assert not await asyncio.to_thread(handler.wait_delivered, timeout_ms=200)
        with caplog.at_level(logging.ERROR):
            started = time.monotonic()
            await handler.aclose()
            took = time.monotonic() - started
        assert took < 5.0 + 0.2, took  # its timeout, and a little for a loaded machine
        assert not handler._thread.is_alive()
        stats = handler.stats()
        assert stats.waiting == 0
        assert stats.delivered == 0  # nothing was ever confirmed
        assert stats.accepted + 10_000 == stats.delivered + stats.dropped == 20_000
        assert reports.messages[-1] == (
            "20000 log records were not sent to Kafka topic deaf-logs (0 delivered)"
        )
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        await asyncio.sleep(0.5)
        assert handler.stats() == stats  # and they stay so


async def test_a_timed_out_flush_does_not_stop_the_others_being_woken(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker that shows a record only at its next flush (about a second): an aflush()
    that gives up first (its future cancelled) must not keep the flush waiting beside
    it from being woken when the record is delivered, nor make asyncio log an error (the
    callback waking them raised InvalidStateError at the cancelled one)."""
    async with kafka_cluster(
        1,
        num_partitions=1,
        log_flush_interval=10_000,
        log_default_flush_scheduler_interval_ms=1000,
        log_default_flush_interval_ms=1000,
    ):
        handler = KafkaHandler("flushed-logs", zookeeper=zookeeper)
        logger = app_logger(handler)
        logger.info("first")
        assert await handler.aflush(timeout_ms=30_000)
        logger.info("shown at the next flush")
        with caplog.at_level(logging.ERROR):
            hasty = asyncio.ensure_future(handler.aflush(timeout_ms=50))
            await asyncio.sleep(0)  # its waiter comes first
            patient = asyncio.ensure_future(handler.aflush(timeout_ms=30_000))
            assert not await hasty
            assert await asyncio.wait_for(patient, 40)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
        assert handler.stats().delivered == 2


async def test_a_record_the_broker_drops_is_counted_dropped_not_delivered(
    kafka_cluster: Callable[..., KafkaCluster],
    zookeeper: str,
    app_logger: Callable[[KafkaHandler], logging.Logger],
) -> None:
    """A broker whose max.message.size is below the record: it drops the produce and
    keeps the connection open. The handler counts the record dropped, never delivered."""
    async with kafka_cluster(1, num_partitions=1, max_message_size=1000) as cluster:
        handler = KafkaHandler(
            "small-logs", zookeeper=zookeeper, producer_options={"request_timeout_ms": 2000}
        )
        logger = app_logger(handler)
        logger.info("short")
        assert await handler.aflush(timeout_ms=30_000)
        logger.info("long %s", "x" * 5000)
        assert await handler.aflush(timeout_ms=30_000)
        stats = handler.stats()
        assert (stats.accepted, stats.delivered, stats.dropped, stats.waiting) == (2, 1, 1, 0)
        assert await topic_values(cluster, "small-logs") == ["short"]
