#!/usr/bin/env python
"""Stage the workbook's site for MkDocs: the committed notebooks and docs/ as pages (``make site``).

Writes ``build/site-src/``: ``pages/`` (the pages MkDocs reads) and ``mkdocs.yml`` (the
repository's ``mkdocs.yml`` by ``INHERIT``, plus the navigation, generated here so that every
notebook and every docs page is in it). Executes nothing: a notebook's page shows the outputs
stored in the committed notebook. Standard library only.

Where each source goes (``SITE_PAGES``), as a path under ``pages/`` and then a page of the site
(``use_directory_urls: false``: ``x.md`` and ``x.ipynb`` become ``x.html``, so the site also opens
from the file system):

- ``notebooks/00_report.ipynb`` (the reproduction report) -> ``index.ipynb``: the front page;
- ``notebooks/NN_*.ipynb`` -> ``notebooks/NN_*.ipynb``; ``docs/*.md`` -> ``docs/*.md``;
- ``README.md`` -> ``readme.md``; ``CHANGELOG.md`` -> ``changelog.md``.

Links. Every relative link of a page (Markdown ``[text](target)``, ``![alt](target)``, and
``href``/``src`` attributes in HTML) is resolved against the page's place in the repository:

- to a source that is a page (above): rewritten to that page's place in the site. In a Markdown
  page it points at the staged source (``docs/findings.md``), which MkDocs turns into the page
  URL and checks (``strict`` and ``validation`` in ``mkdocs.yml``: a link to a missing page or
  anchor fails the build); in a notebook (its Markdown cells and its ``text/markdown`` and
  ``text/html`` outputs, which nbconvert renders without MkDocs' link handling) it points at the
  page URL itself (``docs/findings.html``);
- an image (``![alt](target)``, ``src=``) of the repository: copied into the site at its
  repository path and linked there;
- any other repository path (``benchmarks/records/…``, ``LICENSE``, ``../fedlib/x.py``): not part
  of the site, and the repository has no public address to link to, so the link becomes code
  text naming the repository path (``[text](../LICENSE)`` -> ``text (`LICENSE`)``; a link whose
  text is already that path in backticks becomes the backticked path alone);
- a target that exists nowhere is left as it is, for MkDocs and ``tests/test_site.py`` to report.

The same file is the MkDocs hook of the staged config (:func:`on_post_page`): nbconvert's page
template loads MathJax from a URL that mkdocs-jupyter leaves empty (``<script src="">``); the
notebooks write their symbols in Unicode, not TeX, so the hook drops that dead tag and the site
loads nothing from the network. The hook also readies every page's tables for reading (issue 71,
:func:`readable_tables`): a cell holding a number gets class ``num`` (``white-space: nowrap``),
and a long reason (the report's last column, ``reason``) becomes one collapsible line
(``<details class="why">``), so that a table's key columns fit the content width.

Styles and script. ``scripts/site_assets/`` (``workbook.css``: the wider content column, the
tables' scrolling and unwrapped numbers; ``workbook.js``: a click on an image shows it at its
natural size) is copied to ``assets/`` of the site, named by ``mkdocs.yml``'s ``extra_css`` and
``extra_javascript``.

Usage
-----
    python scripts/site.py                      # stage, then build build/site/ (make site)
    python scripts/site.py --site-dir DIR --stage-dir DIR2   # elsewhere (tests/test_site.py)
"""
from __future__ import annotations

import argparse
import html
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "build" / "site-src"
SITE = ROOT / "build" / "site"
PAGES_DIR = "pages"  # under STAGE; MkDocs refuses a docs_dir that holds its config file
REPORT = "notebooks/00_report.ipynb"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}
SITE_ASSETS = Path(__file__).resolve().parent / "site_assets"  # -> assets/ of the site (mkdocs.yml)

#: Markdown links and images: ``[text](target)`` / ``![alt](target)`` (``target`` without spaces;
#: an optional ``"title"`` after it is kept).
MD_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
#: ``href="…"`` / ``src="…"`` in HTML (inline HTML in Markdown, notebooks' HTML outputs).
HTML_ATTR = re.compile(r"(?P<attr>\b(?:href|src))=\"(?P<target>[^\"]*)\"")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)  # http:, https:, mailto:, data:, //host
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)


