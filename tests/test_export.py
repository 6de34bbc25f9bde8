"""Exports of a log (lrbandit_gym.logs.export): every field against the formats' own documents.

Open Bandit Pipeline: the keys, dtypes and shapes that ``SyntheticBanditDataset`` /
``OpenBanditDataset`` return and that ``obp.utils.check_bandit_feedback_inputs`` and
``check_ope_inputs`` require (st-tech/zr-obp), re-stated in :func:`obp_checks`.  Vowpal
Wabbit: the ``--cb`` label ``action:cost:probability | features`` of the wiki's "Logged
Contextual Bandit Example" (action a positive integer in {1 … k}, cost lower is better,
probability in [0, 1]) and the feature syntax of its "Input format" page, parsed by
:func:`parse_vw`.
"""

from __future__ import annotations

import io
import re

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from lrbandit_gym.logs.export import to_obp, to_vw

K = 3


def _run_log(context: str, n: int = 60, seed: int = 0) -> dict[str, np.ndarray]:
    """A log recorded by hand from MatrixContextBandit-v0 under a random logging pmf."""
    kwargs = {"observation": "index"} if context == "completion" else {}
    env = gym.make(
        "MatrixContextBandit-v0", d1=3, d2=4, rank=1, n_actions=K, context=context, **kwargs
    )
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    cols: dict[str, list] = {k: [] for k in ("x", "a", "y", "p", "pmf", "er", "opt", "reg")}
    for _ in range(n):
        pmf = rng.dirichlet(np.ones(K)) * 0.9 + 0.1 / K
        a = int(rng.choice(K, p=pmf))
        cols["x"].append(np.array(obs))
        next_obs, reward, _, _, info = env.step(a)
        cols["a"].append(a)
        cols["y"].append(reward)
        cols["p"].append(pmf[a])
        cols["pmf"].append(pmf)
        cols["er"].append(info["expected_rewards"])
        cols["opt"].append(info["optimal_action"])
        cols["reg"].append(info["regret"])
        obs = next_obs
    log = {
        "action": np.array(cols["a"], dtype=np.int64),
        "reward": np.array(cols["y"], dtype=np.float64),
        "propensity": np.array(cols["p"], dtype=np.float64),
        "pmf": np.array(cols["pmf"]),
        "d1": np.array(3),
        "d2": np.array(4),
        "n_actions": np.array(K),
        "context_law": np.array(context),
        "format_version": np.array(1),
        "oracle_expected_rewards": np.array(cols["er"]),
        "oracle_optimal_action": np.array(cols["opt"], dtype=np.int64),
        "oracle_regret": np.array(cols["reg"]),
    }
    key = "context_index" if context == "completion" else "context"
    log[key] = np.array(cols["x"], dtype=np.int64 if context == "completion" else np.float64)
    return log


def _dense(log: dict[str, np.ndarray]) -> np.ndarray:
    """The log's contexts as (n, d1, d2) matrices."""
    if "context" in log:
        return log["context"]
    n, d1, d2 = len(log["action"]), int(log["d1"]), int(log["d2"])
    x = np.zeros((n, d1, d2))
    x[np.arange(n), log["context_index"][:, 0], log["context_index"][:, 1]] = 1.0
    return x


def obp_checks(fb: dict) -> None:
    """What OBP's ``check_bandit_feedback_inputs`` and ``check_ope_inputs`` require of a
    ``bandit_feedback`` dict (obp/utils.py), and the key types its datasets return."""
    n = fb["n_rounds"]
    assert isinstance(n, int) and isinstance(fb["n_actions"], int)
    for name, ndim in (("context", 2), ("action", 1), ("reward", 1), ("pscore", 1)):
        assert isinstance(fb[name], np.ndarray) and fb[name].ndim == ndim, name
        assert fb[name].shape[0] == n, name
    action = fb["action"]
    assert np.issubdtype(action.dtype, np.integer) and action.min() >= 0
    assert action.max() < fb["action_context"].shape[0]
    assert fb["action_context"].ndim == 2
    assert (fb["pscore"] > 0).all()
    assert fb["position"].shape == (n,) and np.issubdtype(fb["position"].dtype, np.integer)
    assert fb["position"].min() >= 0
    if "expected_reward" in fb:
        er = fb["expected_reward"]
        assert er.ndim == 2 and er.shape[0] == n and action.max() < er.shape[1]
    if "pi_b" in fb:
        pi_b = fb["pi_b"]
        assert pi_b.ndim == 3 and pi_b.shape[:2] == (n, fb["n_actions"])
        assert np.allclose(pi_b.sum(axis=1), 1)
        assert fb["position"].max() < pi_b.shape[2]


