"""What recording a run costs: memory, file size, write and read time, beside the time to
simulate the rounds (issue 25; the numbers are in docs/logs.md).

``python -m lrbandit_gym.experiments.bench.logs [--rounds N] [--d D]`` simulates ``N``
rounds of ``MatrixContextBandit-v0`` at ``d1 = d2 = D`` with uniformly random decisions,
once bare and once under :class:`~lrbandit_gym.logs.RecordRounds` with float32 contexts,
then saves the log to ``.npz`` and (with pyarrow) ``.parquet`` in a temporary folder and
reads each back (:func:`~lrbandit_gym.logs.load_log`, which validates the whole log).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from lrbandit_gym.decision import Decision
from lrbandit_gym.logs import RecordRounds, load_log, save_log

__all__ = ["bench_logs"]


def _timed(fn) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of ``fn()``: on a shared machine the process's CPU time is
    the steadier of the two."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _simulate(env, rounds: int, seed: int) -> tuple[float, float]:
    """``(wall, cpu)`` seconds to play ``rounds`` uniformly random decisions on ``env``."""
    rng = np.random.default_rng(seed)
    K = env.unwrapped.n_actions
    pmf = np.full(K, 1.0 / K)
    arms = rng.integers(K, size=rounds)
    env.reset(seed=seed)

    def play():
        for t in range(rounds):
            env.step(Decision(int(arms[t]), pmf))

    return _timed(play)


def bench_logs(
    rounds: int = 100_000, d: int = 50, seed: int = 0, folder: str | Path | None = None
) -> dict[str, Any]:
    """Time and size of recording ``rounds`` rounds at ``d1 = d2 = d`` (float32 contexts).

    Returns a dict: ``simulate_s`` (bare env), ``simulate_recorded_s`` (under the
    recorder), ``held_bytes`` (the recorder's columns), and per format (``"npz"``,
    ``"parquet"`` when pyarrow is installed) ``bytes``, ``write_s`` and ``read_s``; every
    time is a pair ``(wall, cpu)`` of seconds.
    """
    kw = {"d1": d, "d2": d}
    out: dict[str, Any] = {"rounds": rounds, "d": d}
    out["simulate_s"] = _simulate(gym.make("MatrixContextBandit-v0", **kw), rounds, seed)
    rec = RecordRounds(gym.make("MatrixContextBandit-v0", **kw), dtype=np.float32)
    out["simulate_recorded_s"] = _simulate(rec, rounds, seed)
    out["held_bytes"] = rec.nbytes
    log = rec.to_log()
    out["log_bytes"] = sum(np.asarray(v).nbytes for v in log.values())
    formats = ["npz"]
    try:
        import pyarrow  # noqa: F401

        formats.append("parquet")
    except ImportError:
        pass
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        for fmt in formats:
            path = Path(tmp) / f"log.{fmt}"
            write = _timed(lambda: save_log(log, path))  # noqa: B023
            read = _timed(lambda: load_log(path))  # noqa: B023
            out[fmt] = {"bytes": path.stat().st_size, "write_s": write, "read_s": read}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    r = bench_logs(args.rounds, args.d, args.seed)
    mb = 1e6

    def secs(pair) -> str:
        return f"{pair[0]:6.2f} s wall, {pair[1]:6.2f} s CPU"

    print(f"{r['rounds']} rounds, d1 = d2 = {r['d']}, K = 2, float32 contexts:")
    print(f"  simulate, bare env            {secs(r['simulate_s'])}")
    print(f"  simulate, with RecordRounds   {secs(r['simulate_recorded_s'])}")
    print(f"  held by the recorder          {r['held_bytes'] / mb:6.0f} MB")
    print(f"  the log's columns             {r['log_bytes'] / mb:6.0f} MB")
    for fmt in ("npz", "parquet"):
        if fmt in r:
            f = r[fmt]
            print(f"  .{fmt:<8} file {f['bytes'] / mb:6.0f} MB")
            print(f"    write                       {secs(f['write_s'])}")
            print(f"    read and validate           {secs(f['read_s'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
