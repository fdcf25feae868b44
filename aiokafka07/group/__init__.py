"""The balanced consumer group of Kafka 0.7.2 (ZOOKEEPER §3-§5).

:class:`Consumer` is the group member (:mod:`.consumer`), a facade over its partition
states (:mod:`.state`), fetchers (:mod:`.fetcher`), coordinator (:mod:`.coordinator`) and
streams (:mod:`.streams`). It builds on identities and registration values
(:mod:`.subscription`), the range assignment (:mod:`.assignment`) and the group's znodes
(:class:`aiokafka07.znodes.GroupRegistry`), which every member must get exactly right to
share a group with Java 0.7.2 consumers.
"""

from ..znodes import GroupRegistry
from .assignment import assign, assign_group, group_threads, partition_names
from .consumer import Consumer, RebalanceListener, Stream
from .state import ConsumerMetrics, PartitionMetrics
from .subscription import (
    InvalidTopicFilterError,
    Subscription,
    TopicFilter,
    consumer_id,
    normalize_filter,
    thread_ids,
)

__all__ = [
    "Consumer",
    "ConsumerMetrics",
    "GroupRegistry",
    "InvalidTopicFilterError",
    "PartitionMetrics",
    "RebalanceListener",
    "Stream",
    "Subscription",
    "TopicFilter",
    "assign",
    "assign_group",
    "consumer_id",
    "group_threads",
    "normalize_filter",
    "partition_names",
    "thread_ids",
]
