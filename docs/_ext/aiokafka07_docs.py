"""The aiokafka07 documentation's own Sphinx extension.

Three jobs, each so that the site cannot drift from the code:

``cli-help`` directive
    ```` ```{cli-help} produce ```` renders ``aiokafka07 produce --help`` from the parser
    the command itself uses (:func:`aiokafka07.cli.command_parser`), at a fixed width;
    without an argument, ``aiokafka07 --help``; ```` ```{cli-help} bridge offsets ````
    renders a subcommand's. Every command of :data:`aiokafka07.cli.COMMANDS` and every
    subcommand of :data:`aiokafka07.cli.SUBCOMMANDS` must have a page with one, or the
    build warns.

References
    The docstrings are reStructuredText with Sphinx roles (``:class:`Producer```,
    ``:meth:`close```) and the signatures carry type annotations; with ``nitpicky`` each is
    a reference that must resolve. Sphinx resolves what the reference documents itself.
    The rest is resolved here by importing it, from the context it was written in (the
    class and module of the docstring, including names imported only for type checking):
    a name documented under another path (``aiokafka07.producer.Producer`` is documented
    as ``aiokafka07.Producer``) links there; a name that exists but is not documented (the
    standard library, an internal helper) is shown as code without a link; a name that
    exists nowhere is left to Sphinx, which warns, and the build (``-W``) fails.

The public API
    Every name in ``aiokafka07.__all__`` must have a reference entry, and every public
    class and function documented must have a docstring; otherwise the build warns.

Two repairs of what Sphinx renders: a class whose only base is ``object`` gets no
"Bases:" line (autodoc would print the label with nothing after it), and the "[docs]"
links of the highlighted source pages (``sphinx.ext.viewcode``) point at the entry that
documents each name (viewcode builds them from the first module path under which a
source module was documented, so a module whose names are documented under two paths,
``aiokafka07.Compression`` and ``aiokafka07.protocol.gzip_compress``, got anchors that
exist nowhere).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext.viewcode import viewcode_anchor
from sphinx.locale import _ as translated
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_refnode

logger = logging.getLogger(__name__)

#: Columns of the rendered ``--help`` (argparse wraps at the terminal's width otherwise).
HELP_WIDTH = 88

_MISSING = object()


# -- cli-help -------------------------------------------------------------------------------


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    """argparse reads the width from ``COLUMNS``; the rendered help must not depend on
    the terminal of whoever builds the site."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width + 2)  # argparse subtracts 2
    try:
        yield
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def cli_help(command: str | None) -> str:
    """``aiokafka07 [command] --help``, exactly as the command prints it."""
    from aiokafka07 import cli

    parser = cli.top_parser() if command is None else cli.command_parser(command)
    with _columns(HELP_WIDTH):
        return parser.format_help()


class CliHelp(SphinxDirective):
    """```` ```{cli-help} COMMAND ````: the command's ``--help``."""

    optional_arguments = 1
    final_argument_whitespace = True  # a subcommand: bridge offsets
    has_content = False

    def run(self) -> list[nodes.Node]:
        from aiokafka07 import cli

        command = self.arguments[0] if self.arguments else None
        if command is not None and command not in cli.command_names():
            raise self.error(
                f"cli-help: no command {command!r} in aiokafka07.cli.COMMANDS or SUBCOMMANDS"
            )
        text = cli_help(command)
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        pages = _cli_pages(self.env)
        pages.setdefault(command or "", self.env.docname)
        return [block]


def _cli_pages(env: BuildEnvironment) -> dict[str, str]:
    if not hasattr(env, "aiokafka07_cli_pages"):
        env.aiokafka07_cli_pages = {}  # type: ignore[attr-defined]
    return env.aiokafka07_cli_pages  # type: ignore[attr-defined,no-any-return]