def site_pages(root: Path = ROOT) -> dict[str, str]:
    """Repository path -> path of its page under ``pages/`` (the report first, as ``index.ipynb``)."""
    pages = {REPORT: "index.ipynb"}
    for nb in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        rel = f"notebooks/{nb.name}"
        pages.setdefault(rel, rel)
    pages["README.md"] = "readme.md"
    for md in sorted((root / "docs").glob("*.md")):
        pages[f"docs/{md.name}"] = f"docs/{md.name}"
    pages["CHANGELOG.md"] = "changelog.md"
    return pages


def page_url(staged: str) -> str:
    """The site URL (relative to the site root) of a staged page: ``docs/x.md`` -> ``docs/x.html``."""
    return posixpath.splitext(staged)[0] + ".html"


class Linker:
    """Rewrites the relative links of one page (see the module docstring for the rules).

    ``source`` and ``staged`` are the page's repository path and its path under ``pages/``;
    ``to_url``: point page links at the rendered ``.html`` (notebooks) instead of the staged source
    (Markdown pages, whose links MkDocs converts and checks). ``assets`` collects the repository
    files (images) to copy into the site.
    """

    def __init__(self, source: str, staged: str, pages: dict[str, str], root: Path, to_url: bool,
                 assets: set[str]):
        self.source, self.staged, self.pages, self.root = source, staged, pages, root
        self.to_url, self.assets = to_url, assets

    def _resolve(self, target: str) -> tuple[str, str] | None:
        """(repository path, '#anchor' or '') of a relative target, or None if not relative."""
        if not target or target.startswith("#") or EXTERNAL.match(target):
            return None
        path, hash_, anchor = target.partition("#")
        repo = posixpath.normpath(posixpath.join(posixpath.dirname(self.source), path))
        return repo, hash_ + anchor

    def _from_here(self, site_path: str) -> str:
        return posixpath.relpath(site_path, posixpath.dirname(self.staged) or ".")

    def target(self, target: str, image: bool) -> str | None:
        """The rewritten target, or None when the link must become code text."""
        resolved = self._resolve(target)
        if resolved is None:
            return target
        repo, anchor = resolved
        if repo in self.pages:
            staged = self.pages[repo]
            return self._from_here(page_url(staged) if self.to_url else staged) + anchor
        if repo.startswith("..") or not (self.root / repo).exists():
            return target  # outside the repository or missing: left for the checks to report
        if image or posixpath.splitext(repo)[1].lower() in IMAGE_SUFFIXES:
            self.assets.add(repo)
            return self._from_here(repo) + anchor
        return None

    def markdown(self, text: str) -> str:
        """``text`` with its Markdown links and HTML attributes rewritten (code fences untouched)."""
        def md_link(m: re.Match) -> str:
            new = self.target(m["target"], image=bool(m["bang"]))
            if new is not None:
                return f"{m['bang']}[{m['text']}]({new}{m['title'] or ''})"
            repo = self._resolve(m["target"])[0]
            if m["text"].strip() == f"`{repo}`":
                return m["text"].strip()
            return f"{m['text']} (`{repo}`)"

        out, last = [], 0
        for fence in FENCE.finditer(text):
            out.append(self.html(MD_LINK.sub(md_link, text[last:fence.start()])))
            out.append(fence.group(0))
            last = fence.end()
        out.append(self.html(MD_LINK.sub(md_link, text[last:])))
        return "".join(out)

    def html(self, text: str) -> str:
        """``text`` with its ``href``/``src`` attributes rewritten; a link that must become code
        text loses its ``href`` (its text stays, as the anchor's content)."""
        def attr(m: re.Match) -> str:
            new = self.target(m["target"], image=m["attr"] == "src")
            if new is None:
                return f'title="{self._resolve(m["target"])[0]} (in the repository)"'
            return f'{m["attr"]}="{new}"'
        return HTML_ATTR.sub(attr, text)


