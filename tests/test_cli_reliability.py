"""Reliability of the command line (issue 26, items 8-11): outputs that cannot be lost or
clobbered, one convention of exit codes and messages, Monte Carlo intervals of coverage that
behave at 0 and 1, and one meaning of ``--out``."""

import json
import math
import sys

import numpy as np
import pytest
from scipy import stats

from lrbandit_gym.experiments.coverage import coverage_interval, coverage_stats, format_coverage

pytestmark = pytest.mark.filterwarnings("ignore::agents.warm_start.check.WarmStartWarning")


# --------------------------------------------------------------------------- item 10
@pytest.mark.parametrize("covered, trials", [(20, 20), (0, 20), (19, 20), (190, 200), (1, 3)])
def test_coverage_interval_is_scipys_wilson_interval(covered, trials):
    expected = stats.binomtest(covered, trials).proportion_ci(method="wilson")
    low, high = coverage_interval(covered, trials)
    assert math.isclose(low, expected.low, abs_tol=1e-12)
    assert math.isclose(high, expected.high, abs_tol=1e-12)
    assert 0.0 <= low < high <= 1.0  # a width at the edges, never past them


def _all_covering_cell(trials):
    """coverage_stats of ``trials`` intervals that all cover the truth 0."""
    est = np.zeros(trials)
    se = np.ones(trials)
    return coverage_stats(est, se, est - 1.0, est + 1.0, 0.0)


def test_a_perfect_coverage_prints_an_interval_not_plus_minus_zero():
    """20 trials that all cover: the old table printed "1.000 ± 0.000"."""
    row = _all_covering_cell(20)
    expected = stats.binomtest(20, 20).proportion_ci(method="wilson")
    assert row["coverage"] == 1.0
    assert math.isclose(row["coverage_low"], expected.low) and row["coverage_high"] == 1.0
    text = format_coverage(row)
    assert text == f"1.000 [{expected.low:.2f}, 1.00]"
    assert "±" not in text


def _table_row(cell, n=60, quantity="<M_0, e11>"):
    return {"n": n, "quantity": quantity, "truth": 0.0, "flag": "", **cell}


def test_validate_table_and_verdict_show_the_interval():
    from lrbandit_gym.experiments.validate.report import ValidationResult, verdict

    cell = _all_covering_cell(20)
    rows = [_table_row(cell)]
    status, line, band = verdict(rows, 0.95)
    assert status == "VALID" and 0.95 + band > 1
    assert f"± {band:.3f}" not in line  # a band that would pass 1 is cut at 1
    assert f"[{0.95 - band:.3f}, 1]" in line and format_coverage(cell) in line
    result = ValidationResult(
        setting=None,
        rows=rows,
        status=status,
        verdict=line,
        band=band,
        quantities=(),
        arrays={},
        trials=20,
        seed=0,
        batch_size=20,
        confidence_level=0.95,
    )
    table = result.to_markdown()
    assert "1.000 ± 0.000" not in table and format_coverage(cell) in table
    header = result.to_csv().splitlines()[0].split(",")
    assert {"coverage_low", "coverage_high"} <= set(header)


def test_verdict_band_is_wilsons_score_test():
    """A cell is flagged exactly when the nominal level lies outside its Wilson interval at
    the Bonferroni level: the rule behaves at 0 and 1."""
    from lrbandit_gym.experiments.validate.report import FAMILY_LEVEL, cell_flag

    trials, m, level = 40, 3, 0.95
    bonferroni = 1 - (1 - FAMILY_LEVEL) / m
    for covered in range(trials + 1):
        row = {"trials": trials, "coverage": covered / trials}
        low, high = coverage_interval(covered, trials, bonferroni)
        expected = "low" if high < level else ("high" if low > level else "")
        assert cell_flag(row, m, level) == expected, covered


def test_figure_error_bars_stay_inside_zero_and_one():
    from lrbandit_gym.experiments.figures import _mc_band, coverage_error_bars

    rows = [_all_covering_cell(20), _all_covering_cell(20)]
    est = np.zeros(20)
    se = np.ones(20)
    rows[1] = coverage_stats(est, se, est - 1.0, est + np.r_[np.ones(19), -0.5], 0.0)
    assert rows[1]["coverage"] == 19 / 20
    err = coverage_error_bars(rows)
    y = np.array([r["coverage"] for r in rows])
    assert np.all(y + err[1] <= 1.0) and np.all(y - err[0] >= 0.0)
    assert np.all(err[0] > 0)  # a width below 1.000 (the old bar was ±0)
    low, high = _mc_band(0.95, np.array([20.0, 5000.0]))
    assert np.all(high <= 1.0) and np.all(low >= 0.0)


