"""Exploration-only baseline for parameter inference (Appendix B.1, the paper's Table 3).

What the paper says
-------------------
Appendix B.1 ("Comparison with Exploration-only Approach in Parameter Inference") compares
the proposed method with "a natural benchmark method where parameter inference relies on
exploration-only samples collected under the online decision-making policy", under
epsilon-greedy with ``epsilon = 0.1``, and reports the MSE of ``m_hat^(1)_T`` and the CI
length (Table 3: about twice the MSE and 1.3-1.4 times the CI length), plus histograms of
``sqrt(n) (m_hat - m) / (sigma_hat S_hat)``.  It gives no formula.

What we infer and implement
---------------------------
Under epsilon-greedy a round is an *exploration round* when the epsilon-coin came up
(probability ``epsilon_t``), and the action is then uniform over the ``K`` arms,
independently of ``X_t``.  Keeping only those rounds is the same estimator as
:class:`~inference.cores.linear_form.LinearFormInference` with the inverse-propensity weight of
the event actually used, ``P(explored_t, a_t = i | F_{t-1}, X_t) = epsilon_t / K``:

``M_tilde_{i,t} = M_hat_{i,t-1} + c 1{explored_t, a_t=i} K/epsilon_t (y_t - <M_hat, X_t>) X_t``,
``sigma_hat_i^2 = (1/n) sum_t 1{explored_t, a_t=i} K/epsilon_t res_t^2``,
``S_hat_i^2 = (1/n) sum_t 1{explored_t, a_t=i} (K/epsilon_t)^2 c^2 <G_t, X_t>^2``,

then the same rank-``r`` projection and ``se = sigma_hat S_hat / sqrt(n)``.  The correction
is still a martingale difference (unbiased for any predictable ``M_hat``), and with a
constant ``epsilon`` it is asymptotically the same as treating the ``n_e ~ epsilon n``
exploration rounds as a uniform-design sample (weight ``K``, ``sqrt(n_e)``).  Its variance
factor ``E[K/epsilon]`` versus the full method's ``E[1/pi_t(i)]`` (= 20 vs ~10.5 for
``K = 2``, ``epsilon = 0.1``, greedy arm split evenly) reproduces Table 3's ratios: MSE
x ~1.9, CI length x ~1.38.

The estimate ``M_hat`` is whatever factors the caller passes (the paper does not say
whether its benchmark's SGD also used only exploration rounds; feeding the same SGD as the
main method isolates the effect of the debiasing samples).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inference.cores.checks import check_batch_vector, check_factors, check_flags
from inference.cores.linear_form import LinearFormCore, check_estimate_scale
from inference.cores.linear_form_round import checked_contexts
from lrbandit_gym.input_checks import check_actions
from lrbandit_gym.rounds import Round

__all__ = ["ExplorationOnlyInference"]


class ExplorationOnlyInference(LinearFormCore):
    """Inference on ``<M_i, T>`` from the exploration rounds of epsilon-greedy only.

    Same constructor, read-out (:meth:`interval`, :meth:`difference`,
    :meth:`debiased_mean`, :meth:`projected`, :attr:`sigma2`, :attr:`S2`) and persistence
    as :class:`~inference.cores.linear_form.LinearFormInference`; :meth:`update` takes the
    exploration flag and ``epsilon_t`` instead of the propensities.  See the module
    docstring for how the baseline is built from the paper's description.

    Parameters
    ----------
    d1, d2, rank, n_actions, targets, context, projection, point_estimate, n_trials
        As for :class:`~inference.cores.linear_form.LinearFormInference`.
    """

    state_kind = "exploration_only"
    pull_kind = " in an exploration round"
    pull_noun = "exploration pull"
    method_name = "exploration-only debiased low-rank estimate (Table 3 baseline)"
    all_rounds_design = False  # its weight is the exploration rounds', not 1/π_t(i)

    def update(
        self,
        U: Any,
        V: Any,
        X: Any,
        action: Any,
        reward: Any,
        explored: Any,
        epsilon: Any,
    ) -> None:
        """Absorb round ``t``; only exploration rounds enter the correction.

        Parameters
        ----------
        U, V : array_like
            Factors of the estimates before round ``t``'s update, shapes ``(K, d1, r)``,
            ``(K, d2, r)`` (batched: leading ``B``).
        X : array_like of shape (d1, d2) or (B, d1, d2)
            With ``context="completion"`` also its index ``[j, k]`` (shape (2,) or (B, 2)).
        action : int or array_like of int of shape (B,)
        reward : float or array_like of shape (B,)
        explored : bool or array_like of bool of shape (B,)
            Whether round ``t``'s action was drawn by the exploration coin (uniform over
            the ``K`` arms).
        epsilon : float or array_like of shape (B,)
            Exploration probability ``epsilon_t`` in ``(0, 1]`` (a scalar is used for every
            trial).

        Raises
        ------
        ValueError
            On any malformed input; the object is then unchanged.
        """
        Ub, Vb = check_factors(U, V, self.n_actions, self.d1, self.d2, self.rank, self.n_trials)
        check_estimate_scale(Ub, Vb, self.batched)
        Xb = checked_contexts(self, X)
        a = check_actions(action, self.n_actions, self.n_trials)
        y = check_batch_vector(reward, self.n_trials, "reward")
        flags = check_flags(explored, self.n_trials, "explored")
        if self.batched and np.ndim(epsilon) == 0 and not isinstance(epsilon, bool | np.bool_):
            try:
                epsilon = np.full(self.n_trials, float(epsilon))
            except (TypeError, ValueError):
                pass  # reported by the check below
        eps = check_batch_vector(epsilon, self.n_trials, "epsilon")
        bad = ~((eps > 0) & (eps <= 1))
        if bad.any():
            i = int(np.argmax(bad))
            where = f" (trial {i})" if self.batched else ""
            raise ValueError(f"epsilon must be in (0, 1], got {eps[i]!r}{where}")
        weight = np.where(flags, self.n_actions / eps, 0.0)
        round_ = Round(Xb, a, y, None)
        self.commit(self.propose(round_, self.estimate_parts(Ub, Vb, a), weight))
        # The SGD behind the estimate absorbs every round, explored or not: the pulls of
        # the remainder's N_i (inference.cores.remainder) count the unexplored ones too.
        s = self.state
        s.unweighted_pulls[s.trials, a] += ~flags
