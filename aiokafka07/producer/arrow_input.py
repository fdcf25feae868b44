"""Arrow arrays into the producer (:meth:`Producer.send_arrow`): an array's values cut
and encoded into 0.7 message sets straight from its buffers (the codec's
``encode_arrow``, in C when built), keys read for the partitioner, refusals in words,
and the one future of an array's sets.

The producer queues the sets as whole batches; this module knows nothing of batches,
connections or routing.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Iterable
from typing import Any

from ..errors import ArrowValuesError, MessageTooLargeError
from ..protocol import _accel
from ..supervisor import mark_retrieved
from .results import ProduceResult

__all__ = [
    "ARROW_FORMAT",
    "ARROW_NULL",
    "ARROW_OFFSETS",
    "ARROW_RELEASED",
    "ARROW_SHAPE",
    "ARROW_TOO_LARGE",
    "ArrowSets",
    "capsules",
    "gather_sets",
    "read_keys",
    "refusal",
]

# Statuses of the codec's encode_arrow (protocol/_speedups.c, aiokafka07/arrow.py).
ARROW_RELEASED, ARROW_FORMAT, ARROW_SHAPE, ARROW_NULL, ARROW_OFFSETS, ARROW_TOO_LARGE = range(1, 7)


def read_keys(keys: Any) -> list[Any]:
    """``keys`` as Python objects (bytes or str), or the typed refusal."""
    from .. import arrow

    if getattr(type(keys), "__arrow_c_array__", None) is None:
        raise ArrowValuesError(
            f"send_arrow() takes keys as an Arrow array (__arrow_c_array__), not a "
            f"{type(keys).__name__}"
        )
    status, index, format_, key_list = arrow.read_values(*capsules(keys))
    if key_list is not None:
        return key_list
    raise ArrowValuesError(
        f"send_arrow() cannot route by these keys: {refusal(status, index, format_)}",
        format=format_,
        index=index if status in (ARROW_NULL, ARROW_OFFSETS, ARROW_SHAPE) else None,
    )


def capsules(values: Any) -> tuple[object, object]:
    """The (schema, array) capsules of an object with ``__arrow_c_array__``."""
    pair = values.__arrow_c_array__()
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise ArrowValuesError(
            f"{type(values).__name__}.__arrow_c_array__() did not return "
            "(schema capsule, array capsule)"
        )
    return pair


class ArrowSets:
    """Arrow arrays cut and encoded into message sets as the producer's batches are cut
    (``batch_size`` messages, ``batch_bytes`` of payload, each value checked against
    ``max_message_size``): ``(messages, payload bytes, message set)`` each."""

    def __init__(self, batch_size: int, batch_bytes: int, max_message_size: int) -> None:
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.max_message_size = max_message_size

    def encode(self, values: Any) -> list[tuple[int, int, bytes]]:
        """The message sets of an Arrow array or stream (:meth:`Producer.send_arrow`), or its
        typed refusal."""
        kind = type(values)
        if getattr(kind, "__arrow_c_array__", None) is not None:
            return self.encode_arrays(kind, [capsules(values)])
        if getattr(kind, "__arrow_c_stream__", None) is not None:
            from .. import arrow  # ctypes, for streams only

            arrays = arrow.stream_arrays(values.__arrow_c_stream__())
            try:
                return self.encode_arrays(kind, arrays)
            except arrow.StreamError as exc:
                raise ArrowValuesError(
                    f"send_arrow() cannot read this {kind.__name__}: {exc}"
                ) from exc
            finally:
                arrays.close()
        raise ArrowValuesError(
            f"send_arrow() takes an Arrow array (an object with __arrow_c_array__ or "
            f"__arrow_c_stream__), not a {kind.__name__}"
        )

    def encode_arrays(
        self, kind: type, arrays: Iterable[Any], rows: array[int] | None = None
    ) -> list[tuple[int, int, bytes]]:
        """The message sets of (schema, array) capsule pairs, in order (of the ``rows``
        selected, if given); a refusal names the value by its index in all of them."""
        sets: list[tuple[int, int, bytes]] = []
        before = 0  # values in the arrays before this one
        for schema, array_capsule in arrays:
            status, index, size, format_, chunks = _accel.impl.encode_arrow(
                schema,
                array_capsule,
                1,
                0,
                self.batch_size,
                self.batch_bytes,
                self.max_message_size,
                rows,
            )
            if chunks is not None:
                sets += chunks
                before += sum(chunk[0] for chunk in chunks)
                continue
            index += before
            if status == ARROW_TOO_LARGE:
                raise MessageTooLargeError(
                    f"the value at index {index} ({size} bytes) exceeds max.message.size "
                    f"{self.max_message_size}; a 0.7 broker would drop it silently",
                    size=size,
                    index=index,
                )
            raise ArrowValuesError(
                f"send_arrow() cannot send this {kind.__name__}: {refusal(status, index, format_)}",
                format=format_,
                index=index if status in (ARROW_NULL, ARROW_OFFSETS) else None,
            )
        return sets


def refusal(status: int, index: int, format_: str | None) -> str:
    """Why ``encode_arrow`` refused an array, in words."""
    return {
        ARROW_RELEASED: "its capsules are not an arrow_schema and an arrow_array, or were released",
        ARROW_FORMAT: f"its Arrow type (format {format_!r}) is not binary or string (z, u, Z, U)",
        ARROW_SHAPE: f"its buffers are not those of a binary or string array (index {index})",
        ARROW_NULL: f"the value at index {index} is null (a 0.7 message has no null)",
        ARROW_OFFSETS: f"its offsets decrease or are negative at index {index}",
    }.get(status, f"status {status}")


def gather_sets(
    whole: asyncio.Future[list[ProduceResult]], futures: list[asyncio.Future[ProduceResult]]
) -> None:
    """Resolve ``whole`` once every message set's future ended: their results in order,
    or the first failure (noting how many sets were delivered). Marked retrieved when it
    fails, as a batch's future is: :meth:`Producer.close` reports the failure."""
    left = len(futures)

    def ended(_: asyncio.Future[ProduceResult]) -> None:
        nonlocal left
        left -= 1
        if left or whole.done():
            return
        failed: list[BaseException] = []
        for future in futures:
            error = (
                asyncio.CancelledError("a message set's future was cancelled")
                if future.cancelled()
                else future.exception()
            )
            if error is not None:
                failed.append(error)
        if not failed:
            whole.set_result([f.result() for f in futures])
            return
        error = failed[0]
        add_note = getattr(error, "add_note", None)
        if add_note is not None and len(futures) > 1:
            add_note(
                f"{len(futures) - len(failed)} of the array's {len(futures)} message sets "
                "were delivered"
            )
        whole.set_exception(error)
        mark_retrieved(whole)

    for future in futures:
        future.add_done_callback(ended)
