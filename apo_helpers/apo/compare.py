"""Every objective from the same pi_ref, goals and budget, side by side (notebook 05).

``compare`` runs ``python -m apo_helpers train`` once per (objective, seed) in a fresh process, so each run's peak
memory is its own, then joins their histories and val evaluations into curves against wall-clock seconds,
environment episodes and generated tokens, and a summary per objective. A*PO's stage 1 (and the V* the simpler
variants use) is reported separately and added in, since the paper's comparison leaves open whether it counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

OBJECTIVE_SETTINGS = {
    "apo": [],
    "apo_split": [],
    "grpo": ["group_size=8"],
    "starpo_s": ["group_size=8"],
    "ppo": [],
    "kl_pg": [],
    "weighted_sft": [],
}
"""``--set`` overrides per objective: the group objectives sample 8 rollouts per goal (GRPO's n; 32 episodes per
iteration stay 32 episodes); the others one rollout per goal."""
USES_VSTAR = {"apo", "apo_split", "kl_pg", "weighted_sft"}
"""Objectives whose targets use stage 1's V* (they pay for it)."""
COMPARED_OBJECTIVES = ["apo", "grpo", "ppo", "starpo_s", "kl_pg", "weighted_sft"]
"""What ``compare`` runs by default (notebook 05): A*PO and the baselines; ``apo_split``, this project's variant for
the item-page decision, is studied in notebook 04 section 6 instead."""


def run_one(objective: str, seed: int, profile: str, out: Path, ref: str | None, vstar: str,
            iterations: int | None, extra: list[str], threads: int | None = None) -> dict:
    """One training run in its own process (``threads`` torch threads when given); returns its metrics.json."""
    command = [sys.executable, "-m", "apo_helpers", "train", "--objective", objective, "--profile", profile,
               "--seeds", str(seed), "--out", str(out), "--vstar", vstar, "--resume", "--json", "--skip-ref",
               "--set", *OBJECTIVE_SETTINGS.get(objective, []), *extra]
    if ref:
        command += ["--ref", ref]
    if iterations:
        command += ["--iterations", str(iterations)]
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"training {objective} seed {seed} failed:\n{done.stderr[-3000:]}")
    return json.loads((out / f"seed_{seed}" / "metrics.json").read_text())


def curves(out: Path, objective: str, seed: int, batch_goals: int) -> pd.DataFrame:
    """Val success at each evaluation against cumulative training seconds, episodes and generated tokens."""
    run = out / f"seed_{seed}"
    history, evals = pd.read_csv(run / "history.csv"), pd.read_csv(run / "evals.csv")
    cumulative = pd.DataFrame({"iteration": [0, *history["iteration"]],
                               "seconds": [0.0, *history["seconds"].cumsum()],
                               "episodes": [0, *(history["iteration"] * batch_goals)],
                               "tokens": [0, *history["generated_tokens"].cumsum()]})
    table = evals.merge(cumulative, on="iteration", how="left")
    return table.assign(objective=objective, seed=seed)[["objective", "seed", "iteration", "seconds", "episodes",
                                                         "tokens", "success", "score"]]


DYNAMICS = ["reward", "success", "kl", "invalid_rate", "entropy", "grad_norm", "generated_tokens", "seconds"]
"""Per-iteration training columns ``dynamics`` keeps: enough to see a run drift away from pi_ref."""


def dynamics(out_dir, objectives: list[str], seeds: list[int]) -> pd.DataFrame:
    """Every run's per-iteration training history (sampled reward and success, KL to pi_ref, invalid-action rate,
    entropy, gradient norm, tokens, seconds), one row per (objective, seed, iteration)."""
    frames = []
    for objective in objectives:
        for seed in seeds:
            history = pd.read_csv(Path(out_dir) / objective / f"seed_{seed}" / "history.csv")
            frames.append(history[["iteration", *DYNAMICS]].assign(objective=objective, seed=seed))
    table = pd.concat(frames, ignore_index=True)
    return table[["objective", "seed", "iteration", *DYNAMICS]]


def time_to_target(curve: pd.DataFrame, target: float) -> float | None:
    """Training seconds until val success first reaches ``target`` (None when it never does)."""
    reached = curve[curve["success"] >= target]
    return float(reached["seconds"].iloc[0]) if len(reached) else None


