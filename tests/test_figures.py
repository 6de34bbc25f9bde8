"""PNG figures of the studies (experiments.figures) and their place in ``reproduce``."""

import json
import struct
import sys

import numpy as np
import pytest

from lrbandit_gym.experiments.cli import main
from lrbandit_gym.experiments.figures import (
    MatplotlibMissing,
    coverage_figure,
    study_figures,
    zscore_figure,
)
from lrbandit_gym.experiments.reproduce.outputs import load_raw
from lrbandit_gym.experiments.reproduce.run import reproduce
from lrbandit_gym.experiments.studies import StudyConfig, run_study

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# A small problem that still runs the paper's procedure end to end (as in test_cli.py).
TINY = dict(d1=12, d2=10, rank=2, warm_start=300, checkpoints=(30, 60))


def png_size(path) -> tuple[int, int]:
    """(width, height) of a PNG, after checking its signature and header chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_valid_png(path, min_bytes=5_000, min_side=300):
    assert path.is_file(), path
    width, height = png_size(path)
    assert width >= min_side and height >= min_side / 2, (width, height)
    assert path.stat().st_size >= min_bytes, path.stat().st_size


@pytest.fixture(scope="module")
def parameter_result():
    pytest.importorskip("matplotlib")
    return run_study(StudyConfig(variants=("paper",), **TINY), 6, seed=2, batch_size=6)


@pytest.fixture(scope="module")
def value_result():
    pytest.importorskip("matplotlib")
    config = StudyConfig(targets=None, value=True, step_scale=0.02, **TINY)
    return run_study(config, 6, seed=2, batch_size=6)


def test_parameter_study_figures_are_valid_pngs(parameter_result, tmp_path):
    paths = study_figures(
        parameter_result,
        tmp_path,
        "tiny",
        coverage_reference={("T1", "arm 0"): {30: 0.9, 3000: 0.93}},
    )
    assert [p.name for p in paths] == ["tiny_zscores.png", "tiny_coverage.png", "tiny_length.png"]
    for p in paths:
        assert_valid_png(p)
    # One z panel per target x (arm 0, arm 1, difference) and n: 2 rows of 6 panels.
    width, height = png_size(paths[0])
    assert width > 2 * height


def test_value_study_figures_are_valid_pngs(value_result, tmp_path):
    paths = study_figures(value_result, tmp_path / "sub", "value")
    assert [p.name for p in paths] == [
        "value_zscores.png",
        "value_coverage.png",
        "value_length.png",
    ]
    for p in paths:
        assert_valid_png(p)


def test_synthetic_zscores_need_no_simulation(tmp_path):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    truth = 0.5
    se = np.full((2, 200), 0.1)
    result = {
        "value_estimate": truth + se * rng.standard_normal((2, 200)),
        "value_se": se,
        "optimal_value": np.array(truth),
        "checkpoints": np.array([100, 200]),
    }
    assert_valid_png(zscore_figure(result, tmp_path / "z.png", title="synthetic"))
    assert_valid_png(coverage_figure(result, tmp_path / "c.png"))


def test_bad_arguments_are_named(value_result, tmp_path):
    with pytest.raises(ValueError, match="path"):
        zscore_figure(value_result, tmp_path / "z.pdf")
    with pytest.raises(ValueError, match="prefix"):
        study_figures(value_result, tmp_path, "a/b")
    with pytest.raises(ValueError, match="checkpoints"):
        zscore_figure({"value_estimate": np.zeros((1, 2))}, tmp_path / "z.png")
    with pytest.raises(ValueError, match="confidence_level"):
        coverage_figure(value_result, tmp_path / "c.png", confidence_level=95)
    with pytest.raises(ValueError, match="bins"):
        zscore_figure(value_result, tmp_path / "z.png", bins=1)
    empty = dict(value_result, value_estimate=np.full_like(value_result["value_estimate"], np.nan))
    with pytest.raises(ValueError, match="no finite interval"):
        zscore_figure(empty, tmp_path / "z.png")


def tiny_reproduce(out, **kwargs):
    """A few trials of the ensemble study (d = 20, r = 1): about 3 s."""
    return reproduce(
        "ensemble", trials=4, n=(20, 40), seed=1, out=out, jobs=1, batch_size=2, **kwargs
    )


def test_reproduce_saves_figures_and_raw_arrays(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    meta = tiny_reproduce(tmp_path)
    names = ["ensemble_zscores.png", "ensemble_coverage.png", "ensemble_length.png"]
    assert [p.split("/")[-1] for p in meta["figures"]] == names
    for name in names:
        assert_valid_png(tmp_path / name)
    data = json.loads((tmp_path / "ensemble.json").read_text())
    assert data["figures"] == meta["figures"] and data["raw"].endswith("ensemble.npz")
    study, results = load_raw(tmp_path / "ensemble.npz")
    assert study == "ensemble" and list(results) == ["r=1"]
    assert results["r=1"]["value_estimate"].shape == (2, 4)
    assert "figures: ensemble_zscores.png" in capsys.readouterr().out
    # The saved arrays redraw the same figures.
    assert main(["figures", str(tmp_path / "ensemble.npz"), "--out", str(tmp_path / "re")]) == 0
    for name in names:
        assert_valid_png(tmp_path / "re" / name)


def test_missing_matplotlib_skips_figures_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MatplotlibMissing, match=r"pip install 'lrbandit-gym\[plot\]'"):
        study_figures({"checkpoints": np.array([1])}, tmp_path, "x")
    meta = tiny_reproduce(tmp_path)
    out = capsys.readouterr().out
    skipped = [line for line in out.splitlines() if "figures skipped" in line]
    assert len(skipped) == 1, out
    assert "matplotlib is not installed" in skipped[0]
    assert "pip install 'lrbandit-gym[plot]'" in skipped[0] and "--no-figures" in skipped[0]
    assert meta["figures"] == [] and not list(tmp_path.glob("*.png"))
    assert (tmp_path / "ensemble.npz").is_file()  # the raw arrays do not need matplotlib


def test_no_figures_flag(tmp_path, capsys):
    args = ["reproduce", "ensemble", "--trials", "2", "--n", "20", "--jobs", "1"]
    assert main(args + ["--batch-size", "2", "--out", str(tmp_path), "--no-figures"]) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith(("figures:", "figures "))]
    assert not list(tmp_path.glob("*.png"))
    assert json.loads((tmp_path / "ensemble.json").read_text())["figures"] == []
