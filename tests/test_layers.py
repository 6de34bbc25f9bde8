"""The package layers (environment core <- agents <- inference <- experiments) hold: the
contracts in pyproject.toml, checked by import-linter."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_layers_are_kept():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.fail("import-linter is not installed: pip install -e '.[dev]'")
    proc = subprocess.run(
        [exe, "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=None,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_core_imports_without_agents_or_inference():
    """Importing the environment pulls in neither agents nor inference (a fresh interpreter)."""
    code = (
        "import sys, lrbandit_gym, gymnasium as gym\n"
        "gym.make('MatrixContextBandit-v0', d1=3, d2=3, rank=1).reset(seed=0)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('agents', 'inference')\n"
        "             or m.startswith('lrbandit_gym.experiments'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
