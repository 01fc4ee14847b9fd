#!/usr/bin/env python
"""How far the numbers the notebooks print move on another CPU: executed copies against the committed ones.

``make workbook`` executes every notebook into ``build/executed/smoke/``; CI (``.ci/run``) does it
with every kernel library forced to another instruction set and thread count
(``tests/other_cpu.env``), while the committed notebooks ran with this project's default kernels.
``scripts/compare_notebooks.py`` compares them by nbval's rules, which sanitise the training tables'
numbers (``tests/nbval_sanitize.cfg``) and skip the cells tagged ``nbval-ignore-output``; this script
measures those numbers instead. It is a measurement, not a gate: it always exits 0.

What is compared, per code cell (papermill's injected-parameters cell dropped, stdout and the
display outputs only; stderr, images and widgets are not read):

- every table, Markdown pipe tables (``text/markdown`` or printed) and HTML tables (``text/html``,
  pandas' DataFrames): each cell keyed by (cell, table, row label, column label), the row label
  being the first column (or as many leading columns as make it unique); the numbers of a
  table cell are read in order (``62.16 (n = 1)`` gives 62.16, ``0.77 ± 0.01`` gives 0.77 and,
  as ``column [2]``, 0.01); a cell with no number is compared as text;
- every other printed line: lines are paired on their words with the numbers blanked out (the
  n-th line of a kind with the n-th, whatever the order), and the numbers of paired lines compared
  in order (row label: the text before the line's first ``": "``,
  else its words before the first number); a line whose words changed counts as one text change.

Tables and lines that report time (CPU time, wall minutes, ``43 s``) are left out: they move on
every run. Differences are in the notebook's own units (percentage points where it prints %,
fractions in notebooks 05-07).

Usage
-----
    python scripts/cross_cpu_drift.py                               # build/executed/smoke vs notebooks/
    python scripts/cross_cpu_drift.py /tmp/xcpu --json drift.json   # also write the result
    python scripts/cross_cpu_drift.py /tmp/xcpu --markdown          # the table docs/reproducibility.md shows
    python scripts/cross_cpu_drift.py /tmp/xcpu --details           # every value that moved
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d+\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])|∞|\binf\b|\bnan\b")
#: Text that reports time: it moves on every run, whatever the CPU.
VOLATILE = re.compile(r"CPU time|cpu_seconds|cpu_min|wall_min|CPU-hours|\bin \d+(?:\.\d+)? ?s\b"
                      r"|\b\d+(?:\.\d+)? s\s*$", re.IGNORECASE)
COUNT = re.compile(r"\(n = \d+\)")  # a table cell's run count: not a result
WIDGET = "application/vnd.jupyter.widget-view+json"


class Number(float):
    """A printed number: its value, and ``text`` as the notebook printed it."""

    def __new__(cls, text: str):
        token = text.replace("−", "-")
        value = float.__new__(cls, math.inf if token in ("∞", "inf") else float(token))
        value.text = text
        return value


def numbers(text: str) -> list[Number]:
    """The numbers in ``text``, in order."""
    return [Number(m.group()) for m in NUMBER.finditer(text)]


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def _cells(nb: dict) -> list[dict]:
    """The code cells, without papermill's injected-parameters cell (the committed notebooks have
    none), so that cell numbers agree with nbval's and compare_notebooks.py's."""
    return [c for c in nb.get("cells", []) if c.get("cell_type") == "code"
            and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


class _HTMLTables(HTMLParser):
    """The rows of every <table> in an HTML text, as lists of cell texts."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables and self.tables[-1]:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _html_tables(html: str) -> list[list[list[str]]]:
    """Each <table> (pandas' DataFrame HTML) as header + body rows; the extra header row of a named
    index (empty but for its first cell) is dropped."""
    parser = _HTMLTables()
    parser.feed(html)
    tables = []
    for rows in parser.tables:
        rows = [r for r in rows if r]
        if len(rows) < 2:
            continue
        header, body = rows[0], rows[1:]
        body = [r for r in body if any(c for c in r[1:])] or body
        tables.append([header] + body)
    return tables


def _pipe_row(line: str) -> list[str] | None:
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|") and len(line) > 1):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def _title(line: str) -> str:
    return line.strip().strip("*").split(": ")[0].strip()[:60].rstrip(" ,(")


