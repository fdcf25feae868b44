"""The 0.7.2 range assignment (ZOOKEEPER §4.4 steps 2, 3 and 6), as pure functions.

Every member of a group computes the same assignment from the same ZooKeeper view, so a
Python member must sort exactly as Java does: partitions as the *strings*
``"<broker>-<partition>"`` (``"0-10" < "0-2"``, ``"10-0" < "2-0"``) and thread ids as
strings; each thread gets a contiguous range, the first ``len(P) % len(C)`` threads one
partition more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .subscription import Subscription, thread_ids

__all__ = ["assign", "assign_group", "group_threads", "partition_names"]


def partition_names(registrations: Mapping[int, int]) -> list[str]:
    """``"b-p"`` for every partition of every broker (broker id → partition count), sorted
    as strings, the order 0.7.2 assigns in."""
    return sorted(f"{broker}-{p}" for broker, count in registrations.items() for p in range(count))


def assign(partitions: Sequence[str], threads: Sequence[str]) -> dict[str, list[str]]:
    """Split the sorted ``partitions`` over the sorted ``threads`` of one topic.

    Returns every thread's range (possibly empty). Inputs are sorted here as strings, so
    callers may pass them in any order.
    """
    ordered_partitions = sorted(partitions)
    ordered_threads = sorted(threads)
    if not ordered_threads:
        return {}
    per, extra = divmod(len(ordered_partitions), len(ordered_threads))
    result: dict[str, list[str]] = {}
    for position, thread in enumerate(ordered_threads):
        start = per * position + min(position, extra)
        count = per + (1 if position < extra else 0)
        result[thread] = ordered_partitions[start : start + count]
    return result


def group_threads(
    members: Mapping[str, Subscription], available_topics: Iterable[str]
) -> dict[str, list[str]]:
    """Topic → the sorted thread ids of every member that consumes it (``consumersPerTopic``)."""
    topics = list(available_topics)
    per_topic: dict[str, list[str]] = {}
    for consumer, subscription in members.items():
        for topic, streams in subscription.streams_per_topic(topics).items():
            per_topic.setdefault(topic, []).extend(thread_ids(consumer, streams))
    return {topic: sorted(threads) for topic, threads in per_topic.items()}


def assign_group(
    members: Mapping[str, Subscription],
    registrations: Mapping[str, Mapping[int, int]],
) -> dict[str, dict[str, list[str]]]:
    """The whole group's assignment: topic → thread id → partition names.

    ``members`` maps consumer ids to their subscriptions; ``registrations`` maps each topic
    to its broker registrations (broker id → partition count), the children of
    ``/brokers/topics/<topic>``. Topics nobody consumes are left out.
    """
    per_topic = group_threads(members, registrations)
    return {
        topic: assign(partition_names(registrations.get(topic, {})), threads)
        for topic, threads in per_topic.items()
    }
