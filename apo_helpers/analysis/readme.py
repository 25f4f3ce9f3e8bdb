"""Fill the README's result tables from the committed result files, so no number there is typed by hand.

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``; ``update_readme()`` rewrites them from
``data/results/`` (``make report`` calls it; ``tests/test_repository.py`` checks the README is up to date).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from ..config import PROJECT_ROOT, RESULTS_DIR

README = PROJECT_ROOT / "README.md"


def _markdown(df: pd.DataFrame) -> str:
    header = "| " + " | ".join(df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def baselines_table(results: Path = RESULTS_DIR) -> str | None:
    path = results / "baselines_test.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    table = pd.DataFrame({
        "agent": df["agent"],
        "success rate [95% CI]": [f"{s:.1%} [{lo:.1%}, {hi:.1%}]" for s, lo, hi in
                                  zip(df["success_rate"], df["ci95_low"], df["ci95_high"])],
        "mean score": df["mean_score"].map("{:.3f}".format),
        "mean steps": df["mean_steps"].map("{:.2f}".format),
        "invalid actions": df["invalid_rate"].map("{:.1%}".format),
        "episodes": df["episodes"]})
    return _markdown(table)


def bench_env_table(results: Path = RESULTS_DIR) -> str | None:
    path = results / "bench_env.json"
    if not path.exists():
        return None
    runs = json.loads(path.read_text())
    table = pd.DataFrame({
        "products": [f"{r['products']:,}" for r in runs],
        "env steps/s (median)": [f"{r['steps_per_second']:,.0f}" for r in runs],
        "search ms (median)": [f"{r['search_ms_median']:.3f}" for r in runs],
        "search ms (p95)": [f"{r['search_ms_p95']:.3f}" for r in runs],
        "catalog + index build s": [f"{r['catalog_seconds'] + r['index_seconds']:.1f}" for r in runs]})
    return _markdown(table)


def pi_ref_table(results: Path = RESULTS_DIR) -> str | None:
    path = results / "pi_ref_class.json"
    if not path.exists():
        return None
    m = json.loads(path.read_text())
    table = pd.DataFrame([{
        "policy": "π_ref (tiny Llama, imitation)",
        "test success [95% CI]": f"{m['test_success_rate']:.1%} [{m['test_ci95'][0]:.1%}, {m['test_ci95'][1]:.1%}]",
        "test mean score": f"{m['test_mean_score']:.3f}",
        "test invalid actions": f"{m['test_invalid_rate']:.1%}",
        "val success": f"{m['val_success_rate']:.1%}",
        f"val pass@{m['k']}": f"{m['val_pass_at_k']:.1%}",
        "demonstrations": m["demonstrations"],
        "training minutes (CPU)": f"{m['train_seconds'] / 60:.1f}"}])
    return _markdown(table)


def bench_rollout_table(results: Path = RESULTS_DIR) -> str | None:
    path = results / "bench_rollout.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    table = pd.DataFrame([{
        "episodes in lockstep": r["batch"], "model": r["model"], "device": r["device"],
        "tokens/s batched": f"{r['tokens_per_second_batched']:,.0f}",
        "tokens/s one at a time": f"{r['tokens_per_second_sequential']:,.0f}", "speed-up": f"{r['speedup']:.1f}x"}])
    return _markdown(table)


def trained_table(results: Path = RESULTS_DIR) -> str | None:
    """One row per trained objective (mean and spread over seeds) with pi_ref's row, from ``*_class_seeds.csv``."""
    paths = sorted(results.glob("*_class_seeds.csv"))
    if not paths:
        return None
    rows, ref = [], None
    for path in paths:
        df = pd.read_csv(path)
        ref = df[df["objective"] == "pi_ref"].iloc[0] if ref is None else ref
        for objective, runs in df[df["objective"] != "pi_ref"].groupby("objective"):
            rows.append({"policy": objective, "seeds": len(runs),
                         "test success (mean ± std over seeds)": f"{runs['test_success'].mean():.1%} ± "
                                                                 f"{runs['test_success'].std(ddof=0):.1%}",
                         "per seed": ", ".join(f"{v:.1%}" for v in runs["test_success"]),
                         "test mean score": f"{runs['test_score'].mean():.3f}",
                         "mean steps": f"{runs['test_steps'].mean():.2f}",
                         "iterations": int(runs["iterations"].iloc[0]),
                         "training minutes per seed (CPU)": f"{runs['train_seconds'].mean() / 60:.1f}"})
    rows.insert(0, {"policy": "pi_ref (start)", "seeds": "-", "test success (mean ± std over seeds)":
                    f"{ref['test_success']:.1%}", "per seed": "-", "test mean score": f"{ref['test_score']:.3f}",
                    "mean steps": f"{ref['test_steps']:.2f}", "iterations": 0, "training minutes per seed (CPU)": "-"})
    return _markdown(pd.DataFrame(rows))


def bench_train_table(results: Path = RESULTS_DIR) -> str | None:
    path = results / "bench_train.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    table = pd.DataFrame([{
        "goals per iteration": r["batch_goals"], "device": r["device"], "threads": r["torch_threads"],
        "iteration s (median)": f"{r['seconds_median']:.2f}", "rollout s": f"{r['rollout_seconds_median']:.2f}",
        "policy forward s": f"{r['policy_forward_seconds_median']:.2f}", "π_ref scoring s": f"{r['ref_seconds_median']:.2f}",
        "backward + step s": f"{r['update_seconds_median']:.2f}", "target s": f"{r['target_seconds']:.0f}"}])
    return _markdown(table)


SECTIONS = {"baselines": baselines_table, "bench-env": bench_env_table, "pi-ref": pi_ref_table,
            "bench-rollout": bench_rollout_table, "trained": trained_table, "bench-train": bench_train_table}


def render_readme(text: str, results: Path = RESULTS_DIR) -> str:
    """``text`` with every known section filled from ``results`` (sections without a result file are left alone)."""
    for name, make in SECTIONS.items():
        table = make(results)
        if table is None:
            continue
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)
    return text


def update_readme(path: Path = README) -> bool:
    """Rewrite the README's tables; returns whether anything changed."""
    old = path.read_text()
    new = render_readme(old)
    if new != old:
        path.write_text(new)
    return new != old
