"""The environment of a pytest run that a test starts (a documented test module, the
plugin's own checks): not one of this run's pytest-xdist workers."""

from __future__ import annotations

import os
from collections.abc import Mapping


def outside_this_run(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) without pytest's and pytest-xdist's variables
    (``PYTEST_XDIST_WORKER``, ``PYTEST_CURRENT_TEST``, ...): a pytest started with them
    takes itself for a worker of this run (pytest-benchmark, for one, then warns on
    stderr that benchmarks are off)."""
    return {
        k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("PYTEST_")
    }
