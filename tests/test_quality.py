"""The test command also checks style and types, and that the accelerator was built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiokafka07.producer import batch
from aiokafka07.protocol import implementation

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_lint() -> None:
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_without_pyspark(tmp_path: Path) -> None:
    """PySpark is an optional extra, so the types must check without it as well: mypy
    runs against an interpreter that sees every installed package but pyspark."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    theirs = Path(subprocess.check_output([str(python), "-c", where], text=True).strip())
    # Every site directory of this interpreter (a venv's and, with system site packages,
    # the system's), in path order: the first of two same-named entries is the one used.
    ours = [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    for directory in ours:
        for entry in directory.iterdir():
            link = theirs / entry.name
            if not entry.name.startswith("pyspark") and not link.exists():
                link.symlink_to(entry)
    hidden = subprocess.run([str(python), "-c", "import pyspark"], capture_output=True)
    assert hidden.returncode != 0
    result = run("mypy", "--python-executable", str(python), "--cache-dir", str(tmp_path / "c"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_c_accelerator_is_active_where_it_can_be_built() -> None:
    if os.environ.get("AIOKAFKA07_PURE", "") not in ("", "0"):
        pytest.skip("AIOKAFKA07_PURE forces the pure-Python codec")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here, so the pure-Python codec is the expected one")
    assert implementation() == "c"
    assert batch.implementation() == "c"  # the producer's hot path (_appender.c)


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python -m pip install")]
    assert len(commands) >= 2, "README must open with the main-job and test commands"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci
