"""The workbook's site (``make site``: ``scripts/site.py``, MkDocs with mkdocs-jupyter).

The module builds the site once, into a temporary folder, from the committed notebooks and
docs/ (as ``make site`` does into build/site/), then checks it:

- every internal link and resource of every page resolves to a file of the site, and every
  ``#anchor`` to an id of its page; nothing is loaded from the network;
- the navigation reaches the report (the front page), every notebook and every docs page;
- links to repository files that are not pages of the site became code text;
- headless Chromium (Debian's ``chromium``) renders the front page, a notebook page and a docs
  page: the report's first table is there with the committed header, and every image loads.

Chromium is required, not optional: without it the browser tests fail, naming ``make browser``
(which installs it; ``make test`` and ``make unit`` run it first). ``CHROMIUM`` names another
binary.
"""
from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("site_builder", ROOT / "scripts" / "site.py")
site_builder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(site_builder)

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
REPORT = ROOT / "notebooks" / "00_report.ipynb"
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)
MISSING_CHROMIUM = ("headless Chromium is needed to check the site and was not found: `make browser` "
                    "installs Debian's chromium (or set CHROMIUM to a Chromium binary)")


# --- the link rules, on a tiny repository ----------------------------------------------------

@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    for rel in ("docs/index.md", "docs/findings.md", "README.md", "LICENSE", "notebooks/00_report.ipynb",
                "benchmarks/records/x.txt", "figures/a.png"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    return tmp_path


PAGES = {"notebooks/00_report.ipynb": "index.ipynb", "README.md": "readme.md",
         "docs/index.md": "docs/index.md", "docs/findings.md": "docs/findings.md"}


def _linker(repo: Path, source: str, to_url: bool, assets: set) -> object:
    return site_builder.Linker(source, PAGES[source], PAGES, repo, to_url=to_url, assets=assets)


def test_a_markdown_page_links_pages_by_their_staged_source(tiny_repo):
    link = _linker(tiny_repo, "docs/index.md", to_url=False, assets=set())
    text = ("[f](findings.md#a-b) [r](../README.md) [n](../notebooks/00_report.ipynb) "
            "[s](#here) [w](https://x.org/a.md)")
    assert link.markdown(text) == ("[f](findings.md#a-b) [r](../readme.md) [n](../index.ipynb) "
                                   "[s](#here) [w](https://x.org/a.md)")


def test_a_notebook_links_pages_by_their_url(tiny_repo):
    link = _linker(tiny_repo, "notebooks/00_report.ipynb", to_url=True, assets=set())
    # notebook 00 is the front page, index.html at the root: its ../docs/ links lose the ../
    assert link.markdown("[row](../docs/findings.md#clust-psi-pfl)") == "[row](docs/findings.html#clust-psi-pfl)"
    assert link.html('<a href="../README.md">') == '<a href="readme.html">'


def test_a_repository_file_outside_the_site_becomes_code_text(tiny_repo):
    link = _linker(tiny_repo, "docs/index.md", to_url=False, assets=set())
    assert link.markdown("see [`benchmarks/records/x.txt`](../benchmarks/records/x.txt).") == \
        "see `benchmarks/records/x.txt`."
    assert link.markdown("([LICENSE](../LICENSE))") == "(LICENSE (`LICENSE`))"
    assert link.html('<a href="../LICENSE">the licence</a>') == \
        '<a title="LICENSE (in the repository)">the licence</a>'


def test_an_image_of_the_repository_is_copied_and_a_missing_target_kept(tiny_repo):
    assets: set = set()
    link = _linker(tiny_repo, "docs/index.md", to_url=False, assets=assets)
    assert link.markdown('![fig](../figures/a.png "t")') == '![fig](../figures/a.png "t")'
    assert assets == {"figures/a.png"}
    assert link.markdown("[gone](../nowhere.md)") == "[gone](../nowhere.md)"  # for the checks to report
    fenced = "```\n[r](../README.md)\n```\n"
    assert link.markdown(fenced) == fenced  # code is code


def test_nav_labels_come_from_the_first_heading_up_to_a_colon(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```\n# not a heading\n```\n# Findings: `what` reproduces\n")
    assert site_builder.title(page) == "Findings"
    page.write_text("no heading\n")
    assert site_builder.title(page) == "p"


# --- the built site ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    return site_builder.build(out / "site", out / "site-src")


class _Page(HTMLParser):
    """A page's ids and names, its links (tag, attribute, value) and its navigation links."""

    def __init__(self, text: str):
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []
        self.nav: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.ids.update(a[k] for k in ("id", "name") if a.get(k))
        for key in ("href", "src"):
            if a.get(key) is not None:
                self.refs.append((tag, key, a[key]))
        if tag == "a" and "md-nav__link" in (a.get("class") or "").split() and a.get("href"):
            self.nav.append(a["href"])


def _pages(site: Path) -> dict[Path, _Page]:
    return {p.resolve(): _Page(p.read_text()) for p in site.rglob("*.html")}


def _site_url(page: Path, site: Path, href: str) -> str:
    """The site path (``docs/x.html``) a relative href of ``page`` points at."""
    target = (page.parent / href.partition("#")[0]).resolve()
    return target.relative_to(site.resolve()).as_posix()


def test_every_internal_link_and_resource_resolves(site):
    """Every relative href/src is a file of the site (a page's #anchor an id on it); the 404 page's
    site-absolute links (it is served at any path) resolve from the site root; nothing that a page
    loads (scripts, images, stylesheets, frames) comes from the network."""
    root, pages = site.resolve(), _pages(site)
    problems = []
    for page, parsed in pages.items():
        where = page.relative_to(root)
        for tag, key, value in parsed.refs:
            if EXTERNAL.match(value):
                loads = key == "src" or tag == "link"
                if loads and not value.startswith("data:"):
                    problems.append(f"{where}: <{tag} {key}> loads {value} from the network")
                continue
            if value == "":
                problems.append(f"{where}: <{tag} {key}=\"\">")
                continue
            path, _, anchor = value.partition("#")
            target = (root / path.lstrip("/")) if path.startswith("/") else (page.parent / path if path else page)
            target = target.resolve()
            if not target.is_relative_to(root) or not target.is_file():
                problems.append(f"{where}: <{tag} {key}=\"{value}\"> points at no file of the site")
            elif anchor and target in pages and unquote(anchor) not in pages[target].ids:
                problems.append(f"{where}: <{tag} {key}=\"{value}\">: no id {anchor!r} on {target.relative_to(root)}")
    assert len(pages) >= len(NOTEBOOKS) + len(DOCS)
    assert not problems, f"{len(problems)} broken:\n  " + "\n  ".join(problems[:40])


@pytest.mark.parametrize("page", ["index.html", "docs/running.html", "notebooks/05_training.html"])
def test_the_navigation_reaches_the_report_every_notebook_and_every_docs_page(site, page):
    path = site / page
    reached = {_site_url(path, site, href) for href in _Page(path.read_text()).nav}
    expected = {"index.html"} | {f"notebooks/{nb.stem}.html" for nb in NOTEBOOKS if nb != REPORT} \
        | {f"docs/{md.stem}.html" for md in DOCS}
    assert not expected - reached, f"{page}'s navigation misses {sorted(expected - reached)}"
    assert not (site / "notebooks" / f"{REPORT.stem}.html").exists(), "the report is the front page, index.html"


def test_repository_files_outside_the_site_are_named_as_code(site):
    index = (site / "docs" / "index.html").read_text()
    assert "<code>CITATION.cff</code>" in index and 'href="../CITATION.cff"' not in index
    assert 'href="../changelog.html"' in index  # the changelog is a page of the site
    performance = (site / "docs" / "performance.html").read_text()
    assert "<code>benchmarks/records/speed/cuda_tests.txt</code>" in performance


def test_the_site_shows_the_committed_outputs_without_executing(site):
    """The report's page holds its committed outputs as stored: one image per image output, and
    the scoreboard's rows (the site is built from the notebooks as committed, not re-run)."""
    nb = json.loads(REPORT.read_text())
    images = sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
    page = (site / "index.html").read_text()
    assert page.count('src="data:image/png;base64,') == images


# --- headless Chromium ------------------------------------------------------------------------

PROBE = """<!doctype html><html><body><pre id="out">pending</pre>
<iframe id="f" style="width:1400px;height:1000px" src="{url}"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => {{
  const d = document.getElementById('f').contentDocument;
  const images = [...d.images];
  const table = d.querySelector('article table');
  document.getElementById('out').textContent = JSON.stringify({{
    h1: (d.querySelector('article h1') || {{textContent: ''}}).textContent.replace('¶', '').trim(),
    images: images.length,
    broken: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 120)),
    tables: d.querySelectorAll('article table').length,
    first_table_head: table ? [...table.querySelectorAll('th')].map(t => t.textContent.trim()) : [],
    stylesheets: d.querySelectorAll('link[rel=stylesheet]').length,
    stylesheets_loaded: [...d.querySelectorAll('link[rel=stylesheet]')].filter(l => l.sheet).length,
    nav_links: d.querySelectorAll('a.md-nav__link').length,
  }});
}});
</script></body></html>
"""


def _chromium() -> str:
    binary = shutil.which(os.environ.get("CHROMIUM") or "chromium")
    if not binary:
        pytest.fail(MISSING_CHROMIUM, pytrace=False)
    return binary


def render(page: Path, tmp: Path) -> dict:
    """What headless Chromium sees of ``page`` once loaded: its first heading, its images (and
    those that did not load), its tables and the first one's header, its stylesheets (and those that loaded), its navigation links. The page is
    loaded in a frame of a probe page, whose script reads it and writes the result into the DOM
    that ``--dump-dom`` prints."""
    probe = tmp / "probe.html"
    probe.write_text(PROBE.format(url=page.resolve().as_uri()))
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'profile'}", "--allow-file-access-from-files",
           "--virtual-time-budget=15000", "--dump-dom", probe.as_uri()]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="out">([^<]*)</pre>', run.stdout)
    assert run.returncode == 0 and m, f"chromium failed ({run.returncode}):\n{run.stderr[-2000:]}"
    assert m.group(1) != "pending", f"{page} did not load in chromium:\n{run.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def _image_outputs(notebook: Path) -> int:
    nb = json.loads(notebook.read_text())
    return sum(any(k.startswith("image/") for k in o.get("data", {}))
               for c in nb["cells"] for o in c.get("outputs", []))


