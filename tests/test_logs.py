"""The log format (validation, files), the recorder wrappers and the replay env (issue 25)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import EditStep, nan_reward

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import ParameterInference
from lrbandit_gym import Decision
from lrbandit_gym.logs import (
    LogFormatError,
    LogReplayEnv,
    RecordRounds,
    VectorRecordRounds,
    load_log,
    save_log,
    validate_log,
)

D1, D2 = 5, 4


def _record(rounds=300, capacity=1024, dtype=None, **env_kw):
    """A recorded epsilon-greedy run; also returns what the loop saw, for comparison."""
    base = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1, **env_kw)
    env = RecordRounds(base, capacity=capacity, dtype=dtype)
    agent = EpsilonGreedy(base, rank=1, epsilon=0.3, warm_start=50, seed=1)
    obs, _ = env.reset(seed=3)
    seen = {"obs": [], "action": [], "reward": [], "pmf": [], "info": []}
    for _ in range(rounds):
        d = agent.act(obs)
        nxt, r, _, _, info = env.step(d)
        agent.update(obs, d, r)
        for key, value in zip(seen, (obs, d.action, r, d.propensities, info), strict=True):
            seen[key].append(np.array(value, copy=True) if key != "info" else dict(value))
        obs = nxt
    return env, seen


def test_recorder_keeps_each_round_as_the_loop_saw_it():
    env, seen = _record()
    log = env.to_log()
    n = len(seen["action"])
    assert log["context"].shape == (n, D1, D2) and log["context"].dtype == np.float64
    np.testing.assert_array_equal(log["context"], np.stack(seen["obs"]))
    np.testing.assert_array_equal(log["action"], seen["action"])
    np.testing.assert_array_equal(log["reward"], seen["reward"])
    np.testing.assert_array_equal(log["pmf"], np.stack(seen["pmf"]))
    np.testing.assert_array_equal(log["propensity"], log["pmf"][np.arange(n), log["action"]])
    np.testing.assert_array_equal(
        log["oracle_expected_rewards"], [i["expected_rewards"] for i in seen["info"]]
    )
    np.testing.assert_array_equal(log["oracle_regret"], [i["regret"] for i in seen["info"]])
    assert int(log["d1"]) == D1 and str(log["context_law"]) == "gaussian"
    validate_log(log)


def test_recorder_growth_and_float32():
    small, _ = _record(rounds=200, capacity=1)  # doubled 8 times
    big, _ = _record(rounds=200, capacity=4096)
    a, b = small.to_log(), big.to_log()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert small.nbytes < big.nbytes
    f32, _ = _record(rounds=200, dtype=np.float32)
    log = f32.to_log()
    assert log["context"].dtype == np.float32
    np.testing.assert_array_equal(log["context"], a["context"].astype(np.float32))


def test_recorder_index_contexts():
    env, seen = _record(rounds=100, context="completion", observation="index")
    log = env.to_log()
    assert "context" not in log and log["context_index"].dtype == np.int64
    np.testing.assert_array_equal(log["context_index"], np.stack(seen["obs"]))
    validate_log(log)


def test_recorder_refuses_a_bare_action_before_the_step():
    base = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1)
    env = RecordRounds(base)
    env.reset(seed=0)
    state = base.unwrapped.np_random.bit_generator.state
    with pytest.raises(ValueError, match="propensity_fn"):
        env.step(1)
    with pytest.raises(ValueError, match="must be > 0"):
        env.step(Decision(1, np.array([1.0, 0.0])))
    assert env.n_rounds == 0 and base.unwrapped.np_random.bit_generator.state == state
    uniform = np.array([0.5, 0.5])
    env = RecordRounds(base, propensity_fn=lambda obs: uniform)
    env.reset(seed=0)
    env.step(1)
    assert env.to_log()["propensity"].tolist() == [0.5]


def test_a_round_refused_above_is_recorded_as_played():
    base = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1)
    rec = RecordRounds(base)
    params = ParameterInference(
        EditStep(rec, 5, nan_reward), {"T": np.eye(D1, D2)}, 1, warm_start=20
    )
    params.reset(seed=0)
    pmf = np.array([0.5, 0.5])
    for _ in range(4):
        params.step(Decision(0, pmf))
    with pytest.raises(ValueError, match="reward must be finite"):
        params.step(Decision(1, pmf))  # the recorder below saw the bandit's finite reward
    assert rec.n_rounds == 5 and params.rounds_seen == 4  # played, not absorbed
    params.step(Decision(0, pmf))  # the next round, absorbed
    log = rec.to_log()
    assert rec.n_rounds == 6 and log["action"].tolist() == [0, 0, 0, 0, 1, 0]
    assert params.rounds_seen == 5


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a 20-round warm start warns
def test_recorder_above_the_inference_wrappers():
    base = gym.make("MatrixContextBandit-v0", d1=D1, d2=D2, rank=1)
    params = ParameterInference(base, {"T": np.eye(D1, D2)}, 1, warm_start=20)
    rec = RecordRounds(gym.wrappers.TimeLimit(params, max_episode_steps=1000))
    obs, _ = rec.reset(seed=0)
    first = obs.copy()
    for _ in range(30):
        rec.step(Decision(0, np.array([0.7, 0.3])))
    log = rec.to_log()
    assert rec.n_rounds == 30 and params.rounds_seen == 30
    np.testing.assert_array_equal(log["context"][0], first)


def test_vector_recorder_gives_each_trial():
    venv = gym.make_vec(
        "MatrixContextBandit-v0",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        d1=D1,
        d2=D2,
        context="completion",
        observation="index",
    )
    rec = VectorRecordRounds(venv)
    obs, _ = rec.reset(seed=0)
    firsts = obs.copy()
    pmf = np.tile([0.25, 0.75], (3, 1))
    rewards = []
    for t in range(6):
        _, r, *_ = rec.step(Decision(np.array([0, 1, t % 2]), pmf))
        rewards.append(r)
    for b in range(3):
        log = rec.to_log(trial=b)
        np.testing.assert_array_equal(log["context_index"][0], firsts[b])
        np.testing.assert_array_equal(log["reward"], np.array(rewards)[:, b])
        validate_log(log)
    assert rec.to_log(2)["action"].tolist() == [0, 1, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="trial must be"):
        rec.to_log(trial=3)


# ------------------------------------------------------------------ validation
@pytest.fixture(scope="module")
def good_log():
    env, _ = _record(rounds=60)
    return {k: np.array(v) for k, v in env.to_log().items()}


def _broken(log, column, row, value):
    bad = {k: np.array(v, copy=True) for k, v in log.items()}
    bad[column][row] = value
    return bad


@pytest.mark.parametrize(
    ("column", "row", "value", "match"),
    [
        ("propensity", 17, 0.0, r"in \(0, 1\]"),
        ("propensity", 3, 1.5, r"in \(0, 1\]"),
        ("propensity", 9, np.nan, r"in \(0, 1\]"),
        ("action", 11, 2, r"in \[0, 2\)"),
        ("action", 0, -1, r"in \[0, 2\)"),
        ("reward", 42, np.inf, "finite"),
        ("context", 7, np.nan, "finite"),
        ("pmf", 23, [0.5, 0.6], "sum to 1"),
        ("pmf", 5, [-0.5, 1.5], ">= 0"),
    ],
)
def test_validation_names_the_column_and_the_row(good_log, column, row, value, match):
    with pytest.raises(LogFormatError, match=match) as err:
        validate_log(_broken(good_log, column, row, value))
    assert err.value.column == column and err.value.row == row
    assert f"log column '{column}', row {row}:" in str(err.value)


def test_pmf_must_agree_with_the_propensity(good_log):
    bad = _broken(good_log, "propensity", 12, good_log["propensity"][12] / 2)
    with pytest.raises(LogFormatError, match="disagrees with") as err:
        validate_log(bad)
    assert (err.value.column, err.value.row) == ("pmf", 12)
    no_pmf = {k: v for k, v in bad.items() if k != "pmf"}
    validate_log(no_pmf)  # the pmf is optional: the propensity alone is a valid log


@pytest.mark.parametrize(
    ("edit", "column", "match"),
    [
        (lambda g: g.pop("propensity"), "propensity", "missing"),
        (lambda g: g.pop("d1"), "d1", "missing"),
        (lambda g: g.__setitem__("context_index", np.zeros((60, 2), int)), "context", "exactly"),
        (lambda g: g.pop("context"), "context", "neither"),
        (lambda g: g.__setitem__("action", g["action"].astype(float)), "action", "integers"),
        (lambda g: g.__setitem__("reward", g["reward"][:-1]), "reward", r"shape \(60,\)"),
        (lambda g: g.__setitem__("context", g["context"][:, :, :2]), "context", "shape"),
        (lambda g: g.__setitem__("context_law", np.asarray("poisson")), "context_law", "one of"),
        (lambda g: g.__setitem__("format_version", np.asarray(2)), "format_version", "newer"),
        (lambda g: g.__setitem__("n_actions", np.asarray(1)), "n_actions", ">= 2"),
        (lambda g: g.__setitem__("oracle_regret", np.zeros(3)), "oracle_regret", "60 rows"),
    ],
)
def test_validation_of_the_columns(good_log, edit, column, match):
    bad = {k: np.array(v, copy=True) for k, v in good_log.items()}
    edit(bad)
    with pytest.raises(LogFormatError, match=match) as err:
        validate_log(bad)
    assert err.value.column == column and err.value.row is None


def test_completion_contexts_are_checked(good_log):
    env, _ = _record(rounds=30, context="completion")
    log = {k: np.array(v) for k, v in env.to_log().items()}
    validate_log(log)
    with pytest.raises(LogFormatError, match="one-hot") as err:
        validate_log(_broken(log, "context", 8, 0.5))
    assert err.value.row == 8
    idx, _ = _record(rounds=30, context="completion", observation="index")
    ilog = {k: np.array(v) for k, v in idx.to_log().items()}
    with pytest.raises(LogFormatError, match=r"k must be in \[0, 4\)") as err:
        validate_log(_broken(ilog, "context_index", 4, [0, 4]))
    assert (err.value.column, err.value.row) == ("context_index", 4)
    gauss = dict(ilog, context_law=np.asarray("gaussian"))
    with pytest.raises(LogFormatError, match="completion"):
        validate_log(gauss)


# ------------------------------------------------------------------------ files
def test_npz_round_trip_atomic_and_no_overwrite(tmp_path, good_log):
    path = tmp_path / "run.npz"
    save_log(good_log, path)
    with np.load(path, allow_pickle=False) as data:  # no pickled object in the file
        assert sorted(data.files) == sorted(good_log)
    back = load_log(path)
    for key, value in good_log.items():
        np.testing.assert_array_equal(back[key], value)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_log(good_log, path)
    with pytest.raises(LogFormatError):  # a bad log is refused before anything is written
        save_log(_broken(good_log, "reward", 1, np.nan), path, overwrite=True)
    assert path.read_bytes() == before
    save_log({k: v for k, v in good_log.items() if k != "pmf"}, path, overwrite=True)
    assert "pmf" not in load_log(path)
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]  # no temporary file left
    with pytest.raises(ValueError, match=r"\.npz or \.parquet"):
        save_log(good_log, tmp_path / "run.csv")


def test_load_refuses_a_bad_file(tmp_path, good_log):
    bad = _broken(good_log, "propensity", 33, 0.0)
    np.savez(tmp_path / "bad.npz", **bad)  # written by someone else, unchecked
    with pytest.raises(LogFormatError, match="row 33"):
        load_log(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        load_log(tmp_path / "missing.npz")


def test_parquet_round_trip(tmp_path, good_log):
    pytest.importorskip("pyarrow")
    env, _ = _record(rounds=40, context="completion", observation="index")
    for log in (good_log, env.to_log()):
        path = save_log(log, tmp_path / f"{str(log['context_law'])}.parquet")
        back = load_log(path)
        assert sorted(back) == sorted(log)
        for key, value in log.items():
            np.testing.assert_array_equal(back[key], value)
            assert back[key].dtype.kind == np.asarray(value).dtype.kind


def test_recorder_save_picks_the_format_by_suffix(tmp_path):
    env, _ = _record(rounds=20, dtype=np.float32)
    env.save(tmp_path / "a.npz")
    assert load_log(tmp_path / "a.npz")["context"].dtype == np.float32
    with pytest.raises(FileExistsError):
        env.save(tmp_path / "a.npz")
    env.save(tmp_path / "a.npz", overwrite=True)


# ----------------------------------------------------------------------- replay
def test_replay_env_returns_the_logged_rounds(good_log):
    env = LogReplayEnv(good_log)
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs, good_log["context"][0])
    wrong = 1 - int(good_log["action"][0])
    with pytest.raises(ValueError, match="row 0: the log played arm"):
        env.step(wrong)
    n = len(good_log["action"])
    for t in range(n):
        obs, r, term, trunc, info = env.step(int(good_log["action"][t]))
        assert r == good_log["reward"][t] and trunc == (t == n - 1) and not term
        assert info["regret"] == good_log["oracle_regret"][t]
    with pytest.raises(RuntimeError, match="replayed"):
        env.step(0)
