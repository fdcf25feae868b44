"""The way off 0.7: copy 0.7 topics into a modern Kafka cluster, exactly once.

:class:`Bridge` reads chosen 0.7 topics partition by partition (the library's
:class:`~aiokafka07.simple.SimpleConsumer`, compressed sets unpacked) and writes every
message, its bytes kept whole as the value and a key taken from it by a key function, to
the topic of the same name on the target through aiokafka (the ``bridge`` extra; in a
checkout: ``python -m pip install -e '.[bridge]'``). Partition mapping: see
:mod:`aiokafka07.bridge.mapping` (keyed messages by the target's default murmur2
partitioner, so a key always lands in the same target partition; keyless ones
broker-partition to partition).

**Exactly once through crashes.** Every target record carries headers naming its 0.7
topic, broker-partition and the position after it (:mod:`aiokafka07.bridge.positions`; a
0.7 offset is a byte offset, and the messages of a compressed set share one, so a position
is the set's offset plus how many of its messages to skip). The bridge copies in batches,
one transaction each, with a transactional producer (``transactional_id``
``aiokafka07-bridge-<name>``): send the batch, wait until the target acknowledged every
record, send a checkpoint record (every broker-partition's position, every target
partition's end), commit.

On start (after a stop, a crash, a SIGKILL), :func:`~aiokafka07.bridge.recovery.recover`:

1. starting the transactional producer fences the killed one: a request of the dead
   process still on its way is refused, and its open transaction is aborted;
2. reads the last checkpoint (``read_committed``) and resumes every 0.7 broker-partition
   from its position there;
3. reads every target partition from the checkpoint's end to its current end, noting per
   (target partition, 0.7 broker-partition) the highest position found; a message read
   again from 0.7 whose target partition already holds its position (or a later one from
   the same broker-partition) is not written again.

On a broker that honours transactions, step 3 finds nothing: the data of a transaction is
visible exactly when its checkpoint is. Step 3 covers a target where records of an
unfinished transaction stay visible to readers (librdkafka's mock cluster, the tests'
target, does not filter aborted transactions): the bridge treats what readers can see as
written, and that is correct because, per target partition, the records of one 0.7
broker-partition arrive in order with no gap (the idempotent producer's sequence numbers),
so everything up to the highest position found there is there, and nothing after it.

Why not idempotence alone: the idempotent producer removes the duplicates of its own
retries, within one producer session. A send that was not yet acknowledged when the
process died is either in the log or not; the next process cannot know which without
reading the target (step 3) and, without fencing, a request of the dead process that was
still in flight could land after that read. The transactional id closes that window.

Limits: the target's partition count of a bridged topic must not change (refused); a
keyless message's partition follows the topic's broker-partitions as they were when the
bridge started, so adding 0.7 brokers between runs moves keyless messages of the new
broker-partitions only; one bridge process per ``name`` (a second one fences the first).
"""

from __future__ import annotations

from .mapping import KeyFunction, key_before
from .metrics import BridgeMetrics, PartitionLag, TopicCounts
from .positions import Position
from .runner import Bridge

__all__ = [
    "Bridge",
    "BridgeMetrics",
    "KeyFunction",
    "PartitionLag",
    "Position",
    "TopicCounts",
    "key_before",
]