def _purge_doc(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    pages = _cli_pages(env)
    for command in [c for c, page in pages.items() if page == docname]:
        del pages[command]
    for names in _source_anchors(env).values():
        for documented_in in names.values():
            documented_in.pop(docname, None)


# -- locating Python names -----------------------------------------------------------------


@functools.cache
def lookup(dotted: str) -> Any:
    """The object a dotted name names (importing modules on the way), or ``_MISSING``.

    A class's attribute is looked up statically, so a method or property comes back as
    the function or descriptor defined on the class (the same object whatever path leads
    to it).
    """
    head, *rest = dotted.split(".")
    try:
        obj: Any = importlib.import_module(head)
    except Exception:
        return _MISSING
    path = head
    for index, part in enumerate(rest):
        last = index == len(rest) - 1
        path = f"{path}.{part}"
        try:
            static = last and inspect.isclass(obj)
            obj = inspect.getattr_static(obj, part) if static else getattr(obj, part)
            continue
        except AttributeError:
            pass
        if inspect.ismodule(obj) and hasattr(obj, "__path__"):
            try:
                obj = importlib.import_module(path)
                continue
            except Exception:
                return _MISSING
        if last and inspect.isclass(obj) and _instance_attribute(obj, part):
            return (obj, part)
        return _MISSING
    return obj


@functools.cache
def _instance_attribute(cls: type, name: str) -> bool:
    """Whether ``name`` is an attribute the class's instances get (``self.name = ...``,
    a field, a slot), though the class itself has no such attribute."""
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "__slots__", ()):
            return True
        source = _source(klass.__module__)
        if f"self.{name} =" in source or f"self.{name}:" in source:
            return True
    return False


