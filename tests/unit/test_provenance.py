"""Every figure names the run it was drawn from: the provenance line of a run directory,
its footer and the PNG/PDF metadata (synthetic run directories, no root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabric.analysis import provenance, results
from fabric.experiment import Experiment, RunData

PIL = pytest.importorskip("PIL.Image")

MANIFEST = {
    "experiment": "lossless",
    "parameters": {"topology": "rail-clos", "ccs": ["none", "dcqcn", "swift"],
                   "transport": "roce", "roce_mtu": 4096, "spray_entropy": "recycle",
                   "host_mbps": "auto", "quick": False,
                   "started": "2026-12-04T12:36:20+0000",
                   "machine_speed": {"round_us": 4.89, "factor": 0.859}},
    "seeds": list(range(10)),
    "started": "2026-12-04T12:36:20+0000",
    "git_commit": "449e9cf1234567890abcdef1234567890abcdef0-dirty",
    "fidelity": {"valid": True, "runs": 360, "invalid_runs": 0, "checks": []},
}
FULL_LINE = ("fabric 449e9cf-dirty · lossless · 2026-12-04 · rail-clos · 7 Mbit/s hosts · "
             "roce 4096 B · entropy recycle · cc none, dcqcn, swift · seeds 0-9 · "
             "full run, 360 runs valid · speed 0.86")


def _run_dir(path: Path, manifest: dict | None = MANIFEST, rows: list[dict] | None = None,
             experiment: str = "lossless") -> Path:
    """A run directory as ``fabric run`` leaves it (only what these tests read)."""
    if manifest is not None:
        (path / "manifest.json").write_text(json.dumps(manifest))
    results.write_csv(path / "runs.csv", rows if rows is not None else
                      [{"setting": "ecmp", "seed": s, "host_mbps": 7.0, "valid": True}
                       for s in range(3)])
    results.write_summary(path, experiment, [], {"valid": True, "runs": 3, "checks": []})
    return path


def test_the_line_names_every_recorded_field(tmp_path):
    found = provenance.read(_run_dir(tmp_path))
    assert found.host_mbps == (7.0,)   # "auto" in the manifest: the rate runs.csv records
    assert found.commit == "449e9cf-dirty" and found.seeds == tuple(range(10))
    assert found.line() == FULL_LINE


def test_fields_the_run_does_not_record_are_left_out(tmp_path):
    manifest = {"experiment": "zones", "seeds": [0],
                "parameters": {"topology": "two-zone", "transport": "tcp",
                               "host_mbps": "auto", "quick": True},
                "git_commit": "unknown"}
    line = provenance.read(_run_dir(tmp_path, manifest, rows=[{"seed": 0}])).line()
    assert line == "zones · two-zone · tcp · seed 0 · quick run"
    for absent in ("fabric", "Mbit/s", "entropy", "cc", "speed", "valid", "B ·"):
        assert absent not in line


def test_a_directory_without_a_manifest_has_no_provenance(tmp_path):
    assert provenance.read(_run_dir(tmp_path, manifest=None, rows=[])).line() == ""


def test_several_rates_seeds_out_of_order_and_an_ablations_controls(tmp_path):
    manifest = {**MANIFEST, "experiment": "collisions", "seeds": [0, 1, 2, 5],
                "parameters": {**MANIFEST["parameters"], "topology": None,
                               "topologies": ["rail-clos", "fat-tree", "leaf-spine"],
                               "ccs": None, "cc": "swift"},
                "fidelity": {"valid": False, "runs": 40, "invalid_runs": 3}}
    rows = [{"cc": cc, "host_mbps": mbps} for cc, mbps in (("swift", 4.0), ("loss", 8.5),
                                                            ("dcqcn", 4.0))]
    line = provenance.read(_run_dir(tmp_path, manifest, rows)).line()
    assert "rail-clos, fat-tree +1 more" in line and "4-8.5 Mbit/s hosts" in line
    assert "cc swift, dcqcn, loss" in line and "seeds 0-2, 5" in line
    assert "full run, 40 runs, 3 invalid" in line


def test_a_fixed_rate_in_the_manifest_is_used_when_runs_csv_has_none(tmp_path):
    manifest = {**MANIFEST, "parameters": {**MANIFEST["parameters"], "host_mbps": 5}}
    assert provenance.read(_run_dir(tmp_path, manifest, rows=[{"seed": 0}])).host_mbps == (5.0,)
    assert provenance.short_commit("0123456789abcdef") == "0123456"


# --- the figures ------------------------------------------------------------------------

class OneFigure(Experiment):
    """Just a figure: what plot() does with it is under test."""

    name = "lossless"
    question = "?"
    modes = {}
    drawn: list = []

    def run_count(self, ctx):
        return 0

    def estimate_s(self, ctx):
        return 0.0

    def measure(self, ctx, runner):
        raise NotImplementedError

    def table(self, rows):
        return []

    def figures(self):
        def draw(data: RunData):
            fig, ax = data.plt.subplots(figsize=(3.0, 2.0))
            ax.plot([0, 1], [0, 1])
            OneFigure.drawn.append(fig)
            return fig
        return {"line": draw}


def _texts(fig) -> list[str]:
    return [t.get_text().replace("\n", " · ") for t in fig.texts]


def _pdf_subject(line: str) -> bytes:
    """A PDF's Subject as matplotlib writes a non-ASCII string: UTF-16 with its BOM."""
    return b"/Subject (" + ("\ufeff" + line).encode("utf-16-be") + b")"


@pytest.mark.parametrize("shown", [True, False])
def test_every_figure_carries_the_line_in_its_metadata_and_as_a_footer(tmp_path, shown):
    OneFigure.drawn = []
    paths = OneFigure().plot(_run_dir(tmp_path), show_provenance=shown)
    assert [p.name for p in paths] == ["line.png", "line.pdf"]
    with PIL.open(tmp_path / "line.png") as image:
        assert image.info["Description"] == FULL_LINE   # with or without the footer
    assert _pdf_subject(FULL_LINE) in (tmp_path / "line.pdf").read_bytes()
    (fig,) = OneFigure.drawn
    assert (FULL_LINE in _texts(fig)) is shown


def test_fabric_plot_no_provenance_leaves_the_footer_out(tmp_path):
    from fabric.cli.main import build_parser

    rows = [{"placement": p, "seed": 0, "busbw_frac": 0.8, "bound_frac": 1.0,
             "interzone_bytes": 0, "host_mbps": 7.0, "valid": True}
            for p in ("one-zone", "cross-zone")]
    heights = {}
    for shown in (True, False):
        run_dir = tmp_path / str(shown)
        run_dir.mkdir()
        _run_dir(run_dir, {**MANIFEST, "experiment": "zones"}, rows, experiment="zones")
        argv = ["plot", str(run_dir)] + ([] if shown else ["--no-provenance"])
        args = build_parser().parse_args(argv)
        assert args.func(args) == 0
        with PIL.open(run_dir / "busbw.png") as image:
            assert "fabric 449e9cf-dirty · zones" in image.info["Description"]
            heights[shown] = image.size[1]
    assert heights[True] > heights[False]   # the footer's rows
