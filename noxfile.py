"""CI sessions beyond README's test command (which runs the whole suite on one Python).

* ``fast``: the fast tier (``pytest -m "not slow"``) on every other supported Python,
  with the spark extra (PySpark 4 installs on each: 4.2 on 3.10, 4.3 on 3.11 to 3.13);
* ``no-spark``: without the spark extra (it is optional), the fast tier and the slow
  tests that the extra's absence changes (``NO_SPARK_SLOW``): every one that needs
  PySpark must skip cleanly, and the demo runs without its Spark stages. The other slow
  tests never touch PySpark: README's command runs them;
* ``uvloop``: the fast tier and the client's integration tests (producer, consumers,
  connections, faults, the services' endpoints) with every async test on uvloop (the
  ``uvloop`` extra; ``AIOKAFKA07_TEST_LOOP=uvloop``, see tests/conftest.py).

``.ci/run`` runs them all after README's command; ``nox -s fast-3.13`` runs one. Each
session installs the package in editable mode, so the tests import this checkout, and
arguments after ``--`` replace the session's pytest arguments. nox looks for
``python3.10`` etc. on PATH; with pyenv, select the versions first (``.ci/run`` sets
``PYENV_VERSION``). In CI (``CI`` set) a missing interpreter fails the run.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["fast", "no-spark", "uvloop"]

#: Every Python the package supports (pyproject.toml's requires-python and classifiers say
#: the same). README's command runs the whole suite on the CI machine's default, 3.11.
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
FULL_SUITE_PYTHON = "3.11"


@nox.session(python=[v for v in SUPPORTED if v != FULL_SUITE_PYTHON])
def fast(session: nox.Session) -> None:
    """The fast tier on one Python, with the spark extra."""
    session.install("-e", ".[test,spark]")
    session.run("python", "-m", "pytest", *(session.posargs or ["-m", "not slow"]))


#: The slow tests whose course depends on whether PySpark is installed (a ``-k``
#: expression): Spark's modules and fixtures, its benchmark, example and docs blocks (each
#: names Spark in its id), and the demo (Spark stages optional). Only the demo's module
#: (``aiokafka07/demo.py``) and the Spark package import PySpark.
NO_SPARK_SLOW = "spark or demo"


@nox.session(python="3.12", name="no-spark")
def no_spark(session: nox.Session) -> None:
    """Without the spark extra: the fast tier, and the slow tests the extra changes (the
    Spark tests skip, never error; the demo runs without Spark)."""
    session.install("-e", ".[test]")
    session.run("python", "-c", "import importlib.util as u; assert not u.find_spec('pyspark')")
    if session.posargs:
        session.run("python", "-m", "pytest", *session.posargs)
        return
    session.run("python", "-m", "pytest", "-m", "not slow")
    session.run("python", "-m", "pytest", "-m", "slow", "-k", NO_SPARK_SLOW)


#: The client's integration tests run on uvloop besides the fast tier: everything that
#: drives sockets, ZooKeeper and faults from this process (the tools, Spark and the demo
#: run their own processes on asyncio's loop).
UVLOOP_MODULES = (
    "tests/test_aiohttp_app.py",
    "tests/test_client_metrics.py",
    "tests/test_confirm.py",
    "tests/test_connection.py",
    "tests/test_group_consumer.py",
    "tests/test_group_edges.py",
    "tests/test_group_faults.py",
    "tests/test_hostile_broker.py",
    "tests/test_logging_handler.py",
    "tests/test_pool.py",
    "tests/test_producer.py",
    "tests/test_producer_faults.py",
    "tests/test_simple_consumer.py",
)


@nox.session(python="3.12")
def uvloop(session: nox.Session) -> None:
    """Every async test of the fast tier and of the client's integration modules on
    uvloop: the library works on the loop an application chooses."""
    session.install("-e", ".[test,uvloop]")
    env = {"AIOKAFKA07_TEST_LOOP": "uvloop"}
    if session.posargs:
        session.run("python", "-m", "pytest", *session.posargs, env=env)
        return
    session.run("python", "-m", "pytest", "-m", "not slow", env=env)
    session.run("python", "-m", "pytest", "-m", "slow", *UVLOOP_MODULES, env=env)
