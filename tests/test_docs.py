"""The documentation site (``make docs``), built here as the Makefile builds it: strictly (a
warning, a broken link or an unresolved reference fails), its API reference holding every public
name and member (generated from ``__all__``: no list is kept by hand), every example listed; and,
where ``chromium`` is installed, its pages drawn in a headless browser as a user sees them."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.api.snapshot import CURRENT, NAMESPACES, read

for module in ("sphinx", "myst_parser", "furo"):  # the docs extra
    pytest.importorskip(module)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site's HTML, built with ``make docs``'s command."""
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    done = subprocess.run(
        [*command, "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out / "html"


def home(name: str) -> str:
    """The namespace whose page documents ``name`` in full: the first below ``ember`` that
    exports it, else ``ember`` (its own errors and ``cli``)."""
    exporting = [ns for ns in NAMESPACES[1:] if name in importlib.import_module(ns).__all__]
    return (exporting or ["ember"])[0]


def inventory(site: Path) -> set[str]:
    """The Python objects the site documents, read from its ``objects.inv``."""
    data = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):  # four plain-text header lines, then the zlib-compressed entries
        header_end = data.index(b"\n", header_end) + 1
    lines = zlib.decompress(data[header_end:]).decode().splitlines()
    return {line.split(" ")[0] for line in lines if line.split(" ")[1].startswith("py:")}


@pytest.mark.timeout(300)
def test_every_public_name_and_member_is_in_the_reference(site: Path) -> None:
    """Each name of the API snapshot (``tests/api/current.txt``) and each member of a class
    there is documented, in its home namespace, with a target that links can reach."""
    documented = inventory(site)
    missing = []
    for dotted, _, _ in read(CURRENT):
        namespace = max((ns for ns in NAMESPACES if dotted.startswith(ns + ".")), key=len)
        name = dotted[len(namespace) + 1 :]
        where = f"{home(name.split('.')[0])}.{name}"
        if where not in documented:
            missing.append(where)
    assert missing == [], f"not in the API reference: {missing[:20]} ({len(missing)} in all)"


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_each_namespace_page_links_every_name(site: Path, namespace: str) -> None:
    """``api/NAMESPACE.html`` links every name of the namespace's ``__all__`` to its entry."""
    page = (site / "api" / f"{namespace}.html").read_text(encoding="utf-8")
    names = importlib.import_module(namespace).__all__
    unlinked = [name for name in names if f'#{home(name)}.{name}"' not in page]
    assert unlinked == [], f"api/{namespace}.html does not link {unlinked}"


def test_the_api_pages_are_the_namespaces() -> None:
    """``docs/api/`` has a page per public namespace and no other."""
    assert sorted(p.stem for p in (DOCS / "api").iterdir()) == sorted(NAMESPACES)


def test_the_examples_page_lists_every_example() -> None:
    """``docs/examples.md`` links each script of ``examples/``."""
    page = (DOCS / "examples.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
    assert [s for s in scripts if f"](../examples/{s})" not in page] == []


def browse(url: str, *options: str, cwd: Path) -> str:
    """Load ``url`` in headless chromium with ``options``; what it prints on stdout."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            *("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"),
            *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
            f"--user-data-dir={cwd / 'profile'}",
            *options,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_chromium
@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", ["index.html", "api/ember.train.html"])
def test_a_page_is_drawn(site: Path, page: str, tmp_path: Path) -> None:
    """The home page and an API page, as a headless browser draws them at 1280x900, are not
    blank: text and the navigation cover a good part of the screen in many shades."""
    image_module = pytest.importorskip("PIL.Image")
    shot = tmp_path / "page.png"
    browse((site / page).as_uri(), f"--screenshot={shot}", "--window-size=1280,900", cwd=tmp_path)
    with image_module.open(shot) as image:
        size = image.width * image.height
        colors = image.convert("RGB").getcolors(size)  # (count, colour) for each colour
    drawn = 1 - max(colors)[0] / size  # all but the background
    assert drawn > 0.05 and len(colors) > 100, (page, drawn, len(colors))


@needs_chromium
@pytest.mark.timeout(300)
def test_search_finds_a_public_name(site: Path, tmp_path: Path) -> None:
    """The site's search, run by the browser on the built files, finds ``SupervisedTraining``
    and lists its API entry first."""
    url = (site / "search.html").as_uri() + "?q=SupervisedTraining"
    dom = browse(url, "--dump-dom", "--virtual-time-budget=10000", cwd=tmp_path)
    assert "Search finished, found" in dom, dom[-2000:]
    first = dom.index('<li class="kind-')
    assert 'href="api/ember.train.html#ember.train.SupervisedTraining"' in dom[first : first + 300]
