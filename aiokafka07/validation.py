"""Checks for client parameters, so bad configuration fails at construction, by name, and
for the arguments of calls, so that nonsense never reaches the wire.

A producer, a connection or a consumer that accepts ``request_timeout="x"`` or
``batch_size=-1`` fails much later, inside a background task, far from the mistake. Each
constructor checks its numeric parameters with these helpers instead, which raise
:class:`~aiokafka07.errors.InvalidConfigError` naming the parameter and the value.
Booleans are not numbers here (``True`` is an ``int`` to Python, never a batch size), and
non-finite floats are refused (every wait has a timeout).

The arguments of requests are checked the same way, before anything is sent: a
partition (:func:`check_partition`: 0 and up, or -1 for a produce, where the broker
picks), a fetch offset (:func:`check_offset`), a fetch size (:func:`check_fetch_size`),
a message key (:func:`check_key`: a type with a Java-compatible hash, so that a key
routes the same in every process).

Every duration a user passes is in milliseconds, in a parameter named ``*_ms``, as in
aiokafka. Parameters that took seconds under another name keep working for one release
through :func:`check_ms` / :func:`check_optional_ms` (which check a duration and take its
deprecated seconds form), :func:`renamed_to_ms` under them, and
:func:`renamed_options_to_ms` for options passed on to another class: each converts the
seconds and warns with a :class:`DeprecationWarning` naming the new keyword.

Other call forms kept for one release warn through :func:`warn_deprecated` (one wording
for every deprecation), and mark their typed overload with :func:`deprecated` (PEP 702),
so a type checker points at each use too.

Names that become a component of a ZooKeeper path (consumer group ids, consumer ids and
their ``consumer_id_suffix``, the ``<host>:<port>/<chroot>`` chroot, topics in a group's
znodes) are checked by :func:`check_name`, with ZooKeeper's own rules: a name with a
``/`` would silently become a deeper path (leaving persistent parent nodes behind that
other members then read as registrations), and one ZooKeeper refuses would fail only
when first written, in the middle of joining a group.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import InvalidConfigError, InvalidPartitionError, KafkaError

if TYPE_CHECKING:
    from typing_extensions import deprecated
else:
    _F = TypeVar("_F")

    def deprecated(message: str) -> Callable[[_F], _F]:
        """PEP 702's marker of a deprecated overload, read by type checkers (from
        ``typing_extensions``, no run-time dependency; mypy reports each use with
        ``--enable-error-code deprecated``). At run time it only records ``message`` as
        ``__deprecated__``, as PEP 702 does; the implementation warns with
        :func:`warn_deprecated`, in the same words."""

        def mark(function: _F) -> _F:
            function.__deprecated__ = message  # type: ignore[attr-defined]
            return function

        return mark


__all__ = [
    "FORBIDDEN_IN_NAMES",
    "INT32_MAX",
    "INT64_MAX",
    "NOT_GIVEN",
    "check_bool",
    "check_callable",
    "check_fetch_size",
    "check_int",
    "check_key",
    "check_ms",
    "check_name",
    "check_number",
    "check_offset",
    "check_optional_int",
    "check_optional_ms",
    "check_optional_name",
    "check_optional_number",
    "check_partition",
    "deprecated",
    "name_problem",
    "renamed_options_to_ms",
    "renamed_to_ms",
    "warn_deprecated",
]

#: The default of a parameter kept for a deprecated call form: told apart from any value
#: the caller may pass (``None`` included).
NOT_GIVEN: Any = object()

#: The largest value of a 0.7 int32 field (sizes, broker ids, partitions): the bound of
#: every such setting and argument.
INT32_MAX = (1 << 31) - 1
#: The largest value of a 0.7 int64 field (offsets).
INT64_MAX = (1 << 63) - 1

#: What ZooKeeper refuses in a path component (its ``PathUtils.validatePath``), which is
#: also what a 0.7.2 broker refuses in a topic name (PROTOCOL §2.2): ``/`` (it separates
#: components), control characters (U+0000-U+001F, U+007F-U+009F), U+D800-U+F8FF
#: (surrogates and the private-use area), U+FFF0-U+FFFF, and anything outside the Basic
#: Multilingual Plane (a surrogate pair in Java).
FORBIDDEN_IN_NAMES = re.compile(
    "[/\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff\U00010000-\U0010ffff]"
)


def _describe(minimum: float | None, maximum: float | None, above: bool) -> str:
    if minimum is not None and maximum is not None:
        if above:
            return f" greater than {minimum} and at most {maximum}"
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" {'greater than' if above else 'of at least'} {minimum}"
    if maximum is not None:
        return f" of at most {maximum}"
    return ""


def check_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """``value`` if it is an int (not a bool) within ``minimum..maximum``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConfigError(
            f"{name} must be an integer{_describe(minimum, maximum, False)}, "
            f"not the {type(value).__name__} {value!r}"
        )
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InvalidConfigError(
            f"{name} must be an integer{_describe(minimum, maximum, False)}, not {value}"
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
            f"{name} must be a number{_describe(minimum, maximum, above)}, "
            f"not the {type(value).__name__} {value!r}"
        )
    number = float(value)
    if (
        not math.isfinite(number)
        or (minimum is not None and (number < minimum or (above and number == minimum)))
        or (maximum is not None and number > maximum)
    ):
        raise InvalidConfigError(
            f"{name} must be a finite number{_describe(minimum, maximum, above)}, not {value!r}"
        )
    return number


