"""Loading your own os-ken app: ``MODULE:CLASS`` or ``path/to/app.py:CLASS``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("os_ken")

from controllers import userapp  # noqa: E402
from controllers.base import PolicyApp  # noqa: E402
from controllers.ecmp import EcmpApp  # noqa: E402

APPS_FILE = Path(__file__).resolve().parents[1] / "data" / "user_apps.py"


@pytest.mark.parametrize("text, words", [
    ("nosuch", "not MODULE:CLASS"),
    (":App", "not MODULE:CLASS"),
    ("mod:", "not MODULE:CLASS"),
    ("mod:1App", "not MODULE:CLASS"),
    ("mod with space:App", "neither a module name"),
    ("../x.json:App", "neither a module name"),
    ("/nonexistent/app.py:App", "no such file"),
])
def test_bad_specs_are_refused_before_any_import(text, words):
    with pytest.raises(userapp.AppSpecError, match=words):
        userapp.parse_app_spec(text)


def test_an_app_loads_from_a_module_or_a_file_and_by_its_class():
    assert userapp.load_app_class(userapp.parse_app_spec("controllers.ecmp:EcmpApp")) is EcmpApp
    spec = userapp.parse_app_spec(f"{APPS_FILE}:StaticEcmp")
    assert spec.is_file and Path(spec.module).is_absolute()
    cls = userapp.load_app_class(spec)
    assert cls.__name__ == "StaticEcmp" and not issubclass(cls, PolicyApp)
    assert userapp.load_app_class(spec) is cls          # loaded once


@pytest.mark.parametrize("name, words", [("NotAnApp", "not an os-ken app"),
                                         ("Missing", "has no Missing")])
def test_what_is_not_an_app_is_refused(name, words):
    with pytest.raises(userapp.AppSpecError, match=words):
        userapp.load_app_class(userapp.parse_app_spec(f"{APPS_FILE}:{name}"))


def test_a_module_that_fails_to_import_is_one_error(tmp_path):
    broken = tmp_path / "broken_app.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(userapp.AppSpecError, match="failed to load: RuntimeError: boom"):
        userapp.load_app_class(userapp.parse_app_spec(f"{broken}:App"))
    with pytest.raises(userapp.AppSpecError, match="cannot import"):
        userapp.load_app_class(userapp.parse_app_spec("nosuch_module_xyz:App"))


def test_an_app_without_a_status_says_it_cannot_report_ready_switches(tmp_path):
    path = tmp_path / "status.json"
    userapp.write_plain_status(path, "app.py:Mine")
    status = json.loads(path.read_text())
    assert status["reports_ready"] is False and status["app"] == "app.py:Mine"
    assert status["ready"] == [] and status["errors"] == []
