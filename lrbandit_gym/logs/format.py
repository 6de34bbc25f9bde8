"""The log format of logged bandit feedback: its columns, its validation, and its files.

A *log* is a mapping of names to numpy arrays, one row per round ``t`` (docs/logs.md):

============================== ================ ==================================================
column                         dtype, shape     meaning
============================== ================ ==================================================
``context``                    float (n, d1, d2) the context ``X_t`` acted on (float32 allowed)
``context_index``              int64 (n, 2)      or, for completion contexts, its entry ``(j, k)``
``action``                     int64 (n,)        the arm played, in ``[0, n_actions)``
``reward``                     float64 (n,)      the reward observed
``propensity``                 float64 (n,)      ``π_t(a_t)``, the chosen arm's probability, (0, 1]
``pmf``                        float64 (n, K)    optional: the logging policy's whole pmf
``oracle_*``                   any (n, ...)      simulator-only truth (never read by analysis)
``d1``, ``d2``, ``n_actions``  0-d int           the sizes
``context_law``                0-d str           one of :data:`CONTEXT_LAWS` (below)
``format_version``             0-d int           1
``context_row_cov`` …          float (d, d), …   the law's arrays, for a law given by them
============================== ================ ==================================================

``context_law`` says what the debiasing divides by (:mod:`lrbandit_gym.context_law`,
docs/method.md §1): ``"gaussian"`` (i.i.d. N(0, 1) entries), ``"completion"`` (one entry
revealed uniformly), ``"estimated"`` (any dense law, estimated from the contexts at analysis),
``"kronecker"`` (``context_row_cov`` (d1, d1), ``context_col_cov`` (d2, d2), optional
``context_mean`` (d1, d2)), ``"second_moment"`` (``context_second_moment``
(d1·d2, d1·d2)) or ``"entries"`` (completion contexts revealed with the frequencies
``context_entry_probs`` (d1, d2)).  The law's arrays are not per-round columns.

Exactly one of ``context`` and ``context_index`` is present.  Other columns may be added
(kept and saved, checked for their length and for a dtype both files keep: booleans,
integers, floats or text, and as a 0-d scalar no bytes); the names above are never
renamed.

:func:`validate_log` checks a whole log before anything reads it, and its errors
(:class:`LogFormatError`) name the column and, for a bad value, the first bad row.
:func:`save_log` writes ``.npz`` (loadable with ``allow_pickle=False``) or, with pyarrow
installed, ``.parquet``, atomically; :func:`load_log` reads either and validates it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lrbandit_gym.context_law import law_from_arrays
from lrbandit_gym.files import atomic_file, read_npz, write_npz
from lrbandit_gym.input_checks import MAX_MAGNITUDE, PROPENSITY_TOL

__all__ = [
    "CONTEXT_COLUMNS",
    "COMPLETION_LAWS",
    "CONTEXT_LAWS",
    "LAW_ARRAYS",
    "FORMAT_VERSION",
    "METADATA",
    "ORACLE_PREFIX",
    "PMF_TOL",
    "REQUIRED_COLUMNS",
    "LogFormatError",
    "load_log",
    "log_sizes",
    "save_log",
    "validate_log",
]

#: Version of the format written by this package (the ``format_version`` entry).
FORMAT_VERSION = 1
#: The two forms of the context column; a log holds exactly one.
CONTEXT_COLUMNS = ("context", "context_index")
#: Columns every log holds (besides one of :data:`CONTEXT_COLUMNS`).
REQUIRED_COLUMNS = ("action", "reward", "propensity")
#: Scalars stored as 0-d arrays.
METADATA = ("d1", "d2", "n_actions", "context_law", "format_version")
#: The context laws (module docstring).
CONTEXT_LAWS = ("gaussian", "completion", "estimated", "kronecker", "second_moment", "entries")
#: The laws of one revealed entry ``e_j e_kᵀ`` (stored as ``context_index`` or one-hot).
COMPLETION_LAWS = ("completion", "entries")
#: The arrays each law given by arrays needs (``context_mean`` is optional for kronecker).
LAW_ARRAYS = {
    "kronecker": ("context_row_cov", "context_col_cov"),
    "second_moment": ("context_second_moment",),
    "entries": ("context_entry_probs",),
}
_OPTIONAL_LAW_ARRAYS = ("context_mean",)
_ALL_LAW_ARRAYS = (*(k for keys in LAW_ARRAYS.values() for k in keys), *_OPTIONAL_LAW_ARRAYS)
#: Prefix of the simulator's oracle columns, kept apart from what an analyst would see.
ORACLE_PREFIX = "oracle_"
#: Absolute tolerance on a pmf row's sum and on ``pmf[t, action[t]] == propensity[t]``.
PMF_TOL = PROPENSITY_TOL

# Rows checked at once in the passes over the context (bounds the temporary memory).
_CHUNK_ROWS = 1024
# The schema metadata key of a Parquet log.
_PARQUET_KEY = b"lrbandit_log"


class LogFormatError(ValueError):
    """A log that does not follow the format; ``column`` and ``row`` say where.

    ``row`` is the first bad round (0-based) or None when the column as a whole is wrong
    (missing, wrong shape or dtype); ``column`` is None when the file itself cannot be read
    as a log (not an archive, corrupt, crafted metadata).
    """

    def __init__(self, column: str | None, message: str, row: int | None = None) -> None:
        self.column = column
        self.row = row
        where = "log file" if column is None else f"log column {column!r}"
        where += "" if row is None else f", row {row}"
        super().__init__(f"{where}: {message}")


# ----------------------------------------------------------------------------- checks
def _scalar(log: Mapping[str, Any], name: str) -> Any:
    if name not in log:
        raise LogFormatError(name, f"missing: a log stores {', '.join(METADATA)} as scalars")
    arr = np.asarray(log[name])
    if arr.shape not in ((), (1,)):
        raise LogFormatError(name, f"must be a scalar (0-d array); got shape {arr.shape}")
    return arr.reshape(()).item()


def _positive_int(log: Mapping[str, Any], name: str, minimum: int) -> int:
    value = _scalar(log, name)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise LogFormatError(name, f"must be an integer >= {minimum}; got {value!r}")
    return int(value)


def log_sizes(log: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of ``log`` as Python values, each checked (``d1``, ``d2``,
    ``n_actions``, ``context_law``, ``format_version``)."""
    version = _positive_int(log, "format_version", 1)
    if version > FORMAT_VERSION:
        raise LogFormatError(
            "format_version",
            f"{version} is newer than this package reads ({FORMAT_VERSION}); upgrade lrbandit-gym",
        )
    law = _scalar(log, "context_law")
    if law not in CONTEXT_LAWS:
        raise LogFormatError("context_law", f"must be one of {CONTEXT_LAWS}; got {law!r}")
    for key in LAW_ARRAYS.get(str(law), ()):
        if key not in log:
            raise LogFormatError(key, f"missing: context_law {str(law)!r} is given by it")
    return {
        "d1": _positive_int(log, "d1", 1),
        "d2": _positive_int(log, "d2", 1),
        "n_actions": _positive_int(log, "n_actions", 2),
        "context_law": str(law),
        "format_version": version,
    }


