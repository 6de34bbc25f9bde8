"""``lrbandit validate`` and its Python function: settings, targets, the verdict rule, the
command line and its config file (tiny runs; the statistical grid is test_validate_grid.py)."""

import csv
import math

import numpy as np
import pytest

from lrbandit_gym.experiments.cli import main
from lrbandit_gym.experiments.cli.validate_config import load_config
from lrbandit_gym.experiments.validate.grid import GRID
from lrbandit_gym.experiments.validate.report import verdict
from lrbandit_gym.experiments.validate.run import check_setting, run_validation, validate
from lrbandit_gym.experiments.validate.setting import (
    SettingError,
    ValidationSetting,
    load_targets,
)

TINY = {"d1": 8, "d2": 6, "rank": 1}

# The tiny settings' warm starts are judged on a handful of trials.
pytestmark = pytest.mark.filterwarnings("ignore::agents.warm_start.check.WarmStartWarning")


def test_tiny_run_reports_every_quantity_with_monte_carlo_errors():
    result = validate(
        {**TINY, "n_actions": 3, "noise_std": [0.1, 0.2, 0.3]},
        policy="softmax",
        targets="entry",
        n=(60, 120),
        trials=12,
        batch_size=6,
        progress=False,
    )
    labels = [r["quantity"] for r in result.rows]
    per_n = ["<M_0, e11>", "<M_1, e11>", "<M_2, e11>"]
    per_n += ["<M_1 - M_0, e11>", "<M_2 - M_0, e11>", "<M_2 - M_1, e11>", "V*"]
    assert labels == per_n * 2
    assert [r["n"] for r in result.rows] == [60] * 7 + [120] * 7
    for r in result.rows:
        assert r["trials"] == 12 and 0 <= r["coverage"] <= 1
        assert math.isclose(r["coverage_mcse"], math.sqrt(r["coverage"] * (1 - r["coverage"]) / 12))
    assert result.arrays["estimate"].shape == (2, 7, 12)
    # Each coverage counts the trials whose interval holds the truth, and the intervals are
    # not wild: every estimate within 6 standard errors of the truth, and the 168 intervals
    # cover 0.8 or more in all (0.90 here; a biased estimator covers far less).
    arrays = result.arrays
    truth = np.array([r["truth"] for r in result.rows]).reshape(2, 7, 1)
    held = (arrays["low"] <= truth) & (truth <= arrays["high"])
    np.testing.assert_allclose([r["coverage"] for r in result.rows], held.mean(axis=2).ravel())
    z = (arrays["estimate"] - truth) / arrays["standard_error"]
    assert np.abs(z).max() < 6, np.abs(z).max()
    assert held.mean() >= 0.8, held.mean()
    assert result.arrays["warm_start_ratio"].shape == (12, 3)
    assert np.isfinite(result.arrays["warm_start_ratio"]).all()  # the policy's, checked
    assert result.verdict.startswith(result.status + ":")
    assert result.report().splitlines()[-1] == result.verdict
    assert result.to_csv().splitlines()[0].startswith("n,quantity,truth,trials,coverage")
    frame = result.to_frame()
    assert list(frame["quantity"]) == labels


def test_results_depend_on_seed_and_batch_size_not_on_jobs():
    kw = dict(targets="entry", n=(40,), trials=6, batch_size=3, progress=False)
    one = validate(TINY, **kw)
    two = validate(TINY, jobs=2, **kw)
    for key in one.arrays:
        np.testing.assert_array_equal(one.arrays[key], two.arrays[key])
    other = validate(TINY, seed=1, **{**kw, "batch_size": 3})
    assert not np.array_equal(one.arrays["estimate"], other.arrays["estimate"])


def test_own_estimator_and_a_policy_without_one():
    """Uniform play: the wrappers run their own estimator, whose warm start is checked."""
    result = validate(TINY, policy="uniform", targets="random:3", n=(50,), trials=4, progress=False)
    assert [r["quantity"] for r in result.rows] == [
        "<M_0, uv3>",
        "<M_1, uv3>",
        "<M_1 - M_0, uv3>",
        "V*",
        "V(arm 0)",
        "V(uniform)",
    ]
    assert np.isfinite(result.arrays["warm_start_ratio"]).all()
    assert np.all(result.arrays["min_propensity"] == 0.5)


