"""The docs' figures and measured tables, generated from the results shipped in docs/results.

A page shows a run's figures as ``figures/RESULTS-FIGURE.png`` and its measured table
between ``<!-- results: RESULTS -->`` and ``<!-- end results -->``. Both are drawn from
``docs/results/RESULTS/`` (a run directory of any experiment, without its work
directories), so each states the run's provenance: commit, link rate, transport, entropy
mode, seeds and the machine's speed factor.

    python scripts/docs_results.py write   # redraw the figures, rewrite the tables
    python scripts/docs_results.py check   # exit 1 if a table or figure is stale

``write`` refuses (exit 1, nothing drawn) while a results directory the pages show
ran from a dirty tree (its commit ends in ``-dirty``); ``check`` names such
directories without failing, so that shipped results can be replaced one by one.

No root is needed: the figures are drawn by the experiments' own figure functions, as
``fabric plot`` draws them.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import experiments  # noqa: E402
from fabric.analysis import provenance, results  # noqa: E402

DOCS = ROOT / "docs"
RESULTS = DOCS / "results"
FIGURES = DOCS / "figures"
FIGURE_LINK = re.compile(r"\]\((?:\.\./)*figures/([a-z]+)-([a-z_]+)\.png\)")
TABLE_BLOCK = re.compile(r"(<!-- results: ([a-z]+) -->\n)(.*?)(<!-- end results -->)", re.S)


def pages() -> list[Path]:
    """Every page of the docs."""
    return sorted(DOCS.rglob("*.md"))


def wanted_figures() -> dict[str, set[str]]:
    """Results directory -> the names of its figures the pages show."""
    wanted: dict[str, set[str]] = {}
    for page in pages():
        for experiment, figure in FIGURE_LINK.findall(page.read_text()):
            wanted.setdefault(experiment, set()).add(figure)
    return wanted


def present_figures() -> list[tuple[str, set[str]]]:
    """The figures the pages show whose results directory is there, by directory."""
    missing = missing_results()
    return [(name, figures) for name, figures in sorted(wanted_figures().items())
            if name not in missing]


def draw_figures() -> list[Path]:
    """Redraw every figure the pages show from its results directory, into docs/figures."""
    written = []
    for name, figures in present_figures():
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / name
            shutil.copytree(RESULTS / name, run_dir)
            experiment = experiments.load(
                results.read_json(run_dir / "summary.json")["experiment"])
            for path in experiment.plot(run_dir):
                if path.suffix == ".png" and path.stem in figures:
                    target = FIGURES / f"{name}-{path.stem}.png"
                    shutil.copyfile(path, target)
                    written.append(target)
    return written


def table_markdown(run_dir: Path) -> str:
    """The run's summary table as Markdown, under its provenance line."""
    summary = results.read_json(run_dir / "summary.json")
    rows: list[dict[str, Any]] = summary["table"]
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    lines = [f"*Measured: {provenance.read(run_dir).line()}.*", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def missing_results() -> list[str]:
    """Results directories the pages name that docs/results lacks."""
    named = set(wanted_figures())
    for page in pages():
        named |= {m.group(2) for m in TABLE_BLOCK.finditer(page.read_text())}
    return sorted(n for n in named if not (RESULTS / n / "summary.json").exists())


def dirty_results() -> list[str]:
    """Results directories the pages show whose run came from a tree with uncommitted
    changes: no one can check out the code that made them."""
    return sorted(name for name in set(wanted_figures()) - set(missing_results())
                  if (provenance.read(RESULTS / name).commit or "").endswith("-dirty"))


def _generated(match: re.Match) -> str:
    """A table block with its table, or left as it is when its results are missing."""
    if not (RESULTS / match.group(2) / "summary.json").exists():
        return match.group(0)
    return match.group(1) + table_markdown(RESULTS / match.group(2)) + match.group(4)


def _number(value: float) -> str:
    """A measurement with the digits a reader compares: 1,583 / 16.4 / 0.956 / 6e-05."""
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 0.01 or value == 0:
        return f"{value:.3f}".rstrip("0").rstrip(".") or "0"
    return f"{value:.1g}"


def rewrite_tables(check_only: bool = False) -> list[str]:
    """Put each page's generated table in place; return the pages that were stale."""
    stale = []
    for page in pages():
        text = page.read_text()
        new = TABLE_BLOCK.sub(_generated, text)
        if new != text:
            stale.append(str(page.relative_to(ROOT)))
            if not check_only:
                page.write_text(new)
    return stale


def stale_figures() -> list[str]:
    """Figures the pages show that are missing, or whose provenance is not their data's."""
    stale = []
    for name, figures in present_figures():
        line = provenance.read(RESULTS / name).line()
        for figure in sorted(figures):
            path = FIGURES / f"{name}-{figure}.png"
            if not path.exists() or line not in _png_text(path):
                stale.append(str(path.relative_to(ROOT)))
    return stale


def _png_text(path: Path) -> str:
    """Every text chunk of a PNG (matplotlib writes the provenance into one)."""
    from PIL import Image

    with Image.open(path) as image:
        return "\n".join(str(v) for v in getattr(image, "text", {}).values())


def main(argv: list[str]) -> int:
    """``write`` or ``check`` (see the module docstring)."""
    if argv not in (["write"], ["check"]):
        print("usage: scripts/docs_results.py write|check", file=sys.stderr)
        return 2
    missing = missing_results()
    for name in missing:
        print(f"missing: docs/results/{name} (a run directory the pages show)", file=sys.stderr)
    dirty = dirty_results()
    for name in dirty:
        print(f"dirty: docs/results/{name} ran from uncommitted changes; re-run it from a "
              f"clean commit", file=sys.stderr)
    if argv == ["write"]:
        if dirty:
            return 1  # nothing drawn: a page must not show results no commit can reproduce
        for path in draw_figures():
            print(path.relative_to(ROOT))
        for page in rewrite_tables():
            print(page)
        return 1 if missing else 0
    stale = rewrite_tables(check_only=True) + stale_figures() + missing
    for item in stale:
        print(f"stale: {item} (regenerate: scripts/docs.sh --figures)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
