"""Results of :func:`lrbandit_gym.experiments.compare.run.compare`: tables, files and figures.

:class:`ComparisonResult` holds each agent's raw arrays (trials on the first axis) and turns
them into the summary (final cumulative regret mean ± s.e. and interquartile mean, estimation
error, time per round), the inference table (coverage and mean width of every interval,
``<M_a, T>``, ``V*`` and the values ``V(arm 0)``, ``V(uniform)`` of the fixed target
policies of :mod:`~lrbandit_gym.experiments.policy_targets`, computed on each agent's own
trajectory), Markdown, CSV, JSON, ``.npz`` and, with the
``plot`` extra, figures.  Tables are pandas DataFrames when pandas is installed and lists of
dicts (arrays for the regret) otherwise.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from scipy.special import ndtri

from lrbandit_gym.experiments.compare.units import ComparisonSetting
from lrbandit_gym.experiments.coverage import coverage_interval, format_coverage
from lrbandit_gym.experiments.outputs import (
    RunStamp,
    check_outputs,
    remove_stale,
    stamped,
    write_csv,
    write_json,
    write_npz,
    write_text,
)
from lrbandit_gym.experiments.policy_targets import policy_label
from lrbandit_gym.experiments.run_warnings import count_warnings

__all__ = ["OUTPUT_FILES", "ComparisonResult", "ReportedQuantity"]

#: Every file :meth:`ComparisonResult.save` may write into its folder.
OUTPUT_FILES = (
    "compare.csv",
    "compare_inference.csv",
    "compare_regret.csv",
    "compare.md",
    "compare.npz",
    "compare.json",
    "compare_regret.png",
    "compare_estimation_error.png",
    "compare_interval_width.png",
)

#: The packages whose warnings an agent's notes list (others, a library's deprecations say,
#: are shown once by :func:`~lrbandit_gym.experiments.compare.run.compare` and not noted).
_PACKAGES = ("agents", "inference", "lrbandit_gym")


def _pandas(as_frame: bool | None):
    if as_frame is False:
        return None
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise ImportError("as_frame=True needs pandas: pip install pandas") from None
        return None
    return pd


class ReportedQuantity(NamedTuple):
    """One interval of the tables: ``<M_arm, T>`` (``target``: the index of ``T``), ``V*``
    (neither), or the value of a target policy (``policy``: its index in
    :attr:`ComparisonResult.policy_values`)."""

    label: str
    target: int | None = None
    arm: int | None = None
    policy: int | None = None


def _coverage(est, se, truth, valid, z):
    """Coverage, its Monte Carlo s.e. and 95% Wilson interval (``coverage_low``,
    ``coverage_high``: it keeps a width at 0 and 1), mean width and the trials used."""
    ok = valid & np.isfinite(est) & np.isfinite(se)
    n = int(ok.sum())
    if not n:
        return {
            "trials": 0,
            "coverage": np.nan,
            "coverage_mcse": np.nan,
            "coverage_low": np.nan,
            "coverage_high": np.nan,
            "mean_width": np.nan,
        }
    covered = np.abs(est[ok] - truth) <= z * se[ok]
    cov = float(np.mean(covered))
    low, high = coverage_interval(int(covered.sum()), n)
    return {
        "trials": n,
        "coverage": cov,
        "coverage_mcse": float(np.sqrt(cov * (1 - cov) / n)),
        "coverage_low": low,
        "coverage_high": high,
        "mean_width": float(np.mean(2 * z * se[ok])),
    }


@dataclass
class ComparisonResult:
    """Everything a comparison measured.

    Attributes
    ----------
    setting : ComparisonSetting
        The environment, rounds, targets, checkpoints and warm start shared by all agents.
    agents : list of str
        Names, in the order given.
    data : dict
        Per agent: ``trials`` (indices), ``regret`` ``(n, rounds)`` cumulative regret,
        ``estimation_error`` ``(n, C, K)`` or None, ``estimate``/``se``
        ``(n, C, n_T, K)``, ``value_estimate``/``value_se`` ``(n, C)``, ``valid`` ``(n,)``
        (inference defined on the trial), ``policy_estimate``/``policy_se`` ``(n, C, P)``
        and ``policy_valid`` ``(n,)`` for the target policies, ``min_propensity`` ``(n,)``
        (after the warm start), ``refusals`` (``(rounds, reason)`` of every unit whose
        wrappers refused a round), ``policy_refusals`` (of every unit whose policy
        evaluation refused a target policy),
        ``context_sum`` ``(n,)`` (the sum of every context the trial acted on: the same
        for every agent on a trial, since contexts do not depend on actions),
        ``seconds`` and ``agent_seconds`` (process-seconds, summed over units).
    truth : ndarray (n_T, K)
        ``<M_a, T>`` for every target.
    optimal_value : float
        ``V*``.
    true_params : ndarray (K, d1, d2)
    info : dict
        Trials, rounds, seed, jobs, backend, engine, wall seconds, kinds of agents, and each
        agent's trials run and planned (``trials_done``, ``trials_planned``).
    partial : bool
        True for a comparison stopped by Ctrl-C: ``data`` holds the units that finished
        (an agent's trials may then have gaps, see ``data[name]["trials"]``), and agents
        without one are not in ``agents``.
    policy_values : dict of str to float
        The exact value of every target policy, by name, in the order of
        ``policy_estimate``'s last axis.
    """

    setting: ComparisonSetting
    agents: list
    data: dict
    truth: np.ndarray
    optimal_value: float
    true_params: np.ndarray
    info: dict
    partial: bool = False
    policy_values: dict = field(default_factory=dict)

    @property
    def interrupted(self) -> str:
        """``"interrupted: N of M trials"`` (over all agents) for a partial result, else
        ``""``."""
        if not self.partial:
            return ""
        from lrbandit_gym.experiments.parallel import interrupted_line

        done, planned = self.info.get("trials_done", {}), self.info.get("trials_planned", {})
        return interrupted_line(sum(done.values()), sum(planned.values()))

    @property
    def checkpoints(self) -> np.ndarray:
        return np.asarray(self.setting.checkpoints)

    def _z(self) -> float:
        return float(ndtri(0.5 + self.setting.confidence_level / 2))

    def quantities(self) -> list[ReportedQuantity]:
        """Every interval of the tables: each ``<M_a, T>``, ``V*``, then every target
        policy's value."""
        out = []
        for j, name in enumerate(self.setting.targets):
            for arm in range(self.truth.shape[1]):
                out.append(ReportedQuantity(f"<M_{arm}, {name}>", target=j, arm=arm))
        out.append(ReportedQuantity("V*"))
        for j, policy in enumerate(self.policy_values):
            out.append(ReportedQuantity(policy_label(policy), policy=j))
        return out

    def _series(self, name: str, q: ReportedQuantity):
        """An agent's ``(estimates, standard errors, valid, truth)`` of quantity ``q``: the
        arrays ``(n, C)`` at every checkpoint and ``(n,)``."""
        d = self.data[name]
        if q.policy is not None:
            truth = list(self.policy_values.values())[q.policy]
            est, se = d["policy_estimate"][:, :, q.policy], d["policy_se"][:, :, q.policy]
            return est, se, d["policy_valid"], truth
        if q.target is None:
            return d["value_estimate"], d["value_se"], d["valid"], self.optimal_value
        est, se = d["estimate"][:, :, q.target, q.arm], d["se"][:, :, q.target, q.arm]
        return est, se, d["valid"], float(self.truth[q.target, q.arm])

    def policy_notes(self, name: str) -> list[str]:
        """Why the target policies' values are missing for some of an agent's trials, if
        they are."""
        refusals = self.data[name].get("policy_refusals", [])
        if not refusals:
            return []
        rounds, reason = min(refusals, key=lambda r: r[0])
        labels = ", ".join(policy_label(p) for p in self.policy_values)
        return [
            f"policy evaluation ({labels}) refused a target in {len(refusals)} unit(s) of "
            f"trials, the first after {rounds} rounds: {reason}"
        ]

    def notes(self, name: str) -> list[str]:
        """Why inference is missing for some of an agent's trials, if it is (the target
        policies' own reasons: :meth:`policy_notes`)."""
        d = self.data[name]
        n = len(d["trials"])
        out = []
        zero = int(np.sum(d["min_propensity"] <= 0))
        if zero:
            out.append(
                f"π_t(a) = 0 for some arm after the warm start in {zero} of {n} trials: "
                "inverse-propensity inference is undefined there (docs/method.md §4)"
            )
        if d["refusals"]:
            rounds, reason = min(d["refusals"], key=lambda r: r[0])
            units = len(d["refusals"])
            out.append(
                f"the inference wrappers refused a round in {units} unit(s) of trials, the "
                f"first after {rounds} rounds: {reason}"
            )
        return out + self.warning_notes(name)

    def warning_notes(self, name: str) -> list[str]:
        """The package's own warnings an agent's units raised (a warm start too short for
        the theory, a biased ``V*`` estimate, propensities too small), each with the number
        of units that raised it: an interval either covers or says it may not."""
        units = self.data[name].get("warnings", [])
        return [
            f"{category.__name__} in {count} of {len(units)} unit(s) of trials: {message}"
            for category, message, count in count_warnings(units)
            if category.__module__.split(".")[0] in _PACKAGES
        ]

    # -- tables -------------------------------------------------------------------------
    def regret(self, as_frame: bool | None = None):
        """Per-round cumulative regret per agent and trial.

        A long DataFrame (``agent``, ``trial``, ``round``, ``cumulative_regret``) when pandas
        is installed (or ``as_frame=True``), else ``{agent: ndarray (n_trials, rounds)}``.
        """
        pd = _pandas(as_frame)
        if pd is None:
            return {name: self.data[name]["regret"] for name in self.agents}
        frames = []
        for name in self.agents:
            d = self.data[name]
            n, rounds = d["regret"].shape
            frames.append(
                pd.DataFrame(
                    {
                        "agent": name,
                        "trial": np.repeat(d["trials"], rounds),
                        "round": np.tile(np.arange(1, rounds + 1), n),
                        "cumulative_regret": d["regret"].reshape(-1),
                    }
                )
            )
        frame = pd.concat(frames, ignore_index=True)
        frame["agent"] = pd.Categorical(frame["agent"], categories=self.agents)
        return frame

    def shared_trials(self) -> int:
        """Trials every agent played (the first ones, with the same seeds for all): the
        trials ``0, 1, …`` up to the first that some agent lacks (a partial run may leave
        gaps)."""

        def leading(trials) -> int:
            trials = np.asarray(trials)
            gaps = np.flatnonzero(trials != np.arange(trials.size))
            return int(gaps[0]) if gaps.size else int(trials.size)

        return min(leading(self.data[name]["trials"]) for name in self.agents)

    def summary(self, as_frame: bool | None = None):
        """One row per agent: regret, estimation error, time and inference at a glance."""
        from scipy.stats import trim_mean  # here: scipy.stats is slow to import

        rows = []
        shared = self.shared_trials()
        rounds = self.setting.rounds
        inference = self.inference(as_frame=False)
        for name in self.agents:
            d = self.data[name]
            final = d["regret"][:, -1]
            n = final.size
            err = d["estimation_error"]
            mine = [r for r in inference if r["agent"] == name]
            params = [r for r in mine if r["quantity"].startswith("<M_") and r["trials"]]
            value = next(r for r in mine if r["quantity"] == "V*")
            policies = {}
            for policy in self.policy_values:
                r = next(r for r in mine if r["quantity"] == policy_label(policy))
                key = policy.replace(" ", "_")
                policies[f"coverage_policy_{key}"] = r["coverage"]
                policies[f"width_policy_{key}"] = r["mean_width"]
            rows.append(
                {
                    "agent": name,
                    "kind": self.info["kinds"].get(name, ""),
                    "trials": n,
                    "final_regret_mean": float(final.mean()),
                    "final_regret_se": float(final.std(ddof=1) / np.sqrt(n)) if n > 1 else np.nan,
                    "final_regret_iqm": float(trim_mean(final, 0.25)),
                    "shared_trials": shared,
                    "shared_regret_mean": float(final[:shared].mean()) if shared else np.nan,
                    "estimation_error": (
                        float(np.nanmean(err[:, -1])) if err is not None else np.nan
                    ),
                    "ms_per_round": 1e3 * d["seconds"] / (n * rounds),
                    "agent_ms_per_round": 1e3 * d["agent_seconds"] / (n * rounds),
                    "coverage_params_min": (
                        min(r["coverage"] for r in params) if params else np.nan
                    ),
                    "coverage_params_max": (
                        max(r["coverage"] for r in params) if params else np.nan
                    ),
                    "coverage_value": value["coverage"],
                    "width_value": value["mean_width"],
                    **policies,
                    "min_propensity": float(np.min(d["min_propensity"])),
                    "notes": " | ".join(self.notes(name) + self.policy_notes(name)),
                }
            )
        pd = _pandas(as_frame)
        return rows if pd is None else pd.DataFrame(rows)

    def inference(self, as_frame: bool | None = None, checkpoint: int = -1):
        """Coverage (with its Monte Carlo s.e. and Wilson interval) and mean width of every
        interval, per agent, at a checkpoint (default: the last round), over the trials where
        inference is defined."""
        z = self._z()
        rows = []
        for name in self.agents:
            for q in self.quantities():
                est, se, valid, truth = self._series(name, q)
                row = {"agent": name, "quantity": q.label, "truth": truth}
                row.update(_coverage(est[:, checkpoint], se[:, checkpoint], truth, valid, z))
                notes = self.warning_notes(name) if row["trials"] else self.notes(name)
                if q.policy is not None:  # said even when some trials remain
                    notes = self.policy_notes(name) + notes
                row["note"] = " | ".join(notes) if notes or row["trials"] else "none"
                rows.append(row)
        pd = _pandas(as_frame)
        return rows if pd is None else pd.DataFrame(rows)

    def curves(self) -> dict[str, dict[str, np.ndarray]]:
        """Per agent, against :attr:`checkpoints`: mean cumulative regret, mean estimation
        error (over trials and arms; NaN without an estimate) and the mean width of every
        interval (``{label: (C,)}``)."""
        z = self._z()
        out = {}
        c = self.checkpoints - 1
        for name in self.agents:
            d = self.data[name]
            widths = {}
            for q in self.quantities():
                _, se, valid, _ = self._series(name, q)
                se = np.where(valid[:, None], se, np.nan)
                with np.errstate(all="ignore"), _quiet():
                    widths[q.label] = 2 * z * np.nanmean(se, axis=0)
            err = d["estimation_error"]
            with _quiet():
                error = np.nanmean(err, axis=(0, 2)) if err is not None else np.full(c.size, np.nan)
            out[name] = {
                "regret": d["regret"][:, c].mean(axis=0),
                "estimation_error": error,
                "widths": widths,
            }
        return out

    # -- text ---------------------------------------------------------------------------
    def to_markdown(self) -> str:
        """The summary and the inference table as Markdown."""
        s = self.setting
        e = s.env_kwargs
        level = f"{100 * s.confidence_level:g}%"
        shared = self.shared_trials()
        first = f"trials 0–{shared - 1}" if shared else "shared trials (none)"
        lines = [
            f"Setting: d1 = {e.get('d1', 50)}, d2 = {e.get('d2', 50)}, r = {e.get('rank', 3)}, "
            f"K = {self.truth.shape[1]}, {s.rounds} rounds, seed {self.info['seed']}; "
            f"wrappers' own warm start {s.warm_start} rounds.",
            "",
            f"| agent | trials | final regret (mean ± s.e.) | IQM | regret, {first} "
            "| ‖M̂_a − M_a‖_F | ms / trial-round (agent) |",
            "|---|---|---|---|---|---|---|",
        ]
        if self.partial:
            done, planned = self.info["trials_done"], self.info["trials_planned"]
            counts = ", ".join(f"{n} {done[n]} of {planned[n]}" for n in planned)
            lines[:0] = [f"**PARTIAL RESULT ({self.interrupted}: {counts}).**", ""]
        for r in self.summary(as_frame=False):
            err = "—" if np.isnan(r["estimation_error"]) else f"{r['estimation_error']:.3f}"
            lines.append(
                f"| {r['agent']} | {r['trials']} | {r['final_regret_mean']:.1f} ± "
                f"{r['final_regret_se']:.1f} | {r['final_regret_iqm']:.1f} | "
                f"{r['shared_regret_mean']:.1f} | {err} | {r['ms_per_round']:.3f} "
                f"({r['agent_ms_per_round']:.3f}) |"
            )
        labels = [q.label for q in self.quantities()]
        lines += [
            "",
            f"Coverage of the {level} intervals after round {s.rounds} on each agent's own "
            "trajectory, with its 95% Monte Carlo (Wilson) interval, and the mean width in "
            "parentheses"
            + (
                f"; {', '.join(policy_label(p) for p in self.policy_values)} are the values of "
                "fixed target policies evaluated on that trajectory (docs/method.md §9)"
                if self.policy_values
                else ""
            )
            + ":",
            "",
            "| agent | trials | " + " | ".join(labels) + " |",
            "|---|---|" + "---|" * len(labels),
        ]
        rows = self.inference(as_frame=False)
        notes = []
        for name in self.agents:
            mine = {r["quantity"]: r for r in rows if r["agent"] == name}
            n = max(r["trials"] for r in mine.values())
            cells = []
            for label in labels:
                r = mine[label]
                if not r["trials"]:
                    cells.append("n/a")
                else:
                    cells.append(f"{format_coverage(r)} ({r['mean_width']:.3g})")
            lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
            agent_notes = self.notes(name) + self.policy_notes(name)
            if agent_notes:
                notes.append(f"- {name}: " + "; ".join(agent_notes))
        if notes:
            lines += ["", "Notes:", *notes]
        return "\n".join(lines)

    # -- files --------------------------------------------------------------------------
    def stamp(self) -> RunStamp:
        """What names this comparison in every file it writes: setting, agents, seed."""
        s = self.setting
        settings = {
            "env_kwargs": dict(s.env_kwargs),
            "rounds": s.rounds,
            "warm_start": s.warm_start,
            "agents": list(self.agents),
            "trials": {n: int(self.data[n]["regret"].shape[0]) for n in self.agents},
        }
        seed = self.info.get("seed")
        return RunStamp.of("lrbandit compare", settings, seed, partial=self.interrupted)

    def save(
        self, out: str | Path, figures: bool = True, stream=None, overwrite: bool = False
    ) -> dict[str, Any]:
        """Write ``compare.{json,csv,md,npz}``, ``compare_inference.csv``,
        ``compare_regret.csv`` (mean, s.e. and quartiles of the cumulative regret at every
        round) and, with ``figures`` and matplotlib, the PNG figures into the folder ``out``;
        returns the paths.  Each file names the run (:meth:`stamp`) and is written
        atomically; :data:`OUTPUT_FILES` already in ``out`` are refused unless ``overwrite``
        (:class:`~.outputs.OutputError`, before anything is written), and those this call
        does not write again are then removed."""
        out = Path(out)
        earlier = check_outputs(out, OUTPUT_FILES, overwrite)
        out.mkdir(parents=True, exist_ok=True)
        stamp = self.stamp()
        summary = self.summary(as_frame=False)
        inference = self.inference(as_frame=False)
        paths: dict[str, Any] = {}
        paths["csv"] = write_csv(out / "compare.csv", summary, stamp)
        paths["inference_csv"] = write_csv(out / "compare_inference.csv", inference, stamp)
        paths["regret_csv"] = write_csv(out / "compare_regret.csv", self._regret_rows(), stamp)
        paths["markdown"] = write_text(out / "compare.md", self.to_markdown() + "\n", stamp)
        arrays = {"truth": self.truth, "optimal_value": np.array(self.optimal_value)}
        arrays["checkpoints"] = self.checkpoints
        arrays["policy_values"] = np.array(list(self.policy_values.values()), dtype=float)
        skipped = ("refusals", "policy_refusals", "warnings", "seconds", "agent_seconds")
        for name in self.agents:
            for key, value in self.data[name].items():
                if key not in skipped and value is not None:
                    arrays[f"{name}/{key}"] = np.asarray(value)
        paths["npz"] = write_npz(out / "compare.npz", arrays, stamp)
        paths["figures"] = []
        if figures:
            with stamped(stamp):
                paths["figures"] = self.figures(out, stream=stream)
        meta = {
            "setting": {
                "env_kwargs": self.setting.env_kwargs,
                "rounds": self.setting.rounds,
                "targets": list(self.setting.targets),
                "checkpoints": list(self.setting.checkpoints),
                "warm_start": self.setting.warm_start,
                "confidence_level": self.setting.confidence_level,
            },
            **self.info,
            "truth": self.truth.tolist(),
            "optimal_value": self.optimal_value,
            "policy_values": self.policy_values,
            "summary": summary,
            "inference": inference,
            "seconds": {n: self.data[n]["seconds"] for n in self.agents},
            "versions": _versions(),
            "files": paths,
        }
        paths["json"] = str(out / "compare.json")
        write_json(out / "compare.json", json.loads(json.dumps(meta, default=_json)), stamp)
        written = [v for k, v in paths.items() if k != "figures"] + list(paths["figures"])
        remove_stale(earlier, written, stream)
        return paths

    def _regret_rows(self) -> list[dict]:
        rows = []
        for name in self.agents:
            reg = self.data[name]["regret"]
            n = reg.shape[0]
            mean = reg.mean(axis=0)
            se = reg.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.full_like(mean, np.nan)
            q25, q75 = np.percentile(reg, [25, 75], axis=0)
            for t in range(reg.shape[1]):
                rows.append(
                    {
                        "agent": name,
                        "round": t + 1,
                        "mean": float(mean[t]),
                        "se": float(se[t]),
                        "q25": float(q25[t]),
                        "q75": float(q75[t]),
                    }
                )
        return rows

    def figures(self, out: str | Path, stream=None) -> list[str]:
        """PNG figures (needs matplotlib; without it, one line on ``stream`` and none):
        cumulative regret with its across-trial interquartile band, estimation error and the
        mean width of every interval against rounds."""
        from lrbandit_gym.experiments.compare.figures import comparison_figures
        from lrbandit_gym.experiments.figures import MISSING_MATPLOTLIB, MatplotlibMissing

        try:
            return [str(p) for p in comparison_figures(self, Path(out))]
        except MatplotlibMissing:
            if stream is not None:
                print(f"figures skipped: {MISSING_MATPLOTLIB}", file=stream)
            return []


class _quiet:
    """Silence numpy's warnings about all-NaN slices (agents without an estimate)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def _json(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _versions() -> dict:
    import gymnasium
    import scipy

    import lrbandit_gym

    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "gymnasium": gymnasium.__version__,
        "lrbandit_gym": lrbandit_gym.__version__,
        "platform": platform.platform(),
    }
    for module in ("stable_baselines3", "torch"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            versions[module] = None
    return versions
