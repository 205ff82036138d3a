"""The documentation site builds with warnings as errors, and its generated parts are
up to date: the experiment pages' figures and measured tables match docs/results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_build_without_warnings(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").exists()


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages and not {p for p in pages if p not in nav}


def test_figures_and_tables_match_their_results():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_results.py"), "check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_every_experiment_page_shows_generated_results():
    import experiments

    for name in experiments.EXPERIMENTS:
        page = (ROOT / "docs" / "experiments" / f"{name}.md").read_text()
        assert f"<!-- results: {name} -->" in page, f"{name}.md has no generated table"
        assert f"](../figures/{name}-" in page, f"{name}.md shows no generated figure"


def test_every_image_a_page_shows_exists():
    import re

    missing = [f"{page.relative_to(ROOT)}: {target}"
               for page in (ROOT / "docs").rglob("*.md")
               for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text())
               if not (page.parent / target).resolve().is_file()]
    assert not missing