@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_obp_every_field(context):
    log = _run_log(context)
    fb = to_obp(log)
    assert set(fb) == {
        "n_rounds",
        "n_actions",
        "action",
        "position",
        "reward",
        "pscore",
        "context",
        "action_context",
        "expected_reward",
        "pi_b",
    }
    obp_checks(fb)
    n = len(log["action"])
    assert fb["n_rounds"] == n and fb["n_actions"] == K
    np.testing.assert_array_equal(fb["action"], log["action"])
    np.testing.assert_array_equal(fb["position"], np.zeros(n, dtype=np.int64))
    np.testing.assert_array_equal(fb["reward"], log["reward"])
    np.testing.assert_array_equal(fb["pscore"], log["propensity"])
    np.testing.assert_array_equal(fb["context"], _dense(log).reshape(n, -1))  # row-major
    np.testing.assert_array_equal(fb["action_context"], np.eye(K, dtype=int))
    np.testing.assert_array_equal(fb["expected_reward"], log["oracle_expected_rewards"])
    np.testing.assert_array_equal(fb["pi_b"][:, :, 0], log["pmf"])
    # OBP's ground truth of the logging policy, np.average(expected_reward, weights=pi_b):
    # the oracle's expected reward of the logged pmf, round by round.
    value = np.average(fb["expected_reward"], weights=fb["pi_b"][:, :, 0], axis=1)
    np.testing.assert_allclose(value, (log["pmf"] * log["oracle_expected_rewards"]).sum(axis=1))


def test_obp_index_contexts_and_optional_columns():
    log = _run_log("completion")
    fb = to_obp(log, index_context="index")
    np.testing.assert_array_equal(fb["context"], log["context_index"])
    obp_checks(fb)
    bare = {k: v for k, v in log.items() if k not in ("pmf", "oracle_expected_rewards")}
    fb = to_obp(bare)
    assert "expected_reward" not in fb and "pi_b" not in fb
    obp_checks(fb)
    with pytest.raises(ValueError, match="index_context must be one of"):
        to_obp(log, index_context="pair")


_LABEL = re.compile(r"^(?P<a>[1-9][0-9]*):(?P<c>[^:\s|]+):(?P<p>[^:\s|]+) \|(?P<f>.*)$")


def parse_vw(line: str) -> tuple[int, float, float, dict[str, float]]:
    """One ``--cb`` example: ``action:cost:probability | features``, no tag, the default
    namespace; a feature is ``name`` (value 1) or ``name:value`` (VW's Input format)."""
    m = _LABEL.match(line)
    assert m is not None, line
    feats = {}
    for token in m.group("f").split():
        name, _, value = token.partition(":")
        assert name and "|" not in name, token
        feats[name] = float(value) if value else 1.0
    return int(m.group("a")), float(m.group("c")), float(m.group("p")), feats


def test_vw_parser_reads_the_wiki_example():
    # The five lines of the wiki's "Logged Contextual Bandit Example".
    wiki = ["1:2:0.4 | a c", "3:0.5:0.2 | b d", "4:1.2:0.5 | a b c", "2:1:0.3 | b c"]
    assert parse_vw(wiki[0]) == (1, 2.0, 0.4, {"a": 1.0, "c": 1.0})
    assert [parse_vw(line)[0] for line in wiki] == [1, 3, 4, 2]


@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_vw_every_field(context, tmp_path):
    log = _run_log(context)
    buffer = io.StringIO()
    assert to_vw(log, buffer) == len(log["action"])
    path = tmp_path / "log.vw"
    to_vw(log, path)
    assert path.read_text() == buffer.getvalue()
    lines = buffer.getvalue().splitlines()
    assert len(lines) == len(log["action"])
    x = _dense(log)
    for t, line in enumerate(lines):
        action, cost, prob, feats = parse_vw(line)
        assert action == log["action"][t] + 1  # VW numbers actions 1 … K
        assert 1 <= action <= K
        assert cost == -log["reward"][t]  # exactly: VW minimises cost
        assert prob == log["propensity"][t] and 0 < prob <= 1
        back = np.zeros_like(x[t])
        for name, value in feats.items():
            j, k = map(int, re.fullmatch(r"x_(\d+)_(\d+)", name).groups())
            back[j, k] = value
        np.testing.assert_array_equal(back, x[t])  # every non-zero entry, exactly


