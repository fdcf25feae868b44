"""The suite's own configuration: how pytest-xdist spreads the tests over its workers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .nested import outside_this_run

ROOT = Path(__file__).resolve().parent.parent

#: A plugin that writes each test's id as a pytest-xdist worker has it once collected
#: (``<id>@<group>`` for a test in a group, which ``--dist loadgroup`` keeps on one
#: worker), then runs nothing. Last, after xdist's own hook, which adds the suffix.
RECORDER = """
import os
import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    with open(os.environ["GROUPS_RECORD"], "a") as record:
        for item in items:
            record.write(item.nodeid + "\\n")
    items[:] = []
"""


def test_module_fixtures_are_set_up_once_and_packaging_runs_on_one_worker(
    tmp_path: Path,
) -> None:
    """A test that uses a module-scoped fixture runs on its module's worker (the built
    site, a cluster process: set up once, not once per worker), the packaging tests
    (they write setuptools' build directories in the tree) on one worker, the slow tests
    that start Spark outside test_spark.py on one worker, and the rest anywhere."""
    (tmp_path / "group_recorder.py").write_text(RECORDER)
    modules = [
        "tests/test_docs.py", "tests/test_readme.py", "tests/test_units.py", "tests/test_demo.py",
        "tests/test_release.py",
    ]  # fmt: skip
    record = tmp_path / "ids"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "-p", "group_recorder",
         *modules],
        cwd=ROOT,
        env={**outside_this_run(), "PYTHONPATH": str(tmp_path), "GROUPS_RECORD": str(record)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: none ran
    groups: dict[str, str] = {}
    for nodeid in record.read_text().splitlines():
        grouped = re.fullmatch(r"(.*)@(test_\w+|packaging|spark)", nodeid)
        groups[grouped[1] if grouped else nodeid] = grouped[2] if grouped else "-"
    site = [n for n in groups if "test_site_builds_without_warnings" in n]
    assert site
    assert all(groups[n] == "test_docs" for n in site)
    release = [n for n in groups if n.startswith("tests/test_release.py")]
    assert any("test_wheel_metadata" in n for n in release)
    assert all(groups[n] == "packaging" for n in release), release
    blocks = [n for n in groups if n.startswith("tests/test_readme.py") and groups[n] != "-"]
    spark_blocks = [n for n in blocks if "spark" in n]
    assert spark_blocks  # Spark starts in them: on the worker of the slow Spark tests
    assert {groups[n] for n in spark_blocks} == {"spark"}
    assert {groups[n] for n in blocks if n not in spark_blocks} == {"test_readme"}
    demo = [n for n in groups if n.startswith("tests/test_demo.py")]
    assert demo
    assert {groups[n] for n in demo} == {"spark"}
    units = [n for n in groups if n.startswith("tests/test_units.py")]
    assert units
    assert all(groups[n] == "-" for n in units)


def test_a_test_starting_processes_through_a_helper_of_its_module_is_slow() -> None:
    """The tier rule follows the tests' own helpers: a test that starts ZooKeeper and
    broker processes through ``own_zookeeper()`` and ``broker_processes()`` is slow, not
    in the fast loop."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-n", "0", "-m", "not slow",
         "-p", "no:cacheprovider", "tests/test_exporter.py"],
        cwd=ROOT,
        env=outside_this_run(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    fast = result.stdout
    assert "tests/test_exporter.py::test_bad_port_is_refused" in fast
    assert "test_survives_zookeeper_stopped_and_started" not in fast
    assert "test_unknown_lag_is_never_zero" not in fast
