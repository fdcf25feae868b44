"""Watching a 0.7 cluster: consumer-lag status (:mod:`aiokafka07.monitor.lag`)."""

from __future__ import annotations

from .lag import LagStatus, LagWindow, OffsetSample, PartitionLag, worst

__all__ = ["LagStatus", "LagWindow", "OffsetSample", "PartitionLag", "worst"]
