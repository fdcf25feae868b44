"""Found by PySpark's data source lookup (modules named ``pyspark_*`` exposing
``DefaultSource``): with aiokafka07 installed, ``format("kafka07")`` works without
registering anything."""

from aiokafka07.spark import Kafka07DataSource as DefaultSource

__all__ = ["DefaultSource"]
