"""inference.analyze and ``lrbandit analyze``: the wrappers' intervals from a saved log.

The round trip (issue 25, must show): a run recorded with the inference wrappers on, each
with its own estimator, gives from its saved log the intervals it gave live, to 1e-10
relative, on Gaussian and on completion (index) contexts.
"""

from __future__ import annotations

import csv
import sys

import gymnasium as gym
import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from agents import EpsilonGreedy
from inference import (
    ParameterInference,
    PolicyEvaluation,
    ValueInference,
    analyze,
)
from lrbandit_gym.experiments.cli import main
from lrbandit_gym.logs import LogFormatError, RecordRounds, load_log, save_log

D1, D2, RANK, WARM, ROUNDS = 8, 6, 1, 300, 1500
FIELDS = ("estimate", "low", "high", "standard_error", "p_value")


def _targets():
    t = np.zeros((D1, D2))
    t[0, 0] = 1.0
    return {"T": t, "I": np.eye(D1, D2)}


def _arm0(obs):
    return 0


POLICIES = {"greedy": "greedy", "arm0": _arm0}


def _live_run(context, observation, tmp_path, suffix):
    """An epsilon-greedy run with RecordRounds under the three wrappers (own estimator)."""
    base = gym.make(
        "MatrixContextBandit-v0",
        d1=D1,
        d2=D2,
        rank=RANK,
        context=context,
        observation=observation,
        noise_std=0.5,
    )
    rec = RecordRounds(base)
    params = ParameterInference(rec, _targets(), RANK, warm_start=WARM)
    value = ValueInference(params)
    top = PolicyEvaluation(value, POLICIES)
    agent = EpsilonGreedy(base, rank=RANK, epsilon=0.3, warm_start=100, seed=0)
    obs, _ = top.reset(seed=0)
    for _ in range(ROUNDS):
        d = agent.act(obs)
        nxt, r, *_ = top.step(d)
        agent.update(obs, d, r)
        obs = nxt
    path = rec.save(tmp_path / f"log{suffix}")
    live = {
        kind: [row for w in (params, value, top) for row in w.results(kind=kind)]
        for kind in ("fixed", "sequence")
    }
    return path, live


def _assert_same(live, replayed):
    assert [label for label, _ in replayed] == [label for label, _ in live]
    for (label, a), (_, b) in zip(live, replayed, strict=True):
        assert b.n_obs == a.n_obs == ROUNDS - WARM and b.method == a.method, label
        for f in FIELDS:
            x, y = getattr(a, f), getattr(b, f)
            assert np.isfinite(x), (label, f)
            np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-300, err_msg=f"{label} {f}")


