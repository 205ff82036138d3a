"""``docs/reference/cli.md`` is the parser rendered by :mod:`fabric.cli.reference`: up to
date, complete and the same whatever the terminal."""

from __future__ import annotations

import argparse
import re

import pytest

import experiments
from fabric.cli import build_parser, reference

REGENERATE = ".venv/bin/python -m fabric.cli.reference --write"


@pytest.fixture(scope="module")
def page() -> str:
    return reference.markdown()


def _subcommands() -> list[str]:
    action = next(a for a in build_parser()._actions
                  if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


def test_the_page_in_the_docs_is_up_to_date(page):
    assert reference.PAGE.is_file(), f"no {reference.PAGE}: run `{REGENERATE}`"
    assert reference.PAGE.read_text() == page, (
        f"{reference.PAGE} is out of date with the parser: run `{REGENERATE}`")


def test_every_subcommand_has_a_section_in_the_parsers_order(page):
    headings = re.findall(r"^## fabric (\S+)$", page, re.M)
    assert headings == _subcommands()


def test_every_experiment_has_a_section(page):
    headings = re.findall(r"^### fabric run (\S+)$", page, re.M)
    assert headings == list(experiments.EXPERIMENTS)


@pytest.mark.parametrize("flag", ["--out", "--quick", "--spray-entropy", "--controller-app",
                                  "--pcap-at", "--flow-control", "--status-file"])
def test_options_appear_in_the_tables(page, flag):
    assert re.search(rf"^\| `{flag}\b", page, re.M), flag


def test_a_required_option_and_a_default_are_shown(page):
    assert re.search(r"^\| `--out OUT` \|[^|]*\| required \|", page, re.M)
    assert re.search(r"^\| `--queue-pkts QUEUE_PKTS` \|[^|]*\| `64` \|", page, re.M)


def test_the_page_does_not_depend_on_the_terminal_width(page, monkeypatch):
    monkeypatch.setenv("COLUMNS", "37")
    assert reference.markdown() == page


def test_help_is_expanded_and_pipes_are_escaped():
    parser = argparse.ArgumentParser(prog="demo")
    action = parser.add_argument("--rate", default=3, choices=(3, 5),
                                 help="a|b rate (default: %(default)s of %(choices)s)")
    row = reference._row(action, "demo")
    assert "a\\|b rate (default: 3 of 3, 5)" in row
    assert row.count(" | ") == 3  # four cells, the escaped pipe is no separator