def test_targets_presets_files_and_shapes(tmp_path):
    assert list(load_targets("paper", 5, 4)) == ["T1", "T2"]
    assert list(load_targets("entry", 5, 4)) == ["e11"]
    t = load_targets("random:2", 5, 4)["uv2"]
    assert t.shape == (5, 4) and np.linalg.matrix_rank(t) == 1
    assert math.isclose(np.linalg.norm(t), 1.0)
    path = tmp_path / "t.npz"
    np.savez(path, A=np.ones((5, 4)), B=np.eye(5, 4))
    assert list(load_targets(str(path), 5, 4)) == ["A", "B"]
    with pytest.raises(SettingError, match=r"target 'A' must have shape \(6, 4\)") as err:
        load_targets(str(path), 6, 4)
    assert err.value.field == "targets"
    with pytest.raises(SettingError, match="cannot read targets file"):
        load_targets(str(tmp_path / "missing.npz"), 5, 4)
    with pytest.raises(SettingError, match="targets must be"):
        load_targets("nonsense", 5, 4)
    with pytest.raises(SettingError, match="d1, d2 >= 3"):
        load_targets("paper", 2, 4)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"env": {**TINY, "rank": 9}}, "env.rank"),
        ({"env": {**TINY, "noise_std": -1.0}}, "env.noise_std"),
        ({"env": {**TINY, "colour": 1}}, "env.colour"),
        ({"policy": "greedy"}, "policy"),
        ({"policy_kwargs": {"epsilon": 2.0}}, "policy_kwargs.epsilon"),
        ({"policy": "uniform", "policy_kwargs": {"epsilon": 0.1}}, "policy_kwargs.epsilon"),
        ({"policy": "uniform", "estimator": "shared"}, "estimator"),
        ({"n": (0,)}, "n"),
        ({"warm_start": 0}, "warm_start"),
        ({"targets": None, "value": False}, "targets"),
    ],
)
def test_invalid_settings_name_their_field(changes, field):
    setting = ValidationSetting(env=TINY, targets="entry").replace(**changes)
    with pytest.raises(SettingError) as err:
        check_setting(setting)
    assert err.value.field == field


@pytest.mark.parametrize("name", list(GRID))
def test_every_grid_setting_is_valid(name, monkeypatch):
    """Each grid setting passes the checks that build one trial of it.  Building the value
    wrapper asks the environment for its exact V*; with six arms or more that is a
    numerical integral of about a minute (lrbandit_gym.truth), which says nothing about the
    setting's validity, so it is asked for and answered with a stand-in here."""
    import lrbandit_gym.problem as problem

    exact = problem.optimal_value

    def optimal_value(params, context):
        return 0.0 if len(params) >= 6 else exact(params, context)

    monkeypatch.setattr(problem, "optimal_value", optimal_value)
    setting = GRID[name]
    check_setting(setting)
    assert setting.description, name


def rows(coverages, trials=200):
    return [
        {"n": 100, "quantity": f"q{i}", "trials": trials, "coverage": c}
        for i, c in enumerate(coverages)
    ]


def test_verdict_rule():
    """Bonferroni band over the cells at the family level 99%: at 200 trials and 10 cells
    z = Φ⁻¹(1 − 0.01/20) = 3.29, half-width 3.29·√(0.95·0.05/200) = 0.0507."""
    status, line, band = verdict(rows([0.95] * 9 + [0.90]), 0.95)
    assert status == "VALID" and math.isclose(band, 0.0507, abs_tol=5e-4)
    # 0.95 + 0.0507 passes 1: the band is quoted cut at 1 (no cell can over-cover here).
    assert "within [0.899, 1]" in line and "Bonferroni over 10 cells" in line
    _, line, band = verdict(rows([0.95] * 10, trials=2000), 0.95)
    assert f"within 0.95 ± {band:.3f}" in line
    status, line, _ = verdict(rows([0.95] * 9 + [0.89]), 0.95)
    assert status == "UNDER-COVERS" and "1 of 10" in line and "q9 at n = 100: 0.890" in line
    status, _, _ = verdict(rows([0.95] * 9 + [1.0], trials=2000), 0.95)
    assert status == "OVER-COVERS"
    status, _, band = verdict(rows([math.nan], trials=0), 0.95)
    assert status == "NO RESULT" and math.isnan(band)


