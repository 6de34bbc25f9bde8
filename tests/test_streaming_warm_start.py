"""Tests of the streaming warm start (agents.warm_start.streaming) and of the policies'
choice between it and the buffered fit."""

from __future__ import annotations

import numpy as np
import pytest

from agents import EpsilonGreedy
from agents.warm_start import warm_start_buffer_bytes
from agents.warm_start.streaming import (
    StreamingWarmStart,
    choose_warm_start_fit,
    streaming_warm_start_bytes,
)
from lrbandit_gym.rounds import Round


def _truth(rng, d1, d2, r, K):
    return np.stack(
        [
            np.linalg.qr(rng.standard_normal((d1, r)))[0]
            @ np.linalg.qr(rng.standard_normal((d2, r)))[0].T
            for _ in range(K)
        ]
    )


def _stream(ws, truth, n, rng, sigma=0.1):
    B = 1 if ws.n_trials is None else ws.n_trials
    K, d1, d2 = truth.shape
    for _ in range(n):
        X = rng.standard_normal((B, d1, d2))
        a = rng.integers(0, K, B)
        y = np.einsum("bij,bij->b", truth[a], X) + sigma * rng.standard_normal(B)
        ws.add_round(Round(X, a, y, None))


def _trunc_error(M, truth, r):
    u, s, vt = np.linalg.svd(M, full_matrices=False)
    return np.linalg.norm((u[..., :r] * s[..., None, :r]) @ vt[..., :r, :] - truth, axis=(-2, -1))


def test_memory_does_not_grow_with_the_length():
    short = StreamingWarmStart(30, 20, 2, 10, 3, n_trials=4)
    long = StreamingWarmStart(30, 20, 2, 10**7, 3, n_trials=4)
    assert short.nbytes == long.nbytes == streaming_warm_start_bytes(30, 20, 2, 3, 4)
    held = sum(getattr(long, name).nbytes for name in ("_S", "_T", "_W", "_Y2", "_U", "_V", "_sv"))
    assert held <= long.nbytes
    # the buffer for the same 10^7 rounds would be 10^5 times larger
    assert warm_start_buffer_bytes(30, 20, 10**7, 4) > 10**5 * long.nbytes


def test_refinement_reaches_the_noise_level():
    # d = 10, r = 2, K = 2 (72 degrees of freedom), 4000 rounds: the refined, averaged
    # estimate is within about the noise level; the moments alone are an order of magnitude
    # further (a fit without the refinement fails the first bound).
    rng = np.random.default_rng(0)
    truth = _truth(rng, 10, 8, 2, 2)
    ws = StreamingWarmStart(10, 8, 2, 4000, 2)
    _stream(ws, truth, 4000, rng)
    err = _trunc_error(ws.initial_estimate(rank=2), truth, 2)
    assert (err < 0.1).all(), err
    moments = np.where(ws._W[0, :, None, None] > 0, ws._S[0] / ws._W[0, :, None, None], 0)
    assert (_trunc_error(moments, truth, 2) > 3 * err).all()


def test_spectral_start_only_when_the_stream_ends_early():
    rng = np.random.default_rng(1)
    truth = _truth(rng, 8, 6, 1, 2)
    ws = StreamingWarmStart(8, 6, 2, 1000, 1)
    _stream(ws, truth, ws.spectral_rounds, rng)  # only moments so far
    M = ws.initial_estimate(rank=1)
    assert M.shape == (2, 8, 6) and np.linalg.matrix_rank(M[0]) == 1


def test_batched_equals_trials_one_by_one():
    rng = np.random.default_rng(2)
    truth = _truth(rng, 7, 5, 2, 2)
    n, B = 300, 3
    X = rng.standard_normal((n, B, 7, 5))
    a = rng.integers(0, 2, (n, B))
    y = np.einsum("nbij,nbij->nb", truth[a], X) + 0.1 * rng.standard_normal((n, B))
    batched = StreamingWarmStart(7, 5, 2, n, 2, n_trials=B)
    for t in range(n):
        batched.add_round(Round(X[t], a[t], y[t], None))
    for b in range(B):
        one = StreamingWarmStart(7, 5, 2, n, 2)
        for t in range(n):
            one.add(X[t, b], int(a[t, b]), float(y[t, b]))
        np.testing.assert_allclose(
            one.initial_estimate(rank=2), batched.initial_estimate(rank=2)[b], atol=1e-12
        )


