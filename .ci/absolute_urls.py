"""Makes the project's URLs in ``pyproject.toml`` absolute, for an upload to PyPI.

    python .ci/absolute_urls.py https://github.com/OWNER/REPO COMMIT

``[project.urls]`` names files of the repository by relative paths (no address is
published for it, and a checkout reads them as they are); PyPI refuses an upload whose
project URLs are not absolute http(s) URLs. The release workflow
(``.github/workflows/release.yml``) runs this in its own checkout before it builds, with
the repository's address and the commit being released, so each URL of the release names
that commit's file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader pip vendors is the same one
    from pip._vendor import tomli as tomllib

#: A ``Label = "value"`` line of a TOML table.
ENTRY = re.compile(r'^(?P<key>[A-Za-z0-9_-]+)\s*=\s*"(?P<value>[^"]*)"\s*$')


def absolute(pyproject: str, repository: str, commit: str) -> str:
    """``pyproject`` with every relative URL of ``[project.urls]`` made a link to that
    file (or directory: ``./``) of ``repository`` at ``commit``; the rest unchanged."""
    base = repository.rstrip("/")
    lines = pyproject.splitlines(keepends=True)
    section = ""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
            continue
        match = ENTRY.match(stripped)
        if section != "[project.urls]" or match is None or "://" in match["value"]:
            continue
        path = match["value"].removeprefix("./")
        url = f"{base}/blob/{commit}/{path}" if path else f"{base}/tree/{commit}"
        lines[i] = f'{match["key"]} = "{url}"\n'
    result = "".join(lines)
    urls = tomllib.loads(result)["project"]["urls"]
    relative = [url for url in urls.values() if not re.match(r"https?://", url)]
    if relative:
        raise ValueError(f"still relative in [project.urls]: {relative}")
    return result


if __name__ == "__main__":
    if len(sys.argv) != 3 or not re.match(r"https?://", sys.argv[1]):
        sys.exit(f"usage: python {sys.argv[0]} https://github.com/OWNER/REPO COMMIT")
    target = Path(__file__).resolve().parent.parent / "pyproject.toml"
    target.write_text(absolute(target.read_text(), sys.argv[1], sys.argv[2]))
    for key, url in tomllib.loads(target.read_text())["project"]["urls"].items():
        print(f"{key}: {url}")