def test_validate_command_prints_the_table_and_the_verdict_last(capsys, tmp_path):
    out = tmp_path / "v"
    argv = ["validate", "--d1", "8", "--d2", "6", "--rank", "1", "--targets", "entry"]
    argv += ["--n", "40", "--trials", "4", "--no-progress", "--out", str(out)]
    code = main(argv)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0].startswith("| n | quantity |")
    status = printed[-1].split(":")[0]
    assert status in ("VALID", "UNDER-COVERS", "OVER-COVERS")
    assert code == (0 if status == "VALID" else 1)
    lines = (out / "validate.csv").read_text().splitlines()
    assert lines[0].startswith("# written by lrbandit-gym")
    assert lines[1].startswith("n,quantity,truth,trials,coverage")


def test_config_file_sets_everything_and_the_command_line_wins(tmp_path, capsys):
    np.savez(tmp_path / "targets.npz", corner=np.eye(8, 6))
    config = tmp_path / "setting.toml"
    config.write_text(
        'trials = 4\nn = [30]\ntargets = "targets.npz"\nvalue = false\nout = "o"\n'
        "[env]\nd1 = 8\nd2 = 6\nrank = 1\nnoise_std = [0.1, 0.2]\n"
        '[policy]\nname = "softmax"\ntemperature = 0.5\n'
    )
    data = load_config(str(config))
    assert data["env"]["noise_std"] == [0.1, 0.2] and data["policy"]["name"] == "softmax"
    code = main(["validate", "--config", str(config), "--no-progress", "--trials", "3"])
    captured = capsys.readouterr()
    assert code == (0 if captured.out.strip().splitlines()[-1].startswith("VALID") else 1)
    assert "policy softmax(temperature=0.5)" in captured.err
    assert "3 trials" in captured.err
    with open(tmp_path / "o" / "validate.csv", newline="") as fh:
        table = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    assert [row["quantity"] for row in table] == [
        "<M_0, corner>",
        "<M_1, corner>",
        "<M_1 - M_0, corner>",
    ]
    assert all(row["trials"] == "3" for row in table)


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--d1", "8", "--d2", "6", "--rank", "9"], "argument --rank"),
        (["--d1", "8", "--d2", "6", "--rank", "1", "--epsilon", "2"], "argument --epsilon"),
        (["--d1", "8", "--d2", "6", "--rank", "1", "--targets", "x"], "argument --targets"),
        (["--policy", "uniform", "--estimator", "shared"], "argument --estimator"),
        (["--d1", "8", "--d2", "6", "--rank", "1", "--level", "1.5"], "argument --level"),
        (["--trials", "0"], "argument --trials"),
        (["--policy", "greedy"], "argument --policy"),
        (["--grid", "nowhere"], "argument --grid"),
    ],
)
def test_argument_errors_exit_2_naming_the_argument(argv, named, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--no-progress", *argv])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


def test_config_errors_exit_2_naming_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    for text, named in [
        ("colour = 1\n", "unknown key 'colour'"),
        ("trials = \n", "invalid TOML"),
        ("[env]\nd1 = 8\nd2 = 6\nrank = 9\n", f"--config ({bad}: env.rank)"),
        ('[policy]\nname = "softmax"\ntemperature = -1\n', f"({bad}: policy.temperature)"),
    ]:
        bad.write_text(text)
        with pytest.raises(SystemExit) as exc:
            main(["validate", "--config", str(bad), "--no-progress", "--trials", "1"])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "argument --config" in err and named in err, err
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--config", str(tmp_path / "none.toml")])
    assert exc.value.code == 2 and "cannot read it" in capsys.readouterr().err


def test_run_validation_refuses_bad_run_options():
    setting = ValidationSetting(env=TINY, targets="entry", n=(20,))
    for kw, field in [({"trials": 0}, "trials"), ({"batch_size": 0}, "batch_size")]:
        with pytest.raises(SettingError) as err:
            run_validation(setting, progress=False, **kw)
        assert err.value.field == field


def test_diagnostics_give_the_v_star_coverage_of_the_trials_without_a_warning():
    """The regret-check line says how often the trials whose R̂ is at most WARN_RATIO
    standard errors (where the paper's interval would not warn) covered V*, counted from the
    per-trial intervals."""
    import re

    from inference.cores.played_regret import WARN_RATIO

    result = validate(
        {**TINY, "noise_std": 0.5}, n=(80, 160), trials=16, batch_size=8, progress=False
    )
    a = result.arrays
    i = [q.label for q in result.quantities].index("V*")
    truth = result.quantities[i].truth
    found = re.findall(r"at or below it covered in ([0-9.]+) of (\d+)", result.diagnostics())
    assert len(found) == 2
    for c, (share, count) in enumerate(found):
        quiet = ~(a["value_bias"][c] > WARN_RATIO)
        covered = (a["low"][c, i][quiet] <= truth) & (truth <= a["high"][c, i][quiet])
        assert int(count) == quiet.sum()
        assert float(share) == pytest.approx(covered.mean(), abs=5e-4)


def _assert_quiet_coverage(line: str, result, quiet: np.ndarray) -> None:
    """The first "covered LO–HI" of a diagnostics ``line`` is the range of the parameter
    intervals' coverage over the ``quiet`` trials at the first checkpoint."""
    import re

    a = result.arrays
    lo, hi = map(float, re.findall(r"covered ([0-9.]+)–([0-9.]+)", line)[0])
    params = [j for j, q in enumerate(result.quantities) if q.target is not None]
    truth = np.array([result.quantities[j].truth for j in params])[:, None]
    held = (a["low"][0, params][:, quiet] <= truth) & (truth <= a["high"][0, params][:, quiet])
    assert lo == pytest.approx(held.mean(axis=1).min(), abs=5e-4)
    assert hi == pytest.approx(held.mean(axis=1).max(), abs=5e-4)


def test_diagnostics_count_small_propensity_warnings_and_the_quiet_trials_coverage():
    """Each trial's smallest chosen propensity is recorded (ε-greedy: ε/K or 1 − ε + ε/K
    exactly), and the small-propensity line counts the trials below SMALL_PROPENSITY (where
    the wrappers raise SmallPropensityWarning) and gives the parameter coverage of the
    others, from the per-trial intervals."""
    import dataclasses

    from inference.wrappers.round_check import SMALL_PROPENSITY

    result = validate(
        TINY, policy_kwargs={"epsilon": 0.1}, targets="entry", n=(60,), trials=16,
        batch_size=8, progress=False,
    )  # fmt: skip
    a = dict(result.arrays)
    chosen = a["min_chosen_propensity"]
    assert chosen.shape == (16,) and np.isin(chosen, [0.05, 0.95]).all()
    assert (chosen >= a["min_propensity"]).all()
    line = [x for x in result.diagnostics().splitlines() if "SmallPropensityWarning" in x][0]
    assert "in 0% of trials" in line and "covered" not in line
    # Half of the trials marked small: the line counts them and covers the other half.
    small = np.arange(16) % 2 == 0
    a["min_chosen_propensity"] = np.where(small, SMALL_PROPENSITY / 2, chosen)
    line = dataclasses.replace(result, arrays=a)._small_propensity_line(a["min_chosen_propensity"])
    assert "in 50% of trials" in line and "of the 8 trials without it" in line
    _assert_quiet_coverage(line, result, ~small)


def test_diagnostics_give_the_lindeberg_share_and_the_quiet_trials_coverage():
    """The parameter core's Lindeberg share is recorded per checkpoint and trial (ε-greedy
    with ε = 0.1 and two arms: the largest weight 20 over the summed weights of n rounds),
    and the line counts the trials above SHARE_LIMIT, whose read-outs warn, and gives the
    parameter coverage of the others."""
    import dataclasses

    from inference.cores.weight_share import SHARE_LIMIT

    result = validate(
        TINY, policy_kwargs={"epsilon": 0.1}, targets="entry", n=(60, 120), trials=16,
        batch_size=8, progress=False,
    )  # fmt: skip
    a = dict(result.arrays)
    share = a["round_share"]
    assert share.shape == (2, 16)
    # 1/π is 20 or about 1.05: the share is 20 over a sum between 1.05 n and 20 n.
    for c, n in enumerate((60, 120)):
        assert ((share[c] >= 1 / n) & (share[c] <= 20 / (1.05 * n))).all()
    line = [x for x in result.diagnostics().splitlines() if "Lindeberg" in x][0]
    assert "n = 60: " in line and "covered" not in line
    heavy = np.arange(16) % 2 == 0
    a["round_share"] = np.where(heavy, 2 * SHARE_LIMIT, share)
    line = dataclasses.replace(result, arrays=a)._round_share_line(a["round_share"])
    assert "n = 60: 50% of trials" in line and "n = 120: 50% of trials" in line
    _assert_quiet_coverage(line, result, ~heavy)


def test_out_folder_holds_every_trial_and_step_gain_reaches_the_policy(tmp_path, capsys):
    """``--out`` also writes validate.npz: every trial's intervals and diagnostics, whose
    coverage is the table's; ``--step-gain`` is the policy's keyword argument."""
    out = tmp_path / "v"
    argv = ["validate", "--d1", "8", "--d2", "6", "--rank", "1", "--targets", "entry"]
    argv += ["--n", "40", "--trials", "6", "--no-progress", "--out", str(out)]
    main([*argv, "--step-gain", "0.01"])
    assert "step_gain=0.01" in capsys.readouterr().err
    with open(out / "validate.csv", newline="") as fh:
        table = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    with np.load(out / "validate.npz") as f:
        assert list(f["labels"]) == [row["quantity"] for row in table]
        truth = f["truth"][:, None]
        held = (f["low"][0] <= truth) & (truth <= f["high"][0])
        assert f["estimate"].shape == (1, len(table), 6)
        assert "lrbandit validate" in str(f["metadata"])
    np.testing.assert_allclose(held.mean(axis=1), [float(row["coverage"]) for row in table])
    (out / "validate.csv").unlink()  # the trials' file alone is refused too
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and "validate.npz" in capsys.readouterr().err


def test_progress_bar_grows_when_the_warm_start_extends(capsys):
    """The planned rounds use the sizing rule's warm start; where the default warm start
    extends, the bar's total grows with the rounds instead of running past 100%."""
    from lrbandit_gym.experiments.validate.run import _round_bar

    bar = _round_bar(100, trials=4, n_chunks=2, progress=True)
    bar.update(60)
    bar.update(70)  # more rounds than planned
    assert bar.bar.n == bar.bar.total == 130
    bar.close()
    assert "130/130" in capsys.readouterr().err


def test_the_verdict_names_the_lindeberg_check_where_it_fires_in_most_trials():
    """Softmax at a low temperature leaves one round holding most of an arm's predictable
    variance in every trial: the verdict line says the Lindeberg check warned, and in how
    many trials, whatever the coverage; ε-greedy's verdict does not mention it."""
    from inference.cores.weight_share import SHARE_LIMIT

    heavy = validate(
        TINY, policy="softmax", policy_kwargs={"temperature": 0.02}, targets="entry", n=(60,),
        trials=16, batch_size=8, progress=False,
    )  # fmt: skip
    warned = (heavy.arrays["round_share"] > SHARE_LIMIT).any(axis=0).mean()
    assert warned > 0.5
    assert f"Lindeberg check (SmallPropensityWarning: one round above {SHARE_LIMIT:g}" in (
        heavy.verdict
    )
    assert f"in {warned:.0%} of trials" in heavy.verdict
    assert heavy.verdict.startswith(heavy.status)
    quiet = validate(
        TINY, policy_kwargs={"epsilon": 0.1}, targets="entry", n=(60,), trials=16,
        batch_size=8, progress=False,
    )  # fmt: skip
    assert "Lindeberg" not in quiet.verdict and "warned" not in quiet.verdict


def test_the_verdict_counts_warned_trials_and_chunks():
    """The verdict names a per-trial warning fired at any checkpoint in over 5% of trials,
    and the warm-start warning by the share of chunks that raised it (whichever message)."""
    from agents.warm_start.check import WarmStartWarning
    from lrbandit_gym.experiments.validate.warning_rates import warned_verdict

    arrays = {"round_share": np.zeros((2, 20)), "context_flag": np.zeros((2, 20))}
    arrays["context_flag"][1, :4] = 1.0  # 4 of 20 trials, at the second checkpoint
    chunks = [[(WarmStartWarning, "arm 0")], [(WarmStartWarning, "arms 0, 1")], [], []]
    line = warned_verdict("VALID", "VALID: x", arrays, chunks)
    assert line.startswith("VALID: x; but warned: ")
    assert "the context check (ContextLawWarning) in 20% of trials" in line
    assert "the warm-start check (WarmStartWarning) in 50% of chunks" in line
    assert "Lindeberg" not in line
    assert warned_verdict("FAILED", "FAILED: x", arrays, chunks) == "FAILED: x"
    arrays["context_flag"][:] = 0.0
    arrays["context_flag"][0, 0] = 1.0  # 1 of 20 trials: 5%, not above
    assert warned_verdict("UNDER-COVERS", "UNDER-COVERS: x", arrays, []) == "UNDER-COVERS: x"
