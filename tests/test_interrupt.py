"""Runs that can be stopped (issue 26, item 7): Ctrl-C during ``lrbandit validate``,
``compare`` or ``reproduce`` with ``--jobs 2`` ends the workers within seconds, keeps the
chunks that finished, prints and writes them marked partial, and exits with status 130.

The command-line tests start the real command in its own process group and send SIGINT to
the whole group, as a terminal's Ctrl-C does, once the first chunk has finished (a marker
line that :data:`DRIVER` prints when the parent collects a chunk).  They assert on what the
command does, not on how fast: it exits 130 within a generous :data:`EXIT_TIMEOUT`, and
the trials it reports and writes are fewer than planned (the remaining chunks never ran).

The command starts with SIGINT at its default action, as a terminal's foreground job does,
whatever this test process inherited: a suite run as a background job (``nohup pytest &``)
inherits an ignored SIGINT, which Python, and so ``lrbandit``, keeps ignoring (a background
job is not stopped by the terminal's Ctrl-C).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lrbandit_gym.experiments.outputs import RunStamp
from lrbandit_gym.experiments.parallel import (
    Interrupted,
    RunInterrupted,
    local_map,
    process_pool_map,
)

pytestmark = pytest.mark.skipif(
    not hasattr(os, "killpg"), reason="sends SIGINT to a process group (POSIX)"
)

#: Seconds the command may take to exit after SIGINT before the test fails (a hang); the
#: tests do not time the stop, they check that the remaining chunks were not run.
EXIT_TIMEOUT = 120

#: Runs ``lrbandit`` (``cli.main``) with one addition: a line ``@@ finished NAME`` on stderr
#: each time the parent collects an item of a process pool, NAME the function it ran.
DRIVER = """
import sys

import lrbandit_gym.experiments.parallel as parallel

_pool_map = parallel.process_pool_map


def process_pool_map(fn, items, jobs, on_done=None, **options):
    name = getattr(getattr(fn, "func", fn), "__name__", "?")

    def done(i):
        if on_done is not None:
            on_done(i)
        print(f"@@ finished {name}", file=sys.stderr, flush=True)

    return _pool_map(fn, items, jobs, done, **options)


