"""The ``lrbandit`` command line: demo, reproduce (local and Ray backends), bench."""

import importlib.util
import json
import platform
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from lrbandit_gym import engine
from lrbandit_gym.experiments.cli import main
from lrbandit_gym.experiments.reproduce.run import reproduce
from lrbandit_gym.experiments.studies import StudyConfig, run_study

_DEMO_ROW = re.compile(
    r"^(\S.*?)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(-?\d+\.\d+)\s+(yes|NO)$", re.M
)


def test_demo_reports_every_interval_with_the_truth(capsys, tmp_path):
    """Every quantity has a row whose "covered" agrees with its printed interval and truth,
    and the closing count is the number of rows that say so; where every interval covers, no
    ValueBiasWarning (its default V* interval allows for the regret)."""
    from inference import ValueBiasWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["demo", "--rounds", "300", "--out", str(tmp_path), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert not [w for w in caught if issubclass(w.category, ValueBiasWarning)]
    rows = {m[0]: m[1:] for m in _DEMO_ROW.findall(out)}
    labels = [f"<M_{a}, {t}>" for t in ("T1", "T2") for a in (0, 1)]
    labels += ["<M_1 - M_0, T1>", "<M_1 - M_0, T2>", "V*"]
    assert sorted(rows) == sorted(labels), out
    for label, (truth, estimate, low, high, covered) in rows.items():
        truth, estimate, low, high = map(float, (truth, estimate, low, high))
        assert low <= estimate <= high and low < high, (label, out)
        assert covered == ("yes" if low <= truth <= high else "NO"), (label, out)
    count = re.search(r"^(\d+) of (\d+) intervals cover the truth", out, re.M)
    assert count, out
    assert int(count[2]) == len(rows) == 7
    assert int(count[1]) == sum(r[-1] == "yes" for r in rows.values())


def test_reproduce_writes_csv_json_with_configuration(tmp_path, capsys):
    meta = reproduce("table3", trials=8, n=(40, 80), seed=3, out=tmp_path, jobs=1, batch_size=4)
    data = json.loads((tmp_path / "table3.json").read_text())
    assert data["seed"] == 3 and data["versions"]["numpy"] == np.__version__
    assert {r["method"] for r in data["rows"]} == {"ours", "exploration_only"}
    assert {r["n"] for r in data["rows"]} == {40, 80}
    stamp, header = (tmp_path / "table3.csv").read_text().splitlines()[:2]
    assert stamp.startswith("# written by lrbandit-gym") and ", seed 3," in stamp
    assert header.startswith("study,setting,method")
    timing = meta["timing"]["r=3"]
    before, after = timing["draw_baseline_before_after"]
    assert before > 0 and after > 0 and timing["draw_baseline_seconds"] == (before + after) / 2
    assert data["engine"] == engine.active_engine()
    assert "exploration_only" in capsys.readouterr().out
    assert (tmp_path / "table3.npz").is_file()
    if importlib.util.find_spec("matplotlib") is not None:
        names = ["table3_zscores.png", "table3_coverage.png", "table3_length.png"]
        assert [p.split("/")[-1] for p in data["figures"]] == names


def test_reproduce_errors_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="study"):
        reproduce("table9", out=tmp_path)
    with pytest.raises(ValueError, match="trials"):
        reproduce("ensemble", trials=0, out=tmp_path)
    with pytest.raises(ValueError, match="backend"):
        reproduce("ensemble", trials=1, n=(5,), backend="dask", out=tmp_path)


def test_results_do_not_depend_on_jobs():
    config = StudyConfig(checkpoints=(30,), warm_start=300, d1=12, d2=10, rank=2)
    one = run_study(config, 6, seed=5, batch_size=3)
    from lrbandit_gym.experiments.montecarlo import chunk_map

    two = run_study(config, 6, seed=5, batch_size=3, map_fn=chunk_map(2))
    for key in one:
        np.testing.assert_array_equal(one[key], two[key])


def test_study_times_its_phases_apart_from_its_results(tmp_path):
    """run_study reports the seconds of the warm-start rounds, the fit and the online rounds
    (summed over chunks) without putting them in the seed-determined result; reproduce
    records them beside the draw baseline's share of each phase."""
    from lrbandit_gym.experiments.studies import PHASES

    config = StudyConfig(checkpoints=(30,), warm_start=300, d1=12, d2=10, rank=2)
    timing = {}
    result = run_study(config, 4, seed=5, batch_size=2, timing=timing)
    assert "phase_seconds" not in result
    assert list(timing) == list(PHASES)
    assert all(np.isfinite(s) and s > 0 for s in timing.values())
    out = reproduce(
        "table1", trials=2, n=(30,), out=tmp_path, jobs=1, figures=False, warm_start=300
    )
    phases = out["timing"]["r=3"]["phases"]
    assert list(phases) == list(PHASES)
    draw = out["timing"]["r=3"]["draw_baseline_seconds"]
    # jobs = 1: the phases' draw shares add up to the baseline, split 300 : 0 : 30.
    shares = [phases[p]["draw_seconds"] for p in PHASES]
    np.testing.assert_allclose(shares, np.array([300, 0, 30]) / 330 * draw)


