"""Argument types of the fabric command: what each accepts and refuses."""

from __future__ import annotations

import argparse

import pytest

from fabric import argtypes


@pytest.mark.parametrize("text, ok", [("1", True), ("65535", True), ("0", False),
                                      ("65536", False), ("-1", False), ("1.0", False),
                                      ("0x10", False), ("", False)])
def test_port(text, ok):
    if ok:
        assert argtypes.port(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="1..65535"):
            argtypes.port(text)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf", "x", ""])
def test_positive_number_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError, match="finite number > 0"):
        argtypes.positive_number()(text)


def test_positive_number_bound():
    assert argtypes.positive_number(10)("2.5") == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match="<= 10"):
        argtypes.positive_number(10)("11")


def test_new_dir_takes_new_or_empty_and_makes_parents(tmp_path):
    assert argtypes.new_dir(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    (tmp_path / "empty").mkdir()
    assert argtypes.new_dir(str(tmp_path / "empty"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="never overwritten"):
        argtypes.new_dir(str(tmp_path / "full"))
    (tmp_path / "file").write_text("")
    with pytest.raises(argparse.ArgumentTypeError):
        argtypes.new_dir(str(tmp_path / "file"))
    with pytest.raises(argparse.ArgumentTypeError, match="cannot be made"):
        argtypes.new_dir(str(tmp_path / "file" / "sub"))


def test_figure_file(tmp_path):
    assert argtypes.figure_file(str(tmp_path / "x.PNG"))
    with pytest.raises(argparse.ArgumentTypeError, match=".png"):
        argtypes.figure_file(str(tmp_path / "x.jpg"))
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        argtypes.figure_file(str(tmp_path / "no" / "x.png"))


def test_ip_address_takes_literals_only():
    assert argtypes.ip_address("127.0.0.1") == "127.0.0.1"
    assert argtypes.ip_address("::1") == "::1"
    with pytest.raises(argparse.ArgumentTypeError):
        argtypes.ip_address("localhost")  # a name would need a lookup


def test_parser_errors_are_one_line(capsys):
    parser = argtypes.ArgumentParser(prog="fabric probe")
    parser.add_argument("--n", type=argtypes.integer(1))
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--n", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("fabric probe: argument --n: must be an integer >= 1, "
                                       "got '0'\n")
