"""Checks for client parameters, so bad configuration fails at construction, by name.

A producer, a connection or a consumer that accepts ``request_timeout="x"`` or
``batch_size=-1`` fails much later, inside a background task, far from the mistake. Each
constructor checks its numeric parameters with these helpers instead, which raise
:class:`~aiokafka07.errors.InvalidConfigError` naming the parameter and the value.
Booleans are not numbers here (``True`` is an ``int`` to Python, never a batch size), and
non-finite floats are refused (every wait has a timeout).
"""

from __future__ import annotations

import math

from .errors import InvalidConfigError

__all__ = ["check_int", "check_number", "check_optional_int"]


def _describe(minimum: float | None, maximum: float | None, above: bool) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum} to {maximum}"
    if minimum is not None:
        return f"{'greater than' if above else 'of at least'} {minimum}"
    if maximum is not None:
        return f"of at most {maximum}"
    return ""


def check_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` if it is an int (not a bool) within ``minimum..maximum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConfigError(
            f"{name} must be an integer {_describe(minimum, maximum, False)}, "
            f"not the {type(value).__name__} {value!r}"
        )
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidConfigError(
            f"{name} must be an integer {_describe(minimum, maximum, False)}, not {value}"
        )
    return value


def check_optional_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    """None, or :func:`check_int`."""
    return None if value is None else check_int(name, value, minimum=minimum, maximum=maximum)


def check_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    above: bool = False,
    maximum: float | None = None,
) -> float:
    """``value`` as a float if it is a finite int or float (not a bool), at least
    ``minimum`` (greater than it with ``above``) and at most ``maximum``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidConfigError(
            f"{name} must be a number {_describe(minimum, maximum, above)}, "
            f"not the {type(value).__name__} {value!r}"
        )
    number = float(value)
    if (
        not math.isfinite(number)
        or (minimum is not None and (number < minimum or (above and number == minimum)))
        or (maximum is not None and number > maximum)
    ):
        raise InvalidConfigError(
            f"{name} must be a finite number {_describe(minimum, maximum, above)}, not {value!r}"
        )
    return number
