"""The README and docs/ say only what is true of the code and of the tree.

The rules (also in docs/index.md, "Rules for these pages"):

- **References.** A backticked span that starts with ``fedlib`` is a reference. A function,
  class or constant is written ``module:name`` (``workbook.tables:table3``, or
  ``module:Class.attr``), optionally followed by a call such as ``(df, 'paper_code')``; a module
  alone is written as its dotted path (``fedlib.reproduction``). Each must import
  (``importlib.import_module``) and resolve (``getattr``); a dotted span that is not a module
  (``fedlib.tables.table3``) is refused, so one syntax is used everywhere.
- **Paths.** A backticked repository path (``tests/test_docs.py``, ``benchmarks/records/``)
  must exist; spans with placeholders (``<paper>``, ``*``) are not paths.
- **Links.** Every relative Markdown link points at an existing file, and its ``#anchor`` at a
  heading (GitHub's slug) or an explicit ``id``/``name`` anchor of that file.
- **The README** is at most 200 lines, a front door. Outside the generated blocks (the
  findings, between ``<!-- findings:start -->`` and ``<!-- findings:end -->``, and the commands'
  measured time and disk, between ``<!-- costs:start -->`` and ``<!-- costs:end -->``, both
  rendered by ``python -m workbook.report --write``) it holds no timing (a
  time unit or a number of seconds/hours), no typed result (``±``, ``%``, ``0.xx``, ``xx.xx``)
  and no machine or session words; every numbered notebook has a row.
- **Pages written by hand** (README and docs/ except the generated findings.md and
  performance.md) name no machine and no session.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
GENERATED = {"findings.md", "performance.md"}  # rendered from records by code, not typed
PAGES = [README] + sorted(DOCS.glob("*.md"))
HAND_WRITTEN = [p for p in PAGES if p.name not in GENERATED or p.parent != DOCS]

FINDINGS_START, FINDINGS_END = "<!-- findings:start -->", "<!-- findings:end -->"
COSTS_START, COSTS_END = "<!-- costs:start -->", "<!-- costs:end -->"
README_MAX_LINES = 200

SPAN = re.compile(r"`([^`\n]+)`")
REFERENCE = re.compile(r"^(?P<module>(?:fedlib|workbook)(?:\.\w+)*)(?::(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?"
                       r"(?:\(.*\))?$")
PATH = re.compile(r"^(?:fedlib|workbook|tests|benchmarks|scripts|params|notebooks|figures|docs|\.ci)/[\w./-]*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
# Timing: a time unit as a word, or a number directly followed by s / h (e.g. "12 s", "3h").
TIMING = re.compile(r"\b(?:seconds?|minutes?|hours?|ms|µs|sec|secs|mins?|hrs?)\b|\d\s?[sh]\b")
# A typed result: a spread, a percentage, an accuracy in [0, 1] or in percent with decimals.
RESULT = re.compile(r"±|%|(?<![\w.])(?:0\.\d{2,}|\d{2}\.\d{2})(?!\w|\.\d)")
MACHINE = re.compile(r"\b(?:EPYC|Epyc|Xeon|Zen ?\d|Ryzen|Threadripper|H100|H200|A100|VM|VMs|"
                     r"sessions?|[Tt]his session's)\b")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _text_outside_code_fences(text: str) -> str:
    """The page without its fenced code blocks (links and spans in code are code, not prose)."""
    return re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)


def _resolve(span: str) -> str | None:
    """None if the reference resolves, else why not."""
    m = REFERENCE.match(span)
    module, attr = m["module"], m["attr"]
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        hint = (" (a function or class is written module:name)"
                if attr is None and "." in module else "")
        return f"module {module!r} does not import: {err}{hint}"
    for part in (attr.split(".") if attr else []):
        if not hasattr(obj, part):
            return f"{module}:{attr} — {part!r} not found"
        obj = getattr(obj, part)
    return None


def references(page: Path) -> list[str]:
    return [s for s in SPAN.findall(page.read_text()) if s.startswith(("fedlib", "workbook")) and REFERENCE.match(s)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _text_outside_code_fences(page.read_text())
    out, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    out.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return out


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_reference_resolves(page):
    spans = [s for s in SPAN.findall(page.read_text()) if s.startswith(("fedlib.", "workbook.")) or s in ("fedlib", "workbook")]
    problems = []
    for span in spans:
        if not REFERENCE.match(span):
            problems.append(f"`{span}`: not a reference; write module:name or a module's dotted path")
            continue
        why = _resolve(span)
        if why:
            problems.append(f"`{span}`: {why}")
    assert not problems, f"{_rel(page)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_repository_path_exists(page):
    missing = [s for s in SPAN.findall(page.read_text()) if PATH.match(s) and not (ROOT / s).exists()]
    assert not missing, f"{_rel(page)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_points_at_a_file_and_anchor(page):
    text = _text_outside_code_fences(page.read_text())
    problems = []
    for groups in LINK.findall(text):
        target = groups[0] or groups[1]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"({target}): {path} does not exist")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"({target}): no heading or anchor #{anchor} in {file.relative_to(ROOT)}")
    assert not problems, f"{_rel(page)}:\n  " + "\n  ".join(problems)


def _readme_outside_findings() -> list[tuple[int, str]]:
    lines = README.read_text().splitlines()
    assert lines.count(FINDINGS_START) == 1 and lines.count(FINDINGS_END) == 1, \
        f"README.md must hold the generated block {FINDINGS_START} … {FINDINGS_END} once"
    assert lines.count(COSTS_START) == 1 and lines.count(COSTS_END) == 1, \
        f"README.md must hold the generated block {COSTS_START} … {COSTS_END} once"
    blocks = [(lines.index(a), lines.index(b)) for a, b in ((FINDINGS_START, FINDINGS_END), (COSTS_START, COSTS_END))]
    assert all(start < end for start, end in blocks)
    return [(i + 1, line) for i, line in enumerate(lines) if not any(start <= i <= end for start, end in blocks)]


def test_readme_is_a_front_door():
    n = len(README.read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; at most {README_MAX_LINES} (move detail to docs/)"


@pytest.mark.parametrize("rule, pattern", [("timing", TIMING), ("typed result", RESULT)])
def test_readme_has_no_timing_and_no_typed_result(rule, pattern):
    hits = [f"README.md:{n}: {m.group(0)!r} in {line.strip()!r}"
            for n, line in _readme_outside_findings() for m in [pattern.search(line)] if m]
    assert not hits, f"{rule} outside the generated findings block:\n  " + "\n  ".join(hits)


@pytest.mark.parametrize("page", HAND_WRITTEN, ids=_rel)
def test_no_machine_or_session_talk(page):
    hits = [f"{_rel(page)}:{n}: {m.group(0)!r}" for n, line in enumerate(page.read_text().splitlines(), 1)
            for m in [MACHINE.search(line)] if m]
    assert not hits, "machine or session words in a hand-written page:\n  " + "\n  ".join(hits)


def test_readme_lists_every_notebook():
    text = README.read_text()
    missing = [p.name for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
               if f"(notebooks/{p.name})" not in text]
    assert not missing, f"README.md's notebook table has no row linking {missing}"


def test_docs_index_links_every_page():
    index = (DOCS / "index.md").read_text()
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "index.md" and f"({p.name})" not in index]
    assert not missing, f"docs/index.md links no {missing}"
    readme = README.read_text()
    assert "(docs/index.md)" in readme, "README.md must link docs/index.md"


# The rules above must be able to fail: each is checked on a line it has to refuse.
@pytest.mark.parametrize("pattern, line", [
    (TIMING, "the grid takes 12 s"), (TIMING, "about ten minutes on a laptop"), (TIMING, "3h"),
    (RESULT, "0.888 vs 0.86"), (RESULT, "95.50"), (RESULT, "0.90 ± 0.01"), (RESULT, "44 %"),
    (MACHINE, "an AMD EPYC"), (MACHINE, "this session's VM"), (MACHINE, "on an H200"),
])
def test_style_rules_refuse_what_they_forbid(pattern, line):
    assert pattern.search(line)


@pytest.mark.parametrize("pattern, line", [
    (TIMING, "Python 3.11+, torch 2.14.1"), (TIMING, "K = 20, 4 rounds of 1 epoch"), (TIMING, "Figs. 5–6"),
    (RESULT, "Python 3.11+, torch 2.14.1, torchvision 0.29.1"), (RESULT, "Dirichlet α = 0.3"), (RESULT, "notebooks 00–10"),
    (MACHINE, "one run per core on this machine"),
])
def test_style_rules_allow_ordinary_text(pattern, line):
    assert not pattern.search(line)


def test_a_renamed_function_is_reported():
    assert _resolve("workbook.tables:table3") is None
    assert "not found" in _resolve("workbook.tables:table3_renamed")
    assert "does not import" in _resolve("workbook.tables.table3")
    assert _resolve("workbook.tables:table3(df, 'paper_code')") is None
