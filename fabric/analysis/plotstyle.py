"""One paper style for every figure: readable fonts, labelled axes, safe colours.

Colours are the Okabe-Ito palette, distinguishable with the common forms of
colour blindness. Figures are saved as PNG (300 dpi) and PDF side by side.
A figure of an invalid run (a failed fidelity check) carries that label; every
figure carries its run's provenance (:mod:`fabric.analysis.provenance`) as a grey
footer and in its metadata.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Sequence

from fabric.analysis.provenance import SEPARATOR

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
             "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
POLICY_COLOURS = {"ecmp": OKABE_ITO[3], "spray": OKABE_ITO[0], "adaptive": OKABE_ITO[2],
                  "static": OKABE_ITO[4], "ar": OKABE_ITO[5]}
POLICY_MARKERS = {"ecmp": "o", "spray": "s", "adaptive": "^", "static": "D", "ar": "v"}
RC: dict[str, Any] = {
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 8, "ytick.labelsize": 8, "figure.dpi": 150, "savefig.dpi": 300,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.3, "lines.linewidth": 1.5, "pdf.fonttype": 42, "ps.fonttype": 42,
    "savefig.bbox": "tight", "figure.constrained_layout.use": True,
}


def pyplot() -> Any:
    """matplotlib.pyplot with the headless backend and the paper style applied."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(RC)  # type: ignore[arg-type]  # (its stubs list the keys as literals)
    from cycler import cycler

    plt.rcParams["axes.prop_cycle"] = cycler(color=OKABE_ITO)
    return plt


def colour(name: str, index: int = 0) -> str:
    """The colour of a policy (fixed across figures) or the index-th palette colour."""
    return POLICY_COLOURS.get(name, OKABE_ITO[index % len(OKABE_ITO)])


def marker(name: str, index: int = 0) -> str:
    """The marker of a policy (fixed across figures) or the index-th marker."""
    return POLICY_MARKERS.get(name, MARKERS[index % len(MARKERS)])


def series_style(name: str, index: int = 0) -> dict[str, str]:
    """``color`` and ``marker`` of one series: every series of a figure gets its own
    pair, so series stay apart in greyscale and for colour-blind readers too."""
    return {"color": colour(name, index), "marker": marker(name, index)}


def spread_bar(ax: Any, x: float, values: Sequence[float], colour: str, width: float = 0.6,
               label: str | None = None) -> None:
    """A bar at the mean of ``values``, a min-max whisker and every value as a dot."""
    mean = statistics.fmean(values)
    # equal values can have a mean one rounding step outside them
    ax.bar(x, mean, width=width, color=colour, alpha=0.7, label=label,
           yerr=[[max(0.0, mean - min(values))], [max(0.0, max(values) - mean)]], capsize=3)
    ax.scatter([x] * len(values), values, s=10, color="black", zorder=3)


IDEAL_LABEL = "ideal (perfect transport)"


def ideal_ticks(ax: Any, x: float, ideals: Sequence[float], label: str | None = IDEAL_LABEL
                ) -> None:
    """Each run's ideal as a grey tick at ``x``, beside its measured values."""
    if ideals:
        ax.scatter([x] * len(ideals), ideals, marker="_", s=80, color="grey", zorder=2,
                   label=label)


def mark_incomplete(ax: Any, x: float, count: int, **text: Any) -> None:
    """Write how many runs at ``x`` did not complete (nothing when none)."""
    if count:
        ax.annotate(f"{count} incomplete", (x, 0.02), ha="center", fontsize=7,
                    color=OKABE_ITO[3], **text)


def validity_mark(summary: dict[str, Any], runs: list[dict[str, Any]] | None = None) -> str:
    """The warning a figure of ``summary``'s runs carries; empty when every run was valid.

    ``runs`` (rows with a ``valid`` column) count the invalid runs for summaries
    written before they recorded that count.
    """
    if summary["valid"]:
        return ""
    fidelity = summary.get("fidelity", {})
    invalid, total = fidelity.get("invalid_runs"), fidelity.get("runs")
    if invalid is None and runs and all("valid" in row for row in runs):
        invalid = sum(str(row["valid"]) not in ("True", "true", "1") for row in runs)
        total = len(runs)
    if invalid:
        return f"{invalid} of {total} runs failed a fidelity check (see summary.json)"
    return "INVALID RUN: a fidelity check failed (see summary.json)"


FOOTER_SIZE = 5.5       # points: small, below everything else
FOOTER_COLOUR = "#808080"


def footer(fig: Any, line: str) -> Any:
    """Write ``line`` (a run's provenance) in small grey type below the figure's axes,
    wrapped at its separators to about the figure's width; returns the text."""
    chars = max(40, int(fig.get_figwidth() * 72 / (FOOTER_SIZE * 0.55)))
    rows: list[str] = []
    for part in line.split(SEPARATOR):
        if rows and len(rows[-1]) + len(SEPARATOR) + len(part) <= chars:
            rows[-1] += SEPARATOR + part
        else:
            rows.append(part)
    # below everything already drawn (x labels, a legend under the axes), at its left edge
    fig.draw_without_rendering()
    box = fig.get_tightbbox()  # inches
    return fig.text(box.x0 / fig.get_figwidth(), (box.y0 - 0.04) / fig.get_figheight(),
                    "\n".join(rows), ha="left", va="top", fontsize=FOOTER_SIZE,
                    color=FOOTER_COLOUR)


def headline(fig: Any, mark: str) -> Any:
    """Write ``mark`` (a validity warning) in bold red as the figure's headline: its
    suptitle, or above everything when the figure has a suptitle of its own."""
    style = {"color": OKABE_ITO[3], "fontsize": 8, "weight": "bold"}
    if not fig.get_suptitle():
        return fig.suptitle(mark, **style)
    fig.draw_without_rendering()
    box = fig.get_tightbbox()  # inches
    return fig.text(0.5, (box.y1 + 0.04) / fig.get_figheight(), mark, ha="center",
                    va="bottom", **style)


def save(fig: Any, run_dir: Path, name: str, mark: str = "", provenance: str = "",
         show_provenance: bool = True) -> list[Path]:
    """Save ``fig`` as ``name.png`` and ``name.pdf``.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (closed once saved).
    run_dir : Path
        Where to write it.
    name : str
        The files' name without suffix.
    mark : str
        A validity warning, written as the figure's headline (empty: none).
    provenance : str
        The run's provenance line (:mod:`fabric.analysis.provenance`): always in
        the files' metadata (PNG ``Description``, PDF ``Subject``), and a footer
        under the figure unless ``show_provenance`` is false.
    show_provenance : bool
        False leaves the footer out (a paper that gives it in the caption).

    Returns
    -------
    list of Path
        The PNG and the PDF.
    """
    if mark:
        headline(fig, mark)
    if provenance and show_provenance:
        footer(fig, provenance)
    paths = [run_dir / f"{name}.png", run_dir / f"{name}.pdf"]
    for path in paths:
        key = "Description" if path.suffix == ".png" else "Subject"
        fig.savefig(path, metadata={key: provenance} if provenance else None)
    pyplot().close(fig)
    return paths
