"""What a context law costs a round of parameter inference (``lrbandit bench laws``).

One single-env :class:`~inference.ParameterInference` (two targets, sharing an ε-greedy
agent's estimator) is timed per step under the paper's law (``Σ = I``), a known Kronecker
law (``KroneckerLaw``: whitening ``R⁻¹ X C⁻¹``) and the Kronecker law estimated from the
contexts, each against the bare environment step; and the memory the estimated law holds.
"""

from __future__ import annotations

import numpy as np

from lrbandit_gym.experiments.bench.run import best_times

__all__ = ["bench_laws"]


def bench_laws(d: int = 50, seed: int = 0) -> dict:
    """Per-step cost of the parameter wrapper under three laws at ``d1 = d2 = d``.

    Returns
    -------
    dict
        ``d``; per law (``identity``, ``kronecker``, ``estimated``) the wrapper's cost per
        step in seconds (wrapped step minus bare step) and ``ratio`` to the identity's;
        ``estimated_bytes``: the running estimate's arrays (one trial).
    """
    import gymnasium as gym

    from agents import EpsilonGreedy
    from inference import ParameterInference
    from lrbandit_gym.context_law import KroneckerLaw, ar1_correlation
    from lrbandit_gym.experiments.studies import paper_targets

    targets = paper_targets(d, d)
    laws = {
        "identity": None,
        "kronecker": KroneckerLaw(ar1_correlation(d, 0.5), ar1_correlation(d, 0.5)),
        "estimated": "estimated-kronecker",
    }
    out: dict = {"d": d}
    for name, law in laws.items():
        env = gym.make("MatrixContextBandit-v0", d1=d, d2=d, max_episode_steps=None)
        truth = env.unwrapped.true_params
        init = truth + 0.01 * np.random.default_rng(0).standard_normal(truth.shape)
        agent = EpsilonGreedy(env, rank=env.unwrapped.rank, epsilon=0.1, M_init=init, seed=0)
        wrapped = ParameterInference(
            env, targets, estimator=agent.estimator, context_law=law, check_contexts=True
        )
        obs, _ = wrapped.reset(seed=seed)
        if name == "estimated":  # a warm start's worth of contexts first
            rng = np.random.default_rng(seed)
            for _ in range(200):
                wrapped.core.observe_context(rng.standard_normal((1, d, d)))
        decision = agent.act(obs)
        fns = {
            "bare": lambda env=env, decision=decision: env.step(decision),
            "wrapped": lambda w=wrapped, decision=decision: w.step(decision),
        }
        t = best_times(fns, number=300)
        out[name] = t["wrapped"] - t["bare"]
        if name == "estimated":
            state = wrapped.core.state_dict()
            out["estimated_bytes"] = sum(
                v.nbytes for k, v in state.items() if k.startswith("law_") and hasattr(v, "nbytes")
            )
    for name in laws:
        out[f"{name}_ratio"] = out[name] / out["identity"]
    return out