def _first_table_header(notebook: Path) -> list[str]:
    """The header cells of the first Markdown table among the notebook's committed outputs."""
    for cell in json.loads(notebook.read_text())["cells"]:
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/markdown", ""))
            lines = text.splitlines()
            for head, rule in zip(lines, lines[1:]):
                if head.startswith("|") and re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", rule.strip()):
                    return [c.strip() for c in head.strip().strip("|").split("|")]
    raise AssertionError(f"{notebook.name} shows no Markdown table")


def test_chromium_shows_the_report_as_front_page_with_its_first_table(site, tmp_path):
    seen = render(site / "index.html", tmp_path)
    heading = json.loads(REPORT.read_text())["cells"][0]["source"][0].lstrip("# ").strip()
    assert seen["h1"] == heading
    assert seen["first_table_head"] == _first_table_header(REPORT), "the report's first table"
    assert seen["images"] == _image_outputs(REPORT) > 0 and seen["broken"] == [], seen["broken"]
    assert seen["stylesheets"] == seen["stylesheets_loaded"] >= 1
    assert seen["nav_links"] >= len(NOTEBOOKS) + len(DOCS)


@pytest.mark.parametrize("page, notebook", [("notebooks/06_tables_and_ecdfs.html", "06_tables_and_ecdfs.ipynb"),
                                            ("docs/findings.html", None)])