def _blocks(text: str, title: str = ""):
    """Split a text into ('table', title, rows) and ('line', line) items; a pipe table's title is
    the last non-empty line before it in its cell (``**`` dropped, cut at ``": "``), ``title``
    when the text starts with the table."""
    lines, i = text.splitlines(), 0
    while i < len(lines):
        row = _pipe_row(lines[i])
        if row is not None and i + 1 < len(lines) and re.fullmatch(r"\|[\s:|-]+\|", lines[i + 1].strip()):
            rows, j = [row], i + 2
            while j < len(lines) and _pipe_row(lines[j]) is not None:
                rows.append(_pipe_row(lines[j]))
                j += 1
            yield ("table", title, rows)
            i = j
            continue
        if lines[i].strip():
            title = _title(lines[i])
            yield ("line", lines[i])
        i += 1


def _table_values(rows: list[list[str]]) -> dict[tuple[str, str], object]:
    """{(row label, column label): number or text} of a table given as header + rows."""
    header, out, seen = rows[0], {}, {}
    body = [r for r in rows[1:] if r]
    # the row label: the first column, or as many leading columns as make it unique
    width = next((n for n in range(1, len(header)) if len({tuple(r[:n]) for r in body}) == len(body)), 1)
    for row in body:
        label = " / ".join(row[:width])
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label} ({seen[label]})"
        for k, cell in enumerate(row[width:], start=width):
            column = header[k] if k < len(header) and header[k] else f"column {k}"
            if VOLATILE.search(column):
                continue
            values = numbers(COUNT.sub("", cell))
            if not values:
                out[(label, column)] = cell
            for j, v in enumerate(values):
                out[(label, column if j == 0 else f"{column} [{j + 1}]")] = v
    return out


def _template(line: str) -> str:
    return " ".join(NUMBER.sub("#", line).split())


def _line_label(line: str) -> str:
    text = line.strip()
    if ": " in text:
        return text.split(": ")[0].strip()[:80]
    words = []
    for word in text.split():
        if NUMBER.fullmatch(word):
            break
        words.append(word)
    return " ".join(words)[:80] or _template(text)[:80]


def extract(nb: dict) -> list[dict]:
    """What one notebook prints, per code cell: {'tables': [(title, {(row, column): value})],
    'lines': [(template, label, [numbers], columns, line)]}."""
    cells = []
    for cell in _cells(nb):
        tables, lines, header, title = [], [], None, ""
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                if output.get("name") != "stdout":
                    continue
                texts = [_text(output.get("text"))]
            elif kind in ("display_data", "execute_result"):
                data = output.get("data", {})
                if WIDGET in data:
                    continue
                if "text/html" in data and "<table" in _text(data["text/html"]):
                    for rows in _html_tables(_text(data["text/html"])):
                        tables.append(("", _table_values(rows)))
                    continue
                texts = [_text(data[m]) for m in ("text/markdown", "text/plain") if m in data][:1]
            else:
                continue
            for text in texts:
                for item in _blocks(text, title):
                    if item[0] == "table":
                        title, rows = item[1], item[2]
                        if VOLATILE.search(title):
                            continue
                        tables.append((title, _table_values(rows)))
                        continue
                    line = item[1]
                    title = _title(line)
                    if VOLATILE.search(line) or line.lstrip().startswith(("<Figure size", "<IPython")):
                        continue
                    values = numbers(line)
                    if not values:
                        header = line.split()
                    columns = header if header and len(header) == len(values) else None
                    lines.append((_template(line), _line_label(line), values, columns, line.strip()))
        cells.append({"tables": tables, "lines": lines})
    return cells


def _pair_lines(ref: list, run: list):
    """(pairs of lines with the same words, the committed lines left, the executed lines left)."""
    def keyed(lines):
        seen, out = {}, {}
        for line in lines:
            seen[line[0]] = seen.get(line[0], 0) + 1
            out[(line[0], seen[line[0]])] = line
        return out

    a, b = keyed(ref), keyed(run)
    return ([(a[k], b[k]) for k in a if k in b], [a[k] for k in a if k not in b],
            [b[k] for k in b if k not in a])


