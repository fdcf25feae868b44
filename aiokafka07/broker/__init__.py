"""An embedded Kafka 0.7.2-compatible broker, for tests and local work.

It behaves like a real 0.7.2 broker on the wire (PROTOCOL §1-§12), on disk
(``<log.dir>/<topic>-<partition>/<offset>.kafka`` segments) and in ZooKeeper
(``/brokers/ids`` and ``/brokers/topics`` registrations).
"""

from .config import BrokerConfig
from .log import Log, LogConfig, LogManager
from .server import Broker

__all__ = ["Broker", "BrokerConfig", "Log", "LogConfig", "LogManager"]
