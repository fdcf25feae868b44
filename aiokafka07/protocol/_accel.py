"""Chooses the implementation of the codec's hot loops: the C accelerator when it was
built, else the pure-Python twin (forced with ``AIOKAFKA07_PURE=1``). Callers look up
``impl`` at call time so tests can exercise both.

The choice is logged once, at import, at DEBUG on ``aiokafka07.protocol``: an install
where no C compiler was found still works (the build of the accelerator is optional), and
that line is how someone chasing a slow consumer learns it runs on the pure twin, and why.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

from . import _pure

log = logging.getLogger("aiokafka07.protocol")


def pure_forced() -> bool:
    """Whether ``AIOKAFKA07_PURE`` asks for the pure-Python twins of every accelerator
    (the codec's here, the producer's hot paths in ``producer/_appender.c``)."""
    return os.environ.get("AIOKAFKA07_PURE", "") not in ("", "0")


def _choose() -> ModuleType:
    if pure_forced():
        log.debug(
            "AIOKAFKA07_PURE is set: the codec runs on its pure-Python twin "
            "(not the C accelerator aiokafka07.protocol._speedups)"
        )
        return _pure
    try:
        from . import _speedups  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:  # not built (no compiler at install time)
        log.debug(
            "the C accelerator aiokafka07.protocol._speedups is not built (%s; no C compiler "
            "when this was installed?): the codec runs on its pure-Python twin",
            exc,
        )
        return _pure
    log.debug("the codec runs on its C accelerator (aiokafka07.protocol._speedups)")
    return _speedups  # type: ignore[no-any-return,unused-ignore]


impl: ModuleType = _choose()


def implementation() -> str:
    """``"c"`` when the C accelerator is active, ``"python"`` otherwise."""
    return "python" if impl is _pure else "c"