def _column(log: Mapping[str, Any], name: str, shape: tuple, kinds: str) -> np.ndarray:
    """The column ``name`` as an array of ``shape`` whose dtype kind is in ``kinds``."""
    arr = np.asarray(log[name])
    if arr.dtype.kind not in kinds:
        what = {"iu": "integers", "iuf": "real numbers", "f": "floating-point numbers"}[kinds]
        raise LogFormatError(name, f"must hold {what}; got dtype {arr.dtype}")
    if arr.shape != shape:
        raise LogFormatError(name, f"must have shape {shape}; got {arr.shape}")
    return arr


def _first(bad: np.ndarray) -> int:
    return int(np.argmax(bad))


def _admissible(block: np.ndarray) -> np.ndarray:
    """Entries that are finite with magnitude at most MAX_MAGNITUDE (every finite float32
    is: its largest is about 3.4e38)."""
    if block.dtype == np.float32:
        return np.isfinite(block)
    return np.abs(block) <= MAX_MAGNITUDE  # NaN fails the comparison


def _check_finite_rows(arr: np.ndarray, name: str) -> None:
    """Every entry finite with magnitude at most MAX_MAGNITUDE (its square must stay finite
    in float64), checked a chunk of rows at a time; the error names the first bad row."""
    n = arr.shape[0]
    for start in range(0, n, _CHUNK_ROWS):
        block = arr[start : start + _CHUNK_ROWS].reshape(min(_CHUNK_ROWS, n - start), -1)
        ok = _admissible(block).all(axis=1)
        if not ok.all():
            row = _first(~ok)
            values = block[row][~_admissible(block[row])]
            raise LogFormatError(
                name,
                f"must be finite with magnitude at most {MAX_MAGNITUDE:g}; got "
                f"{values[:3].tolist()}",
                start + row,
            )


