"""What a group member consumes (ZOOKEEPER §3): static topics with stream counts, or a
whitelist / blacklist topic filter, normalised and matched as Java does.

The values as ZooKeeper holds them (the registration string, consumer and thread ids) are
:mod:`aiokafka07.znodes`'; a :class:`Subscription` converts to and from its
:class:`~aiokafka07.znodes.Registration`. Reading other members' registrations in any 0.7.2
form is what lets Java and Python consumers share one group.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import InvalidConfigError, KafkaError, ZooKeeperError
from ..znodes import Registration, consumer_id, format_registration, parse_registration, thread_ids

__all__ = [
    "InvalidTopicFilterError",
    "Subscription",
    "TopicFilter",
    "consumer_id",
    "normalize_filter",
    "thread_ids",
]

_PLAIN_LIST = re.compile(r"[A-Za-z0-9\-|]+")


class InvalidTopicFilterError(KafkaError, ValueError):
    """A topic filter that does not compile as a regular expression."""


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
            raise InvalidConfigError("a subscription has either topics or a filter")
        if self.topics is not None:
            if not self.topics:
                raise InvalidConfigError("a subscription needs at least one topic")
            for topic, count in self.topics.items():
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    raise InvalidConfigError(
                        f"topic {topic!r} needs a positive stream count, not {count!r}"
                    )
            object.__setattr__(self, "topics", dict(self.topics))
        elif self.streams < 1:
            raise InvalidConfigError("a filter subscription needs at least one stream")

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

    def as_registration(self) -> Registration:
        """The subscription as its ``/consumers/<group>/ids/<id>`` value holds it."""
        if self.topics is not None:
            return Registration(dict(self.topics))
        assert self.filter is not None
        return Registration(None, self.filter.regex, self.filter.whitelist, self.streams)

    @classmethod
    def from_registration(cls, registration: Registration) -> Subscription:
        """A member's subscription from its decoded registration; :class:`ZooKeeperError`
        when its filter is not a regex."""
        if registration.topics is not None:
            return cls(topics=registration.topics)
        assert registration.regex is not None
        try:
            return cls(
                filter=TopicFilter(registration.regex, registration.whitelist),
                streams=registration.streams,
            )
        except InvalidTopicFilterError as exc:
            raise ZooKeeperError(f"unusable consumer registration: {exc}") from exc

    def registration(self) -> str:
        """The ``/consumers/<group>/ids/<id>`` value, byte-identical to Java's."""
        return format_registration(self.as_registration())

    @classmethod
    def parse(cls, value: str | None) -> Subscription:
        """Read a member's registration in any 0.7.2 form."""
        return cls.from_registration(parse_registration(value))

    def covers(self, topic: str) -> bool:
        """Whether ``topic`` is consumed: one of the static topics, or matched by the filter."""
        if self.topics is not None:
            return topic in self.topics
        assert self.filter is not None
        return self.filter.allows(topic)

    def streams_per_topic(self, available_topics: Iterable[str]) -> dict[str, int]:
        """Topic → stream count; a filter is expanded against ``available_topics`` (the
        current children of ``/brokers/topics``), as every 0.7.2 reader does."""
        if self.topics is not None:
            return dict(self.topics)
        assert self.filter is not None
        return {t: self.streams for t in sorted(available_topics) if self.filter.allows(t)}
