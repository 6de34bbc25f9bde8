"""Command-line and analysis reliability, round 4 (issue 34, items 5, 6, 7 and 9): usage
errors (exit 2) that name the option before anything runs, and replay refusals that name
the row (exit 1)."""

from __future__ import annotations

import builtins
import sys

import gymnasium as gym
import numpy as np
import pytest
from helpers import play

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import analyze
from lrbandit_gym.experiments.cli import main
from lrbandit_gym.logs import RecordRounds, save_log

pytestmark = pytest.mark.filterwarnings("ignore")

D1, D2, WARM, ROUNDS = 4, 3, 40, 120


@pytest.fixture(scope="module")
def small_log():
    """A short epsilon-greedy log with its pmf (seeded)."""
    base = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1)
    rec = RecordRounds(base)
    agent = EpsilonGreedy(base, rank=1, epsilon=0.3, warm_start=20, seed=0)
    obs, _ = rec.reset(seed=0)
    play(rec, agent, obs, ROUNDS)
    return {k: np.array(v) for k, v in rec.to_log().items()}


@pytest.fixture
def log_file(small_log, tmp_path):
    return str(save_log(small_log, tmp_path / "log.npz"))


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _analyze_must_not_run(monkeypatch):
    from lrbandit_gym.experiments.cli import analyze as cli_analyze

    def ran(*args, **kwargs):
        raise AssertionError("the analysis ran before its arguments were checked")

    monkeypatch.setattr(cli_analyze, "analyze", ran)


# ------------------------------------------------------------- item 5: replay refusals
def test_a_reward_the_format_admits_but_the_replay_refuses_names_the_row(small_log):
    log = {k: v.copy() for k, v in small_log.items()}
    log["reward"][WARM + 10] = 1e140
    with pytest.raises(ValueError, match=rf"row {WARM + 10} of the log"):
        analyze(log, {"e": np.eye(D1, D2)}, rank=1, warm_start=WARM, value=False)


def test_the_cli_exits_1_naming_the_row(small_log, tmp_path, capsys):
    log = {k: v.copy() for k, v in small_log.items()}
    log["reward"][WARM + 10] = 1e140
    path = save_log(log, tmp_path / "big.npz")
    argv = ["analyze", str(path), "--rank", "1", "--warm-start", str(WARM), "--no-value"]
    assert main([*argv, "--target", "e=eye"]) == 1
    err = capsys.readouterr().err
    assert f"row {WARM + 10} of the log" in err and "Traceback" not in err


# --------------------------------------------------------- item 7: --out under a file
def _refuse_to_run(monkeypatch):
    from lrbandit_gym.experiments.compare import run as compare
    from lrbandit_gym.experiments.validate import run as validate

    def ran(*args, **kwargs):
        raise AssertionError("the run started before its outputs were checked")

    monkeypatch.setattr(compare, "compare", ran)
    monkeypatch.setattr(validate, "run_validation", ran)
    _analyze_must_not_run(monkeypatch)


TINY_COMPARE = ["compare", "--agents", "uniform", "--trials", "2", "--rounds", "30"]
TINY_COMPARE += ["--d", "4", "--rank", "1", "--warm-start", "10", "--jobs", "1"]


@pytest.mark.parametrize("command", ["compare", "validate", "analyze"])
def test_out_under_a_regular_file_is_a_usage_error_before_the_run(
    command, log_file, tmp_path, capsys, monkeypatch
):
    _refuse_to_run(monkeypatch)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    argv = {
        "compare": TINY_COMPARE,
        "validate": ["validate", "--no-progress", "--trials", "2"],
        "analyze": ["analyze", log_file, "--rank", "1", "--no-value", "--target", "e=eye"],
    }[command]
    err = _usage_error([*argv, "--out", str(afile / "sub")], capsys)
    assert "argument --out:" in err and "afile" in err and "is a file" in err
    assert afile.read_text() == "mine"


