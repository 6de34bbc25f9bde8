"""Exports of a bandit log to the formats other tools read: Open Bandit Pipeline and Vowpal
Wabbit.

A *log* is the mapping of names to numpy arrays that :mod:`lrbandit_gym.logs.format`
defines (docs/logs.md; a dict, or what ``np.load`` returns for an ``.npz``): ``action``,
``reward``, ``propensity`` (the chosen arm's probability), exactly one of ``context``
(``(n, d1, d2)``) or ``context_index`` (the revealed entry ``[j, k]`` of a completion context),
optionally ``pmf``, the metadata and the ``oracle_*`` columns.  Both exports validate it with
:func:`~lrbandit_gym.logs.format.validate_log` first, so they refuse what an analysis refuses.

:func:`to_obp` builds Open Bandit Pipeline's ``bandit_feedback`` dict (with, given an estimate
of the arms' parameters, the reward model that its direct and doubly robust estimators take)
and :func:`to_vw` writes Vowpal Wabbit's contextual-bandit text format, one line per round
for ``--cb`` or multiline for the ADF reductions (``--cb_adf``, ``--cb_explore_adf``).
Neither tool is imported: the formats are plain dicts of arrays and plain text.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from lrbandit_gym.files import atomic_file
from lrbandit_gym.logs.format import log_sizes, validate_log

__all__ = ["INDEX_CONTEXTS", "to_obp", "to_vw"]

#: How :func:`to_obp` writes completion contexts given by their index: ``"one-hot"``, the
#: row-major flattening of ``e_j e_kᵀ`` (the same layout as a dense context's), or
#: ``"index"``, the pair ``[j, k]`` itself.
INDEX_CONTEXTS = ("one-hot", "index")


def _read(log: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the exports read, after the log format's own validation
    (:func:`~lrbandit_gym.logs.format.validate_log`: shapes, dtypes, ranges, the pmf against
    the propensity, errors naming the column and the first bad row)."""
    if not isinstance(log, Mapping):
        raise ValueError(
            f"log must be a mapping of names to arrays (a dict, or np.load of an .npz); got "
            f"{type(log).__name__}"
        )
    valid = validate_log(log)
    sizes = log_sizes(valid)
    out: dict[str, Any] = {
        "n": int(valid["action"].shape[0]),
        "d1": sizes["d1"],
        "d2": sizes["d2"],
        "n_actions": sizes["n_actions"],
        "action": np.asarray(valid["action"], dtype=np.int64),
        "reward": np.asarray(valid["reward"], dtype=np.float64),
        "propensity": np.asarray(valid["propensity"], dtype=np.float64),
    }
    if "context" in valid:
        out["context"] = np.asarray(valid["context"])
    else:
        out["context_index"] = np.asarray(valid["context_index"], dtype=np.int64)
    for name in ("pmf", "oracle_expected_rewards"):
        if name in valid:
            col = np.asarray(valid[name], dtype=np.float64)
            if col.shape != (out["n"], out["n_actions"]):
                raise ValueError(
                    f"log[{name!r}] must have shape ({out['n']}, {out['n_actions']}); got "
                    f"{col.shape}"
                )
            out[name] = col
    return out


def _estimated_rewards(f: Mapping[str, Any], estimates: Any) -> np.ndarray:
    """``<M_hat_a, X_t>`` for every round and arm, ``(n, K)``, of an estimate ``(K, d1, d2)``
    of the log's sizes; ValueError for another shape or a value that is not finite."""
    shape = (f["n_actions"], f["d1"], f["d2"])
    try:
        m_hat = np.asarray(estimates, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"estimates must be a real array of shape (K, d1, d2) = {shape}; got "
            f"{type(estimates).__name__}"
        ) from None
    if m_hat.shape != shape:
        raise ValueError(f"estimates must have shape (K, d1, d2) = {shape}; got {m_hat.shape}")
    if not np.isfinite(m_hat).all():
        raise ValueError("estimates must be finite")
    if "context" in f:
        return np.einsum("nij,aij->na", f["context"], m_hat, dtype=np.float64)
    idx = f["context_index"]
    return m_hat[:, idx[:, 0], idx[:, 1]].T.copy()


