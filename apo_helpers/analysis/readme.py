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


SECTIONS = {"baselines": baselines_table, "bench-env": bench_env_table, "pi-ref": pi_ref_table,
            "bench-rollout": bench_rollout_table}


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
