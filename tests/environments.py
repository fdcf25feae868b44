"""Fresh virtual environments holding this checkout as ``pip install -e '.[a,b]'`` installs
it, with exactly the distributions those extras bring, made without a download: each
distribution is linked from this interpreter's installation (:func:`link_distribution`).

What a documented command or code block needs beyond its extras is not there: a module
the extras do not bring fails to import as it fails for a reader who installed just
them. The checkout is on the path through a ``.pth`` line, as an editable install puts
it; a ``.dist-info`` carries its entry points (the pytest plugin), and ``bin/`` has the
console tools' wrappers, as pip writes them. The environment sees no ``PYTHONPATH``
(:func:`activated`): this checkout is imported through the ``.pth`` line only.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class NotInstalled(Exception):
    """A distribution the extras need is not installed in this interpreter, so it cannot
    be linked into the environment."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name}, which the extras need, is not installed here")
        self.name = name


def load_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, as pip vendors it
        from pip._vendor import tomli as tomllib
    with path.open("rb") as file:
        return tomllib.load(file)


@functools.cache
def pyproject() -> dict[str, Any]:
    """This checkout's pyproject.toml (this interpreter's metadata of aiokafka07 may be
    another checkout's)."""
    return load_toml(ROOT / "pyproject.toml")


def extra_requirements(extras: Iterable[str]) -> list[str]:
    """What ``pip install '.[extras]'`` of this checkout asks for: the dependencies, the
    extras' requirements, and those of the extras they name of aiokafka07 itself
    (``aiokafka07[prometheus]``). No extras: the dependencies alone."""
    from packaging.requirements import Requirement

    project = pyproject()["project"]
    requirements = list(project["dependencies"])
    pending, seen = list(extras), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in project["optional-dependencies"][name]:
            requirement = Requirement(line)
            if requirement.name == project["name"]:
                pending += sorted(requirement.extras)
            else:
                requirements.append(line)
    return requirements


def distributions(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``requirements`` need, their own needs included (each
    as this interpreter has it installed). Raises :class:`NotInstalled` for one missing
    here."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, importlib.metadata.Distribution] = {}
    wanted: dict[str, set[str]] = {}  # name → the extras asked of it
    pending = [Requirement(line) for line in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        extras = wanted.setdefault(name, set())
        if name in found and requirement.extras <= extras:
            continue
        extras |= requirement.extras
        try:
            found[name] = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise NotInstalled(name) from None
        for line in found[name].requires or []:
            needed = Requirement(line)
            if needed.marker is None or any(
                needed.marker.evaluate({"extra": extra}) for extra in ("", *extras)
            ):
                needed.marker = None
                pending.append(needed)
    return list(found.values())


def version() -> str:
    """This checkout's version, read from the source as setuptools reads it
    (``[tool.setuptools.dynamic]``: a literal ``__version__``)."""
    attribute = pyproject()["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attribute.rpartition(".")
    source = ROOT.joinpath(*module.split("."), "__init__.py")
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise LookupError(f"{module}.{name} is not a literal in {source}")


def entry_points() -> dict[str, dict[str, str]]:
    """This checkout's entry points by group, as its metadata lists them: the console
    tools (``[project.scripts]``) and the rest (the pytest plugin)."""
    project = pyproject()["project"]
    groups = {"console_scripts": project.get("scripts", {})}
    groups.update(project.get("entry-points", {}))
    return {group: entries for group, entries in groups.items() if entries}


def write_metadata(site_packages: Path) -> None:
    """The ``.dist-info`` an editable install writes, as much of it as is read here: the
    name, the version, and the entry points (pytest finds the plugin by them)."""
    name = pyproject()["project"]["name"]
    info = site_packages / f"{name}-{version()}.dist-info"
    info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version()}\n"
    (info / "METADATA").write_text(metadata)
    sections = [
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
        for group, entries in entry_points().items()
    ]
    (info / "entry_points.txt").write_text("\n".join(sections))


def console_script(python: Path, target: str) -> str:
    """The wrapper pip writes to ``bin/`` for a console script ``module:function``."""
    module, _, function = target.partition(":")
    return (
        f"#!{python}\n"
        "# -*- coding: utf-8 -*-\n"
        "import re\n"
        "import sys\n"
        f"from {module} import {function.split('.')[0]}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({function}())\n"
    )


def write_scripts(python: Path) -> None:
    """The console tools' wrappers, next to ``python`` (the environment's ``bin/``)."""
    for name, target in entry_points().get("console_scripts", {}).items():
        script = python.parent / name
        script.write_text(console_script(python, target))
        script.chmod(0o755)


def link_distribution(distribution: importlib.metadata.Distribution, site: Path) -> None:
    """Each file of ``distribution`` inside site-packages, linked into ``site``.

    A regular package (a top-level directory with an ``__init__.py``) and the metadata
    directory belong to the distribution alone, so each is one link, its bytecode
    included (a link per file costs about a millisecond: PySpark's environment took 8 s);
    the files of a namespace, which distributions share (``sphinxcontrib/``), and
    top-level modules are linked one by one. A file two distributions share is linked
    once.
    """
    assert distribution.files is not None, f"{distribution.name}: no list of its files"
    base = Path(distribution.locate_file("")).resolve()
    files = [f for f in distribution.files if not f.is_absolute() and f.parts[0] != ".."]
    whole = {
        f.parts[0]
        for f in files
        if len(f.parts) == 2 and (f.name == "__init__.py" or f.parts[0].endswith(".dist-info"))
    }
    made = {site}
    for file in [Path(top) for top in sorted(whole)] + [
        f for f in files if f.parts[0] not in whole and "__pycache__" not in f.parts
    ]:
        link = site / file
        if link.parent not in made:
            link.parent.mkdir(parents=True, exist_ok=True)
            made.add(link.parent)
        with contextlib.suppress(FileExistsError):
            link.symlink_to(base / file)


def environment_with(extras: Iterable[str], where: Path) -> Path:
    """A fresh virtual environment at ``where`` as ``pip install -e '.[extras]'`` of this
    checkout leaves it (no extras: ``pip install -e .``); its python. Raises
    :class:`NotInstalled` before making anything when this interpreter lacks one of the
    distributions."""
    needed = distributions(extra_requirements(extras))
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120
    )
    python = where / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([python, "-c", purelib], text=True).strip())
    for distribution in needed:
        link_distribution(distribution, site)
    (site / f"{pyproject()['project']['name']}_checkout.pth").write_text(f"{ROOT}\n")
    write_metadata(site)
    write_scripts(python)
    return python


def activated(python: Path, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) as a shell with the environment of ``python``
    activated has it: its ``bin/`` first on ``PATH``, ``VIRTUAL_ENV`` set; and without
    ``PYTHONPATH``, which would put other code (the checkout this test runs from) ahead
    of the environment's."""
    env = dict(os.environ if env is None else env)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    where = python.parent.parent
    path = os.pathsep.join(p for p in (str(where / "bin"), env.get("PATH")) if p)
    return {**env, "PATH": path, "VIRTUAL_ENV": str(where)}
