"""Seeded bugs ("mutants") that the fast tests must catch, applied one at a time.

Usage (from the repository root; about 2 minutes on 2 cores)::

    python tools/mutants.py                 # every mutant, then the table
    python tools/mutants.py --list          # the mutants and the files they change
    python tools/mutants.py one_sided_factor_2 wrong_v_star   # just these
    python tools/mutants.py --exclude tests/test_mutants.py   # what survives without it

The last commit (``git archive HEAD``; with ``--working-tree``, the working tree as it is,
uncommitted changes included) is copied once to a temporary folder.  The tests are run there
first unchanged, and must pass.  Then each mutant replaces one
exact piece of source text, the fast tests that concern it run
(``pytest -x -q -m "not slow"``) with the copy first on ``PYTHONPATH``, and the file is put
back.  The table printed at the end says, for each mutant, whether a test failed and which
one first.  A mutant whose text no longer occurs exactly once is reported as ``stale``: the
source changed under it, and its ``old`` text needs updating here.  The exit status is 0
when every mutant is caught, 1 otherwise (2 on a failing baseline).

See docs/testing.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Seconds one pytest run may take before the mutant counts as not caught (a hang).
TIMEOUT = 600


@dataclass(frozen=True)
class Mutant:
    """One seeded bug: in ``path``, the text ``old`` (which must occur exactly once) becomes
    ``new``; ``tests`` are the test files run against it, ``env`` extra environment."""

    name: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "no_regret_correction",
        "the V* interval drops the estimated regret of the greedy rules played",
        "inference/cores/played_regret.py",
        "        estimate=est + regret,",
        "        estimate=est,",
        ("tests/test_played_regret.py",),
    ),
    Mutant(
        "remainder_variance_squared_once",
        "the one-step remainder's variance uses s² where its first-order variance has s⁴",
        "inference/cores/remainder.py",
        "    return (s2 * s2)[..., None] * geometry",
        "    return s2[..., None] * geometry",
        ("tests/test_remainder.py", "tests/test_linear_form.py"),
    ),
    Mutant(
        "remainder_ignores_warm_start_pulls",
        "the remainder's N_i counts only the pulls since inference started",
        "inference/cores/linear_form_readout.py",
        "information = (s.unweighted_pulls[:, arm] + s.pulls[:, arm]).astype(float)",
        "information = s.pulls[:, arm].astype(float)",
        ("tests/test_remainder.py",),
    ),
    Mutant(
        "policy_value_no_ipw",
        "the policy-value AIPW term drops its 1/pi weight",
        "inference/cores/policy_value.py",
        "weight = targets[trials, :, action] / propensities[trials, action][:, None]",
        "weight = targets[trials, :, action]",
        ("tests/test_policy_value.py",),
    ),
    Mutant(
        "value_uniform_propensities",
        "the value wrapper feeds the V* core uniform propensities instead of the policy's",
        "inference/wrappers/value_tracker.py",
        "self.core.absorb(predictions, round_.actions, round_.rewards, round_.propensities)",
        "props = round_.propensities\n"
        "        uniform = np.full_like(props, 1.0 / props.shape[-1])\n"
        "        self.core.absorb(predictions, round_.actions, round_.rewards, uniform)",
        ("tests/test_mutants.py", "tests/test_wrappers.py", "tests/test_optimal_value.py"),
    ),
    Mutant(
        "own_warm_start_unweighted",
        "the wrappers' own warm start ignores the 1/pi weights",
        "inference/wrappers/own_estimator.py",
        "weights = 1.0 / props[np.arange(props.shape[0]), round_.actions]",
        "weights = np.ones(props.shape[0])",
        ("tests/test_mutants.py", "tests/test_wrappers.py", "tests/test_warm_start.py"),
    ),
    Mutant(
        "forced_round_reports_inner_pmf",
        "forced-exploration rounds report the wrapped policy's pmf instead of the forced one",
        "agents/forced_exploration.py",
        "        action[rows] = forced[rows]\n"
        "        probs[rows] = 0.0\n"
        "        probs[rows, forced[rows]] = 1.0\n",
        "        action[rows] = forced[rows]\n",
        ("tests/test_mutants.py", "tests/test_policies.py"),
    ),
    Mutant(
        "one_sided_factor_2",
        "the one-sided confidence sequence drops the factor 2 of its mixture",
        "inference/sequences.py",
        "out = out + np.log(2.0) + log_ndtr(",
        "out = out + log_ndtr(",
        ("tests/test_mutants.py", "tests/test_sequences.py"),
    ),
    Mutant(
        "no_ipw",
        "no 1/pi in the debiasing of <M_a, T>",
        "inference/cores/linear_form_round.py",
        "weight = factors[s.trials, action] if core.ipw else np.ones(s.B)",
        "weight = np.ones(s.B)",
        ("tests/test_linear_form.py", "tests/test_wrappers.py"),
    ),
    Mutant(
        "standard_error_x0.8",
        "the fixed-n intervals use 0.8 times the standard error",
        "inference/results.py",
        "low, high = est - z * se, est + z * se",
        "low, high = est - z * 0.8 * se, est + z * 0.8 * se",
        ("tests/test_linear_form.py", "tests/test_optimal_value.py"),
    ),
    Mutant(
        "sequence_width_halved",
        "the two-sided confidence sequence is half as wide",
        "inference/sequences.py",
        "half = se * np.sqrt(n) * sequence_factor(n, alpha, tuning_n)",
        "half = 0.5 * se * np.sqrt(n) * sequence_factor(n, alpha, tuning_n)",
        ("tests/test_sequences.py",),
    ),
    Mutant(
        "eps_greedy_pmf",
        "epsilon-greedy reports the pmf of epsilon/2 (a valid pmf, not the one it plays)",
        "agents/low_rank.py",
        "return (1.0 - eps) * greedy + eps / self.n_actions",
        "return (1.0 - eps / 2) * greedy + eps / (2 * self.n_actions)",
        ("tests/test_policies.py",),
    ),
    Mutant(
        "no_renormalisation",
        "the SGD step keeps the stepped factors unbalanced (no renormalisation, numpy engine)",
        "agents/estimator/sgd.py",
        "U_new, V_new, sv_new = balance(U + step * XV, V + step * XtU)",
        "U_new, V_new = U + step * XV, V + step * XtU\n"
        "                    sv_new = balance(U_new, V_new)[2]",
        ("tests/test_estimator.py",),
        {"LRBANDIT_ENGINE": "numpy"},
    ),
    Mutant(
        "wrong_v_star",
        "the environment's exact V* for two arms divides by sqrt(pi), not sqrt(2 pi)",
        "lrbandit_gym/truth.py",
        "np.linalg.norm(flat[1] - flat[0]) / math.sqrt(2 * math.pi)",
        "np.linalg.norm(flat[1] - flat[0]) / math.sqrt(math.pi)",
        ("tests/test_env.py", "tests/test_optimal_value.py"),
    ),
    Mutant(
        "off_by_one_hand_off",
        "the wrapper's own warm start hands off to inference one round early",
        "agents/warm_start/phase.py",
        "return self.store.n + 1 >= self.store.length",
        "return self.store.n + 2 >= self.store.length",
        ("tests/test_wrappers.py", "tests/test_mutants.py"),
    ),
    Mutant(
        "v_star_one_sided_always",
        "the V* interval between two bounds uses the one-sided quantile whatever their gap",
        "inference/cores/bounded_interval.py",
        "above = ndtr(mid + d) - ndtr(-mid) >= level  # coverage rises with c",
        "above = np.ones_like(mid, dtype=bool)",
        ("tests/test_bounded_interval.py", "tests/test_played_regret.py"),
    ),
    Mutant(
        "v_star_whole_range",
        "the V* interval covers the whole range between the bounds (two-sided z at both ends)",
        "inference/cores/bounded_interval.py",
        "above = ndtr(mid + d) - ndtr(-mid) >= level  # coverage rises with c",
        "above = np.zeros_like(mid, dtype=bool)",
        ("tests/test_bounded_interval.py", "tests/test_played_regret.py"),
    ),
    Mutant(
        "step_cap_ignored",
        "the SGD's step ignores the cap that continues the warm start's average",
        "agents/estimator/sgd.py",
        "sched = np.minimum(sched, cap / self.step_gain)",
        "sched = sched + 0 * cap",
        ("tests/test_step_size.py",),
    ),
    Mutant(
        "completion_warm_start_recovery_only",
        "the completion default warm start stops at the recovery rule, short of the noise level",
        "agents/warm_start/rules.py",
        "rounds = max(recovery, min(noise_level, COMPLETION_MAX_FACTOR * recovery))",
        "rounds = recovery + 0 * noise_level",
        ("tests/test_warm_start_check.py",),
    ),
    Mutant(
        "lindeberg_mean_not_max",
        "the Lindeberg check reads the mean factor instead of the largest (never warns)",
        "inference/cores/weight_share.py",
        "np.maximum(self._max, factors, out=self._max)",
        "self._max += factors / 1e6",
        ("tests/test_weight_share.py",),
    ),
    Mutant(
        "chunks_share_one_seed",
        "every Monte Carlo chunk is seeded with an equal copy of one seed (trials repeat)",
        "lrbandit_gym/experiments/montecarlo.py",
        "seeds = np.random.SeedSequence(seed).spawn(len(sizes))",
        "seeds = np.random.SeedSequence(seed).spawn(1) * len(sizes)",
        ("tests/test_seeded_slips.py", "tests/test_interrupt.py"),
    ),
    Mutant(
        "analyze_spreads_the_pmf",
        "analyze rebuilds the pmf from the chosen arm's propensity although the log has it",
        "inference/analyze.py",
        'pmf = checked["pmf"] if has_pmf else spread_pmf(',
        "pmf = spread_pmf(",
        ("tests/test_seeded_slips.py", "tests/test_analyze.py"),
    ),
    Mutant(
        "validate_pmf_tolerance_1e-2",
        "validate_log accepts pmf rows that sum to 1 within 1e-2",
        "lrbandit_gym/logs/format.py",
        "bad = np.abs(totals - 1.0) > PMF_TOL",
        "bad = np.abs(totals - 1.0) > 1e-2",
        ("tests/test_seeded_slips.py", "tests/test_logs.py"),
    ),
    Mutant(
        "refused_round_keeps_the_old_context",
        "after a round it refuses, RecordRounds pairs the next round with the old context",
        "lrbandit_gym/logs/recorder.py",
        "                self._store_obs(obs)\n                self._last_obs = obs\n",
        "                pass\n",
        ("tests/test_seeded_slips.py", "tests/test_logs.py"),
    ),
    Mutant(
        "step_cap_default_length",
        "the step cap reads the default warm-start length instead of the extended one",
        "agents/warm_start/phase.py",
        "estimator.initialize(M_init, prior_rounds=self.rounds if uniform else 0)",
        "estimator.initialize(M_init, prior_rounds=self.default_rounds if uniform else 0)",
        (
            "tests/test_seeded_slips.py",
            "tests/test_step_size.py",
            "tests/test_warm_start_extension.py",
        ),
    ),
    Mutant(
        "extension_stops_at_1_16",
        "the warm-start extension stops at a noise-to-signal of 1/16 instead of 1/64",
        "agents/warm_start/extension.py",
        "needs = ratios > MAX_NOISE_TO_SIGNAL",
        "needs = ratios > 1.0 / 16.0",
        ("tests/test_warm_start_extension.py",),
    ),
    Mutant(
        "unmeasured_arm_exact",
        "an arm the held-out check cannot measure counts as exact instead of unknown",
        "agents/warm_start/check.py",
        "ratio = np.full((B, K), np.inf)",
        "ratio = np.full((B, K), 0.0)",
        ("tests/test_warm_start_check.py",),
    ),
    Mutant(
        "reservoir_slot_below_t",
        "the regret reservoir draws its slot from [0, t) instead of [0, t]",
        "inference/cores/played_regret.py",
        "int(self._rng.integers(t + 1))",
        "int(self._rng.integers(t))",
        ("tests/test_seeded_slips.py", "tests/test_played_regret.py"),
    ),
    Mutant(
        "reservoir_largest_propensity",
        "the batched reservoir tracks each round's largest propensity instead of its smallest",
        "inference/cores/played_regret.py",
        "np.minimum(self.min_propensity, propensities.min(axis=1), out=self.min_propensity)",
        "np.minimum(self.min_propensity, propensities.max(axis=1), out=self.min_propensity)",
        ("tests/test_seeded_slips.py", "tests/test_played_regret.py"),
    ),
    Mutant(
        "policy_value_factor_unsquared",
        "the policy-value Lindeberg factor reads sum_a pi(a|X)/pi_t(a), without the square",
        "inference/cores/policy_value.py",
        "targets * targets / propensities[:, None, :]",
        "targets / propensities[:, None, :]",
        ("tests/test_seeded_slips.py", "tests/test_weight_share.py", "tests/test_policy_value.py"),
    ),
    Mutant(
        "difference_first_share_only",
        "a difference of two policies checks only the first one's Lindeberg share",
        "inference/cores/policy_value.py",
        "self._weights.shares()[:, weights != 0].max(axis=1),",
        "self._weights.shares()[:, weights > 0].max(axis=1),",
        ("tests/test_seeded_slips.py", "tests/test_weight_share.py", "tests/test_policy_value.py"),
    ),
    Mutant(
        "readout_mean_share",
        "a read-out over several arms warns on their mean Lindeberg share, not the largest",
        "inference/cores/linear_form_readout.py",
        "share = core.state.weights.shares()[:, list(arms)].max(axis=1)",
        "share = core.state.weights.shares()[:, list(arms)].mean(axis=1)",
        ("tests/test_seeded_slips.py", "tests/test_weight_share.py"),
    ),
    Mutant(
        "law_correction_unwhitened",
        "under a law other than the paper's, the correction adds X_t instead of Σ⁻¹ vec X_t",
        "inference/cores/linear_form_round.py",
        "Xc = X if terms.whitened is None else terms.whitened",
        "Xc = X",
        ("tests/test_context_law.py",),
    ),
    Mutant(
        "entry_scale_twice",
        "an entry law scales the design term <G_t, X_t> by 1/p_jk besides its scale",
        "inference/cores/linear_form_round.py",
        "scale, whitened = s.whitener.entry_scale(X.rows, X.cols), None\n",
        "scale, whitened = s.whitener.entry_scale(X.rows, X.cols), None\n"
        "            g = g * scale[:, None]\n",
        ("tests/test_context_law.py",),
    ),
    Mutant(
        "estimated_law_not_predictable",
        "an estimated law takes round t's own context into the estimate that whitens it",
        "inference/cores/linear_form_round.py",
        "    _require_law_contexts(s.whitener)\n    if one_hot and products is None:",
        "    if s.whitener.estimated:\n"
        "        s.whitener.observe(X.dense() if one_hot else X)\n"
        "    _require_law_contexts(s.whitener)\n    if one_hot and products is None:",
        ("tests/test_context_law.py",),
    ),
    Mutant(
        "all_rounds_design_unweighted",
        "the design variance adds c²<G_i, X_t>² without arm i's 1/π_t(i)",
        "inference/cores/design_variance.py",
        "(c * c) * g * g * factors[:, :, None], 0.0)",
        "(c * c) * g * g, 0.0)",
        ("tests/test_design_variance.py",),
    ),
    Mutant(
        "design_floor_ignored",
        "the compiled design terms take every round's term, below the floor too",
        "inference/cores/_kernels.py",
        "    above = f <= limit\n",
        "    above = True\n",
        ("tests/test_design_variance.py",),
    ),
    Mutant(
        "design_below_floor_dropped",
        "below the floor the pulled arm's eq. (14) term is left out of the design variance",
        "inference/cores/design_variance.py",
        "    if below.any():\n",
        "    if False:\n",
        ("tests/test_design_variance.py",),
    ),
    Mutant(
        "robust_variance_dropped",
        "under a law other than the paper's, the standard error is the paper's product form",
        "inference/cores/linear_form_readout.py",
        "    if core.robust:  # σ̂²·S2 is then the robust variance (docs/method.md §11)",
        "    if False:  # σ̂²·S2 is then the robust variance (docs/method.md §11)",
        ("tests/test_context_law.py",),
    ),
    Mutant(
        "completion_takes_robust_variance",
        "completion contexts under an entry law take the robust standard error, not the "
        "product form",
        "inference/cores/linear_form.py",
        'self.c is None and (self.context != "completion" or self.projection == "none")',
        "self.c is None",
        ("tests/test_context_law.py",),
    ),
    Mutant(
        "unprojected_design_unwhitened",
        "projection='none' reads the design term <T, X_t> instead of <T, Σ⁻¹ vec X_t>",
        "inference/cores/linear_form_round.py",
        'g = np.einsum("bij,kij->bk", X if whitened is None else whitened, s.T)',
        'g = np.einsum("bij,kij->bk", X, s.T)',
        ("tests/test_unprojected.py",),
    ),
    Mutant(
        "range_part_everything",
        "a given second moment counts every direction as taken: no target is unidentified",
        "lrbandit_gym/context_law.py",
        "return (flat @ self.second_moment @ self._inv).reshape(A.shape)",
        "return A",
        ("tests/test_unprojected.py",),
    ),
)

_IGNORE = shutil.ignore_patterns(
    ".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".benchmarks", "*.egg-info", ".venv"
)
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def _pytest(
    copy: Path, tests: tuple[str, ...], env: dict[str, str], deselect: tuple[str, ...] = ()
) -> tuple[str, str, float]:
    """Run the fast tests in ``copy``: ``(outcome, first failing test or note, seconds)``."""
    run_env = dict(os.environ, **env)
    run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(copy), run_env.get("PYTHONPATH")]))
    run_env["PYTHONDONTWRITEBYTECODE"] = "1"  # every run compiles the sources it sees
    # One process (-n 0): a mutant's few test files gain nothing from workers.
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-m", "not slow", "-rfE", "-n", "0"]
    command += ["-p", "no:cacheprovider", "-W", "ignore", *tests]
    command += [f"--deselect={node}" for node in deselect]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=copy, env=run_env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"no result within {TIMEOUT} s", time.perf_counter() - start
    seconds = time.perf_counter() - start
    if proc.returncode == 0:
        return "passed", "", seconds
    failed = _FAILED.search(proc.stdout)
    if proc.returncode == 1 and failed:
        return "failed", failed.group(1), seconds
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return "error", f"pytest exit {proc.returncode}: {' | '.join(tail)}", seconds


def _check_copy_is_imported(copy: Path) -> None:
    """The copy's packages, not the installed ones, must be what the tests import."""
    code = "import agents, inference, lrbandit_gym; print(inference.__file__, agents.__file__)"
    env = dict(os.environ, PYTHONPATH=str(copy))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True
    )
    if out.returncode != 0 or any(
        not Path(p).resolve().is_relative_to(copy.resolve()) for p in out.stdout.split()
    ):
        raise SystemExit(f"the copy in {copy} is not what Python imports: {out.stdout}{out.stderr}")


