"""The pytest plugin installs nothing unless the project opts in.

The plugin is loaded in every project that installs aiokafka07, so a missing ZooKeeper
must not make it run apt-get on its own. Each test runs pytest in a subprocess, in a
project of its own, where ZooKeeper looks missing (the plugin is pointed at an empty jar
directory) and ``apt-get`` on PATH is a script that only records that it was called.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .nested import outside_this_run

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
from pathlib import Path

from aiokafka07.testing import zookeeper_server

# ZooKeeper looks missing: no jars where Debian puts them.
zookeeper_server.JAVA_DIR = Path(__file__).parent / "no-jars"
"""

TEST = """
def test_needs_zookeeper(zookeeper_server):
    pass
"""


def run_pytest(tmp_path: Path, *args: str, ini: str = "") -> tuple[str, bool]:
    """Run a one-test project; return pytest's output and whether apt-get was called."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(TEST)
    (tmp_path / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    called = tmp_path / "apt-get-called"
    fake = bin_dir / "apt-get"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    fake.chmod(0o755)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {
        **outside_this_run(),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": path,
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout + result.stderr, called.exists()


def test_without_opting_in_a_missing_zookeeper_is_an_error_that_says_what_to_do(
    tmp_path: Path,
) -> None:
    output, apt_get_called = run_pytest(tmp_path)
    assert not apt_get_called
    assert "1 error" in output
    assert "ZooKeeperNotInstalled" in output
    assert "apt-get install -y zookeeper" in output  # what to run
    assert "--aiokafka07-install-zookeeper" in output  # or how to let the fixture do it


@pytest.mark.skipif(
    not (hasattr(os, "geteuid") and os.geteuid() == 0 and Path("/etc/debian_version").exists()),
    reason="the fixture installs only as root on Debian",
)
@pytest.mark.parametrize(
    ("args", "ini"),
    [((), "aiokafka07_install_zookeeper = true"), (("--aiokafka07-install-zookeeper",), "")],
    ids=["ini", "option"],
)
def test_opting_in_lets_the_fixture_run_apt_get(
    tmp_path: Path, args: tuple[str, ...], ini: str
) -> None:
    output, apt_get_called = run_pytest(tmp_path, *args, ini=ini)
    assert apt_get_called
    assert "apt-get -o DPkg::Lock::Timeout=300 update failed with exit code 1" in output
