"""Who a group member is and what it consumes, in 0.7.2's ZooKeeper forms (ZOOKEEPER §3).

* Consumer id ``<group>_<host>-<ms>-<8 hex>`` and thread ids ``<consumer id>-<n>``; owner
  nodes and the rebalance order are in terms of thread ids.
* The registration value under ``/consumers/<group>/ids/<consumer id>``: a topic map
  ``{ "t": 2,"u": 1 }`` (exactly the Java shape) or a filter ``*n*regex`` (whitelist) /
  ``!n!regex`` (blacklist), with the regex normalised as Java normalises it.

Pure values and functions: reading other members' registrations in any 0.7.2 form is what
lets Java and Python consumers share one group.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import KafkaError, ZooKeeperError

__all__ = [
    "InvalidTopicFilterError",
    "Subscription",
    "TopicFilter",
    "consumer_id",
    "normalize_filter",
    "thread_ids",
]

_WHITELIST = re.compile(r"\*(\d+)\*(.*)", re.DOTALL)
_BLACKLIST = re.compile(r"!(\d+)!(.*)", re.DOTALL)
_PLAIN_LIST = re.compile(r"[A-Za-z0-9\-|]+")


class InvalidTopicFilterError(KafkaError, ValueError):
    """A topic filter that does not compile as a regular expression."""


def consumer_id(
    group: str,
    *,
    suffix: str | None = None,
    hostname: str | None = None,
    now_ms: int | None = None,
) -> str:
    """``<group>_<host>-<ms>-<8 hex>`` as 0.7.2 builds it (``suffix`` = the ``consumerid``
    config, meant for tests, replaces everything after the underscore)."""
    if suffix is None:
        host = hostname or socket.gethostname()
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        # Java: Long.toHexString(uuid.getMostSignificantBits()).substring(0, 8)
        suffix = f"{host}-{ms}-{format(uuid.uuid4().int >> 64, 'x')[:8]}"
    return f"{group}_{suffix}"


def thread_ids(consumer: str, streams: int) -> list[str]:
    """The consumer's thread ids for a topic with ``streams`` streams."""
    return [f"{consumer}-{i}" for i in range(streams)]


def normalize_filter(text: str) -> str:
    """Java's normalisation: trim, ``,`` → ``|``, drop spaces, strip surrounding quotes."""
    regex = text.strip().replace(",", "|").replace(" ", "")
    return regex.lstrip("\"'").rstrip("\"'")


@dataclass(frozen=True)
class TopicFilter:
    """A whitelist (topics that match) or blacklist (topics that do not), matched against
    whole topic names like Java's ``String.matches``."""

    regex: str
    whitelist: bool = True
    _compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            compiled = re.compile(self.regex)
        except re.error as exc:
            raise InvalidTopicFilterError(
                f"topic filter {self.regex!r} is not a regex: {exc}"
            ) from None
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def parse(cls, text: str, *, whitelist: bool = True) -> TopicFilter:
        """A filter from user text, normalised as 0.7.2 does (``"a, b"`` means a or b)."""
        return cls(normalize_filter(text), whitelist)

    def allows(self, topic: str) -> bool:
        matched = self._compiled.fullmatch(topic) is not None
        return matched if self.whitelist else not matched

    @property
    def java_watches_topics(self) -> bool:
        """Whether a 0.7.2 consumer watches for new topics with this filter (it does not
        for a plain list of names; we always watch)."""
        return not (self.whitelist and _PLAIN_LIST.fullmatch(self.regex))


@dataclass(frozen=True)
class Subscription:
    """A member's subscription: a topic → stream count map, or a filter with a stream count."""

    topics: Mapping[str, int] | None = None
    filter: TopicFilter | None = None
    streams: int = 1

    def __post_init__(self) -> None:
        if (self.topics is None) == (self.filter is None):
            raise ValueError("a subscription has either topics or a filter")
        if self.topics is not None:
            if not self.topics:
                raise ValueError("a subscription needs at least one topic")
            for topic, count in self.topics.items():
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    raise ValueError(
                        f"topic {topic!r} needs a positive stream count, not {count!r}"
                    )
            object.__setattr__(self, "topics", dict(self.topics))
        elif self.streams < 1:
            raise ValueError("a filter subscription needs at least one stream")

    @classmethod
    def of_topics(cls, topics: Mapping[str, int] | Iterable[str]) -> Subscription:
        """Static topics: a map to stream counts, or names (one stream each)."""
        if isinstance(topics, Mapping):
            return cls(topics=dict(topics))
        return cls(topics={topic: 1 for topic in topics})

    @classmethod
    def whitelist(cls, text: str, streams: int = 1) -> Subscription:
        return cls(filter=TopicFilter.parse(text, whitelist=True), streams=streams)

    @classmethod
    def blacklist(cls, text: str, streams: int = 1) -> Subscription:
        return cls(filter=TopicFilter.parse(text, whitelist=False), streams=streams)

    @property
    def is_wildcard(self) -> bool:
        return self.filter is not None

    def registration(self) -> str:
        """The ``/consumers/<group>/ids/<id>`` value, byte-identical to Java's."""
        if self.topics is not None:
            return "{ " + ",".join(f'"{t}": {n}' for t, n in self.topics.items()) + " }"
        assert self.filter is not None
        mark = "*" if self.filter.whitelist else "!"
        return f"{mark}{self.streams}{mark}{self.filter.regex}"

    @classmethod
    def parse(cls, value: str | None) -> Subscription:
        """Read a member's registration in any 0.7.2 form."""
        if not value:
            raise ZooKeeperError(f"empty consumer registration {value!r}")
        for pattern, whitelist in ((_WHITELIST, True), (_BLACKLIST, False)):
            match = pattern.fullmatch(value)
            if match:
                try:
                    return cls(
                        filter=TopicFilter(match.group(2), whitelist), streams=int(match.group(1))
                    )
                except (InvalidTopicFilterError, ValueError) as exc:
                    raise ZooKeeperError(
                        f"unusable consumer registration {value!r}: {exc}"
                    ) from exc
        try:
            data: Any = json.loads(value)
        except json.JSONDecodeError:
            raise ZooKeeperError(
                f"consumer registration {value!r} is neither JSON nor a filter"
            ) from None
        if not isinstance(data, dict):
            raise ZooKeeperError(f"consumer registration {value!r} is not a JSON object")
        try:
            return cls(topics=data)
        except ValueError as exc:
            raise ZooKeeperError(f"unusable consumer registration {value!r}: {exc}") from exc

    def streams_per_topic(self, available_topics: Iterable[str]) -> dict[str, int]:
        """Topic → stream count; a filter is expanded against ``available_topics`` (the
        current children of ``/brokers/topics``), as every 0.7.2 reader does."""
        if self.topics is not None:
            return dict(self.topics)
        assert self.filter is not None
        return {t: self.streams for t in sorted(available_topics) if self.filter.allows(t)}