def _copy(copy: Path, working_tree: bool) -> None:
    """The last commit (or the working tree) of the repository, written to ``copy``."""
    if working_tree:
        shutil.copytree(ROOT, copy, ignore=_IGNORE)
        return
    copy.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(copy)], input=archive.stdout, check=True)


def run(
    mutants: tuple[Mutant, ...],
    keep: bool = False,
    working_tree: bool = False,
    deselect: tuple[str, ...] = (),
) -> list[tuple[Mutant, str, str, float]]:
    """Apply each mutant to a copy of the repository and run its tests; the rows of the
    table: ``(mutant, outcome, first failing test or note, seconds)``."""
    tmp = Path(tempfile.mkdtemp(prefix="lrbandit-mutants-"))
    copy = tmp / "repo"
    _copy(copy, working_tree)
    try:
        _check_copy_is_imported(copy)
        files = tuple(sorted({t for m in mutants for t in m.tests}))
        print(f"baseline: {' '.join(files)} ...", flush=True)
        outcome, note, seconds = _pytest(copy, files, {}, deselect)
        if outcome != "passed":
            print(f"the unmutated tests do not pass ({outcome}: {note}); nothing to compare")
            raise SystemExit(2)
        print(f"baseline passed in {seconds:.0f} s", flush=True)
        rows = []
        for m in mutants:
            target = copy / m.path
            original = target.read_text(encoding="utf-8")
            count = original.count(m.old)
            if count != 1:
                rows.append((m, "stale", f"text found {count} times in {m.path}", 0.0))
                print(f"{m.name}: stale", flush=True)
                continue
            target.write_text(original.replace(m.old, m.new), encoding="utf-8")
            try:
                outcome, note, seconds = _pytest(copy, m.tests, m.env, deselect)
            finally:
                target.write_text(original, encoding="utf-8")
            rows.append((m, outcome, note, seconds))
            print(f"{m.name}: {outcome} {note} ({seconds:.0f} s)", flush=True)
        return rows
    finally:
        if keep:
            print(f"copy kept in {copy}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def table(rows) -> str:
    """The Markdown table: mutant | caught? | by which test."""
    lines = ["| mutant | what it breaks | caught? | by which test (first to fail) | s |"]
    lines.append("|---|---|---|---|---|")
    for m, outcome, note, seconds in rows:
        caught = {"failed": "yes", "passed": "**NO**"}.get(outcome, outcome)
        test = f"`{note}`" if outcome == "failed" else note
        lines.append(f"| {m.name} | {m.what} | {caught} | {test} | {seconds:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="run only these mutants (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    parser.add_argument(
        "--deselect",
        action="append",
        default=[],
        metavar="NODEID",
        help="leave this test out (pytest's --deselect), e.g. one failing for an unrelated reason",
    )
    parser.add_argument(
        "--working-tree",
        action="store_true",
        help="copy the working tree, uncommitted changes included (default: the last commit)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="FILE",
        help="leave this test file out of every run (e.g. to see what survives without it)",
    )
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:32} {m.path:30} {m.what}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown mutant(s) {unknown}; known: {sorted(known)}")
    chosen = tuple(known[n] for n in args.names) if args.names else MUTANTS
    if args.exclude:
        drop = {Path(f).as_posix() for f in args.exclude}
        chosen = tuple(replace(m, tests=tuple(t for t in m.tests if t not in drop)) for m in chosen)
        chosen = tuple(m for m in chosen if m.tests)
    rows = run(
        chosen, keep=args.keep, working_tree=args.working_tree, deselect=tuple(args.deselect)
    )
    print()
    print(table(rows))
    return 0 if all(outcome == "failed" for _, outcome, _, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
