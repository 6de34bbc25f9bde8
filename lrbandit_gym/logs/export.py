"""Exports of a bandit log to the formats other tools read: Open Bandit Pipeline and Vowpal
Wabbit.

A *log* is the mapping of names to numpy arrays that :mod:`lrbandit_gym.logs.format`
defines (docs/logs.md; a dict, or what ``np.load`` returns for an ``.npz``): ``action``,
``reward``, ``propensity`` (the chosen arm's probability), exactly one of ``context``
(``(n, d1, d2)``) or ``context_index`` (the revealed entry ``[j, k]`` of a completion context),
optionally ``pmf``, the metadata and the ``oracle_*`` columns.  Both exports validate it with
:func:`~lrbandit_gym.logs.format.validate_log` first, so they refuse what an analysis refuses.

:func:`to_obp` builds Open Bandit Pipeline's ``bandit_feedback`` dict and :func:`to_vw` writes
Vowpal Wabbit's contextual-bandit text format.  Neither tool is imported: the formats are
plain dicts of arrays and plain text.
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


def to_obp(log: Mapping[str, Any], *, index_context: str = "one-hot") -> dict[str, Any]:
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
    ==================  ======================================================================

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

    Raises
    ------
    ValueError
        For a log that breaks the format (naming the field and the row) or an unknown
        ``index_context``.
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
    return out


def _number(value: float) -> str:
    """The shortest text that reads back as the same float64 (VW parses it as a float)."""
    return repr(float(value))


def to_vw(log: Mapping[str, Any], file: str | os.PathLike | io.TextIOBase) -> int:
    """Write a log in Vowpal Wabbit's contextual-bandit text format; returns the line count.

    One line per round, ``action:cost:probability | features``, the label of VW's ``--cb``
    reduction (VW wiki, "Logged Contextual Bandit Example"; features as in "Input format"):

    - ``action``: the chosen arm plus 1, since VW numbers actions ``1 … K``;
    - ``cost``: minus the reward, since VW minimises cost (lower is better) where the log's
      rewards are maximised;
    - ``probability``: the log's ``propensity``, the logging policy's probability of the
      chosen arm;
    - ``features``: ``x_j_k:value`` for every non-zero entry ``(j, k)`` of the context in
      the default namespace (a feature left out is zero in VW); a completion context is the
      single feature ``x_j_k:1.0``.

    Numbers are written in the shortest form that reads back as the same float64.  Train
    with ``vw --cb K`` (the number of arms) on the file.

    Parameters
    ----------
    log : mapping of str to array
        The log (module docstring).
    file : path or text file
        Where to write; a path is created or replaced through a temporary file renamed over
        it (a failed export leaves the old file as it was), an open file is written at its
        position.

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

    def lines():
        for t in range(f["n"]):
            label = (
                f"{f['action'][t] + 1}:{_number(0.0 - f['reward'][t])}:"
                f"{_number(f['propensity'][t])}"
            )
            feats = features(t)
            yield f"{label} | {feats}\n" if feats else f"{label} |\n"

    if isinstance(file, str | os.PathLike):
        with atomic_file(file, "w", encoding="ascii", newline=None) as handle:
            handle.writelines(lines())
    else:
        file.writelines(lines())
    return f["n"]