def to_obp(
    log: Mapping[str, Any], *, index_context: str = "one-hot", estimates: Any = None
) -> dict[str, Any]:
    """Open Bandit Pipeline's logged ``bandit_feedback`` dict of a log.

    The keys and layouts are OBP's own, as its ``SyntheticBanditDataset``
    (``obp/dataset/synthetic.py``), ``OpenBanditDataset`` (``obp/dataset/real.py``) and
    ``check_bandit_feedback_inputs`` / ``check_ope_inputs`` (``obp/utils.py``) build and check
    them (st-tech/zr-obp):

    ==================  ======================================================================
    ``n_rounds``        int, the number of rounds ``n``
    ``n_actions``       int, the number of arms ``K``
    ``action``          int64 ``(n,)``, in ``[0, K)``
    ``position``        int64 zeros ``(n,)``: one recommendation slot (OBP: non-negative ints)
    ``reward``          float64 ``(n,)``
    ``pscore``          float64 ``(n,)``, the logging propensity of the chosen arm (> 0)
    ``context``         float64 ``(n, d1·d2)``, the contexts flattened row-major (OBP wants 2-d)
    ``action_context``  int ``(K, K)`` identity: one-hot arms, as ``SyntheticBanditDataset``
    ``expected_reward`` float64 ``(n, K)``, ``E[r | x_t, a]`` for every arm (only with the
                        log's ``oracle_expected_rewards``)
    ``pi_b``            float64 ``(n, K, 1)``, the logging pmf with OBP's list axis of length 1
                        (only with the log's ``pmf``)
    ``estimated_rewards_by_reg_model``
                        float64 ``(n, K, 1)``, ``<M_hat_a, X_t>`` for every round and arm,
                        OBP's layout of a reward model (only with ``estimates``)
    ==================  ======================================================================

    OBP's ``RegressionModel`` fits a reward model on the context concatenated with the arm's
    one-hot ``action_context``: with a linear base model its rewards are additive in the arm
    (one slope for every arm), which misfits arms whose parameters differ, as here.  Pass
    ``estimates`` (say an agent's ``estimates``) for a reward model of this bandit's form,
    and give ``feedback["estimated_rewards_by_reg_model"]`` to OBP's
    ``OffPolicyEvaluation.estimate_policy_values`` for its direct and doubly robust
    estimators.

    Parameters
    ----------
    log : mapping of str to array
        The log (module docstring).
    index_context : {"one-hot", "index"}, default "one-hot"
        For a log of completion contexts (``context_index``): ``"one-hot"`` writes
        ``context`` as the flattened ``e_j e_kᵀ`` (a 1 in column ``j·d2 + k``; ``n·d1·d2``
        floats, the layout of a dense log), ``"index"`` as the int64 pair ``[j, k]``,
        ``(n, 2)`` (memory ``16 n`` bytes; an OBP regression model then sees two integer
        features, not the entry).  Ignored for dense logs.
    estimates : array of shape (K, d1, d2), optional
        An estimate ``M_hat`` of every arm's parameter; with it the dict holds
        ``estimated_rewards_by_reg_model[t, a, 0] = <M_hat_a, X_t>`` (for a completion
        context, the entry ``M_hat_a[j, k]``).

    Raises
    ------
    ValueError
        For a log that breaks the format (naming the field and the row), an unknown
        ``index_context``, or ``estimates`` of another shape than ``(K, d1, d2)`` or not
        finite.
    """
    if index_context not in INDEX_CONTEXTS:
        raise ValueError(f"index_context must be one of {INDEX_CONTEXTS}; got {index_context!r}")
    f = _read(log)
    n, K = f["n"], f["n_actions"]
    if "context" in f:
        context = f["context"].reshape(n, -1).astype(np.float64)
    elif index_context == "index":
        context = f["context_index"].copy()
    else:
        context = np.zeros((n, f["d1"] * f["d2"]))
        idx = f["context_index"]
        context[np.arange(n), idx[:, 0] * f["d2"] + idx[:, 1]] = 1.0
    out: dict[str, Any] = {
        "n_rounds": n,
        "n_actions": K,
        "action": f["action"],
        "position": np.zeros(n, dtype=np.int64),
        "reward": f["reward"],
        "pscore": f["propensity"],
        "context": context,
        "action_context": np.eye(K, dtype=int),
    }
    if "oracle_expected_rewards" in f:
        out["expected_reward"] = f["oracle_expected_rewards"]
    if "pmf" in f:
        out["pi_b"] = f["pmf"][:, :, None]
    if estimates is not None:
        out["estimated_rewards_by_reg_model"] = _estimated_rewards(f, estimates)[:, :, None]
    return out