def check_gzip_level(codec: str, level: object) -> int | None:
    """``compression_level``: None, or 0 to 9 when ``codec`` (the compression's name) is
    gzip; a level with another codec is refused (snappy has no levels: it is a mistake)."""
    level = check_optional_int("compression_level", level, minimum=0, maximum=9)
    if level is not None and codec != "gzip":
        raise InvalidConfigError(
            f"compression_level applies to gzip only, and the compression is {codec}"
        )
    return level


def check_optional_number(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    above: bool = False,
    maximum: float | None = None,
) -> float | None:
    """None, or :func:`check_number`."""
    if value is None:
        return None
    return check_number(name, value, minimum=minimum, above=above, maximum=maximum)


def renamed_to_ms(
    where: str, old: str, seconds: object, value: object, *, stacklevel: int = 3
) -> object:
    """The value for the millisecond parameter ``<old>_ms``: ``value``, unless the
    deprecated seconds parameter ``old`` was given (is not None); then ``seconds`` in
    milliseconds (a number, or each number of a tuple such as a (first delay, cap) pair),
    with a :class:`DeprecationWarning` naming ``<old>_ms``. The deprecated keyword wins
    when both are given. A ``seconds`` that is not a number raises
    :class:`InvalidConfigError` naming ``old``; the caller checks the result under the
    new name.

    ``where`` names what was called (``"Producer"``, ``"Producer.close"``). The default
    ``stacklevel`` points the warning at the code that called the function calling this.
    """
    if seconds is None:
        return value
    warn_deprecated(f"{where}({old}=<seconds>)", f"{old}_ms=<milliseconds>", stacklevel + 1)
    if isinstance(seconds, tuple):
        return tuple(check_number(old, part) * 1000 for part in seconds)
    return check_number(old, seconds) * 1000


def deprecation_message(old: str, new: str) -> str:
    """The one wording of a deprecation: what goes, and what to use instead."""
    return f"{old} is deprecated and goes in the next release: use {new}"


def warn_deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (:class:`DeprecationWarning`) that the call form ``old`` goes in the next
    release, naming ``new``. The default ``stacklevel`` points the warning at the code
    that called the function calling this."""
    warnings.warn(deprecation_message(old, new), DeprecationWarning, stacklevel=stacklevel)


def check_ms(
    where: str,
    name: str,
    value: object,
    seconds: object = None,
    *,
    above: bool = False,
    stacklevel: int = 3,
) -> float:
    """The duration parameter ``name`` (``<old>_ms``) of ``where``: ``value``, or the
    deprecated ``seconds`` (its old name, without ``_ms``; see :func:`renamed_to_ms`),
    checked: a finite number of milliseconds, at least 0 (greater with ``above``)."""
    given = renamed_to_ms(
        where, name.removesuffix("_ms"), seconds, value, stacklevel=stacklevel + 1
    )
    return check_number(name, given, minimum=0, above=above)  # None is refused here


def check_optional_ms(
    where: str,
    name: str,
    value: object,
    seconds: object = None,
    *,
    above: bool = False,
    stacklevel: int = 3,
) -> float | None:
    """:func:`check_ms` for a duration that may be None (neither form given)."""
    if value is None and seconds is None:
        return None
    return check_ms(where, name, value, seconds, above=above, stacklevel=stacklevel + 1)


def renamed_options_to_ms(
    where: str, options: Mapping[str, Any], renamed: Iterable[str], *, stacklevel: int = 3
) -> dict[str, Any]:
    """``options`` (keyword arguments passed on to another class) with each deprecated
    seconds key of ``renamed`` converted by :func:`renamed_to_ms` to its ``*_ms`` key, so
    that the warning is given once, here, and points at the caller's caller."""
    result = dict(options)
    for old in renamed:
        if result.get(old) is not None:
            seconds = result.pop(old)
            new = f"{old}_ms"
            result[new] = renamed_to_ms(
                where, old, seconds, result.get(new), stacklevel=stacklevel + 1
            )
    return result


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is True or False (not 0, 1 or a string, which would be taken for
    one of them without a word)."""
    if not isinstance(value, bool):
        raise InvalidConfigError(f"{name} must be True or False, not {value!r}")
    return value


def check_callable(name: str, value: object) -> None:
    """Refuse a ``value`` that is neither None nor callable."""
    if value is not None and not callable(value):
        raise InvalidConfigError(f"{name} must be callable or None, not {value!r}")


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be one component of a ZooKeeper path, or None if it can."""
    if not value:
        return "is empty"
    if value in (".", ".."):
        return "is a relative path component"
    bad = FORBIDDEN_IN_NAMES.search(value)
    if bad:
        return f"contains the illegal character {bad.group()!r}"
    return None


