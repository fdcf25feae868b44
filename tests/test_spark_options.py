"""The ``kafka07`` source's option rules and range arithmetic (no Spark needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow")

import itertools

from aiokafka07.protocol import EARLIEST, LATEST, Compression
from aiokafka07.spark.options import OptionError, ReadOptions, WriteOptions
from aiokafka07.spark.planning import split_range
from aiokafka07.spark.stream import allot

ZK = {"zookeeper": "127.0.0.1:2181/kafka"}


def read(streaming: bool = False, **options: str) -> ReadOptions:
    return ReadOptions.parse(options, streaming=streaming)


def test_defaults_and_case_insensitive_names() -> None:
    o = read(ZOOKEEPER="127.0.0.1:2181", Topic="events", MAXBYTESPERPARTITION="1000")
    assert o.topics == ["events"]
    assert o.starting.kind == "earliest"
    assert o.ending.kind == "latest"
    assert o.max_bytes_per_partition == 1000
    assert o.fail_on_data_loss is True
    assert read(True, topics="b, a,b", **ZK).topics == ["a", "b"]
    assert read(True, topic="a", **ZK).starting.kind == "latest"  # streams start at the end


def test_offsets_json_short_and_nested_forms() -> None:
    o = read(topic="t", startingOffsets='{"0-1": 40, "1-0": -2}', **ZK)
    assert o.starting.for_partition("t", "0-1") == 40
    assert o.starting.for_partition("t", "1-0") == EARLIEST
    assert o.starting.for_partition("t", "2-0") == EARLIEST  # unnamed: the default
    o = read(topics="a,b", endingOffsets='{"a": {"0-0": 80}}', **ZK)
    assert o.ending.for_partition("a", "0-0") == 80
    assert o.ending.for_partition("b", "0-0") == LATEST


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "t"}, "'zookeeper'"),
        ({"topic": "t", "brokers": "0:127.0.0.1:1", **ZK}, "'zookeeper'"),
        (ZK, "'topic'"),
        ({"topic": "t", "topics": "u", **ZK}, "'topicPattern'"),
        ({"topic": "t", "colour": "blue", **ZK}, "'colour'"),
        ({"topic": "t", "startingOffsets": "{nope", **ZK}, "'startingOffsets'"),
        ({"topic": "t", "startingOffsets": '{"0-0": "x"}', **ZK}, "'startingOffsets'"),
        ({"topic": "t", "startingOffsets": '{"zero": 1}', **ZK}, "'startingOffsets'"),
        ({"topics": "a,b", "startingOffsets": '{"0-0": 1}', **ZK}, "'startingOffsets'"),
        ({"topic": "t", "startingOffsets": '{"u": {"0-0": 1}}', **ZK}, "'startingOffsets'"),
        ({"topic": "t", "endingOffsets": "earliest", **ZK}, "'endingOffsets'"),
        ({"topic": "t", "maxBytesPerPartition": "lots", **ZK}, "'maxBytesPerPartition'"),
        ({"topic": "t", "maxBytesPerPartition": "0", **ZK}, "'maxBytesPerPartition'"),
        ({"topic": "t", "failOnDataLoss": "maybe", **ZK}, "'failOnDataLoss'"),
        ({"topic": "t", "group": "g", **ZK}, "'group'"),  # batch reads have no commit
        ({"topic": "t", "maxBytesPerTrigger": "10", **ZK}, "'maxBytesPerTrigger'"),
        ({"topic": "bad/name", **ZK}, "'topic'"),
        ({"topicPattern": "(", **ZK}, "'topicPattern'"),
        ({"topicPattern": "a.*", "brokers": "0:127.0.0.1:9092"}, "'topicPattern'"),
        ({"topic": "t", "brokers": "0:127.0.0.1:9092"}, "'partitionsPerBroker'"),
        ({"topic": "t", "brokers": "zero:127.0.0.1:9092"}, "'brokers'"),
        ({"topic": "t", "zookeeper": "127.0.0.1:x"}, "'zookeeper'"),
    ],
)
def test_bad_read_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        read(**options)


def test_spark_kafka_subscriptions() -> None:
    assert read(subscribe="b,a", **ZK).topics == ["a", "b"]
    o = read(subscribePattern="clicks-.*", **ZK)
    assert (o.topics, o.pattern, o.subscription) == (None, "clicks-.*", "subscribePattern")
    o = read(assign='{"clicks": ["0-1", "1-0"], "views": ["0-0"]}', **ZK)
    assert o.topics == ["clicks", "views"]
    assert o.assigned == {"clicks": frozenset({"0-1", "1-0"}), "views": frozenset({"0-0"})}
    # Static brokers: assign says which partitions there are.
    o = read(assign='{"t": ["1-3"]}', brokers="1:127.0.0.1:9092")
    assert o.partitions_per_broker is None


def test_starting_timestamps() -> None:
    o = read(topic="t", startingTimestamp="1700000000000", **ZK)
    assert (o.starting.kind, o.starting.option) == ("timestamp", "startingTimestamp")
    assert o.starting.for_partition("t", "3-1") == 1700000000000
    o = read(True, topic="t", startingOffsetsByTimestamp='{"0-1": 1700000000000}', **ZK)
    assert o.starting.kind == "timestamp"
    assert o.starting.for_partition("t", "0-1") == 1700000000000
    assert o.starting.for_partition("t", "0-0") == LATEST  # a stream's default


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"assign": "[1, 2]", **ZK}, "'assign'"),
        ({"assign": '{"t": [0, 1]}', **ZK}, "'<broker>-<partition>'"),
        ({"assign": '{"t": []}', **ZK}, "'assign'"),
        ({"assign": '{"bad/name": ["0-0"]}', **ZK}, "'assign'"),
        ({"assign": '{"t": ["2-0"]}', "brokers": "0:127.0.0.1:1"}, "'brokers' does not list"),
        (
            {"assign": '{"t": ["0-0"]}', "startingOffsets": '{"0-1": 5}', **ZK},
            "names t/0-1, which 'assign' does not list",
        ),
        ({"topic": "t", "subscribe": "u", **ZK}, "'subscribe'"),
        ({"subscribePattern": "(", **ZK}, "'subscribePattern'"),
        (
            {"topic": "t", "startingTimestamp": "5", "startingOffsets": "earliest", **ZK},
            "at most one",
        ),
        ({"topic": "t", "startingTimestamp": "soon", **ZK}, "'startingTimestamp'"),
        ({"topic": "t", "startingOffsetsByTimestamp": "earliest", **ZK}, "JSON"),
        ({"topic": "t", "maxMessageSize": "0", **ZK}, "'maxMessageSize'"),
        ({"topic": "t", "maxMessageSize": str(1 << 30), **ZK}, "'maxMessageSize' must be at most"),
    ],
)
def test_bad_subscriptions_and_times_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        read(**options)


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("kafka.bootstrap.servers", "'zookeeper'"),
        ("kafka.security.protocol", "'kafka.\\*' options configure Spark's Kafka"),
        ("maxOffsetsPerTrigger", "'maxBytesPerTrigger'"),
        ("minPartitions", "'maxBytesPerPartition'"),
        ("endingTimestamp", "'endingOffsets'"),
        ("groupIdPrefix", "'group'"),
        ("includeHeaders", "no headers"),
    ],
)
def test_spark_kafka_options_without_a_07_meaning_name_what_to_use(option: str, named: str) -> None:
    with pytest.raises(OptionError, match=f"option {option.lower()!r} of Spark's Kafka source"):
        read(topic="t", **{option: "x"}, **ZK)
    with pytest.raises(OptionError, match=named):
        read(topic="t", **{option: "x"}, **ZK)


def test_load_refuses_only_what_neither_a_batch_nor_a_stream_accepts() -> None:
    ReadOptions.check({"topic": "t", "group": "g", **ZK})  # a stream's option
    ReadOptions.check({"topic": "t", "endingOffsets": "latest", **ZK})  # a batch's
    with pytest.raises(OptionError, match="'topic'"):
        ReadOptions.check(ZK)
    with pytest.raises(OptionError, match=r"as a batch read: .*'group'.*as a streaming read: "):
        ReadOptions.check({"topic": "t", "group": "g", "endingOffsets": "latest", **ZK})


def test_stream_only_and_batch_only_options() -> None:
    assert read(True, topic="t", group="g", maxBytesPerTrigger="100", **ZK).group == "g"
    with pytest.raises(OptionError, match="'endingOffsets'"):
        read(True, topic="t", endingOffsets="latest", **ZK)
    with pytest.raises(OptionError, match="'group'"):
        read(True, topic="t", group="g", brokers="0:127.0.0.1:1", partitionsPerBroker="1")
    assert read(topic="t", filterPushdown="true", **ZK).filter_pushdown
    with pytest.raises(OptionError, match="'filterPushdown' applies to batch reads only"):
        read(True, topic="t", filterPushdown="true", **ZK)


def test_write_options() -> None:
    o = WriteOptions.parse({"brokers": "0:127.0.0.1:9092", "topic": "t", "compression": "gzip"})
    assert (o.topic, o.compression, o.confirm) == ("t", Compression.GZIP, True)
    assert WriteOptions.parse({**ZK, "confirm": "false"}).confirm is False
    with pytest.raises(OptionError, match="'compression'"):
        WriteOptions.parse({**ZK, "compression": "lz4"})
    with pytest.raises(OptionError, match="'startingOffsets'"):
        WriteOptions.parse({**ZK, "topic": "t", "startingOffsets": "earliest"})
    with pytest.raises(OptionError, match="'assign' applies to reads only"):
        WriteOptions.parse({**ZK, "assign": '{"t": ["0-0"]}'})


BOUNDARIES = [0, 100, 250, 260, 900, 1000]


@pytest.mark.parametrize(
    ("start", "end", "limit", "expected"),
    [
        (0, 1000, None, [(0, 1000)]),
        (0, 1000, 300, [(0, 260), (260, 900), (900, 1000)]),
        (0, 1000, 100, [(0, 100), (100, 250), (250, 260), (260, 900), (900, 1000)]),
        (0, 1000, 5000, [(0, 1000)]),
        (100, 900, 10, [(100, 250), (250, 260), (260, 900)]),
        (300, 800, 100, [(300, 800)]),  # no boundary inside: stays whole
        (5, 5, 10, []),
    ],
)
def test_split_range_cuts_only_at_boundaries(
    start: int, end: int, limit: int | None, expected: list[tuple[int, int]]
) -> None:
    ranges = split_range(start, end, BOUNDARIES, limit)
    assert ranges == expected
    # Contiguous, covering exactly [start, end).
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_allot_shares_a_budget_evenly_and_passes_on_what_is_not_needed() -> None:
    assert allot({"a": 10, "b": 1000, "c": 1000}, 610) == {"a": 10, "b": 300, "c": 300}
    assert allot({"a": 10, "b": 20}, 1000) == {"a": 10, "b": 20}
    shares = allot({"a": 500, "b": 500, "c": 500}, 100)
    assert sum(shares.values()) <= 100
    assert set(shares.values()) == {33}


def test_write_compression_level_is_gzips() -> None:
    gzip = {**ZK, "topic": "t", "compression": "gzip"}
    assert WriteOptions.parse(gzip).compression_level is None
    assert WriteOptions.parse({**gzip, "compressionLevel": "1"}).compression_level == 1
    for bad in ("10", "-1"):
        with pytest.raises(OptionError, match="'compressionLevel'"):
            WriteOptions.parse({**gzip, "compressionLevel": bad})
    with pytest.raises(OptionError, match=r"'compressionLevel' is gzip's.*snappy"):
        WriteOptions.parse({**ZK, "compression": "snappy", "compressionLevel": "1"})
