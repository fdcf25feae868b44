"""Chooses the implementation of the codec's hot loops: the C accelerator when it was
built, else the pure-Python twin (forced with ``AIOKAFKA07_PURE=1``). Callers look up
``impl`` at call time so tests can exercise both."""

from __future__ import annotations

import os
from types import ModuleType

from . import _pure


def pure_forced() -> bool:
    """Whether ``AIOKAFKA07_PURE`` asks for the pure-Python twins of every accelerator
    (the codec's here, the producer's hot paths in ``producer/_appender.c``)."""
    return os.environ.get("AIOKAFKA07_PURE", "") not in ("", "0")


def _choose() -> ModuleType:
    if pure_forced():
        return _pure
    try:
        from . import _speedups  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # not built (no compiler at install time)
        return _pure
    return _speedups  # type: ignore[no-any-return,unused-ignore]


impl: ModuleType = _choose()


def implementation() -> str:
    """``"c"`` when the C accelerator is active, ``"python"`` otherwise."""
    return "python" if impl is _pure else "c"
