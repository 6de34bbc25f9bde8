"""Log files that keep every column, refuse what they cannot keep, survive crafted or
corrupt input with a LogFormatError, write atomically and readable by others (issue 34,
items 3, 4, 8 and 11)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import lrbandit_gym  # noqa: F401
from lrbandit_gym.logs import LogFormatError, load_log, save_log, validate_log
from lrbandit_gym.logs import format as log_format
from lrbandit_gym.logs.export import to_vw

N = 6


@pytest.fixture
def log():
    """A small valid log with its pmf."""
    rng = np.random.default_rng(0)
    action = np.array([0, 1, 1, 0, 1, 0])
    pmf = np.tile([0.5, 0.5], (N, 1))
    return {
        "context": rng.standard_normal((N, 2, 3)),
        "action": action,
        "reward": rng.standard_normal(N),
        "propensity": pmf[np.arange(N), action],
        "pmf": pmf,
        "d1": np.asarray(2),
        "d2": np.asarray(3),
        "n_actions": np.asarray(2),
        "context_law": np.asarray("gaussian"),
        "format_version": np.asarray(1),
    }


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------ item 3: columns
@pytest.mark.parametrize("name", ["allow_pickle", "file"])
def test_npz_keeps_a_column_named_like_an_argument_of_savez(tmp_path, log, name):
    save_log({**log, name: np.arange(N)}, tmp_path / "a.npz")
    back = load_log(tmp_path / "a.npz")
    np.testing.assert_array_equal(back[name], np.arange(N))


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (np.asarray(b"xy"), "bytes"),
        (np.asarray(1 + 2j), "complex"),
        (np.asarray(np.datetime64("2020-01-01")), "datetime64"),
        (np.ones(N, complex), "complex"),
        (np.ones(N, "timedelta64[s]"), "timedelta64"),
    ],
)
def test_a_column_the_files_cannot_keep_is_refused_naming_it(log, value, what):
    with pytest.raises(LogFormatError, match=what) as err:
        validate_log({**log, "extra": value})
    assert err.value.column == "extra"


def test_text_columns_survive_parquet(tmp_path, log):
    pytest.importorskip("pyarrow")
    extra = {"u": np.array(list("abcdef")), "s": np.array([b"x"] * N), "note": np.asarray("hi")}
    back = load_log(save_log({**log, **extra}, tmp_path / "a.parquet"))
    for name, value in extra.items():
        np.testing.assert_array_equal(back[name], value)
        assert back[name].dtype.kind == value.dtype.kind


# --------------------------------------------------------- item 4: crafted or corrupt
def _npz(tmp_path: Path, log) -> Path:
    return save_log(log, tmp_path / "a.npz")


def _corrupt_crc(path: Path) -> None:
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("reward.npy")
    start = info.header_offset
    names, extra = (int.from_bytes(data[start + k : start + k + 2], "little") for k in (26, 28))
    data[start + 30 + names + extra + info.file_size - 1] ^= 0xFF  # the last data byte

    path.write_bytes(bytes(data))


def _huge_shape(path: Path) -> None:
    with zipfile.ZipFile(path) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    header = np.lib.format.header_data_from_array_1_0(np.zeros(N))
    header["shape"] = (10**15,)
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    members["reward.npy"] = buf.getvalue() + np.zeros(N).tobytes()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "npz"),
        (_corrupt_crc, "corrupt"),
        (_huge_shape, "declares shape"),
        (lambda p: p.write_bytes(b"x" * 64), "not an npz archive"),
    ],
)
def test_a_damaged_npz_is_a_log_format_error(tmp_path, log, damage, match):
    path = _npz(tmp_path, log)
    damage(path)
    with pytest.raises(LogFormatError, match=match) as err:
        load_log(path)
    assert "allow_pickle" not in str(err.value)


def _parquet_meta(tmp_path: Path, log, meta) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = save_log(log, tmp_path / "a.parquet")
    table = pq.read_table(path)
    table = table.replace_schema_metadata({b"lrbandit_log": json.dumps(meta).encode()})
    pq.write_table(table, path)
    assert pa is not None
    return path


@pytest.mark.parametrize(
    "meta", [{"shapes": {"context": [2, 3], "pmf": [2]}}, [1, 2], {"scalars": [], "shapes": {}}]
)
def test_crafted_parquet_metadata_is_a_log_format_error(tmp_path, log, meta):
    path = _parquet_meta(tmp_path, log, meta)
    with pytest.raises(LogFormatError, match="metadata"):
        load_log(path)


def test_a_truncated_parquet_is_a_log_format_error(tmp_path, log):
    pytest.importorskip("pyarrow")
    path = save_log(log, tmp_path / "a.parquet")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(LogFormatError, match="Parquet"):
        load_log(path)


def test_analyze_exits_2_on_a_corrupt_log(tmp_path, log, capsys):
    from lrbandit_gym.experiments.cli import main

    path = _npz(tmp_path, log)
    _huge_shape(path)
    with pytest.raises(SystemExit) as code:
        main(["analyze", str(path), "--rank", "1", "--no-value", "--target", "t=eye"])
    assert code.value.code == 2
    assert "argument log:" in capsys.readouterr().err


# ---------------------------------------------------------------- item 8: atomicity
def test_save_without_overwrite_never_replaces_a_file_that_appeared(tmp_path, log, monkeypatch):
    path = tmp_path / "a.npz"
    real = log_format.write_npz

    def racing(fh, arrays):  # another writer creates the file during this write
        path.write_bytes(b"theirs")
        real(fh, arrays)

    monkeypatch.setattr(log_format, "write_npz", racing)
    with pytest.raises(FileExistsError):
        save_log(log, path)
    assert path.read_bytes() == b"theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]


def test_a_failed_vw_export_leaves_the_old_file(tmp_path, log, monkeypatch):
    path = tmp_path / "a.vw"
    path.write_text("old\n")
    from lrbandit_gym.logs import export

    calls = {"n": 0}
    real = export._number

    def failing(value):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(value)

    monkeypatch.setattr(export, "_number", failing)
    with pytest.raises(KeyboardInterrupt):
        to_vw(log, path)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.vw"]
    monkeypatch.setattr(export, "_number", real)
    assert to_vw(log, path) == N and len(path.read_text().splitlines()) == N


# ------------------------------------------------------------- item 11: permissions
def test_written_files_have_the_umasks_permissions(tmp_path, log):
    from lrbandit_gym.experiments.outputs import write_text

    expected = 0o666 & ~_umask()
    for path in (
        save_log(log, tmp_path / "a.npz"),
        Path(write_text(tmp_path / "b.md", "x")),
    ):
        assert path.stat().st_mode & 0o777 == expected, path
    to_vw(log, tmp_path / "c.vw")
    assert (tmp_path / "c.vw").stat().st_mode & 0o777 == expected


def test_a_state_file_that_is_not_an_npz_says_so(tmp_path):
    from agents.state import load_state

    path = tmp_path / "state.npz"
    path.write_bytes(b"not a zip at all" * 4)
    with pytest.raises(ValueError, match="not an npz archive") as err:
        load_state(path)
    assert "allow_pickle" not in str(err.value)
