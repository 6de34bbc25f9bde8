"""The documentation runs as written.

Every ```python block of README.md and of docs/*.md runs, as it is, in a fresh interpreter
without pandas (which is not a core dependency), and a block that leaves files behind runs
a second time in the same folder (a newcomer runs a snippet twice); every script in
examples/ runs in a fresh interpreter at the small size it offers.  A new example must be
registered in :data:`EXAMPLES` with the arguments that keep it small, or
:func:`test_example` fails for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
EXAMPLES_DIR = ROOT / "examples"

#: Seconds one README block or one example may take (each takes a few seconds).
TIMEOUT = 180

#: Every example: the arguments that make it small, and the modules it needs beyond the core
#: (the test is skipped where one is missing).
EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "coverage_study.py": (("--small",), ()),
    "online_inference.py": (("--small",), ()),
    "sb3_propensities.py": (("--small",), ("stable_baselines3", "torch")),
    "compare_agents.py": (("--small",), ()),
    "sb3_ppo.py": (("--small",), ("stable_baselines3", "torch")),
    "sb3_dqn.py": (("--small",), ("stable_baselines3", "torch")),
    "sb3_logger.py": (("--small",), ("stable_baselines3", "torch")),
}

#: What installs each module an example may need (the skip message says it).
EXTRAS = {
    "stable_baselines3": "the sb3 extra, pip install -e '.[sb3]'",
    "torch": "the sb3 extra (README.md says how to get the CPU build of torch)",
}

#: What a block that contains the key must print: the confidence-sequence snippet shows
#: stopping early, so it must stop.
EXPECTED_OUTPUT = {'kind="sequence"': "stopped at round"}

#: Runs ``block.py`` with ``import pandas`` refused: the blocks must run with the core
#: dependencies of the README's Install section, which leave pandas out.
_WITHOUT_PANDAS = """\
import runpy
import sys


class _NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("No module named 'pandas' (not a core dependency)")
        return None


sys.meta_path.insert(0, _NoPandas())
runpy.run_path("block.py", run_name="__main__")
"""

_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of every ```python block in a Markdown text."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _BLOCK.finditer(text)]


def run_python(args: list[str], cwd: Path, one_thread: bool = False) -> subprocess.CompletedProcess:
    """Run ``python *args`` in a fresh interpreter in ``cwd`` (a test's temporary folder);
    figures never need a display, and temporary files (an example's log folder,
    stable-baselines3's default logger folder) go to ``cwd``, not to the machine's ``/tmp``.
    ``one_thread``: torch's small networks run on one thread (``OMP_NUM_THREADS=1`` unless
    set), as its thread pool only competes with the other processes of a shared machine."""
    env = dict(os.environ, MPLBACKEND="Agg", TMPDIR=str(cwd), SB3_LOGDIR=str(cwd / "sb3"))
    if one_thread:
        env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _report(what: str, code: str, result: subprocess.CompletedProcess | None) -> str:
    if result is None:
        outcome = f"did not finish within {TIMEOUT} s"
    else:
        outcome = f"exited with status {result.returncode}; stderr:\n{result.stderr[-4000:]}"
    return f"{what} failed:\n{code}\n--- {outcome}"


README_BLOCKS = python_blocks(README.read_text(encoding="utf-8"))

#: ``(file, line number, code)`` of every ```python block of README.md and docs/*.md.
DOC_BLOCKS = [
    (path.relative_to(ROOT).as_posix(), line, code)
    for path in [README, *sorted(DOCS.glob("*.md"))]
    for line, code in python_blocks(path.read_text(encoding="utf-8"))
]


def test_readme_has_python_blocks():
    assert len(README_BLOCKS) >= 3


@pytest.mark.parametrize(
    "where, line, code", DOC_BLOCKS, ids=[f"{where}:{line}" for where, line, _ in DOC_BLOCKS]
)
def test_doc_block_runs(where, line, code, tmp_path):
    """Each block is self-contained: it runs alone, pasted into a fresh interpreter without
    pandas; one that writes files runs again in the same folder; it prints what
    :data:`EXPECTED_OUTPUT` asks of it."""
    what = f"{where} block at line {line}"
    (tmp_path / "block.py").write_text(code, encoding="utf-8")
    (tmp_path / "run_block.py").write_text(_WITHOUT_PANDAS, encoding="utf-8")
    before = set(tmp_path.iterdir())
    for attempt in ("", " (its second run, in the folder the first left)"):
        try:
            result = run_python(["run_block.py"], tmp_path)
        except subprocess.TimeoutExpired:
            pytest.fail(_report(what + attempt, code, None), pytrace=False)
        if result.returncode != 0:
            pytest.fail(_report(what + attempt, code, result), pytrace=False)
        for key, printed in EXPECTED_OUTPUT.items():
            if key in code and printed not in result.stdout:
                pytest.fail(
                    f"{what} does not print {printed!r}; it printed:\n{result.stdout[-2000:]}",
                    pytrace=False,
                )
        if set(tmp_path.iterdir()) == before:  # wrote no file: once is enough
            break


@pytest.mark.parametrize(
    "name", sorted({p.name for p in EXAMPLES_DIR.glob("*.py")} | set(EXAMPLES))
)
def test_example(name, tmp_path):
    """Every script in examples/ is registered, and runs at its small size."""
    path = EXAMPLES_DIR / name
    assert path.exists(), f"EXAMPLES lists {name}, which is not in examples/"
    assert name in EXAMPLES, (
        f"examples/{name} is not run by the tests: add it to EXAMPLES in {Path(__file__).name} "
        "with the arguments that make it run in a few seconds"
    )
    args, needs = EXAMPLES[name]
    for module in needs:
        pytest.importorskip(module, reason=f"examples/{name} needs {module}: {EXTRAS[module]}")
    command = f"python examples/{name} {' '.join(args)}".strip()
    try:
        result = run_python([str(path), *args], tmp_path, one_thread="torch" in needs)
    except subprocess.TimeoutExpired:
        pytest.fail(_report(command, command, None), pytrace=False)
    if result.returncode != 0:
        pytest.fail(_report(command, command, result), pytrace=False)


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_resolve_and_stay_in_the_repository(path):
    """Relative links point at files that exist; nothing points outside the repository."""
    text = path.read_text(encoding="utf-8")
    for forbidden in ("ALGORITHMS.md", "../shared"):
        assert forbidden not in text, f"{path.name} refers to {forbidden}"
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target) or target.startswith("#"):
            continue
        local = (path.parent / target.split("#", 1)[0]).resolve()
        assert local.exists(), f"{path.name} links to {target}, which does not exist"
        assert local.is_relative_to(ROOT), f"{path.name} links outside the repository: {target}"


def test_method_sections_cited_by_the_code_exist():
    """Docstrings cite "docs/method.md §N"; each such section is a heading of that page."""
    headings = set(
        re.findall(r"^## §(\d+)\b", (DOCS / "method.md").read_text(encoding="utf-8"), re.M)
    )
    assert headings >= {str(n) for n in range(1, 7)}
    cited = set()
    for package in ("agents", "inference", "lrbandit_gym"):
        for source in (ROOT / package).rglob("*.py"):
            for first, last in re.findall(
                r"docs/method\.md §(\d+)(?:\s*[-–]\s*§?(\d+))?", source.read_text(encoding="utf-8")
            ):
                cited.update(str(n) for n in range(int(first), int(last or first) + 1))
    assert cited <= headings, f"the code cites docs/method.md §{sorted(cited - headings)}"