@pytest.mark.parametrize(
    ("context", "observation", "suffix"),
    [
        ("gaussian", "matrix", ".npz"),
        ("completion", "index", ".npz"),
        ("completion", "index", ".parquet"),
    ],
)
def test_round_trip_gives_the_live_intervals(tmp_path, context, observation, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    path, live = _live_run(context, observation, tmp_path, suffix)
    result = analyze(path, _targets(), rank=RANK, warm_start=WARM, policies=POLICIES)
    labels = [label for label, _ in result.results]
    assert labels[:6] == ["<M_0, T>", "<M_1, T>", "<M_1 - M_0, T>", "<M_0, I>", "<M_1, I>"] + [
        "<M_1 - M_0, I>"
    ]
    assert labels[6:] == ["V*", "V(greedy)", "V(arm0)", "V(arm0) - V(greedy)"]
    _assert_same(live["fixed"], result.results)
    seq = [row for w in result.wrappers.values() for row in w.results(kind="sequence")]
    _assert_same(live["sequence"], seq)
    assert result.n_rounds == ROUNDS and result.n_obs == ROUNDS - WARM


@pytest.fixture(scope="module")
def gaussian_log(tmp_path_factory):
    path, live = _live_run("gaussian", "matrix", tmp_path_factory.mktemp("log"), ".npz")
    return load_log(path), path, live


def test_kind_sequence_and_the_result_views(gaussian_log):
    log, _, live = gaussian_log
    result = analyze(log, _targets(), rank=RANK, warm_start=WARM, kind="sequence")
    n = len(result.results)
    _assert_same(live["sequence"][:n], result.results)  # parameters and V*, no policies
    frame = result.to_frame()
    assert list(frame.columns) == [
        "quantity",
        *FIELDS,
        "n_obs",
        "method",
    ]
    assert frame["quantity"].tolist() == [label for label, _ in result.results]
    assert frame.loc[6, "estimate"] == result["V*"].estimate
    text = result.summary()
    assert "confidence sequences" in text and "<M_1 - M_0, I>" in text
    with pytest.raises(KeyError, match="no quantity"):
        result["V(nothing)"]


def test_propensity_alone_gives_the_parameter_intervals(gaussian_log):
    log, _, _ = gaussian_log
    pulled = analyze(
        log, _targets(), rank=RANK, warm_start=WARM, value=False, design_variance="pulled"
    )
    bare = {k: v for k, v in log.items() if k != "pmf"}
    alone = analyze(bare, _targets(), rank=RANK, warm_start=WARM, value=False)
    for (label, a), (_, b) in zip(pulled.results, alone.results, strict=True):
        assert a == b, label  # eq. (14)'s intervals read only pi_t(a_t)
    with pytest.raises(ValueError, match=r"V\* \(value=True\) need the logging policy's whole"):
        analyze(bare, _targets(), rank=RANK, warm_start=WARM)
    with pytest.raises(ValueError, match=r"target policies \(policies=\)"):
        analyze(bare, rank=RANK, warm_start=WARM, value=False, policies=POLICIES)


def _edited(log, column, row, value):
    out = {k: np.array(v, copy=True) for k, v in log.items()}
    out[column][row] = value
    return out


def test_a_bad_log_is_refused_before_any_round(gaussian_log):
    log, _, _ = gaussian_log
    asked = []

    def policy(obs):
        asked.append(1)
        return 0

    bad = _edited(log, "propensity", 1234, 0.0)
    with pytest.raises(LogFormatError, match="row 1234") as err:
        analyze(bad, _targets(), rank=RANK, warm_start=WARM, policies={"p": policy})
    assert err.value.column == "propensity" and not asked
    # A propensity the format allows but the wrappers refuse: refused up front as well.
    tiny = _edited(log, "pmf", 777, [1e-7, 1 - 1e-7])
    tiny["action"][777] = 0
    tiny["propensity"][777] = 1e-7
    with pytest.raises(LogFormatError, match="MIN_PROPENSITY") as err:
        analyze(tiny, _targets(), rank=RANK, warm_start=WARM, policies={"p": policy})
    assert err.value.row == 777 and not asked


def test_a_round_refused_during_the_replay_names_its_row(gaussian_log):
    log, _, _ = gaussian_log
    calls = []

    def flaky(obs):
        calls.append(1)
        return np.array([2.0, -1.0]) if len(calls) == 50 else 0

    with pytest.raises(
        ValueError, match=f"row {WARM + 49} of the log: the pmf of target policy 'flaky'"
    ):
        analyze(log, rank=RANK, warm_start=WARM, value=False, policies={"flaky": flaky})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 0}, "rank must be"),
        ({"rank": 1, "kind": "anytime"}, "kind must be"),
        ({"rank": 1, "confidence_level": 1.5}, "confidence_level"),
        ({"rank": 1, "value": False}, "nothing to estimate"),
        ({"rank": 1, "warm_start": ROUNDS}, "the warm start takes"),
    ],
)
def test_bad_options(gaussian_log, kwargs, match):
    log, _, _ = gaussian_log
    with pytest.raises(ValueError, match=match):
        analyze(log, **kwargs)