def _check_one_hot(arr: np.ndarray) -> None:
    """Completion contexts in dense form: exactly one non-zero entry, equal to 1."""
    n = arr.shape[0]
    for start in range(0, n, _CHUNK_ROWS):
        block = arr[start : start + _CHUNK_ROWS].reshape(min(_CHUNK_ROWS, n - start), -1)
        nonzero = block != 0
        ok = (nonzero.sum(axis=1) == 1) & (block.sum(axis=1) == 1)
        if not ok.all():
            row = _first(~ok)
            raise LogFormatError(
                "context",
                "a completion context must be one-hot e_j e_kᵀ (exactly one non-zero "
                f"entry, equal to 1); this one has {int(nonzero[row].sum())} non-zero "
                f"entries, {block[row][nonzero[row]][:3].tolist()}",
                start + row,
            )


def validate_log(log: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Check a whole log and return it with canonical dtypes.

    Checks, in order: the metadata; exactly one of ``context`` and ``context_index``; every
    column's dtype and shape (``n`` rounds, ``n >= 1``); contexts finite (and one-hot for
    dense completion contexts), indices in range; actions in ``[0, n_actions)``; rewards
    finite; propensities in ``(0, 1]``; the pmf, when present, finite, non-negative, each
    row summing to 1 within :data:`PMF_TOL` and equal to ``propensity`` at the chosen arm
    (within :data:`PMF_TOL`); every other column ``n`` rows long.  Nothing is modified.

    Returns
    -------
    dict
        The same columns: ``action`` as int64; ``reward``, ``propensity``, ``pmf`` and
        ``oracle_*`` as given; a float32 or float64 ``context`` as given (any other real
        dtype as float64); ``context_index`` as int64; the metadata as 0-d arrays.

    Raises
    ------
    LogFormatError
        Naming the column and, for a bad value, the first bad row.
    """
    if not isinstance(log, Mapping):
        raise TypeError(f"a log is a mapping of column names to arrays; got {type(log).__name__}")
    sizes = log_sizes(log)
    d1, d2, K = sizes["d1"], sizes["d2"], sizes["n_actions"]
    present = [c for c in CONTEXT_COLUMNS if c in log]
    if len(present) != 1:
        raise LogFormatError(
            "context",
            "a log holds exactly one of 'context' (n, d1, d2) and 'context_index' (n, 2); "
            f"got {present or 'neither'}",
        )
    for name in REQUIRED_COLUMNS:
        if name not in log:
            raise LogFormatError(name, "missing: every log holds action, reward and propensity")
    action = np.asarray(log["action"])
    if action.ndim != 1 or action.shape[0] < 1:
        raise LogFormatError("action", f"must have shape (n,) with n >= 1; got {action.shape}")
    n = action.shape[0]
    out: dict[str, np.ndarray] = {}

    action = _column(log, "action", (n,), "iu")
    bad = (action < 0) | (action >= K)
    if bad.any():
        row = _first(bad)
        raise LogFormatError("action", f"must be in [0, {K}); got {action[row]}", row)
    out["action"] = action.astype(np.int64, copy=False)

    if "context" in log:
        ctx = _column(log, "context", (n, d1, d2), "iuf")
        if ctx.dtype not in (np.float32, np.float64):
            ctx = ctx.astype(np.float64)
        _check_finite_rows(ctx, "context")
        if sizes["context_law"] in COMPLETION_LAWS:
            _check_one_hot(ctx)
        out["context"] = ctx
    else:
        if sizes["context_law"] not in COMPLETION_LAWS:
            raise LogFormatError(
                "context_index",
                "an index context is a revealed entry of a completion context; this log's "
                f"context_law is {sizes['context_law']!r} (store the dense 'context')",
            )
        idx = _column(log, "context_index", (n, 2), "iu").astype(np.int64, copy=False)
        for axis, (label, size) in enumerate((("j", d1), ("k", d2))):
            bad = (idx[:, axis] < 0) | (idx[:, axis] >= size)
            if bad.any():
                row = _first(bad)
                raise LogFormatError(
                    "context_index",
                    f"{label} must be in [0, {size}); got {idx[row].tolist()}",
                    row,
                )
        out["context_index"] = idx

    reward = _column(log, "reward", (n,), "iuf")
    _check_finite_rows(reward, "reward")
    out["reward"] = reward.astype(np.float64, copy=False)

    prop = _column(log, "propensity", (n,), "iuf").astype(np.float64, copy=False)
    bad = ~((prop > 0) & (prop <= 1))  # NaN fails both
    if bad.any():
        row = _first(bad)
        raise LogFormatError("propensity", f"must be in (0, 1]; got {prop[row]!r}", row)
    out["propensity"] = prop

    if "pmf" in log:
        pmf = _column(log, "pmf", (n, K), "iuf").astype(np.float64, copy=False)
        bad = ~(np.isfinite(pmf).all(axis=1) & (pmf >= 0).all(axis=1))
        if bad.any():
            row = _first(bad)
            raise LogFormatError("pmf", f"must be finite and >= 0; got {pmf[row].tolist()}", row)
        totals = pmf.sum(axis=1)
        bad = np.abs(totals - 1.0) > PMF_TOL
        if bad.any():
            row = _first(bad)
            raise LogFormatError(
                "pmf",
                f"must sum to 1 (tolerance {PMF_TOL:g}); got sum {totals[row]!r} for "
                f"{pmf[row].tolist()}",
                row,
            )
        chosen = pmf[np.arange(n), out["action"]]
        bad = np.abs(chosen - prop) > PMF_TOL
        if bad.any():
            row = _first(bad)
            raise LogFormatError(
                "pmf",
                f"pmf[{row}, action={out['action'][row]}] = {chosen[row]!r} disagrees with "
                f"propensity[{row}] = {prop[row]!r}: both are the logging policy's "
                "probability of the arm played",
                row,
            )
        out["pmf"] = pmf

    law = sizes["context_law"]
    for key in (*LAW_ARRAYS.get(law, ()), *(_OPTIONAL_LAW_ARRAYS if law == "kronecker" else ())):
        if key in log:
            out[key] = np.asarray(log[key], dtype=float)
    if law in LAW_ARRAYS:
        try:
            law_from_arrays(law, out, d1, d2)
        except (ValueError, TypeError) as exc:
            raise LogFormatError(LAW_ARRAYS[law][0], f"does not give a law: {exc}") from None
    for name, value in log.items():
        if name in out or name in METADATA:
            continue
        if name in _ALL_LAW_ARRAYS:
            raise LogFormatError(name, f"is an array of another law than {law!r}")
        arr = np.asarray(value)
        if arr.dtype.kind == "O":
            raise LogFormatError(name, "holds Python objects; a log holds numeric or text arrays")
        if arr.dtype.kind not in "biufUS" or (arr.ndim == 0 and arr.dtype.kind == "S"):
            raise LogFormatError(
                name,
                f"holds {arr.dtype} ({'0-d ' if arr.ndim == 0 else ''}{arr.dtype.name}); the "
                "log files keep booleans, integers, floats and text (no 0-d bytes)",
            )
        if arr.ndim and arr.shape[0] != n:
            raise LogFormatError(name, f"must have {n} rows (one per round); got {arr.shape[0]}")
        out[name] = arr
    for name, value in sizes.items():
        out[name] = np.asarray(value)
    return out


# ------------------------------------------------------------------------------ files
def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".parquet"):
        raise ValueError(f"a log file ends in .npz or .parquet; got {str(path)!r}")
    return suffix


def _import_pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(
            'Parquet logs need pyarrow: pip install "lrbandit-gym[data]" (or save to .npz)'
        ) from exc
    return pa, pq


def _to_parquet_table(log: Mapping[str, np.ndarray]):
    """One Parquet row per round: arrays of more than one axis as fixed-size lists (shapes
    kept in the schema metadata), scalars in the schema metadata."""
    pa, _ = _import_pyarrow()
    columns, scalars, shapes, law = {}, {}, {}, {}
    for name, value in log.items():
        arr = np.asarray(value)
        if name in _ALL_LAW_ARRAYS:
            law[name] = arr.tolist()
            continue
        if arr.ndim == 0:
            scalars[name] = arr.item()
            continue
        if arr.ndim == 1:
            columns[name] = pa.array(arr)
            continue
        shapes[name] = list(arr.shape[1:])
        width = int(np.prod(arr.shape[1:]))
        flat = np.ascontiguousarray(arr).reshape(-1)
        columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(flat), width)
    meta = json.dumps({"scalars": scalars, "shapes": shapes, "law_arrays": law}).encode()
    return pa.table(columns, metadata={_PARQUET_KEY: meta})


def _parquet_meta(raw: bytes, path: Path) -> dict[str, dict]:
    """The schema metadata of a Parquet log: a JSON object of ``scalars`` (name to value),
    ``shapes`` (name to the list of a column's trailing axes) and, for a law given by
    arrays, ``law_arrays`` (name to nested lists)."""
    where = f"{str(path)!r}: the Parquet metadata {_PARQUET_KEY.decode()!r}"
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LogFormatError(None, f"{where} is not JSON ({exc})") from None
    if not isinstance(meta, dict) or sorted(set(meta) - {"law_arrays"}) != ["scalars", "shapes"]:
        got = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
        raise LogFormatError(
            None, f"{where} must be a JSON object with 'scalars' and 'shapes'; got {got}"
        )
    shapes = meta["shapes"]
    if not all(isinstance(meta.get(k, {}), dict) for k in ("scalars", "shapes", "law_arrays")):
        raise LogFormatError(
            None, f"{where}: 'scalars', 'shapes' and 'law_arrays' must be JSON objects"
        )
    for name, shape in shapes.items():
        ok = isinstance(shape, list) and all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
        )
        if not ok:
            raise LogFormatError(name, f"{where}: its shape must be a list of sizes; got {shape!r}")
    return meta


def _from_parquet(path: Path) -> dict[str, np.ndarray]:
    pa, pq = _import_pyarrow()
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise LogFormatError(None, f"{str(path)!r} is not a readable Parquet file: {exc}") from None
    raw = (table.schema.metadata or {}).get(_PARQUET_KEY)
    if raw is None:
        raise ValueError(
            f"{str(path)!r} has no lrbandit log metadata (schema key {_PARQUET_KEY.decode()!r}): "
            "write it with lrbandit_gym.logs.save_log, or load the table yourself and pass "
            "a mapping of arrays with the metadata (docs/logs.md)"
        )
    meta = _parquet_meta(raw, path)
    log: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in meta["scalars"].items()}
    log.update({k: np.asarray(v, dtype=float) for k, v in meta.get("law_arrays", {}).items()})
    n = table.num_rows
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if name in meta["shapes"]:
            if not pa.types.is_fixed_size_list(col.type) and not pa.types.is_list(col.type):
                raise LogFormatError(name, f"expected a list column; got {col.type}")
            values = _text(col.flatten())
            shape = (n, *meta["shapes"][name])
            if values.size != int(np.prod(shape, dtype=object)):
                raise LogFormatError(
                    name, f"holds {values.size} values, not the metadata's shape {shape}"
                )
            log[name] = values.reshape(shape)
        else:
            log[name] = _text(col)
    return log


def _text(col) -> np.ndarray:
    """A Parquet column as numpy, text as ``str`` or ``bytes`` arrays (not objects)."""
    import pyarrow as pa

    values = col.to_numpy(zero_copy_only=False)
    if values.dtype.kind == "O" and col.null_count == 0:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            return values.astype(str)
        if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            return values.astype(bytes)
    return values


def save_log(log: Mapping[str, Any], path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Validate ``log`` and write it to ``path`` (``.npz`` or ``.parquet``, by suffix).

    The file is written to a temporary name in the same folder and then renamed over
    ``path`` (or, without ``overwrite``, linked to it, so a file another writer created
    meanwhile is not replaced: :func:`~lrbandit_gym.files.atomic_file`), so a reader never
    sees half a file.  ``.npz`` is
    uncompressed (Gaussian contexts do not compress) and loads with ``allow_pickle=False``;
    ``.parquet`` (needs pyarrow) has one row per round, arrays of more than one axis as
    fixed-size list columns and the scalars in the schema metadata.

    Raises
    ------
    FileExistsError
        When ``path`` exists and ``overwrite`` is False (before anything is written, or
        when another writer created it during the write).
    LogFormatError
        When the log does not follow the format (before anything is written).
    """
    path = Path(path)
    suffix = _suffix(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{str(path)!r} exists; pass overwrite=True to replace it")
    checked = validate_log(log)
    if suffix == ".parquet":
        table = _to_parquet_table(checked)  # before the temporary file: may need pyarrow
    with atomic_file(path, "wb", overwrite=overwrite) as fh:
        if suffix == ".npz":
            write_npz(fh, checked)
        else:
            _, pq = _import_pyarrow()
            # Dictionary encoding only costs time on real-valued columns.
            pq.write_table(table, fh, use_dictionary=False)
    return path


def load_log(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a log written by :func:`save_log` (or any ``.npz`` of the format) and return
    it validated (:func:`validate_log`).

    ``.npz`` is read with no pickling (:func:`~lrbandit_gym.files.read_npz`).  A file that
    is not an archive, a truncated or corrupt one, a member declaring more data than it
    holds, or Parquet metadata not of the format is a :class:`LogFormatError` (``column``
    None) that says what is wrong.
    """
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such log file: {str(path)!r}")
    if suffix == ".npz":
        try:
            log = read_npz(path)
        except ValueError as exc:
            raise LogFormatError(None, str(exc)) from None
    else:
        log = _from_parquet(path)
    return validate_log(log)