def _diff(committed, executed):
    """|executed - committed| for two numbers (0 when equal, inf when one is infinite or nan);
    None when either is text."""
    if isinstance(committed, str) or isinstance(executed, str):
        return None
    if committed == executed or (math.isnan(committed) and math.isnan(executed)):
        return 0.0
    delta = abs(executed - committed)
    return math.inf if math.isnan(delta) else delta


def compare(committed: dict, executed: dict) -> dict:
    """The numbers two copies of one notebook print, compared (``committed``, ``executed``:
    notebook JSON dicts). Returns {'compared': values compared, 'differences': [{'cell', 'table',
    'row', 'column', 'committed', 'executed', 'diff'}], 'rows': {row label: {'compared', 'differ',
    'max_abs_diff', 'largest'}}, 'unmatched': cells present in one copy only}; 'diff' is None for
    a changed text."""
    ref, run = extract(committed), extract(executed)
    compared, differences, rows = 0, [], {}

    def count(row, where, a, b):
        nonlocal compared
        compared += 1
        entry = rows.setdefault(row, {"compared": 0, "differ": 0, "max_abs_diff": 0.0, "largest": None})
        entry["compared"] += 1
        if a == b or (isinstance(a, float) and isinstance(b, float) and _diff(a, b) == 0.0):
            return
        d = _diff(a, b)
        record = dict(where, row=row, committed=a, executed=b, diff=d)
        differences.append(record)
        entry["differ"] += 1
        if d is not None and (entry["largest"] is None or entry["largest"]["diff"] is None
                              or d > entry["max_abs_diff"]):
            entry["max_abs_diff"], entry["largest"] = d, record
        elif entry["largest"] is None:
            entry["largest"] = record

    for number, (a, b) in enumerate(zip(ref, run)):
        for t, (title, values) in enumerate(a["tables"]):
            other = b["tables"][t][1] if t < len(b["tables"]) else {}
            for (row, column), value in values.items():
                where = {"cell": number, "table": title or f"table {t + 1}", "column": column}
                count(row, where, value, other.get((row, column), "(absent)"))
        # printed lines are paired by their words (numbers blanked), the n-th line of a kind with
        # the n-th: a table printed in another order (a sort by a number that moved) still pairs
        pairs, left, right = _pair_lines(a["lines"], b["lines"])
        for x, y in pairs:
            for k, (u, v) in enumerate(zip(x[2], y[2])):
                column = x[3][k] if x[3] else f"number {k + 1}"
                count(x[1], {"cell": number, "table": "printed line", "column": column}, u, v)
        for k in range(max(len(left), len(right))):  # the words changed: one text change a line
            x = left[k] if k < len(left) else None
            y = right[k] if k < len(right) else None
            count((x or y)[1], {"cell": number, "table": "printed line", "column": "text"},
                  x[4] if x else "(absent)", y[4] if y else "(absent)")
    return {"compared": compared, "differences": differences, "rows": rows,
            "unmatched": abs(len(ref) - len(run))}


def measure(executed_dir: Path, notebooks: list[Path]) -> dict:
    """compare() for every notebook with an executed copy in ``executed_dir``."""
    result = {"executed": str(executed_dir), "notebooks": {}}
    for path in notebooks:
        copy = executed_dir / path.name
        if not copy.is_file():
            result["notebooks"][path.stem] = {"status": "not executed"}
            continue
        try:
            committed = json.loads(path.read_text(encoding="utf-8"))
            executed = json.loads(copy.read_text(encoding="utf-8"))
            result["notebooks"][path.stem] = dict(status="compared", **compare(committed, executed))
        except Exception as error:  # a measurement: report and go on
            result["notebooks"][path.stem] = {"status": f"error: {type(error).__name__}: {error}"}
    done = {k: v for k, v in result["notebooks"].items() if v["status"] == "compared"}
    largest = None
    for name, nb in done.items():
        for row, entry in nb["rows"].items():
            if entry["largest"] and entry["largest"]["diff"] is not None and (
                    largest is None or entry["max_abs_diff"] > largest[2]["max_abs_diff"]):
                largest = (name, row, entry)
    result["summary"] = {
        "notebooks_compared": len(done),
        "notebooks_not_compared": len(result["notebooks"]) - len(done),
        "values": sum(nb["compared"] for nb in done.values()),
        "differ": sum(len(nb["differences"]) for nb in done.values()),
        "largest": None if largest is None else {"notebook": largest[0], "row": largest[1],
                                                   **largest[2]["largest"]},
    }
    return result


