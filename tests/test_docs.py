"""The documentation: the site builds with warnings as errors and documents every public
name and every console tool; README stays a front page; the migration tables name only
calls the code has, with those signatures; and the wheel carries the metadata a package
index page shows.

The site build is the one command README gives (``python -m sphinx -W ...``), into a
temporary directory, in a fresh virtual environment that holds only what README's
``pip install -e '.[docs]'`` installs (``tests/environments.py``): a module autodoc
imports that the ``docs`` extra does not bring fails it. With ``-W`` a warning fails
it: a broken link or anchor, a docstring reference to a name that does not exist, a
public name without a reference entry, a console tool without a page
(``docs/_ext/aiokafka07_docs.py``). Sphinx does
not check the anchors of the links it writes itself (the source pages' "[docs]" links):
every internal link of the built HTML is checked here. The code blocks of the pages run
in ``tests/test_readme.py``.
"""

from __future__ import annotations

import ast
import html
import html.parser
import inspect
import re
import subprocess
import typing
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aiokafka07
from aiokafka07 import cli
from aiokafka07.group import Stream
from aiokafka07.producer import BatchBuilder

from .environments import activated, environment_with

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


# -- the site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built fresh as README says (``-W``: a warning fails it) into a temporary
    directory, in an environment with nothing but the ``docs`` extra. One build serves
    every test of the site."""
    out = tmp_path_factory.mktemp("site")
    python = environment_with({"docs"}, out / "venv")
    options = ["-W", "--keep-going", "-q", "-E", "-b", "html", "-d", str(out / "doctrees")]
    result = subprocess.run(
        [str(python), "-m", "sphinx", *options, str(DOCS), str(out / "html")],
        cwd=ROOT,
        env=activated(python),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    # -q leaves only warnings and errors: there must be none.
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr
    return out / "html"


def inventory(site: Path) -> dict[str, str]:
    """The site's objects.inv: documented name → its role (``py:class``, ...)."""
    raw = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = raw.index(b"\n", header_end) + 1
    names = {}
    for line in zlib.decompress(raw[header_end:]).decode().splitlines():
        match = re.match(r"(\S+)\s+(\S+)\s+-?\d+\s+\S+", line)
        if match:
            names[match[1]] = match[2]
    return names


def test_site_builds_without_warnings(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "producer.html").is_file()


def test_the_docs_extra_is_all_the_build_imports(tmp_path: Path) -> None:
    """The environment the site is built in has the docs extra and nothing else: not the
    test extra's packages (which once hid that the reference needs prometheus-client)."""
    python = environment_with({"docs"}, tmp_path / "venv")
    env = activated(python)
    probe = "import importlib.util as u; print([m for m in %r if u.find_spec(m)])"
    present = ["sphinx", "myst_parser", "furo", "pytest", "prometheus_client", "aiokafka07"]
    absent = ["hypothesis", "mypy", "aiohttp", "pyspark", "nox"]
    found = subprocess.check_output(
        [str(python), "-c", probe % (present + absent)], env=env, cwd=tmp_path, text=True
    )
    assert ast.literal_eval(found) == present


# -- links inside the site -----------------------------------------------------------------