# ------------------------------------------------------------------------------ CLI
def test_cli_analyze(gaussian_log, tmp_path, capsys):
    log, path, _ = gaussian_log
    out = tmp_path / "out"
    argv = [
        "analyze",
        str(path),
        "--target",
        "T=entry:0,0",
        "--policy",
        "g=greedy",
        "--rank",
        str(RANK),
        "--warm-start",
        str(WARM),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    result = analyze(
        log, {"T": _targets()["T"]}, rank=RANK, warm_start=WARM, policies={"g": "greedy"}
    )
    assert result.summary() in printed
    with open(out / "analyze.csv") as fh:
        assert fh.readline().startswith("# written by lrbandit-gym")
        rows = list(csv.DictReader(fh))
    assert [r["quantity"] for r in rows] == [label for label, _ in result.results]
    assert float(rows[3]["low"]) == result["V*"].low
    with pytest.raises(SystemExit) as exit_:
        main(argv)  # the files are there: refused without --overwrite
    assert exit_.value.code == 2
    assert "argument --out" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "argument"),
    [
        (["--target", "T=diag"], "--target"),
        (["--target", "T=entry:8,0"], "--target"),
        (["--target", "T=eye", "--target", "T=eye"], "--target"),
        (["--target", "T=eye", "--policy", "p=arm:2"], "--policy"),
        (["--target", "T=eye", "--warm-start", str(ROUNDS)], "--warm-start"),
        (["--target", "T=eye", "--confidence-level", "95"], "--confidence-level"),
        (["--no-value"], "--target"),
    ],
)
def test_cli_usage_errors_name_the_argument(gaussian_log, capsys, extra, argument):
    _, path, _ = gaussian_log
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(path), "--rank", "1", *extra])
    assert exit_.value.code == 2
    assert f"argument {argument}" in capsys.readouterr().err


def test_cli_bad_log_files(gaussian_log, tmp_path, capsys):
    log, _, _ = gaussian_log
    bad = _edited(log, "pmf", 99, [0.9, 0.9])
    np.savez(tmp_path / "bad.npz", **bad)
    bare = {k: v for k, v in log.items() if k != "pmf"}
    save_log(bare, tmp_path / "bare.npz")
    cases = [
        (tmp_path / "missing.npz", "no such file"),
        (tmp_path / "bad.npz", "log column 'pmf', row 99"),
        (tmp_path / "bare.npz", "argument --no-value"),
    ]
    for path, message in cases:
        with pytest.raises(SystemExit) as exit_:
            main(["analyze", str(path), "--target", "T=eye", "--rank", "1"])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err
    argv = ["analyze", str(tmp_path / "bare.npz"), "--target", "T=eye", "--rank", "1"]
    assert main([*argv, "--warm-start", str(WARM), "--no-value", "--kind", "sequence"]) == 0
    assert "confidence sequences" in capsys.readouterr().out


def test_cli_policy_uniform_and_your_function(gaussian_log, tmp_path, monkeypatch, capsys):
    """Issue 34: ``--policy NAME=uniform`` and ``NAME=MODULE:FUNCTION`` (a module in the
    current folder) give the intervals of analyze with the same policies; a module that
    cannot be imported, a missing name or one that is not callable is a usage error naming
    ``--policy``."""
    log, path, _ = gaussian_log
    (tmp_path / "issue34_policies.py").write_text(
        "def first_entry(obs):\n    return int(obs[0, 0] > 0)\n\nNOT_CALLABLE = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "issue34_policies", raising=False)
    argv = ["analyze", str(path), "--rank", str(RANK), "--warm-start", str(WARM)]
    specs = ["--policy", "u=uniform", "--policy", "f=issue34_policies:first_entry"]
    assert main([*argv, *specs]) == 0
    printed = capsys.readouterr().out
    mine = sys.modules.pop("issue34_policies")
    K = int(log["n_actions"])
    policies = {"u": lambda obs: np.full(K, 1 / K), "f": mine.first_entry}
    result = analyze(log, rank=RANK, warm_start=WARM, policies=policies)
    assert result.summary() in printed
    for spec, message in [
        ("p=issue34_no_such_module:f", "cannot import module 'issue34_no_such_module'"),
        ("p=issue34_policies:missing", "has no 'missing'"),
        ("p=issue34_policies:NOT_CALLABLE", "not a function"),
        ("p=issue34_policies", "takes greedy, uniform, arm:A or MODULE:FUNCTION"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--policy", spec])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "argument --policy" in err and message in err
        sys.modules.pop("issue34_policies", None)
