"""The house rules of tools/house.py hold: no import circles between the project's modules
(imports inside functions included), no module over 600 lines, no private reaches into
another object; and the checker itself sees each kind of violation."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def house():
    spec = importlib.util.spec_from_file_location("house", ROOT / "tools" / "house.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["house"] = module
    spec.loader.exec_module(module)
    return module


def test_the_house_rules_hold(house):
    assert house.violations() == []


def test_the_checker_sees_a_circle_a_long_module_and_a_private_reach(house, tmp_path, monkeypatch):
    pkg = tmp_path / "agents"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from agents import b\n    return b\n")
    (pkg / "b.py").write_text("from agents.a import f\n\ndef g(x):\n    return x._hidden\n")
    (pkg / "long.py").write_text("x = 1\n" * (house.MAX_LINES + 1))
    for name in ("lrbandit_gym", "inference"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.setattr(house, "ROOT", tmp_path)
    found = house.violations()
    assert "import circle: agents.a <-> agents.b" in found
    assert any(v.startswith("agents/long.py:") for v in found)
    assert any("private reach: agents/b.py:4: x._hidden" == v for v in found)
    assert len(found) == 3, found