parallel.process_pool_map = process_pool_map
from lrbandit_gym.experiments.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
"""


def _default_sigint() -> None:
    """In the child before ``exec``: SIGINT back to its default action, so that Python
    installs its ``KeyboardInterrupt`` handler (it keeps an inherited SIG_IGN)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(tmp_path: Path, argv: list[str], chunk: str, signals: int = 1):
    """Start ``lrbandit argv``, send SIGINT to its process group (``signals`` times, 0.1 s
    apart) once an item run by ``chunk`` has finished; ``(exit status, stdout, stderr)``,
    the exit status None when the command did not exit within :data:`EXIT_TIMEOUT`."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(driver), *argv],
            stdout=out,
            stderr=err,
            start_new_session=True,  # its own process group, as a terminal's job
            preexec_fn=_default_sigint,  # a foreground job's SIGINT, whatever pytest inherited
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 300
            while f"@@ finished {chunk}" not in err_path.read_text():
                assert proc.poll() is None, err_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no chunk finished in 300 s"
                time.sleep(0.05)
            for k in range(signals):
                if k:
                    time.sleep(0.1)
                os.killpg(proc.pid, signal.SIGINT)
            try:
                code = proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    # No worker outlives the command: its process group is empty.
    for _ in range(40):
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("a worker process is still running after the command exited")
    return code, out_path.read_text(), err_path.read_text()


def _done_of(text: str, total: int) -> int:
    match = re.search(rf"interrupted: (\d+) of {total} trials", text)
    assert match, text[-3000:]
    return int(match.group(1))


@pytest.mark.filterwarnings("ignore")
def test_ctrl_c_stops_validate_and_writes_the_finished_chunks_marked_partial(tmp_path):
    argv = ["validate", "--d1", "8", "--d2", "6", "--rank", "1", "--targets", "entry"]
    argv += ["--n", "300", "--trials", "120", "--batch-size", "2", "--jobs", "2"]
    argv += ["--seed", "1", "--no-progress", "--out", "out"]
    code, stdout, stderr = _interrupt(tmp_path, argv, "run_chunk_task")
    assert code == 130, stderr[-3000:]
    done = _done_of(stderr, 120)
    assert 2 <= done < 120 and done % 2 == 0  # whole chunks of 2 trials
    assert stdout.startswith(f"PARTIAL RESULT (interrupted: {done} of 120 trials)")
    assert f"PARTIAL (interrupted: {done} of 120 trials)" in stdout
    lines = (tmp_path / "out" / "validate.csv").read_text().splitlines()
    assert lines[0].startswith(f"# PARTIAL RUN (interrupted: {done} of 120 trials); written by")
    rows = list(csv.DictReader(lines[1:]))
    assert rows
    for row in rows:
        assert int(row["trials"]) + int(row["no_interval"]) == done  # the finished trials


@pytest.mark.filterwarnings("ignore")
def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    argv = ["validate", "--d1", "8", "--d2", "6", "--rank", "1", "--targets", "entry"]
    argv += ["--n", "300", "--trials", "120", "--batch-size", "2", "--jobs", "2"]
    argv += ["--seed", "1", "--no-progress", "--out", "out"]
    code, stdout, stderr = _interrupt(tmp_path, argv, "run_chunk_task", signals=2)
    assert code in (130, -signal.SIGINT), stderr[-3000:]  # 130, or killed by SIGINT
    assert "Traceback" not in stderr or "KeyboardInterrupt" in stderr


@pytest.mark.filterwarnings("ignore")
def test_ctrl_c_stops_compare_and_writes_the_finished_units_marked_partial(tmp_path):
    argv = ["compare", "--d", "6", "--rank", "1", "--rounds", "300", "--warm-start", "100"]
    argv += ["--trials", "60", "--batch-size", "1", "--jobs", "2", "--no-figures"]
    argv += ["--agents", "eps-greedy", "uniform", "--out", "out"]
    code, stdout, stderr = _interrupt(tmp_path, argv, "_execute")
    assert code == 130, stderr[-3000:]
    done = _done_of(stderr, 120)
    assert 1 <= done < 120
    assert f"**PARTIAL RESULT (interrupted: {done} of 120 trials" in stdout
    meta = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert meta["run"]["partial"] is True
    assert meta["run"]["interrupted"] == f"interrupted: {done} of 120 trials"
    assert meta["trials_planned"] == {"eps-greedy": 60, "uniform": 60}
    assert sum(meta["trials_done"].values()) == done
    with np.load(tmp_path / "out" / "compare.npz") as npz:
        kept = sum(
            npz[f"{a}/trials"].size for a in ("eps-greedy", "uniform") if f"{a}/trials" in npz
        )
    assert kept == done
    assert (tmp_path / "out" / "compare.md").read_text().startswith("<!-- PARTIAL RUN")


@pytest.mark.filterwarnings("ignore")
def test_ctrl_c_stops_reproduce_and_skips_the_settings_not_reached(tmp_path):
    argv = ["reproduce", "table2", "--ranks", "1", "3", "--trials", "40", "--n", "200"]
    argv += ["--batch-size", "2", "--warm-start", "200", "--no-figures", "--jobs", "2"]
    argv += ["--out", "out"]
    code, stdout, stderr = _interrupt(tmp_path, argv, "run_chunk_task")
    assert code == 130, stderr[-3000:]
    done = _done_of(stderr, 80)
    assert 2 <= done < 40  # within the first setting, r=1
    assert f"PARTIAL RESULT (interrupted: {done} of 80 trials: r=1 {done} of 40, r=3 0 of 40)" in (
        stdout
    )
    out = tmp_path / "out"
    assert (out / "table2.csv").read_text().startswith("# PARTIAL RUN (interrupted: ")
    meta = json.loads((out / "table2.json").read_text())
    assert meta["partial"] is True and meta["trials_done"] == {"r=1": done}
    assert {r["setting"] for r in meta["rows"]} == {"r=1"}
    with np.load(out / "table2.npz") as npz:
        assert npz["r=1/estimate"].shape[-1] == done
        assert json.loads(str(npz["metadata"]))["partial"] is True


# ------------------------------------------------------------------- in this process
def _item(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_process_pool_map_ends_running_items_on_keyboard_interrupt():
    """A KeyboardInterrupt in the caller ends items that would run 10 minutes (the map
    returns: it waits for its workers, so a worker still running would hang it) and keeps
    the one that finished."""

    def on_done(i):
        raise KeyboardInterrupt

    outcome = _die_guarded(process_pool_map, _item, [0.0, 600.0, 600.0, 600.0], 2, on_done)
    caught = outcome.get("error")
    assert isinstance(caught, Interrupted), outcome
    assert caught.results == {0: 0.0} and caught.total == 4


def test_local_map_in_this_process_keeps_the_items_before_the_interrupt():
    def fn(x):
        if x == 2:
            raise KeyboardInterrupt
        return 10 * x

    with pytest.raises(Interrupted) as caught:
        local_map(fn, [0, 1, 2, 3], 1)
    assert caught.value.results == {0: 0, 1: 10} and caught.value.total == 4
    assert isinstance(caught.value, KeyboardInterrupt)  # code that does not look stops too


@pytest.mark.filterwarnings("ignore")
def test_run_study_in_this_process_raises_the_merged_partial_result(monkeypatch):
    import lrbandit_gym.experiments.studies as studies

    config = studies.StudyConfig(d1=6, d2=6, rank=1, warm_start=60, checkpoints=(40,))
    calls = []
    real = studies.run_chunk

    def run_chunk(setting, n_trials, seed):
        calls.append(n_trials)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(setting, n_trials, seed)

    monkeypatch.setattr(studies, "run_chunk", run_chunk)
    with pytest.raises(RunInterrupted) as caught:
        studies.run_study(config, 7, seed=3, batch_size=2)
    stop = caught.value
    assert (stop.done, stop.total) == (4, 7)
    assert stop.line == "interrupted: 4 of 7 trials"
    assert stop.result["estimate"].shape[-1] == 4


def test_the_stamp_of_a_partial_run_says_so_everywhere():
    full = RunStamp.of("lrbandit validate", {"trials": 80}, 1)
    part = RunStamp.of(
        "lrbandit validate", {"trials": 80}, 1, partial="interrupted: 8 of 80 trials"
    )
    assert full.to_dict()["partial"] is False and "interrupted" not in full.to_dict()
    assert full.line().startswith("written by lrbandit-gym")
    assert part.to_dict()["partial"] is True
    assert part.to_dict()["interrupted"] == "interrupted: 8 of 80 trials"
    assert part.line().startswith("PARTIAL RUN (interrupted: 8 of 80 trials); written by")


def test_shared_trials_of_a_partial_comparison_stop_at_the_first_gap():
    """Units finish out of order: an agent may hold trials 0-2 and 4 but not 3, and the
    regret over "the trials every agent played" must not pair its trial 4 with another's 3."""
    from lrbandit_gym.experiments.compare.report import ComparisonResult

    data = {"a": {"trials": np.array([0, 1, 2, 4])}, "b": {"trials": np.array([0, 1, 2, 3])}}
    result = ComparisonResult(None, ["a", "b"], data, None, 0.0, None, {}, partial=True)
    assert result.shared_trials() == 3
    data["a"]["trials"] = np.array([1, 2])
    assert result.shared_trials() == 0