def test_vw_zero_context_and_reward():
    log = {
        "context": np.zeros((2, 2, 2)),
        "action": np.array([0, 1]),
        "reward": np.array([0.0, 1.5]),
        "propensity": np.array([0.5, 1.0]),
        "n_actions": np.array(2),
        "d1": np.array(2),
        "d2": np.array(2),
        "context_law": np.array("gaussian"),
        "format_version": np.array(1),
    }
    log["context"][1, 1, 0] = 1e-300
    buffer = io.StringIO()
    to_vw(log, buffer)
    assert buffer.getvalue().splitlines() == ["1:0.0:0.5 |", "2:-1.5:1.0 | x_1_0:1e-300"]


def _bad(log, **changes):
    out = dict(log)
    out.update(changes)
    return out


@pytest.mark.parametrize("export", [to_obp, lambda log: to_vw(log, io.StringIO())])
def test_exports_refuse_bad_logs(export):
    log = _run_log("gaussian", n=10)
    p = log["propensity"].copy()
    p[4] = 0.0
    with pytest.raises(ValueError, match=r"'propensity'.*row 4"):
        export(_bad(log, propensity=p))
    with pytest.raises(ValueError, match="exactly one of 'context'"):
        export(_bad(log, context_index=np.zeros((10, 2), dtype=np.int64)))
    a = log["action"].copy()
    a[2] = K
    with pytest.raises(ValueError, match=r"'action'.*row 2"):
        export(_bad(log, action=a))
    with pytest.raises(ValueError, match=r"'context'.*shape \(10, 5, 4\)"):
        export(_bad(log, d1=np.array(5)))
    pmf = log["pmf"].copy()
    pmf[3] = np.roll(pmf[3], 1)
    with pytest.raises(ValueError, match=r"row 3"):
        export(_bad(log, pmf=pmf))
    y = log["reward"].copy()
    y[7] = np.nan
    with pytest.raises(ValueError, match=r"'reward'.*row 7"):
        export(_bad(log, reward=y))
    with pytest.raises(ValueError, match="'propensity': missing"):
        export({k: v for k, v in log.items() if k != "propensity"})
    idx = _run_log("completion", n=10)
    bad = idx["context_index"].copy()
    bad[1] = [3, 0]
    with pytest.raises(ValueError, match=r"'context_index'.*row 1"):
        export(_bad(idx, context_index=bad))


def test_exports_read_an_npz(tmp_path):
    log = _run_log("completion", n=20)
    np.savez(tmp_path / "log.npz", **log)
    with np.load(tmp_path / "log.npz", allow_pickle=False) as saved:
        fb = to_obp(saved)
    np.testing.assert_array_equal(fb["context"], _dense(log).reshape(20, -1))


def _tiny_log() -> dict[str, np.ndarray]:
    """Two rounds, three arms, 2 x 2 contexts: small enough to write the export by hand."""
    context = np.zeros((2, 2, 2))
    context[0] = [[0.5, 0.0], [0.0, -2.0]]
    context[1, 1, 0] = 1.25
    return {
        "context": context,
        "action": np.array([1, 0]),
        "reward": np.array([1.0, -0.5]),
        "propensity": np.array([0.25, 0.5]),
        "n_actions": np.array(3),
        "d1": np.array(2),
        "d2": np.array(2),
        "context_law": np.array("gaussian"),
        "format_version": np.array(1),
    }


def test_vw_adf_exact_text(tmp_path):
    """Issue 34: the ADF multiline format of ``--cb_adf`` / ``--cb_explore_adf``: a shared
    line with the context, one line per arm, ``0:cost:probability`` on the chosen arm's,
    a blank line after each example."""
    buffer = io.StringIO()
    assert to_vw(_tiny_log(), buffer, adf=True) == 2
    assert buffer.getvalue() == (
        "shared |x x_0_0:0.5 x_1_1:-2.0\n"
        "|a arm_0\n"
        "0:-1.0:0.25 |a arm_1\n"
        "|a arm_2\n"
        "\n"
        "shared |x x_1_0:1.25\n"
        "0:0.5:0.5 |a arm_0\n"
        "|a arm_1\n"
        "|a arm_2\n"
        "\n"
    )
    to_vw(_tiny_log(), tmp_path / "log.vw", adf=True)
    assert (tmp_path / "log.vw").read_text() == buffer.getvalue()
    index = _run_log("completion", n=2)
    text = io.StringIO()
    to_vw(index, text, adf=True)
    j, k = index["context_index"][0]
    assert text.getvalue().splitlines()[0] == f"shared |x x_{j}_{k}:1.0"