def test_chromium_renders_a_notebook_and_a_docs_page(site, tmp_path, page, notebook):
    seen = render(site / page, tmp_path)
    assert seen["broken"] == [], f"{page}: images that did not load: {seen['broken']}"
    assert seen["tables"] > 0 and seen["stylesheets"] == seen["stylesheets_loaded"] >= 1
    if notebook:
        assert seen["images"] == _image_outputs(ROOT / "notebooks" / notebook) > 0


# --- issue 71: read at a 1,440-px window ------------------------------------------------------

READING = """<!doctype html><html><body style="margin:0"><pre id="out">pending</pre>
<iframe id="f" style="width:{width}px;height:900px;border:0;display:block" src="{url}"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => {{
  const w = document.getElementById('f').contentWindow, d = w.document;
  const box = (el) => {{  // the box that clips el: its nearest ancestor that scrolls or hides overflow
    for (let p = el.parentElement; p; p = p.parentElement) {{
      if (/(auto|scroll|hidden)/.test(w.getComputedStyle(p).overflowX)) return p.getBoundingClientRect();
    }}
    return {{left: 0, right: w.innerWidth}};
  }};
  const forest = [...d.querySelectorAll('article img')].filter(i => i.alt.startsWith('Forest plot'));
  const verdicts = [...d.querySelectorAll('article th')].filter(t => t.textContent.trim().startsWith('verdict'));
  const nums = [...d.querySelectorAll('article td.num')];
  const result = {{
    viewport: w.innerWidth,
    forest: forest.map(i => ({{alt: i.alt, shown: i.getBoundingClientRect().width, natural: i.naturalWidth}})),
    verdicts: verdicts.map(t => ({{right: t.getBoundingClientRect().right, box: box(t).right}})),
    nums: nums.length,
    nums_wrapping: nums.filter(c => w.getComputedStyle(c).whiteSpace !== 'nowrap').length,
    reasons: d.querySelectorAll('article details.why').length,
  }};
  const img = forest[0] || d.querySelector('article img');
  if (img) {{
    img.click();
    const big = d.querySelector('.wb-lightbox img');
    result.enlarged = big ? {{shown: big.getBoundingClientRect().width, natural: img.naturalWidth}} : null;
  }}
  document.getElementById('out').textContent = JSON.stringify(result);
}});
</script></body></html>
"""
WINDOW = 1440
"""The window width the reader's checks are made at (issue 71)."""


