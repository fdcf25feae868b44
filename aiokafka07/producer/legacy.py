"""Call forms of the producer kept for one release, each with a
:class:`DeprecationWarning` naming its replacement (the warning itself is given by the
method, so that it points at the caller's line).

``send_batch(topic, values, key=None, partition=None)``: the form before
``create_batch()`` / ``send_batch(batch, topic)``; each value was sent as ``send()`` sends
it, and the list of their futures returned.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from ..validation import NOT_GIVEN

__all__ = ["SEND_BATCH_OF_VALUES", "send_batch_of_values_arguments"]


def _send_batch_of_values(
    topic: str,
    values: Iterable[Any],
    key: Any = None,
    partition: tuple[int, int] | None = None,
) -> None:
    """The deprecated ``Producer.send_batch`` signature (its arguments are bound to it)."""


_OLD_SEND_BATCH = inspect.signature(_send_batch_of_values)


def send_batch_of_values_arguments(
    batch: Any,
    topic: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: Any,
    partition: tuple[int, int] | None,
) -> dict[str, Any]:
    """What a ``send_batch`` call without a :class:`BatchBuilder` passed, bound as the
    deprecated ``send_batch(topic, values, key=None, partition=None)`` binds them;
    ``TypeError`` if that form does not fit them either."""
    given = [a for a in (batch, topic, *args) if a is not NOT_GIVEN]
    named = dict(kwargs)
    if key is not None:
        named["key"] = key
    if partition is not None:
        named["partition"] = partition
    try:
        bound = _OLD_SEND_BATCH.bind(*given, **named)
    except TypeError as exc:
        problem = str(exc)
    else:
        bound.apply_defaults()
        if isinstance(bound.arguments["topic"], str):
            return bound.arguments
        problem = f"not {batch!r}"
    raise TypeError(
        "send_batch takes a BatchBuilder from create_batch() and a topic (or, deprecated, a "
        f"topic and values): {problem}"
    )


#: What goes and what to use instead (the words of the overload's ``@deprecated``, too).
SEND_BATCH_OF_VALUES = (
    "Producer.send_batch(topic, values, key=None, partition=None)",
    "batch = producer.create_batch(), batch.append(value) for each value, then "
    "send_batch(batch, topic, key=key, partition=partition) (one message set, one future), "
    "or send(topic, value, key, partition) for each value",
)
