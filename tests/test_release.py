"""The release: ``python -m build`` makes an sdist and a wheel that ``twine check`` passes;
the wheel, installed into a fresh virtual environment, runs on the C accelerators; the
sdist, installed where no C compiler exists, installs all the same and runs on the pure
twins, and says so at DEBUG.

Each virtual environment holds what was installed from the built file and, linked from
this interpreter's site directories, only the distributions the wheel's own metadata
requires (and setuptools, to build the sdist): an import that needs an undeclared
dependency fails here, as it would for a user. Nothing is downloaded: the build and the
sdist's install use this environment's setuptools (``--no-isolation``), which the test
extra brings at the version ``[build-system]`` needs, as it brings ``build`` and ``twine``.
``.ci/check_install.py`` is the check run inside each environment; cibuildwheel runs it on
every wheel it builds.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / ".ci" / "check_install.py"

#: Not part of a checkout's sources: build artefacts, caches, environments, and the
#: tests (the sdist prunes them; they need a clone). Copied without them, the build
#: leaves nothing behind in the checkout (setuptools writes its egg-info into the tree).
NOT_SOURCES = shutil.ignore_patterns(
    ".git", "*.so", "__pycache__", "*.egg-info", "build", "dist", "_build", ".venv*",
    ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", ".bytecode_cache",
    "tests",
)  # fmt: skip


def clean_env(**changes: str) -> dict[str, str]:
    """This environment without what would change what is imported or built: the
    checkout on ``PYTHONPATH``, ``AIOKAFKA07_PURE``, and a compiler named in ``CC``."""
    drop = {"PYTHONPATH", "AIOKAFKA07_PURE", "CC", "CXX", "LDSHARED", "CPP"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(changes)
    return env


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs ``command``; its stdout and stderr together, or a failure that shows them."""
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from a copy of the checkout as a maintainer builds
    them (``python -m build`` builds the wheel from the sdist)."""
    setuptools = importlib.metadata.version("setuptools")
    assert int(setuptools.split(".")[0]) >= 77, (
        f"setuptools {setuptools} here; the test extra installs >= 77: "
        "python -m pip install -e '.[test,spark]'"
    )
    work = tmp_path_factory.mktemp("release")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    out = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        cwd=work,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    return out


def only(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def requirements_of(metadata: str) -> list[str]:
    """The names of the distributions a built package's METADATA (or PKG-INFO) requires
    without extras."""
    return required(email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or [])


def required(lines: list[str]) -> list[str]:
    """The names in ``Requires-Dist`` lines that apply here without extras."""
    from packaging.requirements import Requirement

    names = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(requirement.name)
    return names


def closure(names: list[str]) -> Iterator[importlib.metadata.Distribution]:
    """These installed distributions and, recursively, what each requires."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        found = importlib.metadata.distribution(name)
        todo.extend(required(found.requires or []))
        yield found


