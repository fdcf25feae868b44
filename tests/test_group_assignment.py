"""The pure part of the group consumer: ids, registration values, filters, and the 0.7.2
range assignment (ZOOKEEPER §3-§4), against the spec's rules and the observed znodes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07.errors import ZooKeeperError
from aiokafka07.group import (
    InvalidTopicFilterError,
    Subscription,
    TopicFilter,
    assign,
    assign_group,
    consumer_id,
    group_threads,
    normalize_filter,
    partition_names,
    thread_ids,
)

# -- identities ------------------------------------------------------------------------


def test_consumer_and_thread_ids_have_the_0_7_2_shape() -> None:
    cid = consumer_id("group1", hostname="web01", now_ms=1350567891234)
    assert re.fullmatch(r"group1_web01-1350567891234-[0-9a-f]{8}", cid)
    assert consumer_id("g", suffix="test-1") == "g_test-1"
    assert thread_ids("g_c", 3) == ["g_c-0", "g_c-1", "g_c-2"]
    assert consumer_id("g") != consumer_id("g")  # random part


# -- registration values ------------------------------------------------------------


def test_static_registration_is_byte_identical_to_java() -> None:
    subscription = Subscription.of_topics({"topicA": 2, "topicB": 1})
    assert subscription.registration() == '{ "topicA": 2,"topicB": 1 }'
    assert Subscription.of_topics(["t"]).registration() == '{ "t": 1 }'


@pytest.mark.parametrize(
    ("value", "topics", "streams"),
    [
        ('{ "topicA": 2,"topicB": 1 }', {"topicA": 2, "topicB": 1}, None),
        ('{"x":3}', {"x": 3}, None),  # any JSON object with integer values
        ("*1*console-gzip", None, 1),  # observed from the Java console consumer
        ("*4*white1|white2", None, 4),
        ("!1!test.*", None, 1),
    ],
)
def test_registrations_in_every_java_form(
    value: str, topics: dict[str, int] | None, streams: int | None
) -> None:
    subscription = Subscription.parse(value)
    if topics is None or value.startswith("{ "):
        assert subscription.registration() == value  # Java-shaped values round-trip exactly
    if topics is not None:
        assert subscription.topics == topics
    else:
        assert subscription.filter is not None
        assert subscription.streams == streams
        assert subscription.filter.whitelist == value.startswith("*")


@pytest.mark.parametrize(
    "value", ["", None, "{", "[1, 2]", '{"t": "2"}', '{"t": 0}', '{"t": true}', "*x*a", "*1*("]
)
def test_unusable_registrations_are_typed_errors(value: str | None) -> None:
    with pytest.raises(ZooKeeperError):
        Subscription.parse(value)


def test_filter_normalisation_and_matching() -> None:
    assert normalize_filter(' "a, b ,c" ') == "a|b|c"
    assert normalize_filter("'events.*'") == "events.*"
    white = TopicFilter.parse("clicks, views")
    assert white.allows("clicks")
    assert not white.allows("clicks2")  # whole-name match, like String.matches
    assert not white.java_watches_topics  # a plain list: 0.7.2 does not watch (we do)
    black = TopicFilter.parse("test.*", whitelist=False)
    assert black.allows("prod")
    assert not black.allows("test-1")
    assert black.java_watches_topics
    with pytest.raises(InvalidTopicFilterError):
        TopicFilter.parse("a(")
    expanded = Subscription.whitelist("page.*", streams=2).streams_per_topic(["pages", "x"])
    assert expanded == {"pages": 2}


# -- assignment -----------------------------------------------------------------------


def test_partitions_sort_as_strings() -> None:
    assert partition_names({2: 2, 10: 2}) == ["10-0", "10-1", "2-0", "2-1"]
    assert partition_names({0: 12})[:4] == ["0-0", "0-1", "0-10", "0-11"]


def test_spec_example_five_partitions_three_threads() -> None:
    result = assign(["p0", "p1", "p2", "p3", "p4"], ["c-1", "c-0", "c-2"])
    assert result == {"c-0": ["p0", "p1"], "c-1": ["p2", "p3"], "c-2": ["p4"]}


def test_more_threads_than_partitions_leaves_some_idle() -> None:
    result = assign(["0-0", "0-1"], ["a-0", "a-1", "b-0"])
    assert result == {"a-0": ["0-0"], "a-1": ["0-1"], "b-0": []}


def test_thread_ids_sort_as_strings_too() -> None:
    # "g_c-10" < "g_c-2": a consumer with 11 streams interleaves oddly, as in Java.
    threads = thread_ids("g_c", 11)
    assert sorted(threads)[:4] == ["g_c-0", "g_c-1", "g_c-10", "g_c-2"]
    assert partition_names({0: 11})[:4] == ["0-0", "0-1", "0-10", "0-2"]
    result = assign(partition_names({0: 11}), threads)
    assert result["g_c-10"] == ["0-10"]  # third thread, third partition, in string order
    assert result["g_c-2"] == ["0-2"]


CASES = [
    # members: consumer -> {topic: streams}; brokers: topic -> {broker: partitions}
    ({"g_a": {"t": 1}}, {"t": {0: 2, 1: 2}}, {"g_a-0": ["0-0", "0-1", "1-0", "1-1"]}),
    (
        {"g_a": {"t": 1}, "g_b": {"t": 1}},
        {"t": {0: 3}},
        {"g_a-0": ["0-0", "0-1"], "g_b-0": ["0-2"]},
    ),
    (
        {"g_a": {"t": 2}, "g_b": {"t": 1}},
        {"t": {0: 2, 10: 2}},
        {"g_a-0": ["0-0", "0-1"], "g_a-1": ["10-0"], "g_b-0": ["10-1"]},
    ),
    (
        {"g_a": {"t": 1}, "g_b": {"t": 1, "u": 1}},
        {"t": {0: 1}, "u": {0: 2}},
        {"g_a-0": ["0-0"], "g_b-0": [], "g_b-0u": ["0-0", "0-1"]},
    ),
]


@pytest.mark.parametrize(("members", "brokers", "expected"), CASES)
def test_group_assignment_table(
    members: dict[str, dict[str, int]],
    brokers: dict[str, dict[int, int]],
    expected: dict[str, list[str]],
) -> None:
    subscriptions = {c: Subscription.of_topics(t) for c, t in members.items()}
    result = assign_group(subscriptions, brokers)
    flat = {thread: parts for thread, parts in result["t"].items()}
    if "u" in result:  # distinguish the second topic's ranges in the table
        flat.update({f"{thread}u": parts for thread, parts in result["u"].items()})
    assert flat == expected


def test_wildcard_members_expand_against_current_topics() -> None:
    members = {
        "g_java": Subscription.parse("*2*events.*"),
        "g_py": Subscription.of_topics({"events.a": 1}),
    }
    per_topic = group_threads(members, ["events.a", "events.b", "other"])
    assert per_topic == {
        "events.a": ["g_java-0", "g_java-1", "g_py-0"],
        "events.b": ["g_java-0", "g_java-1"],
    }


@given(
    st.dictionaries(st.integers(0, 30), st.integers(1, 12), min_size=1, max_size=5),
    st.lists(st.integers(1, 4), min_size=1, max_size=6),
)
def test_assignment_covers_every_partition_exactly_once(
    brokers: dict[int, int], streams: list[int]
) -> None:
    threads = [t for i, n in enumerate(streams) for t in thread_ids(f"g_c{i}", n)]
    partitions = partition_names(brokers)
    result = assign(partitions, threads)
    owned = [p for parts in result.values() for p in parts]
    assert sorted(owned) == partitions  # no gap, no partition owned twice
    per, extra = divmod(len(partitions), len(threads))
    counts = [len(result[t]) for t in sorted(threads)]
    assert counts == [per + 1] * extra + [per] * (len(threads) - extra)
    for parts in result.values():  # contiguous ranges of the sorted list
        if parts:
            start = partitions.index(parts[0])
            assert partitions[start : start + len(parts)] == parts