def test_reproduce_runs_and_records_the_engine_asked_for(tmp_path, capsys):
    previous = engine.get_engine()
    meta = reproduce(
        "table1",
        trials=2,
        n=(20,),
        out=tmp_path,
        jobs=1,
        figures=False,
        warm_start=300,
        engine="numpy",
    )
    assert meta["engine"] == "numpy" and "engine numpy" in capsys.readouterr().out
    assert engine.get_engine() == previous  # restored afterwards
    with pytest.raises(ValueError, match="'gpu'"):
        reproduce("table1", trials=2, n=(20,), out=tmp_path, engine="gpu")


def test_bench_env_runs(capsys):
    assert main(["bench", "env", "--num-envs", "50", "--d", "10"]) == 0
    assert "ratio" in capsys.readouterr().out


def test_bench_round_runs(capsys):
    assert main(["bench", "round", "--num-envs", "8", "--d", "10"]) == 0
    out = capsys.readouterr().out
    assert "B=8" in out and "API" in out and "core" in out


def test_unknown_study_is_refused():
    with pytest.raises(SystemExit):
        main(["reproduce", "table9"])


def test_table1_projection_comparison_and_table2_ranks_on_request(tmp_path):
    """table1 runs the paper's G_t only with compare_projection, and the comparison leaves
    our intervals unchanged; table2 runs the ranks asked for (r = 3 is table1's setting),
    with the paper's column only where the paper has one."""
    from lrbandit_gym.experiments.reproduce.run import _configs

    assert _configs("table1", (30,))["r=3"].variants == ()
    assert _configs("table1", (30,), compare_projection=True)["r=3"].variants == ("paper",)
    assert _configs("table1", (30,))["r=3"] == _configs("table2", (30,))["r=3"]
    small = StudyConfig(checkpoints=(30,), warm_start=300, d1=12, d2=10, rank=2)
    plain = run_study(small, 4, seed=1, batch_size=4)
    both = run_study(small.replace(variants=("paper",)), 4, seed=1, batch_size=4)
    for key in plain:
        np.testing.assert_array_equal(plain[key], both[key])
    assert np.isfinite(both["paper:se"]).all()
    two = reproduce(
        "table2",
        trials=4,
        n=(30,),
        out=tmp_path,
        jobs=1,
        batch_size=4,
        ranks=(2,),
        figures=False,
    )
    assert {r["setting"] for r in two["rows"]} == {"r=2"} and two["ranks"] == [2]


@pytest.mark.filterwarnings("ignore::inference.results.InsufficientDataWarning")  # n = 5
def test_warm_start_option_reaches_every_setting_and_is_recorded(tmp_path):
    out = reproduce(
        "table2",
        trials=2,
        n=(5,),
        out=tmp_path,
        jobs=1,
        batch_size=2,
        ranks=(1, 2),
        warm_start=40,
        figures=False,
    )
    assert out["warm_start"] == 40
    assert {c["warm_start"] for c in out["configs"].values()} == {40}
    with pytest.raises(ValueError, match="warm_start must be an integer >= 1"):
        reproduce("table1", trials=1, warm_start=0, out=tmp_path)
    with pytest.raises(ValueError, match="warm_start"):
        reproduce("value", trials=1, warm_start=2.5, out=tmp_path)


def test_study_specific_options_are_refused_elsewhere(tmp_path):
    with pytest.raises(ValueError, match="compare_projection"):
        reproduce("value", trials=1, compare_projection=True, out=tmp_path)
    with pytest.raises(ValueError, match="ranks"):
        reproduce("table1", trials=1, ranks=(5,), out=tmp_path)
    with pytest.raises(ValueError, match="ranks"):
        reproduce("table2", trials=1, ranks=(0,), out=tmp_path)


_FAULTS_SCRIPT = """
import resource, sys
import numpy as np
from lrbandit_gym.experiments.parallel import single_threaded_blas
if sys.argv[1] == "worker":
    single_threaded_blas()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(10 << 17)
before = faults()
for _ in range(20):
    np.ones(10 << 17)  # 10 MB, the size of one arm's contexts in the warm-start fit
print(faults() - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="the study workers tune glibc's malloc only",
)
def test_study_workers_reuse_freed_memory_without_page_faults():
    """A worker keeps the fit's freed blocks: allocating 10 MB again faults no page in, where
    a plain process faults hundreds (the kernel zeroes every page it hands back)."""

    def faults(mode):
        run = subprocess.run(
            [sys.executable, "-c", _FAULTS_SCRIPT, mode], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    assert faults("plain") >= 100
    assert faults("worker") < 20


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--rounds", "-5"],
        ["demo", "--rounds", "0"],
        ["demo", "--seed", "-1"],
        ["reproduce", "table1", "--trials", "0"],
        ["reproduce", "table1", "--n", "1000", "-3"],
        ["reproduce", "table1", "--jobs", "0"],
        ["reproduce", "table2", "--ranks", "0"],
        ["reproduce", "table1", "--warm-start", "-2000"],
        ["bench", "env", "--d", "0"],
        ["bench", "round", "--num-envs", "x"],
    ],
)
def test_cli_refuses_nonsense_arguments_with_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "must be an integer >=" in err and argv[-1] in err


def test_run_demo_refuses_nonsense_before_running():
    from lrbandit_gym.experiments.demo import run_demo

    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got -5"):
        run_demo(rounds=-5, plot=False)