def _notebook(source: Path, linker: Linker) -> dict:
    """The notebook with the links of its Markdown cells and Markdown/HTML outputs rewritten."""
    nb = json.loads(source.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = linker.markdown("".join(cell["source"]))
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/markdown" in data:
                data["text/markdown"] = linker.markdown("".join(data["text/markdown"]))
            if "text/html" in data:
                data["text/html"] = linker.html("".join(data["text/html"]))
    return nb


def title(source: Path) -> str:
    """A page's navigation label: its first level-1 heading, up to a colon (``# Findings: …`` ->
    ``Findings``); the file's stem if it has none."""
    if source.suffix == ".ipynb":
        cells = json.loads(source.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = FENCE.sub("", source.read_text())
    m = re.search(r"^#\s+(.+?)\s*#*\s*$", text, flags=re.M)
    if not m:
        return source.stem
    heading = re.sub(r"`|\*\*|\*", "", m.group(1))
    return heading.split(": ", 1)[0].strip()


def _docs_order(pages: dict[str, str], root: Path) -> list[str]:
    """docs/ pages: docs/index.md, then in the order its table links them, then any others."""
    docs = [p for p in pages if p.startswith("docs/")]
    index = (root / "docs" / "index.md").read_text() if (root / "docs" / "index.md").exists() else ""
    linked = [f"docs/{name}" for name in re.findall(r"\]\(([\w.-]+\.md)\)", index)]
    order = ["docs/index.md"] + [p for p in linked if p in docs]
    order += [p for p in docs if p not in order]
    return list(dict.fromkeys(p for p in order if p in docs))


def nav(pages: dict[str, str], root: Path = ROOT) -> list:
    """MkDocs ``nav``: the report, the README, every notebook, every docs page, the changelog."""
    def entry(repo: str) -> dict:
        return {title(root / repo): pages[repo]}

    notebooks = [p for p in pages if p.startswith("notebooks/") and p != REPORT]
    return [
        {"Reproduction report": pages[REPORT]},
        {"README": pages["README.md"]},
        {"Notebooks": [entry(p) for p in notebooks]},
        {"Documentation": [entry(p) for p in _docs_order(pages, root)]},
        {"Changelog": pages["CHANGELOG.md"]},
    ]


def _yaml(value, indent: int = 0) -> str:
    """The few YAML shapes ``mkdocs.yml`` needs here (a list of one-key mappings, strings),
    written with JSON strings, which YAML reads as they are."""
    pad = "  " * indent
    lines = []
    for item in value:
        (key, val), = item.items()
        if isinstance(val, list):
            lines.append(f"{pad}- {json.dumps(key, ensure_ascii=False)}:")
            lines.append(_yaml(val, indent + 2))
        else:
            lines.append(f"{pad}- {json.dumps(key, ensure_ascii=False)}: {json.dumps(val)}")
    return "\n".join(lines)


def stage(root: Path = ROOT, stage_dir: Path = STAGE, site_dir: Path = SITE) -> Path:
    """Stage every page into ``stage_dir`` and write its ``mkdocs.yml`` (building into
    ``site_dir``); returns the config's path."""
    pages = site_pages(root)
    out = stage_dir / PAGES_DIR
    if stage_dir.exists():
        if any(stage_dir.iterdir()) and not (stage_dir / "mkdocs.yml").is_file():
            raise SystemExit(f"site: stage_dir={stage_dir} holds files this script did not write; "
                             "give an empty or new folder (default build/site-src)")
        shutil.rmtree(stage_dir)
    assets: set[str] = set()
    for repo, staged in pages.items():
        target = out / staged
        target.parent.mkdir(parents=True, exist_ok=True)
        linker = Linker(repo, staged, pages, root, to_url=repo.endswith(".ipynb"), assets=assets)
        if repo.endswith(".ipynb"):
            target.write_text(json.dumps(_notebook(root / repo, linker), ensure_ascii=False, indent=1))
        else:
            target.write_text(linker.markdown((root / repo).read_text()))
    for repo in sorted(assets):
        (out / repo).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / repo, out / repo)
    shutil.copytree(SITE_ASSETS, out / "assets")
    config = stage_dir / "mkdocs.yml"
    rel = lambda p: json.dumps(os.path.relpath(p, stage_dir))  # noqa: E731
    config.write_text(
        "# Written by scripts/site.py (make site); the settings are in the repository's mkdocs.yml.\n"
        f"INHERIT: {rel(root / 'mkdocs.yml')}\ndocs_dir: {PAGES_DIR}\nsite_dir: {rel(site_dir)}\n"
        f"hooks: [{rel(Path(__file__).resolve())}]\nnav:\n{_yaml(nav(pages, root), 1)}\n")
    return config


def build(site_dir: Path = SITE, stage_dir: Path = STAGE, root: Path = ROOT) -> Path:
    """Stage the pages and build the site into ``site_dir`` with MkDocs (strict: a warning fails;
    MkDocs empties ``site_dir`` first); returns ``site_dir``. Runs ``python -m mkdocs`` of this
    interpreter, from ``root``."""
    config = stage(root, stage_dir, site_dir)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about its successor
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-f", str(config)],
                   cwd=root, env=env, check=True)
    return site_dir


def _toc_links(toc) -> list:
    """The table of contents' anchor links, depth first (document order)."""
    out = []
    for link in toc:
        out.append(link)
        out.extend(_toc_links(link.children))
    return out