@functools.cache
def _source(module_name: str) -> str:
    """The source of a module ('' when it has none, like a builtin)."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    if path is None or not path.endswith(".py"):
        return ""
    return Path(path).read_text()


@functools.cache
def _imports(module_name: str) -> dict[str, str]:
    """The names a module imports, type-checking-only imports included: local name →
    the dotted name it stands for."""
    source = _source(module_name)
    if not source:
        return {}
    table: dict[str, str] = {}
    path = sys.modules[module_name].__file__ or ""
    package = module_name if path.endswith("__init__.py") else module_name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                table[alias.asname or alias.name.partition(".")[0]] = (
                    alias.name if alias.asname else alias.name.partition(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                table[alias.asname or alias.name] = f"{base}.{alias.name}"
    return table


def _contexts(module: str | None, cls: str | None) -> list[tuple[str, str | None]]:
    """(module, class path) pairs to resolve a relative name in: where the docstring is
    documented, and where its class really lives (and that class's bases)."""
    contexts: list[tuple[str, str | None]] = []
    if module:
        contexts.append((module, cls))
        owner = lookup(f"{module}.{cls}") if cls else _MISSING
        if inspect.isclass(owner):
            for klass in owner.__mro__:
                if klass.__module__ != "builtins":
                    contexts.append((klass.__module__, klass.__qualname__))
        elif cls:
            # A method's or a function's description: its class, or its real module.
            head = lookup(f"{module}.{cls.partition('.')[0]}")
            if inspect.isclass(head):
                contexts.append((head.__module__, head.__qualname__))
            elif getattr(head, "__module__", None):
                contexts.append((head.__module__, None))
    return contexts


def locate(target: str, module: str | None, cls: str | None) -> tuple[str, Any] | None:
    """Where ``target``, written in the context of ``module`` / ``cls``, points: its
    dotted name and the object, or None when it points nowhere."""
    target = target.lstrip("~")
    relative = target.startswith(".")
    name = target.lstrip(".")
    candidates: list[str] = []
    for context_module, context_class in _contexts(module, cls):
        if context_class:
            candidates.append(f"{context_module}.{context_class}.{name}")
        candidates.append(f"{context_module}.{name}")
        if relative:
            parent = context_module.rpartition(".")[0]
            candidates.append(f"{parent}.{name}")
        head, _, rest = name.partition(".")
        imported = _imports(context_module).get(head)
        if imported:
            candidates.append(f"{imported}.{rest}" if rest else imported)
    if not relative:
        # Absolute, a builtin, or a name the package exports (``KafkaError``).
        candidates += [name, f"builtins.{name}", f"aiokafka07.{name}"]
    for candidate in candidates:
        obj = lookup(candidate)
        if obj is not _MISSING:
            return candidate, obj
    return None


# -- resolving references ------------------------------------------------------------------


def _key(obj: Any) -> int | None:
    """Identity of an object worth matching (classes, functions, descriptors, modules),
    not of values such as ints that many names share."""
    if isinstance(obj, (int, float, str, bytes, bool, tuple, type(None))):
        return None
    return id(obj)


class Documented:
    """The objects the reference documents, by name and by identity."""

    def __init__(self, env: BuildEnvironment) -> None:
        domain = env.domaindata["py"]
        self.objects: dict[str, tuple[str, str]] = {
            name: (entry.docname, entry.node_id)
            for name, entry in domain["objects"].items()
            if not entry.aliased
        }
        for name, entry in domain["modules"].items():
            self.objects.setdefault(name, (entry.docname, entry.node_id))
        self.by_identity: dict[int, str] = {}
        for name in sorted(self.objects, key=len):
            key = _key(lookup(name))
            if key is not None:
                self.by_identity.setdefault(key, name)

    def find(self, name: str, obj: Any) -> str | None:
        if name in self.objects:
            return name
        key = _key(obj)
        return self.by_identity.get(key) if key is not None else None


_documented: dict[int, Documented] = {}


def documented(env: BuildEnvironment) -> Documented:
    found = _documented.get(id(env))
    if found is None:
        found = _documented[id(env)] = Documented(env)
    return found


def _described(node: nodes.Element) -> tuple[str | None, str | None]:
    """The module and name of the object whose description contains ``node`` (a type in
    its signature, a role in its docstring), if any."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, addnodes.desc):
            for signature in parent.findall(addnodes.desc_signature):
                return signature.get("module"), signature.get("fullname")
        parent = parent.parent
    return None, None


def _missing_reference(
    app: Sphinx, env: BuildEnvironment, node: nodes.Element, contnode: nodes.Element
) -> nodes.Node | None:
    if node.get("refdomain") != "py":
        return None
    # A role broken across docstring lines keeps the line break in its target.
    target = "".join(node["reftarget"].split())
    if "[" in target:
        # A generic split apart by the signature parser (``dict[str, int]`` read as
        # ``dict[str`` and ``int]``): the part before the bracket is the reference.
        target = target.partition("[")[0]
    module, cls = node.get("py:module"), node.get("py:class")
    found = locate(target, module, cls)
    if found is None:
        described_module, fullname = _described(node)
        if described_module and fullname:
            found = locate(target, described_module, fullname)
    if found is None:
        return None  # points nowhere: Sphinx warns (nitpicky), the build fails
    name, obj = found
    target = documented(env).find(name, obj)
    if target is None:
        return contnode  # real, but not in the reference: plain code
    docname, anchor = documented(env).objects[target]
    return make_refnode(app.builder, node["refdoc"], docname, anchor, contnode, target)


# -- checks of the whole site --------------------------------------------------------------


def _check_consistency(app: Sphinx, env: BuildEnvironment) -> None:
    from aiokafka07 import cli

    pages = _cli_pages(env)
    for command in cli.command_names():
        if command not in pages:
            logger.warning(
                "console tool %r has no page: add one with ```{cli-help} %s``` "
                "and list it in docs/tools/index.md",
                command,
                command,
            )
    import aiokafka07

    known = Documented(env)
    for name in aiokafka07.__all__:
        obj = getattr(aiokafka07, name)
        if known.find(f"aiokafka07.{name}", obj) is None:
            logger.warning(
                "aiokafka07.%s (in aiokafka07.__all__) has no entry in the API reference",
                name,
            )


def _check_docstring(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """A public class, function or method documented without a docstring is a hole."""
    if what not in ("class", "function", "method", "exception", "module"):
        return
    if name.rpartition(".")[2].startswith("_"):
        return
    if not any(line.strip() for line in lines):
        logger.warning("%s %s has no docstring", what, name)


def _drop_object_base(app: Sphinx, name: str, obj: Any, options: Any, bases: list[type]) -> None:
    """``Bases: object`` says nothing; other bases are worth showing. (A class left
    without bases loses the label too: :func:`_drop_empty_bases`.)"""
    if object in bases:
        bases.remove(object)


def _drop_empty_bases(
    app: Sphinx, domain: str, objtype: str, content: addnodes.desc_content
) -> None:
    """Remove the "Bases:" label of a class :func:`_drop_object_base` left without bases.

    autodoc writes the label whatever the list holds, as the first paragraph of the
    class's description, so a class deriving from ``object`` alone showed an empty
    "Bases:" (Sphinx 8 and 9 alike).
    """
    if domain != "py" or objtype not in ("class", "exception") or not content.children:
        return
    first = content.children[0]
    label = translated("Bases: %s") % ""
    if isinstance(first, nodes.paragraph) and first.astext().strip() == label.strip():
        content.remove(first)


# -- the highlighted source pages' "[docs]" links -------------------------------------------


def _source_anchors(env: BuildEnvironment) -> dict[str, dict[str, dict[str, str]]]:
    """Source page (``_modules/aiokafka07/pool``) → name in it (``ConnectionPool.close``)
    → document that describes it → the id of its description there."""
    if not hasattr(env, "aiokafka07_source_anchors"):
        env.aiokafka07_source_anchors = {}  # type: ignore[attr-defined]
    return env.aiokafka07_source_anchors  # type: ignore[attr-defined,no-any-return]


def _note_source_anchors(app: Sphinx, doctree: nodes.document) -> None:
    """Where each description viewcode links to its source really is (its id).

    Runs after viewcode's own ``doctree-read`` handler, which puts a
    :class:`~sphinx.ext.viewcode.viewcode_anchor` (the "[source]" link) in each
    signature whose source it found: the same descriptions its "[docs]" links return to.
    """
    anchors = _source_anchors(app.env)
    docname = app.env.docname
    for signature in doctree.findall(addnodes.desc_signature):
        if not signature["ids"]:
            continue
        for anchor in signature.findall(viewcode_anchor):
            names = anchors.setdefault(anchor["reftarget"], {})
            names.setdefault(anchor["refid"], {})[docname] = signature["ids"][0]


#: A "[docs]" link as viewcode writes it: the block of a name, then the link back.
_BACKLINK = re.compile(
    r'(<div class="viewcode-block" id="(?P<name>[^"]+)">\s*'
    r'<a class="viewcode-back" href=")(?P<page>[^"#]*)#[^"]*(")'
)


def _fix_source_backlinks(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Point a source page's "[docs]" links at the ids of the descriptions.

    viewcode writes ``page.html#<module>.<name>`` with one ``<module>`` per source module:
    the path under which the first description of one of its names was documented. A
    name documented under another path (``aiokafka07.protocol.gzip_compress`` while
    ``aiokafka07.Compression``, from the same file, came first) has no such id.
    """
    names = _source_anchors(app.env).get(pagename)
    if not names or "body" not in context:
        return

    def repoint(match: re.Match[str]) -> str:
        for docname, node_id in names.get(match["name"], {}).items():
            if app.builder.get_relative_uri(pagename, docname) == match["page"]:
                return f"{match[1]}{match['page']}#{node_id}{match[4]}"
        return match[0]

    context["body"] = _BACKLINK.sub(repoint, context["body"])


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cli-help", CliHelp)
    app.connect("env-purge-doc", _purge_doc)
    app.connect("missing-reference", _missing_reference)
    app.connect("env-check-consistency", _check_consistency)
    app.connect("autodoc-process-docstring", _check_docstring)
    app.connect("autodoc-process-bases", _drop_object_base)
    app.connect("object-description-transform", _drop_empty_bases)
    # After viewcode's own handler (priority 500), which adds the anchors read here.
    app.connect("doctree-read", _note_source_anchors, priority=600)
    app.connect("html-page-context", _fix_source_backlinks)
    return {"version": "1", "parallel_read_safe": False, "parallel_write_safe": True}
