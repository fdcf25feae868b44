"""Shared test set-up: the two tiers, hypothesis profiles, and a fixture running tests on
both codec implementations (the C accelerator and its pure-Python twin).

Tiers: ``python -m pytest -m "not slow"`` is the fast loop (codec, units, properties,
embedded brokers in this process); ``python -m pytest`` runs everything. A test is
``slow`` when it is marked so (one that waits seconds on purpose: a timeout, a backoff
or a broker's flush it checks), or is in one of :data:`SLOW_MODULES`, or uses a fixture
that starts a JVM (:data:`SLOW_FIXTURES`), or ``kafka_cluster`` for anything but brokers
without ZooKeeper, or starts a process in its own body or in a fixture it uses
(:data:`PROCESS_STARTERS`): new tests land in the right tier by what they use.
"""

from __future__ import annotations

import ast
import asyncio
import fnmatch
import functools
import inspect
import os
import re
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

from aiokafka07.protocol import _accel, _pure
from aiokafka07.testing import KafkaCluster

#: Where the suite keeps byte code when the environment says not to write it beside the
#: sources (:func:`_cache_byte_code`).
BYTE_CODE = Path(__file__).resolve().parents[1] / ".bytecode_cache"


def _cache_byte_code() -> None:
    """Byte code cached for the run where the environment says not to write it.

    With ``PYTHONDONTWRITEBYTECODE`` set (shells and CI images set it), every process of
    the suite compiled every module it imported, every time: each worker rewrote and
    compiled every test module (collecting took 11.6 s a process, 5.0 s with byte code),
    and the suite runs about 500 Python processes (tools, brokers, examples, benchmarks,
    Spark's Python workers), each importing the library (the tools: 0.42-0.49 s of CPU
    without byte code, 0.26-0.30 s with it). The suite then writes byte code under one
    directory of the checkout, :data:`BYTE_CODE` (ignored by git, as ``.mypy_cache``
    is), for itself and every process it starts (``PYTHONPYCACHEPREFIX``), and no
    ``__pycache__`` beside the sources. A prefix the user set is kept; without the
    variable nothing changes (``__pycache__``, as Python does by default).
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.pycache_prefix:
        return
    prefix = str(BYTE_CODE)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


_cache_byte_code()

#: Fixtures whose tests are slow: ZooKeeper (a JVM; every fixture that starts one, or
#: runs the tools or the demo as processes, asks for ``zookeeper_installed``), and Spark.
SLOW_FIXTURES = frozenset({"zookeeper_installed", "spark"})

# Short-lived JVMs: Spark's drivers (in this process, or in the demo, examples and
# benchmarks run as processes) start about twice as fast with the client compiler and the
# serial collector, as the ZooKeeper fixtures already start theirs. Spark's launcher adds
# SPARK_SUBMIT_OPTS to a driver's command line, SPARK_DAEMON_JAVA_OPTS to a standalone
# master's and worker's; a user's own setting wins. A driver also reads spark.* system
# properties as settings: a Python worker gets 120 s instead of 15 to connect back to its
# JVM (at a load of 20 on 2 cores, the streaming source's worker took longer to start).
_SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS", f"{_SHORT_LIVED_JVM} -Dspark.python.authenticate.socketTimeout=300s"
)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", _SHORT_LIVED_JVM)


#: Modules whose tests run the tools, the demo, examples, benchmarks, linters, pytest or a
#: broker as processes, through helpers of their own (file name patterns).
SLOW_MODULES = (
    "test_benchmarks",
    "test_cli_*",
    "test_demo",
    "test_examples",
    "test_hostile_broker",
    "test_logging",
    "test_pytest_plugin",
    "test_quality",
)

#: Calls in a test's own body that start processes: ``subprocess.*``,
#: ``asyncio.create_subprocess_*``, and these helpers (a ZooKeeper server of the test's
#: own, a broker process, ZooKeeper and brokers as processes).
PROCESS_STARTERS = frozenset({"ZooKeeperServer", "start_broker_process", "local_cluster"})


@functools.cache
def _calls(function: object) -> list[ast.Call]:
    """The calls in a test function's own source (none if it cannot be read); once per
    function, however many parameters it runs with."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError):
        return []
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _starts_processes(calls: list[ast.Call]) -> bool:
    for call in calls:
        func = call.func
        if isinstance(func, ast.Name) and func.id in PROCESS_STARTERS:
            return True
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == "subprocess" or func.attr.startswith("create_subprocess_"):
                return True
            if func.attr in PROCESS_STARTERS:
                return True
    return False


def _helpers_start_processes(module: object, calls: list[ast.Call], depth: int = 2) -> bool:
    """Whether a function of the tests' own that ``calls`` names (looked up in the test's
    ``module``: ``own_zookeeper()``, ``broker_processes()``) starts processes, following
    such helpers ``depth`` calls deep."""
    if depth == 0:
        return False
    namespace = getattr(module, "__dict__", {})
    for call in calls:
        if not isinstance(call.func, ast.Name):
            continue
        helper = inspect.unwrap(namespace.get(call.func.id))  # a context manager's function
        if not inspect.isfunction(helper) or not helper.__module__.startswith("tests."):
            continue
        inner = _calls(helper)
        if _starts_processes(inner) or _helpers_start_processes(module, inner, depth - 1):
            return True
    return False


def _without_zookeeper(calls: list[ast.Call]) -> bool:
    """Whether the test's own body calls ``kafka_cluster(...)``, each time with
    ``zookeeper=None`` (brokers in this process, no JVM). Anything else that uses the
    factory (ZooKeeper, the default; settings passed as ``**``; a helper calling it) may
    start ZooKeeper."""
    clusters = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id == "kafka_cluster"]
    return bool(clusters) and all(
        any(
            k.arg == "zookeeper" and isinstance(k.value, ast.Constant) and k.value.value is None
            for k in call.keywords
        )
        for call in clusters
    )