def venv_with(path: Path, distributions: list[str]) -> Path:
    """A fresh virtual environment (no pip of its own: pip installs into it from here
    with ``--python``) with ``distributions``, and what they require, linked in from
    this interpreter's site directories; its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120
    )
    python = path / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([str(python), "-c", where], text=True).strip())
    for found in closure(distributions):
        for top in {Path(str(f)).parts[0] for f in found.files or [] if ".." not in str(f)}:
            link = site / top
            if not link.exists() and top != "__pycache__":
                link.symlink_to(found.locate_file(top))
    return python


def test_the_sdist_and_the_wheel_pass_twine_check(dist: Path) -> None:
    output = run(sys.executable, "-m", "twine", "check", "--strict", *sorted(dist.iterdir()),
                 cwd=dist)  # fmt: skip
    assert output.count("PASSED") == 2, output


def test_the_wheel_holds_the_accelerators_and_the_sdist_their_sources(dist: Path) -> None:
    wheel = zipfile.ZipFile(only(dist, "*.whl")).namelist()
    for module in ("protocol/_speedups", "producer/_appender"):
        assert any(n.startswith(f"aiokafka07/{module}.cpython-") for n in wheel), module
        assert not any(n.endswith(f"{module}.c") for n in wheel), module
    assert "aiokafka07/py.typed" in wheel
    assert "pyspark_kafka07.py" in wheel  # PySpark's data source lookup finds it
    assert not any(n.startswith("tests/") for n in wheel)
    with tarfile.open(only(dist, "*.tar.gz")) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"aiokafka07/protocol/_speedups.c", "aiokafka07/producer/_appender.c"} <= names
    assert {"LICENSE", "README.md", "CHANGELOG.md", "docs/index.md"} <= names
    assert not any(n.endswith(".so") for n in names)


def test_the_wheel_runs_on_the_c_accelerators(dist: Path, tmp_path: Path) -> None:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here: the wheel was built without its accelerators")
    wheel = only(dist, "*.whl")
    requires = requirements_of(zipfile.ZipFile(wheel).read(
        next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    ).decode())  # fmt: skip
    assert {"aiozk", "cramjam"} <= set(requires)
    python = venv_with(tmp_path / "venv", requires)
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
        "--no-index", "--no-cache-dir", wheel, cwd=tmp_path)  # fmt: skip
    output = run(python, CHECK, "c", cwd=tmp_path)
    assert f"from {tmp_path / 'venv'}" in output, output  # the installed copy, not a checkout
    assert "{'codec': 'c', 'producer': 'c'}" in output, output
    assert "round trips: ok" in output, output
    assert "the codec runs on its C accelerator (aiokafka07.protocol._speedups)" in output


def test_the_sdist_installs_without_a_compiler_on_the_pure_twins(
    dist: Path, tmp_path: Path
) -> None:
    sdist = only(dist, "*.tar.gz")
    with tarfile.open(sdist) as archive:
        member = next(n for n in archive.getnames() if n.endswith("/PKG-INFO"))
        extracted = archive.extractfile(member)
        assert extracted is not None
        requires = requirements_of(extracted.read().decode())
    python = venv_with(tmp_path / "venv", [*requires, "setuptools"])
    # No compiler: only the environment's own bin on PATH (setuptools runs the compiler
    # Python was built with, found on PATH, unless CC says otherwise; clean_env drops CC).
    bare = str(python.parent)
    assert shutil.which("gcc", path=bare) is None
    assert shutil.which("cc", path=bare) is None
    pip = run(sys.executable, "-m", "pip", "--python", python, "install", "-v", "--no-deps",
              "--no-index", "--no-cache-dir", "--no-build-isolation", sdist,
              cwd=tmp_path, env=clean_env(PATH=bare))  # fmt: skip
    # setuptools tried both (they are in the sdist's build) and skipped each, as optional.
    for module in ("aiokafka07.protocol._speedups", "aiokafka07.producer._appender"):
        assert f'building extension "{module}" failed' in pip, pip[-4000:]
    assert not list((tmp_path / "venv").rglob("_speedups*.so"))
    assert not list((tmp_path / "venv").rglob("_appender*.so"))
    output = run(python, CHECK, "python", cwd=tmp_path, env=clean_env(PATH=bare))
    assert f"from {tmp_path / 'venv'}" in output, output
    assert "{'codec': 'python', 'producer': 'python'}" in output, output
    assert "round trips: ok" in output, output
    for line in (
        "DEBUG aiokafka07.protocol: the C accelerator aiokafka07.protocol._speedups is not built (",
        "no C compiler when this was installed?): the codec runs on its pure-Python twin",
        "DEBUG aiokafka07.producer: the C accelerator aiokafka07.producer._appender is not built (",
        "the producer's hot path runs on its pure-Python twin",
    ):
        assert line in output, output


def test_wheel_metadata_has_urls_classifiers_and_keywords(dist: Path) -> None:
    """The wheel's METADATA, as an index reads it: project URLs naming files of the
    repository, classifiers matching requires-python and the Pythons CI tests, keywords,
    author, maintainer, and the docs extra the test extra includes."""
    with zipfile.ZipFile(only(dist, "*.whl")) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL"))
    assert set(urls) == {"Documentation", "Source", "Changelog", "Issues"}
    for url in urls.values():
        # Relative to the repository: each names a file or folder of it.
        assert (ROOT / url.partition("#")[0]).exists(), url

    classifiers = metadata.get_all("Classifier")
    # requires-python admits exactly the versions the classifiers name (each tested in
    # CI: noxfile.py's SUPPORTED), from the lowest to the highest.
    # (The wheel's field lists the specifiers in any order.)
    specifiers = sorted(metadata["Requires-Python"].split(","), key=lambda x: x[0] != ">")
    bounds = re.fullmatch(r">=3\.(\d+)(?:,<3\.(\d+))?", ",".join(specifiers))
    assert bounds is not None, metadata["Requires-Python"]
    versions = sorted(
        int(c.rpartition(".")[2])
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert versions[0] == int(bounds[1])
    assert versions == list(range(versions[0], versions[-1] + 1))
    if bounds[2] is not None:
        assert int(bounds[2]) == versions[-1] + 1
    noxfile = (ROOT / "noxfile.py").read_text()
    tested = re.search(r"^SUPPORTED = \((.*)\)$", noxfile, re.MULTILINE)
    assert tested is not None
    assert [int(v.strip(' "').rpartition(".")[2]) for v in tested[1].split(",")] == versions
    for prefix in ("Development Status :: ", "Operating System :: ", "Topic :: "):
        assert any(c.startswith(prefix) for c in classifiers), prefix
    assert "kafka" in metadata["Keywords"].split(",")
    assert metadata["Author"] or metadata["Author-email"]
    assert metadata["Maintainer"] or metadata["Maintainer-email"]
    # The docs extra, which the test extra includes, so the suite builds the site.
    assert "docs" in metadata.get_all("Provides-Extra")
    requirements = metadata.get_all("Requires-Dist")
    assert any(r.startswith("sphinx") and 'extra == "docs"' in r for r in requirements)
    assert any("aiokafka07[docs]" in r and 'extra == "test"' in r for r in requirements)


def test_the_release_makes_the_project_urls_absolute() -> None:
    """PyPI refuses relative project URLs, which pyproject.toml has (the repository's
    files): the release workflow makes them absolute with .ci/absolute_urls.py."""
    spec = importlib.util.spec_from_file_location(
        "absolute_urls", ROOT / ".ci" / "absolute_urls.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tomllib = module.tomllib  # the standard library's, or tomli on Python 3.10
    pyproject = (ROOT / "pyproject.toml").read_text()
    before = tomllib.loads(pyproject)
    assert any("://" not in url for url in before["project"]["urls"].values())
    after = tomllib.loads(module.absolute(pyproject, "https://github.com/o/r/", "abc123"))
    base = "https://github.com/o/r"
    assert after["project"]["urls"] == {
        key: url if "://" in url
        else f"{base}/tree/abc123" if url == "./"
        else f"{base}/blob/abc123/{url}"
        for key, url in before["project"]["urls"].items()
    }  # fmt: skip
    assert after["project"]["urls"]["Changelog"] == f"{base}/blob/abc123/CHANGELOG.md"
    assert {k: v for k, v in after.items() if k != "project"} == {
        k: v for k, v in before.items() if k != "project"
    }
    assert {k: v for k, v in after["project"].items() if k != "urls"} == {
        k: v for k, v in before["project"].items() if k != "urls"
    }
    release = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert release.count("python .ci/absolute_urls.py") == 2  # before each build
