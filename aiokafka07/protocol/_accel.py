"""Chooses the implementation of the codec's hot loops: the C accelerator when it was
built, else the pure-Python twin (forced with ``AIOKAFKA07_PURE=1``). Callers look up
``impl`` at call time so tests can exercise both.

The choice is logged once, at import, at DEBUG on ``aiokafka07.protocol``: an install
where no C compiler was found still works (the build of the accelerator is optional), and
that line is how someone chasing a slow consumer learns it runs on the pure twin, and why.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

from . import _pure

log = logging.getLogger("aiokafka07.protocol")


def pure_forced() -> bool:
    """Whether ``AIOKAFKA07_PURE`` asks for the pure-Python twins of every accelerator
    (the codec's here, the producer's hot paths in ``producer/_appender.c``)."""
    return os.environ.get("AIOKAFKA07_PURE", "") not in ("", "0")


def load_accelerator(name: str, runs: str, logger: logging.Logger) -> ModuleType | None:
    """The C module ``name`` (``aiokafka07.protocol._speedups``), or None when
    ``AIOKAFKA07_PURE`` is set or it was not built (no compiler at install time). The
    choice is logged once, at DEBUG on ``logger``, saying what ``runs`` on which and why:
    the codec's choice and the producer's hot path's (``producer/batch.py``)."""
    if pure_forced():
        logger.debug(
            "AIOKAFKA07_PURE is set: %s runs on its pure-Python twin (not the C accelerator %s)",
            runs,
            name,
        )
        return None
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        logger.debug(
            "the C accelerator %s is not built (%s; no C compiler when this was installed?): "
            "%s runs on its pure-Python twin",
            name,
            exc,
            runs,
        )
        return None
    logger.debug("%s runs on its C accelerator (%s)", runs, name)
    return module


impl: ModuleType = load_accelerator("aiokafka07.protocol._speedups", "the codec", log) or _pure


def implementation() -> str:
    """``"c"`` when the C accelerator is active, ``"python"`` otherwise."""
    return "python" if impl is _pure else "c"
