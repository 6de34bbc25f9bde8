"""Files that a reader never sees half-written, and ``.npz`` archives read without trust.

:func:`atomic_file` writes through a temporary file in the target's folder that becomes
the target only when the write completes (renamed over it, or linked to it when an
existing file must not be replaced), with the permissions an ordinary ``open`` would give.
:func:`write_npz` and :func:`read_npz` write and read the ``.npz`` archives of logs and
states: any member name is stored (``np.savez`` takes its own keyword arguments, ``file``
and ``allow_pickle``, from the names), and a file that is not an archive, a corrupt
archive, a pickled member or a member declaring more data than it holds is a
``ValueError`` that says so, before any large allocation.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_file", "read_npz", "write_npz"]


def _default_mode() -> int:
    """The permissions ``open(path, "w")`` gives a new file: ``0o666`` less the umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike,
    mode: str = "w",
    *,
    overwrite: bool = True,
    encoding: str | None = "utf-8",
    newline: str | None = "",
) -> Iterator[Any]:
    """A file object whose content becomes ``path`` only when the block completes.

    The content goes to a temporary file in the folder of ``path`` (created if missing),
    made readable as ``open`` would make it (``0o666`` less the umask, where ``mkstemp``
    gives ``0o600``), flushed to disk, then renamed over ``path``
    (``overwrite=True``) or hard-linked to it (``overwrite=False``), which fails with
    ``FileExistsError`` when a file appeared at ``path`` meanwhile instead of replacing
    it.  On any failure the temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : path-like
        The file to write.
    mode : {"w", "wb"}
        Text or binary.
    overwrite : bool
        Whether an existing ``path`` is replaced.
    encoding, newline : str or None
        For text mode, as :func:`open` takes them.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb'; got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _default_mode())
        text = {} if "b" in mode else {"encoding": encoding, "newline": newline}
        with os.fdopen(fd, mode, **text) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # FileExistsError when a file appeared meanwhile
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_npz(fh, arrays: Mapping[str, Any]) -> None:
    """Write ``arrays`` to the binary file ``fh`` as an uncompressed ``.npz`` archive, one
    ``NAME.npy`` member per entry, whatever the names (``np.savez`` would take ``file``
    and ``allow_pickle`` as its own arguments); object arrays are refused (no pickling)."""
    with zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive at ``path``, read with no pickling.

    Raises
    ------
    ValueError
        Saying what the file is when it is not an npz archive, when the archive is
        truncated or corrupt (a bad CRC included), when a member is not a ``.npy`` array,
        holds pickled Python objects, or declares a shape larger than the data it holds
        (checked from its header, before the array is allocated).
    """
    where = repr(str(path))
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{where} is not an npz archive (a zip file of .npy arrays)")
    arrays: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as member:
                    arrays[name] = _read_member(member, info, where)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise ValueError(f"{where} is a truncated or corrupt npz archive: {exc}") from None
    except MemoryError:
        raise ValueError(f"{where}: a member declares more data than memory holds") from None
    return arrays


def _read_member(member, info: zipfile.ZipInfo, where: str) -> np.ndarray:
    """One ``.npy`` member, its header checked against the member's size first."""
    name = info.filename
    try:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"format version {version} is not read")
    except ValueError as exc:
        raise ValueError(f"{where}: member {name!r} is not a .npy array ({exc})") from None
    if dtype.hasobject:
        raise ValueError(
            f"{where}: member {name!r} holds pickled Python objects, which are not read"
        )
    count = 1
    for size in shape:
        count *= int(size)
    declared = count * dtype.itemsize
    if declared > info.file_size:
        raise ValueError(
            f"{where}: member {name!r} declares shape {shape} of {dtype} ({declared} bytes) "
            f"but holds {info.file_size} bytes"
        )
    data = member.read(declared)
    if len(data) != declared:
        raise ValueError(f"{where}: member {name!r} is truncated")
    while member.read(1 << 20):  # to the member's end, where zipfile checks its CRC
        pass
    array = np.frombuffer(data, dtype=dtype).copy()
    if fortran:
        return array.reshape(shape[::-1]).transpose()
    return array.reshape(shape)
