"""Checking a deprecated call form: one DeprecationWarning, in the project's words, naming
the new form, pointing at the caller's line; and the typed overload's ``@deprecated`` says
the same (so a type checker and the run time tell users one thing)."""

from __future__ import annotations

import contextlib
import sys
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from aiokafka07.validation import deprecation_message


@contextlib.contextmanager
def warns_once(old: str, new: str, caller: str) -> Iterator[None]:
    """Expect exactly one DeprecationWarning in the block: ``old`` goes, use ``new``;
    given at a line of the file ``caller`` (the test calling the deprecated form)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert [str(w.message) for w in ours] == [deprecation_message(old, new)]
    assert ours[0].filename == caller, f"the warning points at {ours[0].filename}"


@contextlib.contextmanager
def no_deprecation() -> Iterator[None]:
    """Expect no DeprecationWarning in the block (the current form)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == []


def overload_says(function: Callable[..., Any], old: str, new: str) -> None:
    """The one ``@deprecated`` overload of ``function`` carries the warning's words
    (``typing.get_overloads`` is 3.11+: nothing to check before)."""
    if sys.version_info < (3, 11):
        return
    marked = [
        getattr(o, "__deprecated__", None)
        for o in typing.get_overloads(function)
        if hasattr(o, "__deprecated__")
    ]
    assert marked == [deprecation_message(old, new)]
