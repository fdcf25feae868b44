"""Message formatters for ``aiokafka07 consume``: 0.7.2 ConsoleConsumer's ``--formatter``,
``--property`` and ``--skip-message-on-error``.

A formatter turns a consumed record into the bytes printed for it. Besides consume's own
formats (``raw``, 0.7.2's NewlineMessageFormatter, ``json``, ``hex``, ``length-prefixed``)
there is ``checksum``, 0.7.2's ChecksumMessageFormatter: one line ``checksum:<crc>`` per
message (``<topic>-checksum:<crc>`` with ``--property topic=<topic>``), the CRC-32 of the
payload as an unsigned decimal, which is the CRC stored with the message (the consumer has
checked it). The Java class names are accepted as aliases.

``MODULE:FACTORY`` names a formatter of your own, as 0.7.2's ``--formatter CLASS`` does:
``FACTORY(properties)`` is called once with the ``--property`` settings (a dict of str)
and returns a callable taking a :class:`~aiokafka07.records.ConsumerRecord` and returning
the bytes to print (a str is written as UTF-8).

When a formatter raises, consume stops with the error, having printed (and, as a group
member, committed) only the messages before it; with ``--skip-message-on-error`` the
message is reported on stderr and skipped instead, as in 0.7.2.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..protocol import crc32
from ..records import ConsumerRecord
from .common import CommandError, UsageError

__all__ = ["Formatted", "Formatter", "MessageFormatter", "build_formatter", "parse_properties"]

log = logging.getLogger("aiokafka07.tools.consume")

Formatter = Callable[[ConsumerRecord], bytes]

#: 0.7.2's formatter class names, and the built-in formatter each one is.
JAVA_NAMES = {
    "kafka.consumer.NewlineMessageFormatter": "raw",
    "newline": "raw",
    "kafka.consumer.ChecksumMessageFormatter": "checksum",
}


def parse_properties(items: Sequence[str]) -> dict[str, str]:
    """``--property KEY=VALUE`` (repeatable) as a dict; the last setting of a key wins."""
    properties: dict[str, str] = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"--property {item!r} is not KEY=VALUE")
        properties[key.strip()] = value
    return properties


def checksum_formatter(properties: Mapping[str, str]) -> Formatter:
    """0.7.2's ChecksumMessageFormatter: ``[<topic>-]checksum:<crc>`` and a newline."""
    topic = properties.get("topic")
    prefix = (b"" if topic is None else topic.encode("utf-8") + b"-") + b"checksum:"

    def format_checksum(record: ConsumerRecord) -> bytes:
        return b"%s%d\n" % (prefix, crc32(record.value))

    return format_checksum


#: Formatters built from properties: name → (factory, the properties it reads).
_CONFIGURABLE: dict[str, tuple[Callable[[Mapping[str, str]], Formatter], frozenset[str]]] = {
    "checksum": (checksum_formatter, frozenset({"topic"})),
}


def build_formatter(
    spec: str, properties: Mapping[str, str], plain: Mapping[str, Formatter]
) -> Formatter:
    """The formatter ``spec`` names: one of ``plain`` (which take no properties), a
    configurable built-in, a 0.7.2 class name, or ``MODULE:FACTORY``."""
    name = JAVA_NAMES.get(spec, spec)
    if name in plain:
        if properties:
            raise UsageError(f"formatter {name} takes no --property (got {sorted(properties)})")
        return plain[name]
    if name in _CONFIGURABLE:
        factory, accepted = _CONFIGURABLE[name]
        unknown = sorted(set(properties) - accepted)
        if unknown:
            raise UsageError(
                f"formatter {name} takes --property {', '.join(sorted(accepted))}, "
                f"not {', '.join(unknown)}"
            )
        return factory(properties)
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        choices = ", ".join([*plain, *_CONFIGURABLE])
        raise UsageError(f"unknown formatter {spec!r}: use {choices}, or MODULE:FACTORY")
    return _custom(spec, module_name, attribute, dict(properties))


def _custom(spec: str, module_name: str, attribute: str, properties: dict[str, str]) -> Formatter:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"formatter {spec}: cannot import {module_name}: {exc}") from None
    factory: Any = module
    for part in attribute.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise CommandError(f"formatter {spec}: {module_name} has no {attribute}")
    try:
        function = factory(properties)
    except Exception as exc:
        raise CommandError(f"formatter {spec} refused its properties: {exc}") from exc
    if not callable(function):
        raise CommandError(f"formatter {spec}: {attribute}(properties) returned no callable")

    def format_custom(record: ConsumerRecord) -> bytes:
        data = function(record)
        if isinstance(data, str):
            return data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"the formatter returned {type(data).__name__}, not bytes or str")
        return bytes(data)

    return format_custom


class Formatted(NamedTuple):
    """A batch of records, formatted.

    ``data`` holds the output of ``records[:handled]`` except the skipped ones; when a
    record could not be formatted (and is not skipped) it is ``records[handled]``, and
    ``error`` says why: that record and the rest of the batch were not printed.
    """

    data: bytes
    handled: int
    printed: int
    size: int
    error: CommandError | None = None


class MessageFormatter:
    """Formats batches with ``formatter``; a record it raises on is skipped (counted, one
    warning each) with ``skip_on_error``, else it ends the batch with an error."""

    def __init__(self, formatter: Formatter, *, skip_on_error: bool = False) -> None:
        self.formatter = formatter
        self.skip_on_error = skip_on_error
        self.skipped = 0

    def format(self, records: list[ConsumerRecord]) -> Formatted:
        try:
            data = b"".join(map(self.formatter, records))
        except Exception:
            return self._one_by_one(records)  # find the culprit; the fast path stays lean
        return Formatted(data, len(records), len(records), sum(len(r.value) for r in records))

    def _one_by_one(self, records: list[ConsumerRecord]) -> Formatted:
        parts: list[bytes] = []
        size = 0
        for index, record in enumerate(records):
            try:
                parts.append(self.formatter(record))
            except Exception as exc:
                where = (
                    f"a message of {record.topic} {record.broker_id}-{record.partition} "
                    f"(next offset {record.offset})"
                )
                if not self.skip_on_error:
                    error = CommandError(
                        f"cannot format {where}: {type(exc).__name__}: {exc} "
                        "(--skip-message-on-error skips such messages)"
                    )
                    return Formatted(b"".join(parts), index, len(parts), size, error)
                self.skipped += 1
                log.warning("skipping %s: %s: %s", where, type(exc).__name__, exc)
                continue
            size += len(record.value)
        return Formatted(b"".join(parts), len(records), len(parts), size)
