"""aiokafka07: an asyncio client library for Apache Kafka 0.7.

The sans-IO codec (:mod:`aiokafka07.protocol`), one exception hierarchy
(:mod:`aiokafka07.errors`), Java-compatible partitioning (:mod:`aiokafka07.partitioner`),
pipelined broker connections and a pool (:mod:`aiokafka07.connection`,
:mod:`aiokafka07.pool`), the :class:`SimpleConsumer`, the cluster view
(:mod:`aiokafka07.cluster`), the :class:`Producer`, the group :class:`Consumer`, a PySpark
data source (:mod:`aiokafka07.spark`, optional extra), a logging handler that produces log records
(:mod:`aiokafka07.logging_handler`), console tools (:mod:`aiokafka07.cli`,
:mod:`aiokafka07.tools`), the demo pipeline (:mod:`aiokafka07.demo`) and an embedded
broker with test fixtures (:mod:`aiokafka07.broker`, :mod:`aiokafka07.testing`).
"""

import logging

from . import errors, protocol
from .connection import BrokerAddress, BrokerConnection
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .group import Consumer
from .logging_handler import HandlerStats, KafkaHandler
from .partitioner import default_partition, java_hash_code
from .pool import ConnectionPool
from .producer import Producer, ProduceResult, ProducerMetrics
from .protocol import EARLIEST, LATEST, Compression, Message
from .record_batch import RecordBatch
from .records import ConsumerRecord, TopicPartition
from .simple import FetchResult, SimpleConsumer

__version__ = "0.1.0"

# A library logs, the application decides where that goes: without logging configured,
# nothing of ours is printed (not even warnings, through logging's last resort).
logging.getLogger("aiokafka07").addHandler(logging.NullHandler())

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerAddress",
    "BrokerConnection",
    "Compression",
    "ConnectionPool",
    "Consumer",
    "ConsumerRecord",
    "FetchResult",
    "HandlerStats",
    "KafkaHandler",
    "Message",
    "ProduceResult",
    "Producer",
    "ProducerMetrics",
    "RecordBatch",
    "SimpleConsumer",
    "TopicPartition",
    "__version__",
    "default_partition",
    "errors",
    "java_hash_code",
    "protocol",
    *_errors_all,
]