def check_name(
    name: str,
    value: object,
    *,
    error: type[KafkaError] = InvalidConfigError,
    max_length: int | None = None,
) -> str:
    """``value`` if it is a str that can be one component of a ZooKeeper path (see
    :data:`FORBIDDEN_IN_NAMES`; not empty, ``.`` or ``..``), of at most ``max_length``
    characters; else ``error`` (:class:`InvalidConfigError` by default) naming ``name``."""
    if not isinstance(value, str):
        raise error(f"{name} must be a str, not the {type(value).__name__} {value!r}")
    problem = name_problem(value)
    if problem is None and max_length is not None and len(value) > max_length:
        problem = f"is {len(value)} characters long; the limit is {max_length}"
    if problem is not None:
        raise error(f"{name} {value!r} {problem}: it must be one ZooKeeper path component")
    return value


def check_optional_name(name: str, value: object) -> str | None:
    """None, or :func:`check_name`."""
    return None if value is None else check_name(name, value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_partition(partition: object, *, produce: bool = False) -> int:
    """``partition`` if it is a partition number a request may carry: 0 to
    :data:`INT32_MAX`, or -1 for a produce (the broker picks one of the topic's
    partitions, PROTOCOL §4.1). Anything else raises
    :class:`~aiokafka07.errors.InvalidPartitionError` (a broker would answer WrongPartition
    to a fetch, and close the connection on a produce or OFFSETS)."""
    lowest = -1 if produce else 0
    if not _is_int(partition) or not lowest <= partition <= INT32_MAX:  # type: ignore[operator]
        allowed = f"-1 (the broker picks) or 0 to {INT32_MAX}" if produce else f"0 to {INT32_MAX}"
        raise InvalidPartitionError(f"partition must be an int, {allowed}, not {partition!r}")
    return partition  # type: ignore[return-value]


def check_offset(offset: object) -> int:
    """``offset`` if it is a fetch offset: a byte position, 0 to :data:`INT64_MAX`; else
    :class:`~aiokafka07.errors.InvalidConfigError`."""
    if not _is_int(offset) or not 0 <= offset <= INT64_MAX:  # type: ignore[operator]
        raise InvalidConfigError(
            f"offset must be an int from 0 to {INT64_MAX} (a byte position), not {offset!r}"
        )
    return offset  # type: ignore[return-value]


def check_fetch_size(max_size: object) -> int:
    """``max_size`` if it is a fetch size, 0 to :data:`INT32_MAX` bytes (a broker closes
    the connection on a negative one); else :class:`~aiokafka07.errors.InvalidConfigError`."""
    return check_int("max_size", max_size, minimum=0, maximum=INT32_MAX)


def check_key(key: object) -> object:
    """``key`` if a message key of its type routes the same in every process: None, a
    ``str``, bytes-like, an ``int`` within the int64 range (``bool`` included) or a
    :class:`~aiokafka07.partitioner.JavaLong`, the types with a Java-compatible hash
    (:func:`~aiokafka07.partitioner.java_hash_code`). Anything else (a float, an object
    hashed by its id) raises :class:`~aiokafka07.errors.InvalidConfigError`."""
    from .partitioner import JavaLong  # the partitioner is above this module

    if key is None or isinstance(key, (str, bytes, bytearray, memoryview)):
        return key
    if isinstance(key, JavaLong):
        value = key.value
    elif isinstance(key, int):
        value = key
    else:
        raise InvalidConfigError(
            f"no Java-compatible hash for a {type(key).__name__} key ({key!r}): a key must be "
            "str, bytes, int, bool or JavaLong, whose hash is the same in every process; "
            "convert it with key_serializer, or route with a partitioner of your own"
        )
    if not isinstance(value, int) or not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise InvalidConfigError(f"an int key must fit a Java long (int64), not {value!r}")
    return key
