"""Lag status of every group the exporter sees: a :class:`~aiokafka07.monitor.lag.LagWindow`
per group partition, fed from each refresh of the cluster state.

:meth:`LagTracker.observe` is the monitor's ``on_refresh``: every group partition with a
committed offset and a known log end becomes an
:class:`~aiokafka07.monitor.lag.OffsetSample` (its ``at_ms`` is the offset znode's mtime,
so a rewrite of the same offset counts as a commit, as Burrow counts them). Windows of
partitions or groups that left the state are dropped. :meth:`LagTracker.evaluate` judges
them at a given time, and a group's status is the worst of its partitions'.

A partition whose lag cannot be known now (its broker does not answer, its offset znode
holds no offset: :attr:`~aiokafka07.monitor.cluster_state.GroupPartitionState.unknown`)
is ERR with that reason, never judged on what was seen before the outage, and its group's
total lag is unknown (``null``), not the sum of the others.

:func:`judge_partition` (one partition's verdict) and :func:`group_document` (a group's status as
JSON) are the one evaluator and the one shape: the exporter (``/status``, the metrics)
and ``aiokafka07 groups status`` both use them, with the same defaults
(:data:`~aiokafka07.monitor.lag.DEFAULT_COMMITS`,
:data:`~aiokafka07.monitor.lag.DEFAULT_MIN_STOP_MS`), so both say the same of the same
commits at the same time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..records import TopicPartition
from .cluster_state import ClusterMonitor, ClusterState, GroupPartitionState, GroupState
from .lag import (
    DEFAULT_COMMITS,
    DEFAULT_MIN_STOP_MS,
    LagStatus,
    LagWindow,
    OffsetSample,
    PartitionLag,
    worst,
)

__all__ = ["LagTracker", "group_document", "judge_partition"]


def judge_partition(p: GroupPartitionState, window: LagWindow | None, now_ms: int) -> PartitionLag:
    """``p``'s verdict at ``now_ms``: ERR while its lag is unknown (never judged on what
    was seen before), else its window's (:meth:`LagWindow.evaluate`); OK with the reason
    when nothing was committed or its window has no sample yet."""
    if p.unknown is not None:
        return PartitionLag(LagStatus.ERR, None, f"lag unknown: {p.unknown}")
    if window is not None and len(window):
        return window.evaluate(now_ms)
    if p.committed is None:
        return PartitionLag(LagStatus.OK, None, "no committed offset")
    return PartitionLag(LagStatus.OK, None, "log end not read yet")


def group_document(
    group: GroupState, verdicts: Mapping[TopicPartition, PartitionLag]
) -> dict[str, Any]:
    """One group's status as JSON, the same from ``/status`` and ``groups status
    --json``: the worst status and the first reason for it, live members, total lag in
    bytes and in messages (null while any partition's is unknown: ``partial``; the
    messages' method ``exact`` only when every partition's count is), and each
    partition with its verdict."""
    messages = group.lag_messages()
    partitions = []
    for p in group.partitions:
        verdict = verdicts[p.tp]
        partitions.append(
            {
                "topic": p.tp.topic,
                "broker_id": p.tp.broker_id,
                "partition": p.tp.partition,
                "status": verdict.status.name,
                "committed": p.committed,
                "log_end": p.log_end,
                "lag": p.lag,
                "lag_messages": p.lag_messages,
                "lag_messages_method": p.lag_messages_method,
                "owner": p.owner,
                "reason": verdict.reason,
                "unknown": p.unknown,
            }
        )
    status = worst(v.status for v in verdicts.values())
    reasons = [v.reason for v in verdicts.values() if v.status is status]
    return {
        "group": group.group,
        "status": status.name,
        "reason": reasons[0] if reasons and status is not LagStatus.OK else "",
        "members": group.members,
        "total_lag": group.total_lag,
        "total_lag_messages": None if messages is None else messages.messages,
        "total_lag_messages_method": None if messages is None else messages.method,
        "partial": group.unknown > 0,
        "unknown_partitions": group.unknown,
        "partitions": partitions,
    }


class LagTracker:
    """Lag windows of ``commits`` commits per group partition (see
    :mod:`aiokafka07.monitor.lag` for the rules; ``min_stop_ms`` is its minimum STOP
    time)."""

    def __init__(
        self, *, commits: int = DEFAULT_COMMITS, min_stop_ms: int = DEFAULT_MIN_STOP_MS
    ) -> None:
        LagWindow(commits=commits, min_stop_ms=min_stop_ms)  # checks both now
        self.commits = commits
        self.min_stop_ms = min_stop_ms
        self._windows: dict[tuple[str, TopicPartition], LagWindow] = {}

    def observe(self, state: ClusterState) -> None:
        """Feed every group partition of ``state``; forget those no longer in it."""
        seen = set()
        for group in state.groups:
            for p in group.partitions:
                key = (group.group, p.tp)
                seen.add(key)
                if p.committed is None or p.log_end is None or p.committed_at_ms is None:
                    continue
                window = self._windows.get(key)
                if window is None:
                    window = LagWindow(commits=self.commits, min_stop_ms=self.min_stop_ms)
                    self._windows[key] = window
                window.observe(OffsetSample(p.committed, p.log_end, p.log_start, p.committed_at_ms))
        for key in set(self._windows) - seen:
            del self._windows[key]

    def evaluate(
        self, group: GroupState, now_ms: int | None = None
    ) -> dict[TopicPartition, PartitionLag]:
        """The verdict on each of ``group``'s partitions at ``now_ms`` (default: now)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return {
            p.tp: judge_partition(p, self._windows.get((group.group, p.tp)), now)
            for p in group.partitions
        }

    def group_document(
        self,
        group: GroupState,
        now_ms: int | None = None,
        verdicts: Mapping[TopicPartition, PartitionLag] | None = None,
    ) -> dict[str, Any]:
        """:func:`group_document` of ``group``, judged at ``now_ms`` (default: now)
        unless ``verdicts`` are given (the exporter's server judges once per refresh)."""
        if verdicts is None:
            verdicts = self.evaluate(group, now_ms)
        return group_document(group, verdicts)

    def status(self, monitor: ClusterMonitor) -> dict[str, Any]:
        """Every group's document, with whether the state is stale and how old it is."""
        state = monitor.state
        now_ms = int(time.time() * 1000)
        return {
            "stale": monitor.is_stale,
            "refreshed_at": state.refreshed_at,
            "groups": [self.group_document(g, now_ms) for g in state.groups],
        }

    def group_status(self, monitor: ClusterMonitor, group: str) -> dict[str, Any] | None:
        """``group``'s document (with the stale flag), or None when it is not in the state."""
        for g in monitor.state.groups:
            if g.group == group:
                return {"stale": monitor.is_stale, **self.group_document(g)}
        return None