def test_coverage_figure_draws_wilson_error_bars(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    from lrbandit_gym.experiments.figures import coverage_figure
    from lrbandit_gym.experiments.studies import StudyConfig, run_study

    drawn = []
    original = Axes.errorbar

    def spy(self, x, y, *args, yerr=None, **kwargs):
        drawn.append((np.asarray(y, float), np.asarray(yerr, float)))
        return original(self, x, y, *args, yerr=yerr, **kwargs)

    monkeypatch.setattr(Axes, "errorbar", spy)
    config = StudyConfig(checkpoints=(30,), warm_start=300, d1=12, d2=10, rank=2)
    result = run_study(config, 6, seed=5, batch_size=6)
    coverage_figure(result, tmp_path / "c.png")
    assert drawn
    for y, yerr in drawn:
        assert yerr.shape == (2, y.size)
        assert np.all(y + yerr[1] <= 1.0 + 1e-12) and np.all(y - yerr[0] >= -1e-12)
        assert np.all(yerr[0] + yerr[1] > 0)  # 6 trials never pin a coverage down


# --------------------------------------------------------------------------- item 9
def _usage_error(argv, capsys):
    """Run ``lrbandit argv``; return the usage error's message (exit status 2 asserted)."""
    from lrbandit_gym.experiments.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, named",
    [
        (["reproduce", "table1", "--ranks", "5"], "argument --ranks: ranks applies to table2"),
        (["reproduce", "table1", "--uniform-from", "99999"], "argument --uniform-from:"),
        (["reproduce", "value", "--point-estimate", "projection"], "argument --point-estimate:"),
        (["reproduce", "value", "--compare-projection"], "argument --compare-projection:"),
        (["reproduce", "ensemble", "--tuning-n", "500"], "argument --tuning-n:"),
        (["compare", "--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
        (["compare", "--trials", "0"], "argument --trials"),
        (["compare", "--jobs", "0"], "argument --jobs"),
        (["compare", "--agents", "nobody"], "argument --agents: unknown agent(s) ['nobody']"),
        (["compare", "--d", "4", "--rank", "9"], "argument --rank: env_config: rank must be"),
        (["compare", "--arms", "1"], "argument --arms: env_config: n_actions must be"),
    ],
)
def test_reproduce_and_compare_usage_errors_exit_2_naming_the_option(argv, named, capsys, tmp_path):
    """They were tracebacks (exit 1), or a bare message with exit 1 for --agents."""
    err = _usage_error([*argv, "--out", str(tmp_path / "o")], capsys)
    assert named in err, err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def _write_config(tmp_path, text):
    config = tmp_path / "setting.toml"
    config.write_text(text + "\n[env]\nd1 = 6\nd2 = 5\nrank = 1\n")
    return config


@pytest.mark.parametrize(
    "line, named",
    [
        ("n = 40", "n must be a list of integers"),
        ("grid = [1]", "grid must be a string"),
        ("out = 5", "out must be a string"),
        ("trials = 1180591620717411303424", "trials is out of range"),
        ("value = 1", "value must be true or false"),
        ("policy = {name = 3}", "policy.name must be a string"),
    ],
)
def test_config_values_of_the_wrong_type_are_usage_errors_naming_the_key(
    line, named, tmp_path, capsys
):
    config = _write_config(tmp_path, line)
    err = _usage_error(["validate", "--config", str(config), "--no-progress"], capsys)
    assert "argument --config" in err and named in err, err


def test_a_negative_truth_seed_names_the_argument(tmp_path, capsys):
    import gymnasium as gym

    import lrbandit_gym  # noqa: F401

    with pytest.raises(ValueError, match="truth_seed must be an integer >= 0; got -1"):
        gym.make("MatrixContextBandit-v0", truth_seed=-1)
    with pytest.raises(ValueError, match="truth_seed"):
        gym.make("MatrixContextBandit-v0", truth_seed="x")
    config = _write_config(tmp_path, "trials = 2\nn = [20]")
    config.write_text(config.read_text() + "truth_seed = -1\n")
    err = _usage_error(["validate", "--config", str(config), "--no-progress"], capsys)
    assert f"({config}: env.truth_seed)" in err and "truth_seed must be" in err, err


@pytest.mark.parametrize("flatten", ["no", "", 0, 1, None])
def test_flatten_must_be_a_real_bool(flatten):
    """``bool("no")`` is True: the env flattened when told "no"."""
    import gymnasium as gym

    from lrbandit_gym import MatrixContextBanditVectorEnv

    with pytest.raises(ValueError, match=f"flatten must be True or False; got {flatten!r}"):
        gym.make("MatrixContextBandit-v0", d1=4, d2=3, rank=1, flatten=flatten)
    with pytest.raises(ValueError, match="flatten must be True or False"):
        MatrixContextBanditVectorEnv(num_envs=2, d1=4, d2=3, rank=1, flatten=flatten)
    env = gym.make("MatrixContextBandit-v0", d1=4, d2=3, rank=1, flatten=np.True_)
    assert env.observation_space.shape == (12,)


def test_complex_contexts_are_refused_not_cast():
    from inference.cores.checks import check_targets
    from lrbandit_gym.input_checks import check_context, check_context_fingerprint

    X = np.ones((4, 3)) + 1j
    for call in (
        lambda: check_context(X, 4, 3),
        lambda: check_context(X.tolist(), 4, 3),
        lambda: check_context(X[None], 4, 3, n_trials=1),
        lambda: check_context_fingerprint(X, 4, 3, None, np.ones(12)),
        lambda: check_targets({"T": X}, 4, 3),
    ):
        with pytest.raises(ValueError, match="must be real numbers, got"):
            call()
    assert check_context(X.real, 4, 3).dtype == np.float64  # the real part alone is fine


@pytest.mark.parametrize("v0", ["1", b"1", 1j, np.array(["1", "2"])])
def test_test_greater_refuses_a_threshold_that_is_not_a_real_number(v0):
    from inference import OptimalValueInference

    single = OptimalValueInference(2)
    batched = OptimalValueInference(2, n_trials=2)
    if np.ndim(v0) == 0:
        with pytest.raises(ValueError, match="v0 must be"):
            single.test_greater(v0)
    with pytest.raises(ValueError, match="v0 must be"):
        batched.test_greater(v0)


def _fake_result(status):
    from lrbandit_gym.experiments.validate.report import ValidationResult
    from lrbandit_gym.experiments.validate.setting import ValidationSetting

    cell = _all_covering_cell(20)
    return ValidationResult(
        setting=ValidationSetting(),
        rows=[_table_row(cell)],
        status=status,
        verdict=f"{status}: a verdict",
        band=0.1,
        quantities=(),
        arrays={
            "warm_start_ratio": np.full((1, 2), np.nan),
            "estimation_error": np.full((1, 1, 2), np.nan),
            "min_propensity": np.full(1, np.nan),
            "checkpoints": np.array([60]),
        },
        trials=20,
        seed=0,
        batch_size=20,
        confidence_level=0.95,
        seconds=0.0,
    )


@pytest.mark.parametrize(
    "status, code",
    [("VALID", 0), ("UNDER-COVERS", 1), ("OVER-COVERS", 1), ("FAILED", 1), ("NO RESULT", 1)],
)
def test_validate_exits_non_zero_unless_the_verdict_is_valid(status, code, monkeypatch, capsys):
    """A FAILED verdict used to exit 0."""
    from lrbandit_gym.experiments.cli import main
    from lrbandit_gym.experiments.validate import run as validate

    monkeypatch.setattr(validate, "run_validation", lambda *a, **k: _fake_result(status))
    assert main(["validate", "--no-progress"]) == code
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1].startswith(status)
    assert (f"verdict {status}: exit status 1" in captured.err) == (code == 1)


def test_figures_without_matplotlib_exits_1_with_the_install_command(tmp_path, capsys, monkeypatch):
    """It exited 0 and suggested --no-figures, an option `lrbandit figures` lacks."""
    from lrbandit_gym.experiments.cli import main

    npz = tmp_path / "table1.npz"
    np.savez(npz, study=np.array("table1"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert main(["figures", str(npz)]) == 1
    err = capsys.readouterr().err
    assert 'pip install "lrbandit-gym[plot]"' in err and "--no-figures" not in err
    assert not list(tmp_path.glob("*.png"))
    err = _usage_error(["figures", str(tmp_path / "none.npz")], capsys)
    assert "argument npz: no such file" in err


# --------------------------------------------------------------------------- items 8 and 11
def _refuse_to_run(monkeypatch):
    """Make every run fail loudly: a check that must come first is then proven to."""
    from lrbandit_gym.experiments.compare import run as compare
    from lrbandit_gym.experiments.reproduce import timing as reproduce_timing
    from lrbandit_gym.experiments.validate import run as validate

    def ran(*args, **kwargs):
        raise AssertionError("the run started before its outputs were checked")

    monkeypatch.setattr(compare, "compare", ran)
    monkeypatch.setattr(validate, "run_validation", ran)
    monkeypatch.setattr(reproduce_timing, "draw_baseline", ran)


TINY_COMPARE = ["compare", "--agents", "uniform", "oracle", "--trials", "2", "--rounds", "30"]
TINY_COMPARE += ["--d", "4", "--rank", "1", "--warm-start", "10", "--jobs", "1"]
TINY_COMPARE += ["--batch-size", "2", "--no-figures"]


def test_compare_out_that_is_a_file_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    """It ran every trial, then failed to write."""
    _refuse_to_run(monkeypatch)
    file = tmp_path / "results"
    file.write_text("mine")
    err = _usage_error([*TINY_COMPARE, "--out", str(file)], capsys)
    assert "argument --out:" in err and "is a file; --out is a folder" in err
    assert file.read_text() == "mine"


def test_compare_never_overwrites_without_overwrite_and_stamps_every_file(tmp_path, capsys):
    import lrbandit_gym
    from lrbandit_gym.experiments.cli import main

    out = tmp_path / "o"
    assert main([*TINY_COMPARE, "--seed", "7", "--out", str(out)]) == 0
    csv_lines = (out / "compare.csv").read_text().splitlines()
    stamp = f"# written by lrbandit-gym {lrbandit_gym.__version__}: lrbandit compare, seed 7"
    assert csv_lines[0].startswith(stamp) and csv_lines[1].startswith("agent,")
    assert (out / "compare.md").read_text().startswith("<!-- written by lrbandit-gym")
    run = json.loads((out / "compare.json").read_text())["run"]
    assert run["seed"] == 7 and run["version"] == lrbandit_gym.__version__
    assert run["settings"]["rounds"] == 30
    with np.load(out / "compare.npz") as data:
        assert json.loads(str(data["metadata"]))["command"] == "lrbandit compare"
    before = (out / "compare.csv").read_text()
    err = _usage_error([*TINY_COMPARE, "--out", str(out)], capsys)
    assert "already holds files of an earlier run" in err and "--overwrite" in err
    assert (out / "compare.csv").read_text() == before
    assert main([*TINY_COMPARE, "--seed", "8", "--out", str(out), "--overwrite"]) == 0
    assert ", seed 8," in (out / "compare.csv").read_text().splitlines()[0]
    assert not list(out.glob(".*.tmp"))


@pytest.mark.parametrize("out", ["../../x", "../sibling", "/tmp/lrbandit-absolute"])
def test_validate_config_out_outside_its_folder_is_refused(out, tmp_path, capsys, monkeypatch):
    """`out = "../../x"` or an absolute path overwrote any file silently."""
    _refuse_to_run(monkeypatch)
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    config = _write_config(folder, f'out = "{out}"')
    err = _usage_error(["validate", "--config", str(config), "--no-progress"], capsys)
    assert f"argument --config ({config}: out)" in err and "--out on the command line" in err


def test_validate_out_is_a_folder_and_is_not_overwritten(tmp_path, capsys, monkeypatch):
    from lrbandit_gym.experiments.cli import main
    from lrbandit_gym.experiments.validate import run as validate

    err = _usage_error(["validate", "--out", str(tmp_path / "v.csv")], capsys)
    assert "--out is a folder" in err and "validate.csv" in err
    monkeypatch.setattr(validate, "run_validation", lambda *a, **k: _fake_result("VALID"))
    assert main(["validate", "--no-progress", "--out", str(tmp_path)]) == 0
    first = (tmp_path / "validate.csv").read_text()
    assert first.startswith("# written by lrbandit-gym") and "lrbandit validate, seed 0" in first
    _refuse_to_run(monkeypatch)
    err = _usage_error(["validate", "--no-progress", "--out", str(tmp_path)], capsys)
    assert "argument --out:" in err and "validate.csv" in err and "--overwrite" in err
    assert (tmp_path / "validate.csv").read_text() == first
    config = _write_config(tmp_path, 'out = "."')
    err = _usage_error(["validate", "--config", str(config), "--no-progress"], capsys)
    assert f"argument --config ({config}: out)" in err and "--overwrite" in err


def test_reproduce_refuses_an_earlier_runs_files_and_removes_stale_ones(tmp_path, capsys):
    """A new table1.csv sat beside an old table1_uniform.csv, neither saying which run."""
    from lrbandit_gym.experiments.cli import main

    (tmp_path / "table3_uniform.csv").write_text("an earlier run's\n")
    argv = ["reproduce", "table3", "--trials", "4", "--n", "40", "--batch-size", "4"]
    argv += ["--jobs", "1", "--no-figures", "--seed", "5", "--out", str(tmp_path)]
    err = _usage_error(argv, capsys)
    assert "table3_uniform.csv" in err and "--overwrite" in err
    assert not (tmp_path / "table3.csv").exists()
    assert main([*argv, "--overwrite"]) == 0
    assert not (tmp_path / "table3_uniform.csv").exists()
    assert "removed files of an earlier run" in capsys.readouterr().out
    stamp = (tmp_path / "table3.csv").read_text().splitlines()[0]
    assert "lrbandit reproduce table3, seed 5" in stamp and '"trials": 4' in stamp
    assert json.loads((tmp_path / "table3.json").read_text())["run"]["seed"] == 5
    with np.load(tmp_path / "table3.npz") as data:
        assert json.loads(str(data["metadata"]))["settings"]["n"] == [40]
    from lrbandit_gym.experiments.reproduce.outputs import load_raw

    study, results = load_raw(tmp_path / "table3.npz")
    assert study == "table3" and list(results) == ["r=3"]


def test_figures_refuse_to_overwrite_and_carry_the_stamp(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from lrbandit_gym.experiments.cli import main
    from lrbandit_gym.experiments.reproduce.run import reproduce

    reproduce("ensemble", trials=4, n=(20, 40), seed=1, out=tmp_path, jobs=1, batch_size=2)
    png = tmp_path / "ensemble_coverage.png"
    assert "lrbandit reproduce ensemble, seed 1" in Image.open(png).info["Description"]
    err = _usage_error(["figures", str(tmp_path / "ensemble.npz")], capsys)
    assert "ensemble_coverage.png" in err and "--overwrite" in err
    assert main(["figures", str(tmp_path / "ensemble.npz"), "--overwrite"]) == 0
    assert "lrbandit figures" in Image.open(png).info["Description"]


def test_demo_refuses_to_overwrite_its_figure(tmp_path, capsys):
    (tmp_path / "demo_intervals.png").write_bytes(b"mine")
    err = _usage_error(["demo", "--rounds", "10", "--out", str(tmp_path)], capsys)
    assert "demo_intervals.png" in err and "--overwrite" in err
    assert (tmp_path / "demo_intervals.png").read_bytes() == b"mine"


def test_demo_runs_again_with_its_defaults(tmp_path, monkeypatch, capsys):
    """Issue 34: without ``--out`` the figure goes to lrbandit-out and a second run replaces
    it (the first run's figure used to stop the second with a usage error)."""
    pytest.importorskip("matplotlib")
    from lrbandit_gym.experiments.cli import main

    monkeypatch.chdir(tmp_path)
    figure = tmp_path / "lrbandit-out" / "demo_intervals.png"
    assert main(["demo", "--rounds", "10"]) == 0
    figure.write_bytes(b"the first run's figure")
    assert main(["demo", "--rounds", "10", "--seed", "1"]) == 0
    assert figure.read_bytes().startswith(b"\x89PNG")  # replaced by the second run's
    capsys.readouterr()
    err = _usage_error(["demo", "--rounds", "10", "--out", "lrbandit-out"], capsys)
    assert "demo_intervals.png" in err and "--overwrite" in err  # an explicit --out: refused


def test_writes_are_atomic(tmp_path):
    """A write that fails half-way leaves the earlier file whole and no temporary file."""
    from lrbandit_gym.experiments.outputs import RunStamp, _atomic, write_csv, write_npz

    path = tmp_path / "t.csv"
    stamp = RunStamp.of("test", {"a": 1}, 0)
    write_csv(path, [{"x": 1}], stamp)
    before = path.read_text()

    class Exploding:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_npz(tmp_path / "t.npz", {"x": np.ones(3), "y": Exploding()}, stamp)
    with pytest.raises(RuntimeError, match="interrupted"):
        with _atomic(path) as fh:
            fh.write("half a table")
            raise RuntimeError("interrupted")
    assert path.read_text() == before
    assert not (tmp_path / "t.npz").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_bench_completion_coverage_rows_carry_the_wilson_interval():
    from lrbandit_gym.experiments.bench.completion import completion_coverage

    cov = completion_coverage(
        trials=5, d=12, rank=2, checkpoints=(50,), warm_start=400, batch_size=5
    )
    for row in cov["rows"]:
        low, high = coverage_interval(round(row["coverage"] * row["trials"]), row["trials"])
        assert (row["coverage_low"], row["coverage_high"]) == (low, high)
        assert format_coverage(row).startswith(f"{row['coverage']:.3f} [")
