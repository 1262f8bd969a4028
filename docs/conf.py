"""Sphinx configuration of ember's documentation site (``make docs``; see README, "Development")."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent / "src"))

from ember import __version__  # noqa: E402  (after the path above)

project = "ember"
author = "ember contributors"
copyright = "ember contributors"
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "ember_api"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]

myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"

nitpicky = True
# every reference must resolve (a wrong name fails the build), except those the site cannot link
# offline (other packages' names: no intersphinx inventories are fetched) and ember's private
# names (a signature's type variable, a private base class)
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(torch|collections|typing|os|pathlib|datetime|enum|types|rich|matplotlib|transformers)"
        r"\b.*",
    ),
    # annotations only imported for typing
    (r"py:.*", r"(Path|Console|TorchmetricsMetric|Figure|PreTrainedTokenizerBase)"),
    (r"py:.*", r"ember(\.\w+)*\._.*"),
    (r"py:.*", r".*\[.*"),  # Sphinx splits ``Callable[[], float]`` at its brackets
]

# a JSON example with "..." in it is highlighted leniently: not a broken reference
suppress_warnings = ["misc.highlighting_failure"]

html_theme = "furo"
html_title = f"ember {release}"
html_static_path: list[str] = []
