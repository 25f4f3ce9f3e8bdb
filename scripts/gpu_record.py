"""Record a lease of scripts/gpu_lease.sh from the log folder it brought back, with no number typed by hand.

    python scripts/gpu_record.py LOG NAME RECORD   # e.g. /tmp/res apo_gpu_sloppy_lr2e5_long gpu_sloppy_lr2e5_long_run

Writes under data/results/: RECORD.json (the device, pi_ref's training and greedy test result, stage 1, the
commands, the seeds that did not finish), NAME_gpu_seeds.csv (one row per finished seed: the gathered table,
LOG/results.csv, when the chain got that far, else the metrics each finished seed printed last in LOG/seed_k.log,
which are the rows the gather would have written) and NAME_gpu_progress.csv (each seed's iterations as its progress
bar showed them: KL, reward and success of the batch, the latest val success; rounded to two decimals), which is
all that comes back of a seed whose call ended before its test evaluation. It records the chain's first round; the
gather of each later round (ROUNDS) writes that round's tables itself, as LOG/r<r>_results.csv too.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

from apo_helpers.config import get_profile

RESULTS = Path("data/results")
BAR = re.compile(r"seed (\d+):.*?(\d+)/\d+ \[[^\]]*, "
                 r"kl=([-\d.]+), reward=([-\d.]+), success=([-\d.]+), val=([-\d.]+)\]")
NOT_STAGE1 = r"(lr|warmup|eval_every|eval_episodes|checkpoint_every|max_minutes)="


def lines(path: Path) -> list[str]:
    """A log's lines, a progress bar's redraws (carriage returns) each on its own."""
    return path.read_text(errors="replace").replace("\r", "\n").splitlines()


def progress(log: list[str]) -> pd.DataFrame:
    """The last postfix the progress bar showed at each iteration (the bar ticks, then shows that iteration's)."""
    rows = {}
    for line in log:
        if match := BAR.search(line):
            seed, iteration, *values = match.groups()
            rows[int(iteration)] = dict(seed=int(seed), iteration=int(iteration),
                                        **dict(zip(("kl", "reward", "success", "val"), map(float, values))))
    return pd.DataFrame(list(rows.values()))


def finished(log: list[str]) -> dict | None:
    """The metrics a seed prints once its test evaluation is done; None when it never got there."""
    printed = [line for line in log if line.startswith('{"objective"')]
    return json.loads(printed[-1]) if printed else None


def ref_metrics(log: Path) -> dict:
    """pi_ref's ``metrics.json``: the copy the chain made at its end, else the same text train-ref printed last."""
    if (log / "pi_ref_metrics.json").exists():
        return json.loads((log / "pi_ref_metrics.json").read_text())
    text = lines(log / "train_ref.log")
    return json.loads("\n".join(text[len(text) - 1 - text[::-1].index("{"):]))


def train_command(ref: str, out: str, profile: str, stage1: str, lr: str, minutes: str) -> str:
    """The chain's training command for the three seeds of one round, as gpu_lease.sh runs it."""
    return (f"train --ref {ref} --profile {profile} --iterations 60 --skip-ref --out {out} --set {stage1} "
            f"lr={lr} warmup=2 eval_every=1000 eval_episodes=64 checkpoint_every=1000 "
            f"max_minutes={minutes} --seeds k (k = 0, 1, 2 side by side)")


def later_rounds(timeline: str, name: str, profile: str, stage1: str, lr: str) -> list[str]:
    """The commands of each re-anchored round (ROUNDS > 1) the timeline shows a training budget for; that round's
    gather wrote its own tables (``NAME_r<r>_PROFILE_*.csv``)."""
    commands = []
    for r, minutes in re.findall(r"round (\d+) training budget: (\S+) minutes", timeline):
        if int(r) == 1:
            continue
        prev = f"runs/{name}" + (f"_r{int(r) - 1}" if int(r) > 2 else "")
        commands += [
            f"vstar --ref {prev}/seed_k/policy --profile {profile} --set {stage1} (k = 0, 1, 2 side by side)",
            train_command(f"'{prev}/seed_{{seed}}/policy'", f"runs/{name}_r{r}", profile, stage1, lr, minutes)]
    return commands


def main(log: str, name: str, record: str, profile: str = "gpu") -> None:
    log = Path(log)
    seed_logs = [lines(path) for path in sorted(log.glob("seed_*.log"))]
    gathered = log / "results.csv"
    seeds = pd.read_csv(gathered) if gathered.exists() else pd.DataFrame(
        [m for m in map(finished, seed_logs) if m is not None])
    traces = pd.concat(map(progress, seed_logs), ignore_index=True)
    metrics = ref_metrics(log)
    ref_cfg = get_profile(profile).reference
    test = json.loads((log / "pi_ref_test.json").read_text())
    vstar = json.loads((log / "vstar.json").read_text())
    timeline = (log / "timeline.txt").read_text()
    stamps = re.findall(r"\+(\d+)s\] ([^:;\n]+)", timeline)
    lr = re.search(r"lr (\S+),", timeline).group(1)  # the chain's first line names the A*PO rate it ran with
    num = metrics["numerics"]
    overrides = seeds["apo_overrides"].iloc[0]
    stage1 = " ".join(w for w in overrides.split() if not re.match(NOT_STAGE1, w))
    minutes = re.search(r"max_minutes=(\S+)", overrides).group(1)
    done = set(seeds.loc[seeds["objective"] == "apo", "seed"].astype(int))
    ref = f"runs/pi_ref_{profile}_skip_options_0.5"
    unfinished = {int(s): {"iterations": int(t["iteration"].max()), "last_val_success": float(t["val"].iloc[-1]),
                           "last_kl": float(t["kl"].iloc[-1])}
                  for s, t in traces.groupby("seed") if int(s) not in done}
    out = {
        "device": f"{num['gpu']} (torch {num['torch']}, transformers {num['transformers']})",
        "model": "smollm2-135m", "demonstrator": "options ignored in 50%",
        "lease": "one session's 15 minutes of a lent H200: scripts/gpu_lease.sh, pi_ref to seeds",
        "timeline_seconds": {step: int(s) for s, step in stamps},
        "pi_ref": {"sft_steps": ref_cfg.sft_steps, "sft_batch": ref_cfg.batch_size, "lr": ref_cfg.lr,
                   "demonstrations": metrics["demonstrations"], "demo_skip_options": metrics["demo_skip_options"],
                   "train_seconds": metrics["train_seconds"], "final_loss": metrics["final_loss"],
                   "test_success_rate": test["success_rate"], "test_mean_score": test["mean_score"],
                   "test_mean_steps": test["mean_steps"], "test_invalid_rate": test["invalid_rate"],
                   "test_episodes": test["episodes"], "test_ci95": test["success_ci95"]},
        "vstar": {k: vstar[k] for k in ("key", "goals", "N", "beta1", "mean_vstar", "mean_reward", "sample_success",
                                        "goals_never_solved", "dropped_by_filters")},
        "seeds_finished": sorted(done),
        "seeds_unfinished": unfinished,
        "max_kl": float(traces["kl"].max()),
        "commands": [
            f"train-ref --profile {profile} --skip-options 0.5 --no-eval",
            f"evaluate --agent {ref} --profile {profile} --split test (beside stage 1)",
            f"vstar --ref {ref} --profile {profile} --set {stage1}",
            train_command(ref, f"runs/{name}", profile, stage1, lr, minutes),
            *later_rounds(timeline, name, profile, stage1, lr)],
    }
    RESULTS.joinpath(f"{record}.json").write_text(json.dumps(out, indent=1) + "\n")
    seeds.to_csv(RESULTS / f"{name}_{profile}_seeds.csv", index=False)
    traces.to_csv(RESULTS / f"{name}_{profile}_progress.csv", index=False)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
