"""The producer, split along its seams as aiokafka splits it.

=================  =====================================================================
module             job
=================  =====================================================================
``producer``       :class:`Producer`, the facade: parameters, lifecycle, ``send*()``
``router``         which (broker, partition): 0.7.2 partitioning, static vs ZooKeeper,
                   checks of partition pairs and keys at ``send()``
``accumulator``    batches per (broker, topic, partition), buffer space, linger, the
                   hot path for keyless messages
``sender``         the only code that touches connections: one supervised task per
                   broker, outcomes classified into done / retry / fail, retries
``encoding``       batches as message sets: compression and wrapper splitting
``batch``          :class:`Batch` (internal) and :class:`BatchBuilder` (``send_batch``)
``results``        :class:`ProduceResult`, :class:`ProducerMetrics`, and the ledger where
                   every message ends exactly once
``legacy``         call forms kept for one release (deprecated ``send_batch(topic, values)``)
=================  =====================================================================
"""

from .batch import BatchBuilder
from .producer import Producer
from .results import EncodedMessage, ProduceResult, ProducerMetrics
from .router import Partitioner

__all__ = [
    "BatchBuilder",
    "EncodedMessage",
    "Partitioner",
    "ProduceResult",
    "Producer",
    "ProducerMetrics",
]