# ------------------------------------------------------------------- a worker that dies
def _die_after(marker: str) -> str:
    """Return ``"ok"`` for the empty marker; else wait for the marker file (which the
    caller creates once an item finished) and end this process as the OOM killer would."""
    if not marker:
        return "ok"
    deadline = time.monotonic() + 120
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


def _die_guarded(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a thread, failing the test after 120 s instead of hanging
    (a generous bound for a loaded machine: what passes takes seconds)."""
    import threading

    outcome: dict = {}

    def target():
        try:
            outcome["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the map hangs (its workers were not ended)"
    return outcome


def test_a_dead_worker_ends_the_map_with_a_clear_error_keeping_the_finished_items(tmp_path):
    from lrbandit_gym.experiments.parallel import WorkerDied

    marker = tmp_path / "first-done"
    items = ["", str(marker), "", ""]

    def on_done(i):
        marker.touch()

    outcome = _die_guarded(process_pool_map, _die_after, items, 2, on_done)
    error = outcome.get("error")
    assert isinstance(error, WorkerDied), outcome
    assert isinstance(error, Interrupted)  # the callers keep what finished, as on Ctrl-C
    assert 0 in error.results and 1 not in error.results and error.total == 4
    assert "worker process died" in str(error) and "of 4 items finished" in str(error)


def _dying_chunk(setting, n_trials, seed):
    return {"x": np.zeros(n_trials)} if not setting else _die_after(setting)


def test_a_dead_worker_keeps_the_finished_chunks_of_a_run(tmp_path):
    from lrbandit_gym.experiments.montecarlo import Chunk, run_chunks
    from lrbandit_gym.experiments.parallel import WorkerDied

    marker = tmp_path / "first-done"
    seed = np.random.SeedSequence(0)
    chunks = [Chunk(s, 2, seed, "numpy") for s in ("", str(marker), "", "")]
    outcome = _die_guarded(
        run_chunks, _dying_chunk, chunks, jobs=2, on_done=lambda i: marker.touch()
    )
    ran = outcome.get("value")
    assert ran is not None, outcome
    assert ran.partial and isinstance(ran.stopped, WorkerDied)
    assert 0 in ran.finished and 1 not in ran.finished
    stop = ran.interrupted(None)
    assert "worker process died" in stop.reason
    assert stop.line.startswith("interrupted:")


def test_the_command_line_says_a_worker_died_and_exits_1(capsys):
    from lrbandit_gym.experiments.cli.conventions import interrupted, partial_result
    from lrbandit_gym.experiments.parallel import WorkerDied

    died = WorkerDied({0: 1}, 4)
    assert partial_result("validate", RunInterrupted(None, 2, 8, str(died))) == 1
    assert interrupted("validate", WorkerDied({}, 4)) == 1
    assert partial_result("validate", RunInterrupted(None, 2, 8)) == 130
    err = capsys.readouterr().err
    assert "validate: a worker process died (killed, or out of memory)" in err
    assert "interrupted: 2 of 8 trials (partial result): exit status 1" in err
    assert "0 of 4 items finished; no further output written" in err


MAP_CHILD = """
import os, signal, sys, time
from lrbandit_gym.experiments.parallel import Interrupted, process_pool_map

signal.signal(signal.SIGINT, signal.default_int_handler)
after = []

def on_done(i):
    if i == 0:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the map runs its own code
        time.sleep(0.05)  # an undeferred interrupt would be raised here, mid-callback
        after.append(i)

try:
    process_pool_map(time.sleep, [0.01] + [0.5] * 7, 2, on_done)
except Interrupted as exc:
    print("interrupted", sorted(exc.results), after)
    sys.exit(0)
print("not interrupted")
sys.exit(1)
"""


def test_a_first_ctrl_c_is_read_between_the_maps_waits_not_inside_its_own_code():
    # An interrupt raised asynchronously inside the map's bookkeeping (its waits hold the
    # futures' locks) could leave a lock held and hang the stop; the first one is read at
    # the map's safe points: the callback it arrived in runs to its end, then the map stops.
    proc = subprocess.run(
        [sys.executable, "-c", MAP_CHILD],
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
        preexec_fn=_default_sigint,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.startswith("interrupted [0"), proc.stdout
    assert proc.stdout.rstrip().endswith("[0]"), proc.stdout  # the callback finished