class _Page(html.parser.HTMLParser):
    """The ids a page defines and the links it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)
            elif name == "href" and tag == "a":
                self.links.append(value)


def broken_links(site: Path) -> list[str]:
    """Every link between the site's pages (``page.html#anchor``, ``#anchor``) whose page
    or anchor does not exist: ``"from.html: href"``. Links elsewhere are not followed."""
    pages: dict[Path, _Page] = {}
    for path in site.rglob("*.html"):
        page = pages[path.resolve()] = _Page()
        page.feed(path.read_text())
        page.close()
    broken = []
    for path, page in sorted(pages.items()):
        for href in page.links:
            parsed = urllib.parse.urlsplit(href)
            if parsed.scheme or parsed.netloc:
                continue  # another site
            if parsed.path and not parsed.path.endswith(".html"):
                continue  # a file: a stylesheet, a download, an image
            target = (path.parent / urllib.parse.unquote(parsed.path)).resolve()
            if not parsed.path:
                target = path  # an anchor of the page itself
            fragment = urllib.parse.unquote(parsed.fragment)
            if target not in pages or (fragment and fragment not in pages[target].ids):
                broken.append(f"{path.relative_to(site.resolve())}: {href}")
    return broken


def test_every_internal_link_and_anchor_exists(site: Path) -> None:
    """Including the links Sphinx does not check: the "[docs]" links of the source pages
    (once 19 pointed at ids no page had: codec.html#aiokafka07.gzip_compress)."""
    assert broken_links(site) == []
    viewcode = (site / "_modules" / "aiokafka07" / "protocol" / "compression.html").read_text()
    assert "codec.html#aiokafka07.protocol.gzip_compress" in viewcode


def test_the_link_check_finds_a_missing_page_or_anchor(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#there">ok</a> <a href="#top">ok</a> <a href="#">top</a>'
        '<a href="https://example.org/x.html#y">elsewhere</a> <a href="_static/f.css">f</a>'
        '<p id="top">'
    )
    (tmp_path / "sub" / "page.html").write_text(
        '<div id="there"></div><a href="../index.html#nowhere">bad</a>'
        '<a href="gone.html">bad</a> <a href="../index.html#top">ok</a>'
    )
    assert broken_links(tmp_path) == [
        "sub/page.html: ../index.html#nowhere",
        "sub/page.html: gone.html",
    ]


def test_no_empty_bases_label(site: Path) -> None:
    """A class that derives from ``object`` alone shows no "Bases:" (it showed the label
    with nothing after it); a class with bases still shows them."""
    reference = site / "reference"
    empty = [
        p.name for p in reference.glob("*.html") if re.search(r"<p>Bases:\s*</p>", p.read_text())
    ]
    assert empty == []
    errors = (reference / "errors.html").read_text()
    assert re.search(r"<p>Bases: <a [^>]*href=\"#aiokafka07.errors.KafkaError\"", errors)


class _Sidebar(html.parser.HTMLParser):
    """The links of Furo's navigation tree (``div.sidebar-tree``)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0  # of divs, inside the tree; 0 outside it
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "div" and (self.depth or "sidebar-tree" in (dict(attrs).get("class") or "")):
            self.depth += 1
        elif tag == "a" and self.depth:
            self.links.append(dict(attrs).get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self.depth:
            self.depth -= 1


def test_each_page_is_in_the_sidebar_once(site: Path) -> None:
    """A page in two tables of contents is listed twice (Errors was: under Reference and
    under the API reference)."""
    sidebar = _Sidebar()
    sidebar.feed((site / "index.html").read_text())
    assert "reference/errors.html" in sidebar.links
    assert [link for link in set(sidebar.links) if sidebar.links.count(link) > 1] == []


def test_wide_tables_fit_the_page(site: Path) -> None:
    """The metrics table (five columns of long names) ran off the page's right edge: a code
    span in a table cell may now break (docs/_static/aiokafka07.css)."""
    page = (site / "operations" / "monitoring.html").read_text()
    assert "_static/aiokafka07.css" in page
    style = (site / "_static" / "aiokafka07.css").read_text()
    rule = re.search(r"table\.docutils td code\.literal span\.pre \{([^}]*)\}", style)
    assert rule is not None
    assert "white-space: normal" in rule[1]
    assert "overflow-wrap: anywhere" in rule[1]


def test_every_public_name_has_a_reference_entry(site: Path) -> None:
    documented = inventory(site)
    missing = []
    for name in aiokafka07.__all__:
        candidates = [f"aiokafka07.{name}", f"aiokafka07.errors.{name}"]
        if not any(candidate in documented for candidate in candidates):
            missing.append(name)
    assert missing == []
    # Including the methods of the main classes, not only the classes.
    for method in ("Producer.send", "Consumer.getmany", "SimpleConsumer.fetch"):
        assert documented[f"aiokafka07.{method}"] == "py:method"


def test_each_console_tool_has_a_page_with_its_help(site: Path) -> None:
    for command in cli.command_names():
        # A subcommand is documented on its command's page (bridge offsets: bridge.html).
        page = (site / "tools" / f"{command.split()[0]}.html").read_text()
        usage = html.escape(f"usage: aiokafka07 {command}", quote=False)
        assert usage in page, command
    assert "usage: aiokafka07 [--debug] COMMAND" in (site / "tools" / "index.html").read_text()


def test_readme_is_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(((?:docs/)[^)#]+)", readme):
        assert (ROOT / target).is_file(), target


def test_no_page_cites_a_file_the_repository_lacks() -> None:
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        assert "DESIGN.md" not in page.read_text(), page


@pytest.mark.parametrize("page", ["operations/monitoring.md", "tools/exporter.md"])
def test_the_exporter_pages_install_from_a_checkout(page: str) -> None:
    """aiokafka07 is not on a package index, so ``pip install 'aiokafka07[exporter]'``
    fails for a reader with a checkout: the pages give the checkout's command (as
    getting-started.md, and the exporter's own error, do), and the index's form only
    labelled as such."""
    from aiokafka07.tools.exporter import INSTALL

    text = (DOCS / page).read_text()
    checkout = "python -m pip install -e '.[exporter]'"
    assert checkout in text
    assert checkout in INSTALL
    assert checkout in (DOCS / "getting-started.md").read_text()
    published = [m.start() for m in re.finditer(r"pip install '?aiokafka07\[", text)]
    for start in published:
        assert "installed from an index" in " ".join(text[start - 120 : start].split()), page


def test_nothing_gives_an_index_install_unlabelled() -> None:
    """No page, docstring, example or message tells a reader to ``pip install
    'aiokafka07[...]'`` (which fails: aiokafka07 is on no package index) unless it is
    labelled as the form for a package installed from an index; messages say it through
    one helper."""
    from aiokafka07._install import install_hint

    hint = install_hint("spark")
    assert "python -m pip install -e '.[spark]'" in hint
    assert "installed from an index: python -m pip install 'aiokafka07[spark]'" in hint
    files = [
        *DOCS.rglob("*.md"),
        *(ROOT / "aiokafka07").rglob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
        ROOT / "README.md",
    ]
    found = []
    for path in files:
        if "_build" in path.parts or path.name == "_install.py":
            continue
        text = path.read_text()
        for match in re.finditer(r"pip install '?aiokafka07\[", text):
            before = " ".join(text[max(match.start() - 120, 0) : match.start()].split())
            if "installed from an index" not in before:
                found.append(
                    f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
                )
    assert found == []


# -- the migration tables ------------------------------------------------------------------

#: What a table's right-hand column calls its objects (each page says so above its table).
RECEIVERS: dict[str, type] = {
    "producer": aiokafka07.Producer,
    "consumer": aiokafka07.Consumer,
    "simple": aiokafka07.SimpleConsumer,
    "conn": aiokafka07.BrokerConnection,
    "batch": BatchBuilder,
    "stream": Stream,
    "record": aiokafka07.ConsumerRecord,
    "tp": aiokafka07.TopicPartition,
    "handler": aiokafka07.KafkaHandler,
}
MIGRATION_PAGES = ["migration-java.md", "migration-aiokafka.md"]


def aiokafka07_cells(page: Path) -> Iterator[tuple[int, str]]:
    """(line, cell) of every table's aiokafka07 column."""
    column = None
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if column is None:
            column = next(i for i, c in enumerate(cells) if c.startswith("aiokafka07"))
        elif not set(line) <= set("|-: "):
            yield number, cells[column]


def resolve_name(name: str) -> Any:
    """A name the tables use bare (``Consumer``, an error class), or None."""
    for namespace in (aiokafka07, aiokafka07.errors, aiokafka07.group):
        if hasattr(namespace, name):
            return getattr(namespace, name)
    return None


def dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def has_attribute(cls: type, name: str) -> bool:
    """A class attribute, a field, or an attribute ``__init__`` sets."""
    if hasattr(cls, name) or name in getattr(cls, "__annotations__", {}):
        return True
    return any(
        re.search(rf"\bself\.{name}\b\s*[:=]", inspect.getsource(klass))
        for klass in cls.__mro__
        if klass.__module__.startswith("aiokafka07")
    )


class TableChecker(ast.NodeVisitor):
    """Every call and attribute of a code span, against the code."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.errors: list[str] = []
        self.checked = 0
        # The awaited nodes themselves, not their id(): a checker visits several trees, and
        # the id of a node from a tree already freed can be reused by a node of the next.
        self.awaited: set[ast.expr] = set()

    def visit_Await(self, node: ast.Await) -> None:
        self.awaited.add(node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        target = self.callable_of(node.func)
        if target is not None:
            function, bound = target
            self.check_call(node, function, bound)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = dotted(node)
        if name is not None and name.startswith("aiokafka07."):
            self.checked += 1
            self.resolve(name)
            return  # its parts are prefixes of the name just checked
        if isinstance(node.value, ast.Name) and node.value.id in RECEIVERS:
            cls = RECEIVERS[node.value.id]
            self.checked += 1
            if not has_attribute(cls, node.attr):
                self.errors.append(f"{self.where}: {cls.__name__} has no {node.attr!r}")
        self.generic_visit(node)

    def callable_of(self, func: ast.expr) -> tuple[Any, bool] | None:
        """The function a call calls, and whether it is called on an instance."""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            cls = RECEIVERS.get(func.value.id)
            if cls is not None:
                if not hasattr(cls, func.attr):
                    return None  # reported by visit_Attribute
                found = inspect.getattr_static(cls, func.attr)
                if isinstance(found, property):
                    # A property whose value is called (``consumer.subscription()``):
                    # the call binds to its return type's ``__call__``.
                    returned: Any = typing.get_type_hints(found.fget).get("return")
                    mro = returned.__mro__ if isinstance(returned, type) else ()
                    if not any("__call__" in vars(klass) for klass in mro):
                        self.errors.append(f"{self.where}: {func.attr} is not callable")
                        return None
                    return returned.__call__, True
                return getattr(cls, func.attr), True
        name = dotted(func)
        if name is None or not (name[0].isupper() or name.startswith("aiokafka07.")):
            return None  # a placeholder of the table (``choose(key, n)``)
        obj = self.resolve(name)
        return None if obj is None else (obj, False)

    def resolve(self, name: str) -> Any:
        """A library name (``Consumer``, ``BrokerConnection.open``, ``aiokafka07.x.y``),
        or None after reporting that it does not exist."""
        head, *rest = name.split(".")
        obj = aiokafka07 if head == "aiokafka07" else resolve_name(head)
        for part in rest:
            if obj is None or not hasattr(obj, part):
                obj = None
                break
            obj = getattr(obj, part)
        if obj is None:
            self.errors.append(f"{self.where}: {name} does not exist")
        return obj

    def check_call(self, node: ast.Call, function: Any, bound: bool) -> None:
        self.checked += 1
        name = getattr(function, "__qualname__", repr(function))
        signature = inspect.signature(function)
        if bound:
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        keywords = {k.arg: None for k in node.keywords if k.arg is not None}
        positional = [None] * sum(not isinstance(a, ast.Starred) for a in node.args)
        try:
            if starred:
                signature.bind_partial(**keywords)
            else:
                signature.bind(*positional, **keywords)
        except TypeError as exc:
            self.errors.append(f"{self.where}: {name}{signature}: {exc}")
        if bound:
            awaited = node in self.awaited
            if inspect.iscoroutinefunction(function) and not awaited:
                self.errors.append(f"{self.where}: {name} is a coroutine: await it")
            if awaited and not inspect.iscoroutinefunction(function):
                self.errors.append(f"{self.where}: {name} is not a coroutine function")


def check_table_cell(where: str, cell: str) -> TableChecker:
    checker = TableChecker(where)
    for span in re.findall(r"`([^`]+)`", cell):
        code = span.replace("…", "...").replace("\\|", "|")
        try:
            tree = ast.parse("async def _():\n    " + code)
        except SyntaxError:
            # Not code: a value (`"smallest"`), a name (`aiokafka07 <command>`), a path.
            assert "(" not in code or code.startswith("aiokafka07 "), f"{where}: {span}"
            continue
        checker.visit(tree)
    return checker


@pytest.mark.parametrize("page", MIGRATION_PAGES)
def test_migration_tables_match_the_signatures(page: str) -> None:
    path = DOCS / "operations" / page
    errors, checked = [], 0
    for line, cell in aiokafka07_cells(path):
        checker = check_table_cell(f"{page}:{line}", cell)
        errors += checker.errors
        checked += checker.checked
    assert errors == []
    assert checked >= 40  # the tables are read: most cells name calls


@pytest.mark.parametrize(
    ("cell", "error"),
    [
        ("`await consumer.commit(partition=None)`", "unexpected keyword argument 'partition'"),
        ("`consumer.seek_to_end(*tps)`", "is a coroutine: await it"),
        ("`consumer.subscription(tp)`", "too many positional arguments"),
        ("`consumer.rebalances()`", "rebalances is not callable"),
        ("`await consumer.seek(tp, 0)`", "is not a coroutine function"),
        ("`await simple.fetch(t, p)`", "missing a required argument"),
        ("`consumer.nothing_like_this`", "has no 'nothing_like_this'"),
        ("`aiokafka07.NoSuchName`", "aiokafka07.NoSuchName does not exist"),
        ("`await NoSuchClass.open(x)`", "NoSuchClass.open does not exist"),
        ("`Consumer(topic, group=g, zookeeper=z, bootstrap_servers=b)`", "bootstrap_servers"),
    ],
)
def test_the_table_check_catches_a_stale_row(cell: str, error: str) -> None:
    checker = check_table_cell("row", cell)
    assert checker.errors, cell
    assert error in checker.errors[0]
