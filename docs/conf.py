"""Sphinx configuration of the aiokafka07 documentation.

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (the test
suite runs exactly that, so a warning, a broken link or a broken reference fails it).
Pages are Markdown (MyST); the API reference is generated from the docstrings by autodoc;
``docs/_ext/aiokafka07_docs.py`` renders the console tools' ``--help`` and checks every
reference (see its docstring).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The checkout's code (an editable install has it too; a plain clone may not).
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))

import aiokafka07  # noqa: E402

project = "aiokafka07"
author = "the aiokafka07 maintainers"
copyright = "the aiokafka07 maintainers, Apache-2.0"
release = version = aiokafka07.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "aiokafka07_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# Every reference must resolve: a name that points nowhere is a warning, and the build
# treats warnings as errors (-W). aiokafka07_docs resolves names that exist but are not in
# the reference (the standard library, internal helpers) to plain code.
nitpicky = True

# -- MyST -------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
# `[text](page.md#a-heading)` works for headings down to ###, and a missing one warns.
myst_heading_anchors = 3

# -- autodoc ----------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_class_signature = "mixed"
# The Spark data source imports PySpark and its companions; the reference builds without
# the spark extra (the docs extra brings pytest, whose fixtures it documents).
autodoc_mock_imports = ["pyspark", "pyarrow", "numpy", "pandas"]

# -- HTML -------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"aiokafka07 {release}"
html_static_path = ["_static"]
# Tables whose code spans wrap instead of running off the page (see the file).
html_css_files = ["aiokafka07.css"]
html_copy_source = False
html_theme_options = {"navigation_with_keys": True}
# Offline and reproducible: no fonts or scripts from elsewhere.
html_last_updated_fmt = None