def read_at_window(page: Path, tmp: Path, width: int = WINDOW) -> dict:
    """What headless Chromium measures on ``page`` laid out ``width`` px wide (the page in a frame
    of that width, the frame at the probe's top left): the viewport's width; per forest-plot image
    (alt text "Forest plot: …") its shown and natural width; per ``verdict…`` table header its
    right edge and the right edge of the box that clips it (the table's scrolling box, else the
    viewport), with nothing scrolled; the number cells and those that may wrap; the collapsed
    reasons; and, after a click on the first forest plot (else the first image), the width of
    the enlarged copy (None when nothing opened)."""
    probe = tmp / "reading.html"
    probe.write_text(READING.format(url=page.resolve().as_uri(), width=width))
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp / 'profile-reading'}", "--allow-file-access-from-files",
           f"--window-size={width + 40},1000", "--virtual-time-budget=15000", "--dump-dom", probe.as_uri()]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="out">([^<]*)</pre>', run.stdout)
    assert run.returncode == 0 and m, f"chromium failed ({run.returncode}):\n{run.stderr[-2000:]}"
    assert m.group(1) != "pending", f"{page} did not load in chromium:\n{run.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def label_px(shown: float, natural: float) -> float:
    """A forest plot's row labels' height as shown, px: their height in the PNG (LABEL_PT points
    at the figures' DPI: LABEL_PT × DPI / 72 px) times the scale the page shows the image at."""
    from workbook import forest, plots
    return forest.LABEL_PT * plots.DPI / 72 * shown / natural


def test_findings_forest_plots_are_legible_at_a_1440_px_window(site, tmp_path):
    """Issue 71: docs/findings.md's forest plots (one per table or column), shown at the site's
    content width in a 1,440-px window, have row labels at least 10 px tall; a click shows a
    figure at its natural size."""
    seen = read_at_window(site / "docs" / "findings.html", tmp_path)
    linked = len(re.findall(r"^!\[Forest plot: ", (ROOT / "docs" / "findings.md").read_text(), flags=re.M))
    assert seen["viewport"] == WINDOW and linked > 0 and len(seen["forest"]) == linked
    small = [(f["alt"], round(label_px(f["shown"], f["natural"]), 1)) for f in seen["forest"]
             if not label_px(f["shown"], f["natural"]) >= 10]
    assert not small, f"forest plots whose labels show under 10 px tall: {small}"
    assert seen["enlarged"] and seen["enlarged"]["shown"] == seen["enlarged"]["natural"] > 0


@pytest.mark.parametrize("page", ["docs/findings.html", "index.html"])
def test_the_verdict_column_is_visible_without_scrolling_at_a_1440_px_window(site, tmp_path, page):
    """Issue 71: in every table of the report (the findings page, the front page), the verdict
    column's right edge lies within the viewport and within the table's scrolling box, with
    nothing scrolled; numbers never wrap, and long reasons are collapsed to one line."""
    seen = read_at_window(site / page, tmp_path)
    assert len(seen["verdicts"]) >= 5, "the report's tables: at least one per paper"
    hidden = [v for v in seen["verdicts"] if not v["right"] <= min(v["box"], seen["viewport"]) + 0.5]
    assert not hidden, f"{len(hidden)} of {len(seen['verdicts'])} tables hide their verdict column: {hidden[:5]}"
    assert seen["nums"] > 0 and seen["nums_wrapping"] == 0
    assert seen["reasons"] > 0


def test_numbers_are_marked_and_long_reasons_collapsed():
    table = ("<table><thead><tr><th>row</th><th>ours</th><th>verdict</th><th>reason</th></tr></thead><tbody>"
             "<tr><td>FedAvg</td><td>90.12 ± 0.48 (n = 3)</td><td>differs (±1.00)</td>"
             "<td>stand_in_dataset: suspected: adult (1994 census) stands in for ACSIncome</td></tr>"
             "<tr><td>CL</td><td>+0.50 [−0.20, +1.20]</td><td>reproduced</td><td>short</td></tr></tbody></table>")
    out = site_builder.readable_tables(table)
    assert out.count('<td class="num">') == 2 and "<td>FedAvg</td>" in out and "<td>differs (±1.00)</td>" in out
    assert ('<td><details class="why"><summary>stand_in_dataset …</summary>stand_in_dataset: suspected: '
            "adult (1994 census) stands in for ACSIncome</details></td>") in out
    assert "<td>short</td>" in out
    assert site_builder.is_number("3 / 28 / 22") and not site_builder.is_number("Table III")