def summarize(metrics: list[dict], all_curves: pd.DataFrame, target: float) -> pd.DataFrame:
    """One row per objective: test success mean and spread over seeds, score, time to target (with and without
    stage 1), episodes, tokens, peak memory."""
    rows = []
    frame = pd.DataFrame(metrics)
    for objective, runs in frame.groupby("objective", sort=False):
        stage1 = float(runs["vstar_seconds"].dropna().max()) if objective in USES_VSTAR and \
            runs["vstar_seconds"].notna().any() else 0.0
        reach = [time_to_target(all_curves[(all_curves["objective"] == objective) & (all_curves["seed"] == s)], target)
                 for s in runs["seed"]]
        reached = [r for r in reach if r is not None]
        rows.append({"objective": objective, "seeds": len(runs),
                     "test_success": runs["test_success"].mean(), "test_success_std": runs["test_success"].std(ddof=0),
                     "test_score": runs["test_score"].mean(), "train_seconds": runs["train_seconds"].mean(),
                     "stage1_seconds": stage1, "total_seconds": runs["train_seconds"].mean() + stage1,
                     f"seconds_to_val_{target:g}": sum(reached) / len(reached) if reached else None,
                     "seeds_reaching_target": len(reached),
                     "episodes": runs["episodes"].mean(), "generated_tokens": runs["generated_tokens"].mean(),
                     "peak_memory_mb": runs["peak_memory_mb"].max()})
    return pd.DataFrame(rows)


def compare(objectives: list[str], seeds: list[int], profile: str, out_dir, ref: str | None = None,
            vstar: str = "runs/vstar", iterations: int | None = None, target: float = 0.8,
            extra: list[str] | None = None, progress=print, jobs: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train every (objective, seed) and return ``(summary, curves)``; each run resumes when its folder exists.

    ``jobs`` runs train side by side, each with an equal share of the CPU cores as torch threads (more processes
    than cores slow every run down: measured on 2 cores, 3 single-threaded runs took 2.4x the time of 2)."""
    from ..config import get_profile

    batch = get_profile(profile).apo.batch_goals
    out_dir = Path(out_dir)
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    runs = [(objective, seed) for objective in objectives for seed in seeds]

    def one(run: tuple[str, int]) -> dict:
        objective, seed = run
        result = run_one(objective, seed, profile, out_dir / objective, ref, vstar, iterations, extra or [], threads)
        progress(json.dumps({k: result[k] for k in ("objective", "seed", "test_success", "train_seconds",
                                                     "peak_memory_mb")}))
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        metrics = list(pool.map(one, runs))  # in the order of ``runs`` whatever order they finish in
    table = pd.concat([curves(out_dir / o, o, s, batch) for o, s in runs], ignore_index=True)
    return summarize(metrics, table, target), table


def sweep(name: str, values: list[str], seed: int, profile: str, out_dir, ref: str | None = None,
          vstar: str = "runs/vstar", iterations: int | None = None, objective: str = "apo",
          extra: list[str] | None = None, progress=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run per value of an ``APOConfig`` field (e.g. beta2): its test and val success, and its KL to pi_ref
    over the last quarter of the iterations; returns ``(table, per-iteration histories)``."""
    out_dir = Path(out_dir)
    rows, histories = [], []
    for value in values:
        folder = out_dir / f"{name}={value}"
        result = run_one(objective, seed, profile, folder, ref, vstar, iterations, [*(extra or []), f"{name}={value}"])
        history = pd.read_csv(folder / f"seed_{seed}" / "history.csv")
        tail = history.tail(max(1, len(history) // 4))
        rows.append({name: value, "test_success": result["test_success"], "test_score": result["test_score"],
                     "val_success": result["val_success"], "kl_last_quarter": tail["kl"].mean(),
                     "log_ratio_abs_last_quarter": tail["log_ratio_abs"].mean(),
                     "train_reward_last_quarter": tail["reward"].mean(), "iterations": result["iterations"]})
        histories.append(history.assign(**{name: value}))
        progress(json.dumps(rows[-1]))
    return pd.DataFrame(rows), pd.concat(histories, ignore_index=True)