# -------------------------------------------------------------- item 9: analyze options
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--rank", "4", "--target", "e=eye"], "argument --rank:"),
        (["--rank", "1", "--target", "z=ZEROS"], "argument --target:"),
        (["--rank", "1", "--target", "h=HUGE"], "argument --target:"),
        (["--rank", "1", "--target", "n=NPZ"], "argument --target:"),
    ],
)
def test_analyze_options_are_usage_errors_naming_the_option(
    extra, named, log_file, tmp_path, capsys, monkeypatch
):
    _analyze_must_not_run(monkeypatch)
    zeros, huge, npz = tmp_path / "z.npy", tmp_path / "h.npy", tmp_path / "n.npy"
    np.save(zeros, np.zeros((D1, D2)))
    np.save(huge, np.full((D1, D2), 1e151))
    with open(npz, "wb") as fh:
        np.savez(fh, t=np.eye(D1, D2))
    files = {"ZEROS": str(zeros), "HUGE": str(huge), "NPZ": str(npz)}
    extra = [
        a.replace(a.split("=")[-1], files[a.split("=")[-1]])
        if "=" in a and a.split("=")[-1] in files
        else a
        for a in extra
    ]
    err = _usage_error(["analyze", log_file, "--no-value", *extra], capsys)
    assert named in err, err
    if str(npz) in extra:
        assert "npz archive" in err


def test_analyze_api_refuses_a_rank_above_the_sizes(small_log):
    with pytest.raises(ValueError, match=r"rank.*min\(d1, d2\) = 3.*got 4"):
        analyze(small_log, {"e": np.eye(D1, D2)}, rank=4, warm_start=WARM, value=False)


# ------------------------------------------------------- item 9: sizes refused up front
def test_validate_refuses_an_impossible_batch_before_running(capsys, monkeypatch):
    from lrbandit_gym.experiments.validate import run as validate

    def planned(*args, **kwargs):
        raise AssertionError("the run was planned before its batch size was checked")

    monkeypatch.setattr(validate, "plan_chunks", planned)
    big = str(2**63 - 1)
    err = _usage_error(["validate", "--no-progress", "--trials", big, "--batch-size", big], capsys)
    assert "argument --batch-size:" in err and big in err


def test_recorder_capacity_beyond_memory_is_refused():
    base = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1)
    with pytest.raises(ValueError, match=r"capacity.*1000000000000"):
        RecordRounds(base, capacity=10**12)


def test_an_index_log_declaring_huge_sizes_is_refused_naming_them(small_log):
    from lrbandit_gym.logs import LogFormatError, LogReplayEnv, validate_log

    n = 5
    log = {
        "context_index": np.zeros((n, 2), np.int64),
        "action": np.zeros(n, np.int64),
        "reward": np.zeros(n),
        "propensity": np.full(n, 0.5),
        "d1": np.asarray(10**6),
        "d2": np.asarray(10**6),
        "n_actions": np.asarray(2),
        "context_law": np.asarray("completion"),
        "format_version": np.asarray(1),
    }
    validate_log(log)  # a valid log: its contexts are stored as indices
    with pytest.raises(LogFormatError, match=r"d1.*1000000") as err:
        LogReplayEnv(log)
    assert err.value.column in ("d1", "d2")


def test_a_stray_label_of_the_classification_env_is_refused_naming_it():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((6, 3, 3))
    labels = np.array([0, 1, 2, 0, 1, 10**12])
    with pytest.raises(ValueError, match=r"labels.*1000000000000"):
        gym.make("MatrixClassification-v0", contexts=images, labels=labels)


# ------------------------------------------------------------------- item 6: Ray
def test_ray_without_the_extra_is_a_usage_error_before_the_run(tmp_path, capsys, monkeypatch):
    _refuse_to_run(monkeypatch)
    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    out = tmp_path / "o"
    for argv in (
        [*TINY_COMPARE, "--jobs", "2"],
        ["validate", "--no-progress", "--trials", "2"],
        ["reproduce", "table1", "--trials", "2"],
    ):
        err = _usage_error([*argv, "--backend", "ray", "--out", str(out)], capsys)
        assert "argument --backend:" in err and "lrbandit-gym[ray]" in err
        assert not out.exists()


def test_ray_map_joins_a_running_cluster_without_num_cpus(monkeypatch):
    from lrbandit_gym.experiments import parallel

    calls = {}

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            calls["init"] = kwargs
            raise RuntimeError("stop here")

    monkeypatch.setitem(sys.modules, "ray", FakeRay)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    with pytest.raises(RuntimeError, match="stop here"):
        parallel.ray_map(abs, [1], 2)
    assert "num_cpus" not in calls["init"] and calls["init"].get("address") == "127.0.0.1:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(RuntimeError, match="stop here"):
        parallel.ray_map(abs, [1], 2)
    assert calls["init"]["num_cpus"] == 2