def test_discard_last_and_state_round_trip():
    rng = np.random.default_rng(3)
    truth = _truth(rng, 6, 5, 2, 2)
    ws = StreamingWarmStart(6, 5, 2, 50, 2, n_trials=2)
    _stream(ws, truth, 49, rng)
    before = ws.state_dict()
    with pytest.raises(RuntimeError, match="completed"):
        ws.discard_last()  # the 49th round did not complete it
    _stream(ws, truth, 1, rng)
    assert ws.full
    ws.discard_last()
    after = ws.state_dict()
    assert after.keys() == before.keys()
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])
    # a restored copy continues exactly as the original
    copy = StreamingWarmStart(6, 5, 2, 50, 2, n_trials=2)
    copy.load_state_dict(before)
    r1, r2 = np.random.default_rng(9), np.random.default_rng(9)
    _stream(ws, truth, 1, r1)
    _stream(copy, truth, 1, r2)
    np.testing.assert_array_equal(ws.initial_estimate(rank=2), copy.initial_estimate(rank=2))
    bad = dict(before, U=before["U"][..., :1])
    with pytest.raises(ValueError, match="state\\['U'\\] must have shape"):
        copy.load_state_dict(bad)


def test_rejects_weights_and_wrong_rank():
    ws = StreamingWarmStart(4, 3, 2, 5, 1)
    with pytest.raises(ValueError, match="unit weights"):
        ws.add(np.ones((4, 3)), 0, 1.0, weight=2.0)
    assert ws.n == 0
    ws.add(np.ones((4, 3)), 0, 1.0)
    with pytest.raises(ValueError, match="rank must be this warm start's rank = 1, got 2"):
        ws.initial_estimate(rank=2)


def test_choice_rule():
    common = dict(d1=500, d2=500, n_trials=None, max_memory_bytes=2**31)
    # the buffer of 20,000 rounds at d = 500 (20 GB) does not fit: streaming
    assert choose_warm_start_fit(None, context="gaussian", rounds=20_000, **common) == "streaming"
    # the paper's 2000 rounds at d = 50 fit: the buffer, the better fit
    small = dict(common, d1=50, d2=50)
    assert choose_warm_start_fit(None, context="gaussian", rounds=2000, **small) == "buffer"
    assert choose_warm_start_fit("streaming", context="gaussian", rounds=2000, **small) == (
        "streaming"
    )
    assert choose_warm_start_fit(None, context="completion", rounds=10**6, **common) == "buffer"
    with pytest.raises(ValueError, match="warm_start_fit must be one of"):
        choose_warm_start_fit("online", context="gaussian", rounds=10, **small)
    with pytest.raises(ValueError, match="streaming' is for Gaussian contexts"):
        choose_warm_start_fit("streaming", context="completion", rounds=10, **small)


def test_policy_uses_the_streaming_fit_when_the_buffer_does_not_fit():
    rng = np.random.default_rng(4)
    truth = _truth(rng, 10, 8, 2, 2)
    kw = dict(d1=10, d2=8, n_actions=2, rank=2, warm_start=3000, seed=0)
    # the buffer would need 3000 * (80 * 4 + 24) bytes; 64 kB does not hold it
    with pytest.warns(UserWarning, match="using the streaming fit"):
        agent = EpsilonGreedy(max_memory_bytes=2**16, **kw)
    assert agent.warm_start_fit == "streaming"
    assert EpsilonGreedy(**kw).warm_start_fit == "buffer"
    # without warm_start=: the buffered default (3.5 rounds per dof) fits at d = 50; at
    # d = 500 it would not (21 GB), and the streaming fit plays 10 rounds per dof instead
    paper = EpsilonGreedy(d1=50, d2=50, n_actions=2, rank=3)
    assert (paper.warm_start_fit, paper.warm_start_rounds) == ("buffer", 2100)
    with pytest.warns(UserWarning, match="using the streaming fit"):
        large = EpsilonGreedy(d1=500, d2=500, n_actions=2, rank=3)
    assert (large.warm_start_fit, large.warm_start_rounds) == ("streaming", 59_900)
    with pytest.raises(ValueError, match="warm_start_fit must be one of .*got 'fast'"):
        EpsilonGreedy(warm_start_fit="fast", **kw)
    for _ in range(3000):
        X = rng.standard_normal((10, 8))
        decision = agent.act(X)
        y = float(np.sum(truth[decision.action] * X)) + 0.1 * rng.standard_normal()
        agent.update(X, decision, y)
    assert not agent.in_warm_start
    assert (_trunc_error(agent.estimates, truth, 2) < 0.15).all()


def test_bench_warm_start_run_smoke():
    from lrbandit_gym.experiments.bench.warm_start import warm_start_run

    out = warm_start_run(8, 300, 50, rank=2, warm_start_fit="streaming", seed=0)
    assert out["fit"] == "streaming" and not out["diverged"]
    assert 0 < out["peak_bytes"] < 2**24
    assert len(out["init_error"]) == len(out["final_error"]) == 2