def test_vw_adf_is_read_by_vowpal_wabbit_without_a_warning(tmp_path):
    """Vowpal Wabbit itself parses the ADF export and learns from it (only where the
    ``vowpalwabbit`` package is installed)."""
    vw = pytest.importorskip("vowpalwabbit")
    log = _run_log("gaussian", n=40)
    path = tmp_path / "log.vw"
    to_vw(log, path, adf=True)
    workspace = vw.Workspace(f"--cb_explore_adf -q xa -d {path}", enable_logging=True)
    workspace.run_parser()
    workspace.finish()
    output = "\n".join(workspace.get_log())
    assert "number of examples = 40" in output, output
    assert "warning" not in output.lower() and "error" not in output.lower(), output


@pytest.mark.parametrize("context", ["gaussian", "completion"])
def test_obp_reward_model_of_an_estimate(context):
    """Issue 34: ``to_obp(log, estimates=M_hat)`` adds OBP's
    ``estimated_rewards_by_reg_model``, ``(n, K, 1)``, holding ``<M_hat_a, X_t>``."""
    log = _run_log(context)
    m_hat = np.random.default_rng(1).standard_normal((K, 3, 4))
    fb = to_obp(log, estimates=m_hat)
    q = fb["estimated_rewards_by_reg_model"]
    n = len(log["action"])
    assert q.shape == (n, K, 1) and q.dtype == np.float64
    x = _dense(log)
    for t in (0, 7, n - 1):
        for a in range(K):
            assert np.isclose(q[t, a, 0], np.sum(m_hat[a] * x[t]), rtol=1e-12, atol=1e-15)
    assert "estimated_rewards_by_reg_model" not in to_obp(log)
    with pytest.raises(ValueError, match=r"shape \(K, d1, d2\) = \(3, 3, 4\)"):
        to_obp(log, estimates=m_hat[:2])
    with pytest.raises(ValueError, match="finite"):
        to_obp(log, estimates=np.full((K, 3, 4), np.nan))


def test_obp_estimates_policy_values_from_the_export():
    """Open Bandit Pipeline's own checks and estimators read the export, the reward model
    of ``estimates`` included (only where ``obp`` is installed).  With the true parameters
    as the estimate, the direct method gives the target's value on these contexts exactly;
    OBP's own ``RegressionModel``, additive in the arm, misses it."""
    pytest.importorskip("obp")
    from obp.ope import (
        DirectMethod,
        DoublyRobust,
        InverseProbabilityWeighting,
        OffPolicyEvaluation,
        RegressionModel,
    )
    from sklearn.linear_model import LinearRegression

    env = gym.make("MatrixContextBandit-v0", d1=3, d2=4, rank=1, n_actions=K)
    log = _run_log("gaussian", n=2000)
    fb = to_obp(log, estimates=env.unwrapped.true_params)
    n = fb["n_rounds"]
    target = np.zeros((n, K, 1))
    target[np.arange(n), log["oracle_optimal_action"], 0] = 1.0  # the optimal policy
    truth = log["oracle_expected_rewards"][np.arange(n), log["oracle_optimal_action"]].mean()
    ope = OffPolicyEvaluation(
        bandit_feedback=fb,
        ope_estimators=[InverseProbabilityWeighting(), DirectMethod(), DoublyRobust()],
    )
    values = ope.estimate_policy_values(
        action_dist=target, estimated_rewards_by_reg_model=fb["estimated_rewards_by_reg_model"]
    )
    assert np.isclose(values["dm"], truth, rtol=1e-9)
    assert abs(values["dr"] - truth) < 0.05 and abs(values["ipw"] - truth) < 0.2
    additive = RegressionModel(
        n_actions=K, action_context=fb["action_context"], base_model=LinearRegression()
    ).fit_predict(context=fb["context"], action=fb["action"], reward=fb["reward"])
    dm_additive = ope.estimate_policy_values(target, estimated_rewards_by_reg_model=additive)
    assert abs(dm_additive["dm"] - truth) > 5 * abs(values["dr"] - truth)