def is_slow(item: pytest.Item) -> bool:
    """The tier rule (see the module's docstring)."""
    if item.get_closest_marker("slow"):
        return True
    if any(fnmatch.fnmatch(item.path.stem, pattern) for pattern in SLOW_MODULES):
        return True
    used = set(getattr(item, "fixturenames", ()))
    if used & SLOW_FIXTURES:
        return True
    calls = _calls(getattr(item, "function", None))
    if _starts_processes(calls) or any(_starts_processes(_calls(f)) for f in _fixtures(item)):
        return True
    if _helpers_start_processes(getattr(item, "module", None), calls):
        return True
    return "kafka_cluster" in used and not _without_zookeeper(calls)


def _fixtures(item: pytest.Item) -> list[object]:
    """The functions of the fixtures ``item`` uses (a module's own fixture may start a
    process: a broker, a documentation build)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = getattr(info, "name2fixturedefs", {})
    return [d.func for defs in definitions.values() for d in defs]


#: Modules with tests that build this checkout into a distribution, and the fixture that
#: does it (``None``: every test of the module). They write in the source tree
#: (setuptools' ``build/`` and ``*.egg-info``), so they run on one worker, one at a time.
#: (The wheel's metadata is checked in test_release.py, on the release's own build: a
#: second build for it cost 50 s of a loaded run.)
PACKAGING: dict[str, str | None] = {"test_release": None}


#: Slow tests that start Spark outside tests/test_spark.py (the Spark guide's blocks, the
#: Spark example and benchmark, the demo's Spark stages): one at a time, on one worker,
#: beside test_spark.py's own: two Spark applications at most at once on the machine
#: (four at once on a busy 2-core machine left a Python worker more than two minutes to
#: connect back to its JVM).
_SPARK = re.compile(r"(?<![a-z])spark|^tests/test_demo\.py", re.IGNORECASE)


def _xdist_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group ``item`` runs in (``--dist loadgroup``), if any: a test that
    uses a module-scoped fixture (a Spark session, the built site, a cluster process) runs
    on its module's worker, so the fixture is set up once, not once per worker; the
    packaging tests share one worker (:data:`PACKAGING`); so do the slow tests that
    start Spark outside its module (:data:`_SPARK`)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = getattr(info, "name2fixturedefs", {})
    used = {d.argname for defs in definitions.values() for d in defs if d.scope == "module"}
    if item.path.stem in PACKAGING and PACKAGING[item.path.stem] in (None, *used):
        return "packaging"
    slow = item.get_closest_marker("slow") is not None  # marked by the tier rule first
    if item.path.stem != "test_spark" and slow and _SPARK.search(item.nodeid):
        return "spark"
    return item.path.stem if used else None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the project's default, ``addopts``): three times the cores, at most 8.

    Much of the suite's time is waiting (a broker's flush timer, a timeout, ZooKeeper's
    session expiry, a JVM starting), not computing, so more workers than cores pays; each
    worker runs its own ZooKeeper server. On a 2-core machine kept busy by two other
    processes, README's command took 849 s with four workers and 756 s with six (with a
    few tests made cheaper in between). ``AIOKAFKA07_TEST_WORKERS`` sets the number
    (``-n 0``, or ``-p no:xdist``, runs everything in one process).
    """
    wanted = os.environ.get("AIOKAFKA07_TEST_WORKERS")
    if wanted:
        return int(wanted)
    cores = os.cpu_count() or 1
    if "not slow" in (config.getoption("markexpr", "") or ""):
        # The fast tier computes rather than waits, so a worker past twice the cores
        # only adds its collection (1,131 tests idle: 66-72 s on four, 72-84 s on six).
        return min(8, 2 * cores)
    return min(8, 3 * cores)


settings.register_profile(
    "default",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("quick", parent=settings.get_profile("default"), max_examples=75)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_configure(config: pytest.Config) -> None:
    """The fast loop (``-m "not slow"``) tries each property with half the examples
    (``quick``), a third of its time; README's command, which runs everything, keeps the
    default 150. ``HYPOTHESIS_PROFILE`` set in the environment wins."""
    if "HYPOTHESIS_PROFILE" not in os.environ and config.getoption("markexpr") == "not slow":
        settings.load_profile("quick")


def _implementations() -> list[ModuleType]:
    impls = [_pure]
    try:
        from aiokafka07.protocol import _speedups  # type: ignore[attr-defined]
    except ImportError:
        # CI builds the accelerator; without a compiler only the pure codec exists.
        return impls
    return [_speedups, *impls]


IMPLEMENTATIONS = _implementations()


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def impl(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """Run the test with the given codec implementation active."""
    saved = _accel.impl
    _accel.impl = request.param
    try:
        yield request.param
    finally:
        _accel.impl = saved


@pytest.fixture
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KafkaCluster]:
    """One standalone broker (no ZooKeeper) with two partitions per topic, in this
    process (not through ``kafka_cluster``, whose users may start ZooKeeper)."""
    log_root: Path = tmp_path_factory.mktemp("kafka-logs")
    async with KafkaCluster(1, zookeeper=None, log_root=log_root, num_partitions=2) as running:
        yield running


if os.environ.get("AIOKAFKA07_TEST_LOOP", "asyncio") == "uvloop":

    def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item
    ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
        """Every async test on uvloop (``AIOKAFKA07_TEST_LOOP=uvloop``; nox session
        ``uvloop``): the library must work on the loop an application chooses."""
        import uvloop

        return {"uvloop": uvloop.new_event_loop}
