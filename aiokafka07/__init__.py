"""aiokafka07: an asyncio client library for Apache Kafka 0.7.

This release holds the sans-IO codec (:mod:`aiokafka07.protocol`), the exception
hierarchy (:mod:`aiokafka07.errors`) and Java-compatible partitioning
(:mod:`aiokafka07.partitioner`).
"""

from . import errors, protocol
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .partitioner import default_partition, java_hash_code
from .protocol import EARLIEST, LATEST, Compression, Message

__version__ = "0.1.0"

__all__ = [
    "EARLIEST",
    "LATEST",
    "Compression",
    "Message",
    "__version__",
    "default_partition",
    "errors",
    "java_hash_code",
    "protocol",
    *_errors_all,
]
