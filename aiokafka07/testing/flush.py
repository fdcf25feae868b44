"""How embedded brokers flush, by name: the settings real 0.7.2 clusters run, or a flush
per produce request for tests that must read what they wrote at once.

A 0.7 broker lets consumers read, and OFFSETS report, only what it has flushed (PROTOCOL
§12): every ``log.flush.interval`` messages per partition, or when its flusher (every
``log.default.flush.scheduler.interval.ms``) finds a log's last flush at least
``log.default.flush.interval.ms`` old. That is also when a confirming producer's
messages are confirmed.

* ``"shipped"``: 0.7.2's shipped ``config/server.properties`` (CONFIG §1):
  ``log.flush.interval=10000``, ``log.default.flush.interval.ms=1000``,
  ``log.default.flush.scheduler.interval.ms=1000``. A message is readable once 10,000
  more follow it in its partition, else one to two seconds after it was appended. What
  real clusters run: measure and test the client here.
* ``"every-message"``: ``log.flush.interval=1`` (and the flusher every 200 ms): every
  produce request is readable as soon as it is processed. For quick starts, and tests
  that read what they just wrote.

Neither fsyncs in the test helpers (``log.flush.fsync=false``, this broker's own key):
a flush still advances what readers see, as on a real broker.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Literal

from ..broker.config import BrokerConfig

__all__ = ["FLUSH", "FlushName", "flush_fields", "flush_properties"]

FlushName = Literal["shipped", "every-message"]

#: The presets, as ``server.properties`` keys.
FLUSH: dict[str, dict[str, str]] = {
    "shipped": {
        "log.flush.interval": "10000",
        "log.default.flush.interval.ms": "1000",
        "log.default.flush.scheduler.interval.ms": "1000",
    },
    "every-message": {
        "log.flush.interval": "1",
        "log.default.flush.scheduler.interval.ms": "200",
    },
}


def _check(name: str) -> dict[str, str]:
    try:
        return FLUSH[name]
    except KeyError:
        raise ValueError(
            f"flush must be one of {', '.join(repr(n) for n in FLUSH)}, not {name!r}"
        ) from None


def flush_properties(name: str) -> dict[str, str]:
    """The preset ``name`` as ``server.properties`` keys (a broker process, the CLI),
    without fsync."""
    return {**_check(name), "log.flush.fsync": "false"}


def flush_fields(name: str) -> dict[str, object]:
    """The preset ``name`` as :class:`~aiokafka07.broker.BrokerConfig` fields (an
    embedded broker in this process), without fsync."""
    by_key = {f.metadata["key"]: f.name for f in fields(BrokerConfig)}
    settings: dict[str, object] = {by_key[k]: int(v) for k, v in _check(name).items()}
    settings["log_flush_fsync"] = False
    return settings