def _strict(value):
    """``value`` with infinite and nan numbers as text, so that the JSON is strict."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return _fmt(value)
    return value


def _fmt(value) -> str:
    if isinstance(value, Number):
        return value.text
    if isinstance(value, float):
        return "∞" if math.isinf(value) else f"{value:g}"
    return str(value)


def _where(record: dict) -> str:
    return (f"{record['table']} / {record['column']}: {_fmt(record['committed'])} → "
            f"{_fmt(record['executed'])}")


def summary_line(result: dict) -> str:
    s = result["summary"]
    line = (f"cross_cpu_drift: {s['notebooks_compared']} notebook(s) compared "
            f"({s['notebooks_not_compared']} not), {s['values']} values, {s['differ']} differ")
    if s["largest"]:
        line += (f"; largest |Δ| {_fmt(s['largest']['diff'])} ({s['largest']['notebook']}, "
                 f"{s['largest']['row']}, {_where(s['largest'])})")
    return line


def report(result: dict, details: bool = False) -> str:
    out = [f"cross_cpu_drift: executed copies in {result['executed']}/ against the committed notebooks"]
    for name, nb in result["notebooks"].items():
        if nb["status"] != "compared":
            out.append(f"  {name}: {nb['status']}")
            continue
        out.append(f"  {name}: {nb['compared']} values, {len(nb['differences'])} differ")
        for row, e in nb["rows"].items():
            if e["differ"]:
                out.append(f"    {row}: {e['differ']} of {e['compared']} differ, max |Δ| "
                           f"{_fmt(e['max_abs_diff'])} ({_where(e['largest'])})")
        if details:
            for d in nb["differences"]:
                out.append(f"      cell {d['cell']}, {d['row']}, {_where(d)}")
    out.append(summary_line(result))
    return "\n".join(out)


def markdown(result: dict) -> str:
    """One row per (notebook, row label) with a value that moved, then the notebooks where none moved."""
    out = ["| notebook | row (method) | values | differ | max \\|Δ\\| | largest change |",
           "|---|---|---|---|---|---|"]
    still, skipped = [], []
    for name, nb in result["notebooks"].items():
        if nb["status"] != "compared":
            skipped.append(f"{name} ({nb['status']})")
            continue
        moved = [(row, e) for row, e in nb["rows"].items() if e["differ"]]
        if not moved:
            still.append(f"{name} ({nb['compared']} values)")
        for row, e in sorted(moved, key=lambda x: -x[1]["max_abs_diff"]):
            cell = _where(e["largest"]).replace("|", "\\|")
            out.append(f"| {name} | {row} | {e['compared']} | {e['differ']} | {_fmt(e['max_abs_diff'])} | {cell} |")
    if still:
        out.append(f"\nNothing moved in: {', '.join(still)}.")
    if skipped:
        out.append(f"\nNot compared: {', '.join(skipped)}.")
    out.append(f"\n{summary_line(result)}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("executed", nargs="?", type=Path, default=ROOT / "build" / "executed" / "smoke",
                    help="folder of executed notebooks (default: build/executed/smoke, make workbook's)")
    ap.add_argument("notebooks", nargs="*", type=Path,
                    help="committed notebooks (default: notebooks/[0-9][0-9]_*.ipynb)")
    ap.add_argument("--json", type=Path, help="also write the result as JSON here")
    ap.add_argument("--markdown", action="store_true", help="print the table docs/reproducibility.md shows")
    ap.add_argument("--details", action="store_true", help="also list every value that moved")
    args = ap.parse_args(argv)
    try:
        paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        result = measure(args.executed, paths)
        print(markdown(result) if args.markdown else report(result, args.details))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(_strict(result), indent=1, ensure_ascii=False) + "\n",
                                 encoding="utf-8")
    except BrokenPipeError:  # its output piped into head
        sys.stdout = None
    except Exception as error:  # a measurement, never a gate
        print(f"cross_cpu_drift: could not measure: {type(error).__name__}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