def _number(value: float) -> str:
    """The shortest text that reads back as the same float64 (VW parses it as a float)."""
    return repr(float(value))


def to_vw(
    log: Mapping[str, Any], file: str | os.PathLike | io.TextIOBase, *, adf: bool = False
) -> int:
    """Write a log in Vowpal Wabbit's contextual-bandit text format; returns the number of
    rounds written (one example each).

    With ``adf=False``, one line per round, ``action:cost:probability | features``, the label
    of VW's ``--cb`` reduction (VW wiki, "Logged Contextual Bandit Example"; features as in
    "Input format"):

    - ``action``: the chosen arm plus 1, since VW numbers actions ``1 … K``;
    - ``cost``: minus the reward, since VW minimises cost (lower is better) where the log's
      rewards are maximised;
    - ``probability``: the log's ``propensity``, the logging policy's probability of the
      chosen arm;
    - ``features``: ``x_j_k:value`` for every non-zero entry ``(j, k)`` of the context in
      the default namespace (a feature left out is zero in VW); a completion context is the
      single feature ``x_j_k:1.0``.

    Train with ``vw --cb K`` (the number of arms) on the file.

    With ``adf=True``, the multiline format of the action-dependent-features reductions
    (``--cb_adf``, ``--cb_explore_adf``; VW wiki, "Contextual Bandit algorithms", the ADF
    input format), one example per round: a shared line ``shared |x features`` with the
    context's features in the namespace ``x``, then one line per arm ``a`` in order,
    ``|a arm_a`` (the arm's indicator in the namespace ``a``), the chosen arm's line
    labelled ``0:cost:probability`` (cost and probability as above), and a blank line that
    ends the example.  A model of this bandit's form, a linear function of the context per
    arm, needs the products of the two namespaces: train with
    ``vw --cb_explore_adf -q xa`` (or ``--cb_adf -q xa``).

    Numbers are written in the shortest form that reads back as the same float64.

    Parameters
    ----------
    log : mapping of str to array
        The log (module docstring).
    file : path or text file
        Where to write; a path is created or replaced through a temporary file renamed over
        it (a failed export leaves the old file as it was), an open file is written at its
        position.
    adf : bool, default False
        The multiline ADF format instead of one line per round.

    Raises
    ------
    ValueError
        For a log that breaks the format, naming the field and the row.
    """
    f = _read(log)
    d2 = f["d2"]
    names = [f"x_{j}_{k}" for j in range(f["d1"]) for k in range(d2)]
    if "context" in f:
        flat = f["context"].reshape(f["n"], -1)

        def features(t: int) -> str:
            (cols,) = np.nonzero(flat[t])
            return " ".join(f"{names[c]}:{_number(flat[t, c])}" for c in cols)
    else:
        idx = f["context_index"]

        def features(t: int) -> str:
            return f"{names[idx[t, 0] * d2 + idx[t, 1]]}:1.0"

    def label(t: int, action: int) -> str:
        return f"{action}:{_number(0.0 - f['reward'][t])}:{_number(f['propensity'][t])}"

    def lines():
        for t in range(f["n"]):
            head, feats = label(t, f["action"][t] + 1), features(t)
            yield f"{head} | {feats}\n" if feats else f"{head} |\n"

    def adf_lines():
        for t in range(f["n"]):
            feats = features(t)
            yield f"shared |x {feats}\n" if feats else "shared |x\n"
            chosen = f["action"][t]
            for a in range(f["n_actions"]):
                yield f"{label(t, 0)} |a arm_{a}\n" if a == chosen else f"|a arm_{a}\n"
            yield "\n"

    text = adf_lines() if adf else lines()
    if isinstance(file, str | os.PathLike):
        with atomic_file(file, "w", encoding="ascii", newline=None) as handle:
            handle.writelines(text)
    else:
        file.writelines(text)
    return f["n"]