def on_page_context(context, page, config, nav):
    """MkDocs hook: point a notebook page's table of contents at its headings' ids.

    mkdocs-jupyter slugs the contents from a Markdown export of the notebook and the headings'
    ids from nbconvert's HTML, and the two differ where a heading holds inline code (the export
    drops it, from the slug and from the entry's text) or repeats. Both list the same headings in
    document order: when the counts agree, each entry takes the id and the text of its heading;
    otherwise the contents are left as they are (and ``tests/test_site.py`` reports the anchors
    that miss)."""
    if not page.file.src_uri.endswith(".ipynb"):
        return context
    links = _toc_links(page.toc)
    headings = re.findall(r"<h([1-6])\b[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h\1>", page.content or "", flags=re.S)
    if len(links) == len(headings):
        for link, (_, id_, inner) in zip(links, headings):
            link.id = id_
            inner = re.sub(r"<a\b[^>]*class=\"anchor-link\".*?</a>", "", inner, flags=re.S)
            link.title = re.sub(r"<[^>]+>", "", inner).strip()  # entities kept: the theme prints it as HTML
    return context


TABLE = re.compile(r"<table\b.*?</table>", re.S)
ROW = re.compile(r"<tr\b[^>]*>.*?</tr>", re.S)
CELL = re.compile(r"<(?P<tag>t[dh])(?P<attrs>\b[^>]*)>(?P<inner>.*?)</(?P=tag)>", re.S)
TAG = re.compile(r"<[^>]+>")
SHORT_REASON = 40
"""A reason of at most this many characters stays as it is; a longer one is collapsed."""


def is_number(inner: str) -> bool:
    """Whether a table cell's HTML holds a number (a value, ``90.12 ± 0.48 (n = 3)``, an interval,
    counts ``3 / 28``): a digit, and no Latin letter outside ``(n = …)``."""
    text = html.unescape(TAG.sub("", inner)).strip()
    rest = re.sub(r"\bn = \d+", "", text)
    return bool(re.search(r"\d", text)) and not re.search(r"[A-Za-z]", rest)


def collapsed_reason(inner: str) -> str:
    """A reason cell's HTML as one collapsible line: ``<details class="why"><summary>`` its
    head (the text before the first ``: ``, or its first words) ``</summary>`` all of it
    ``</details>``; a short reason (:data:`SHORT_REASON`) is left as it is."""
    text = html.unescape(TAG.sub("", inner)).strip()
    if len(text) <= SHORT_REASON:
        return inner
    head = text.split(": ", 1)[0].split("; ", 1)[0]
    if len(head) > 32:
        head = " ".join(head.split()[:4])
    return (f'<details class="why"><summary>{html.escape(head)} …</summary>{inner.strip()}</details>')


def readable_tables(output: str) -> str:
    """Every table of a page's HTML with its number cells marked ``class="num"`` and, in a table
    whose last header is ``reason``, each long reason collapsed (:func:`collapsed_reason`)."""
    def table(m: re.Match) -> str:
        t = m.group(0)
        heads = [html.unescape(TAG.sub("", c["inner"])).strip() for c in CELL.finditer(t) if c["tag"] == "th"]
        reason = bool(heads) and heads[-1] == "reason"

        def row(r: re.Match) -> str:
            cells = [c for c in CELL.finditer(r.group(0)) if c["tag"] == "td"]
            out, last = [], 0
            for i, c in enumerate(cells):
                inner, attrs = c["inner"], c["attrs"]
                if reason and i == len(heads) - 1 == len(cells) - 1:
                    inner = collapsed_reason(inner)
                elif is_number(inner) and "class=" not in attrs:
                    attrs += ' class="num"'
                out += [r.group(0)[last:c.start()], f"<td{attrs}>{inner}</td>"]
                last = c.end()
            return "".join(out) + r.group(0)[last:]
        return ROW.sub(row, t)
    return TABLE.sub(table, output)


def on_post_page(output: str, page, config) -> str:
    """MkDocs hook: drop the MathJax loader mkdocs-jupyter leaves without a URL, and ready the
    page's tables for reading (:func:`readable_tables`)."""
    return readable_tables(output.replace('<script src=""> </script>', ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site-dir", type=Path, default=SITE, help="where the site goes (build/site)")
    parser.add_argument("--stage-dir", type=Path, default=STAGE, help="where the pages are staged (build/site-src)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    site = build(args.site_dir.resolve(), args.stage_dir.resolve())
    print(f"site: {len(site_pages())} pages in {site}/ ({time.monotonic() - t0:.0f} s); open {site / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
