"""Fill the README's result tables from the committed result files, so no number there is typed by hand.

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` in the README or in the experiment log
``docs/experiments.md`` (``DOCUMENTS``); ``update_readme()`` rewrites them from ``data/results/`` (``make report``
calls it; ``tests/test_repository.py`` checks both documents are up to date).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from ..config import PROJECT_ROOT, RESULTS_DIR, TARGET_GAIN, get_profile

README = PROJECT_ROOT / "README.md"
EXPERIMENTS = PROJECT_ROOT / "docs" / "experiments.md"
DOCUMENTS = (README, EXPERIMENTS)
"""The documents whose tables are rendered: the README (headline results) and the full experiment log."""


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


def bench_update_memory_table(results: Path = RESULTS_DIR) -> str | None:
    """``bench update-memory --save``: one update's peak memory and seconds, the whole batch's backward against one
    micro-batch's at a time (``APOConfig.max_graph_tokens``), a row per batch size."""
    path = results / "bench_update_memory.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    table = pd.DataFrame([{
        "model": f"{Path(r['model']).name} ({r['parameters'] / 1e6:.1f}M)", "machine": bench_machine(r),
        "episodes": row["episodes"], "turns": row["turns"], "scored tokens": f"{row['scored_tokens']:,}",
        "peak MB, whole batch": f"{row['whole_peak_mb_median']:,.0f}",
        "peak MB, by micro-batch": f"{row['lean_peak_mb_median']:,.0f}", "memory ratio": f"{row['peak_ratio']:.1f}x",
        "s whole / by micro-batch": f"{row['whole_seconds_median']:.2f} / {row['lean_seconds_median']:.2f}"}
        for row in r["rows"]])
    return _markdown(table)


def bench_rollout_table(results: Path = RESULTS_DIR) -> str | None:
    path = results / "bench_rollout.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    table = pd.DataFrame([{
        "episodes in lockstep": r["batch"], "model": r["model"], "device": r["device"], "machine": bench_machine(r),
        "tokens/s batched": f"{r['tokens_per_second_batched']:,.0f}",
        "tokens/s one at a time": f"{r['tokens_per_second_sequential']:,.0f}", "speed-up": f"{r['speedup']:.1f}x",
        "prompt / reply tokens per turn": f"{r['prompt_tokens'] / r['turns']:.0f} / "
                                          f"{r['generated_tokens']['batched'] / r['turns']:.0f}",
        "s batched / one at a time": f"{r['seconds_median']['batched']:.2f} / {r['seconds_median']['sequential']:.2f}",
        "of which prompt prefill s": f"{r['prefill_seconds_median']['batched']:.2f} / "
                                     f"{r['prefill_seconds_median']['sequential']:.2f}",
        "speed-up bound from prefill": f"{r['speedup_bound_from_prefill']:.1f}x"}])
    return _markdown(table)


def _recipe(runs: pd.DataFrame) -> str:
    """The runs' ``--set`` changes to the profile (``apo_overrides`` in their metrics): ``none`` when they ran on the
    profile's settings, ``not recorded`` for tables written before runs recorded them; for runs re-anchored on
    earlier runs' final policies (``ref_rounds``), how many iterations came before, and on what (each seed's own
    policy, or their average: ``ref_averaged``)."""
    if "apo_overrides" not in runs:
        return "not recorded"
    changes = runs["apo_overrides"].dropna()
    recipe = f"`{changes.iloc[0]}`" if len(changes) and changes.iloc[0] else "none"
    rounds = runs["ref_rounds"].dropna() if "ref_rounds" in runs else pd.Series(dtype=float)
    if len(rounds) and rounds.iloc[0] > 0:
        before = int(runs["ref_iterations"].dropna().iloc[0])
        averaged = runs["ref_averaged"].fillna(0) if "ref_averaged" in runs else pd.Series([0])
        anchor = f"the average of {int(averaged.iloc[0])} seeds' policies" if averaged.iloc[0] else "each seed's policy"
        recipe += f"; re-anchored on {anchor} after {before} iterations ({int(rounds.iloc[0])} run"
        recipe += "s)" if rounds.iloc[0] > 1 else ")"
    return recipe


def _minutes(runs: pd.DataFrame) -> str:
    """Mean training minutes per seed, and the device where it was not the CPU (a GPU's minutes are not comparable)."""
    minutes = f"{runs['train_seconds'].mean() / 60:.1f}"
    devices = runs["device"].dropna() if "device" in runs else pd.Series(dtype=str)
    gpu = [d for d in devices.unique() if not str(d).startswith("cpu")]
    return f"{minutes} ({', '.join(gpu)})" if gpu else minutes


def _pi_ref_groups(results: Path) -> tuple[dict, dict, dict, dict]:
    """The ``*_class_seeds.csv`` tables grouped by pi_ref: ``groups`` maps a pi_ref's key (its folder, ``ref``, or
    where a table does not record it its demonstrations and item pages; and its pi_ref row's test score, which tells
    a folder retrained in place from the first) to its tables; ``labels`` maps it to the fullest description any of
    its tables gives (the demonstrator, the item pages, the count), unique among the pi_refs; ``descriptions`` maps it
    to that description before the folder or "retrained in place" made it unique (pi_refs trained alike share it);
    ``stems`` maps a table (by ``id``) to its name, ``data/results/<name>_class_seeds.csv``."""
    groups: dict[tuple, list[pd.DataFrame]] = {}
    labels: dict[tuple, str] = {}
    stems = {}  # which data/results/<table>_class_seeds.csv a row comes from: runs of one objective differ by it
    for path in sorted(results.glob("*_class_seeds.csv")):
        df = pd.read_csv(path)
        stems[id(df)] = path.name.removesuffix("_class_seeds.csv")
        share = df["demo_skip_options"].dropna() if "demo_skip_options" in df else pd.Series(dtype=float)
        demos = (f"options ignored in {share.iloc[0]:.0%}" if len(share) and share.iloc[0] > 0 else "full expert")
        forgot = df["demo_forget_options"].dropna() if "demo_forget_options" in df else pd.Series(dtype=float)
        if len(forgot) and forgot.iloc[0] > 0:  # another sloppy pi_ref: items chosen as the expert does, no clicks
            demos = f"options checked, not selected in {forgot.iloc[0]:.0%}"
        marked = df["show_selected_options"].dropna() if "show_selected_options" in df else pd.Series(dtype=bool)
        if len(marked) and bool(marked.iloc[0]):  # another pi_ref: pages that say which option is selected
            demos += "; pages show the selection"
        thinks = df["demo_think"].dropna() if "demo_think" in df else pd.Series(dtype=str)
        if len(thinks) and thinks.iloc[0] != "short":  # another pi_ref: the same actions, thinks that read on
            demos += f"; {thinks.iloc[0]} thinks"
        queries = df["demo_query"].dropna() if "demo_query" in df else pd.Series(dtype=str)
        if len(queries) and queries.iloc[0] != "instruction":  # another pi_ref: another search demonstrated
            demos += f"; {queries.iloc[0]} queries"
        count = df["ref_demonstrations"].dropna() if "ref_demonstrations" in df else pd.Series(dtype=float)
        if len(count):  # another pi_ref: fewer (or more) demonstrations; tables written before do not record it
            demos += f"; {int(count.iloc[0])} demonstrations"
        size = df["ref_model_size"].dropna() if "ref_model_size" in df else pd.Series(dtype=str)
        if len(size):  # another pi_ref: a resized tiny Llama (train-ref --model)
            demos += f"; {size.iloc[0]}"
        for column, what in (("ref_pretrain_steps", "pretraining"), ("ref_sft_steps", "imitation")):
            steps = df[column].dropna() if column in df else pd.Series(dtype=float)
            if len(steps):  # another pi_ref: imitated longer or shorter (train-ref --sft-steps)
                demos += f"; {int(steps.iloc[0])} {what} steps"
        refs = df["ref"].dropna() if "ref" in df else pd.Series(dtype=str)
        folder = refs.iloc[0] if len(refs) else demos  # one pi_ref folder, one group, though older tables say less
        # a folder retrained in place holds other weights: its pi_ref row's test score tells the two apart
        start = df.loc[df["objective"] == "pi_ref", "test_score"]
        key = (folder, f"{start.iloc[0]:.6f}" if len(start) else "")
        groups.setdefault(key, []).append(df)
        labels[key] = max(labels.get(key, ""), demos, key=len)
    descriptions = dict(labels)
    seen: set[str] = set()
    for key in groups:  # two pi_refs that the columns describe alike (one retrained elsewhere): name the later
        folder = key[0]
        if labels[key] in seen and folder != labels[key]:
            same_folder = any(other[0] == folder for other in groups if other != key)
            labels[key] += "; retrained in place" if same_folder else f"; `{folder}`"
        seen.add(labels[key])
    return groups, labels, descriptions, stems


def trained_table(results: Path = RESULTS_DIR) -> str | None:
    """Per pi_ref (``_pi_ref_groups``): pi_ref's row once, then one row per trained objective of any of its files
    (mean and spread over seeds); the demonstrations column tells the pi_refs apart (what the demonstrator did, the
    item pages, how many it imitated where recorded), the table column the runs of one objective (``train
    --name``), the last column the ``--set`` changes they ran with."""
    groups, labels, _, stems = _pi_ref_groups(results)
    if not groups:
        return None
    rows = []
    for key, frames in groups.items():
        demos = labels[key]
        ref = frames[0][frames[0]["objective"] == "pi_ref"].iloc[0]
        rows.append({"policy": "pi_ref (start)", "demonstrations": demos, "seeds": "-",
                     "test success (mean ± std over seeds)": f"{ref['test_success']:.1%}", "per seed": "-",
                     "test mean score": f"{ref['test_score']:.3f}", "mean steps": f"{ref['test_steps']:.2f}",
                     "iterations": 0, "training minutes per seed": "-", "table": "-", "APOConfig changes": "-"})
        for df in frames:
            for objective, runs in df[df["objective"] != "pi_ref"].groupby("objective"):
                rows.append({"policy": objective, "demonstrations": demos, "seeds": len(runs),
                             "test success (mean ± std over seeds)": f"{runs['test_success'].mean():.1%} ± "
                                                                     f"{runs['test_success'].std(ddof=0):.1%}",
                             "per seed": ", ".join(f"{v:.1%}" for v in runs["test_success"]),
                             "test mean score": f"{runs['test_score'].mean():.3f}",
                             "mean steps": f"{runs['test_steps'].mean():.2f}",
                             "iterations": int(runs["iterations"].iloc[0]),
                             "training minutes per seed": _minutes(runs),
                             "table": stems[id(df)], "APOConfig changes": _recipe(runs)})
    return _markdown(pd.DataFrame(rows))


def _trained_runs(groups: dict, stems: dict):
    """Each trained objective of each table of ``_pi_ref_groups``'s ``groups`` that has a pi_ref row: (its pi_ref's
    key, the table's name from ``stems``, pi_ref's test success, the objective, its seeds' rows)."""
    for key, frames in groups.items():
        for df in frames:
            ref = df.loc[df["objective"] == "pi_ref", "test_success"]
            if not len(ref):
                continue
            for objective, runs in df[df["objective"] != "pi_ref"].groupby("objective"):
                yield key, stems[id(df)], float(ref.iloc[0]), objective, runs


MIN_REFS_FOR_CORRELATION = 3
"""Below three pi_refs a correlation is +-1 whatever the runs did: ``ref_spread`` leaves it out."""


def ref_spread(results: Path = RESULTS_DIR) -> pd.DataFrame:
    """One recipe's gain over pi_ref from several pi_refs trained alike (the same demonstrations description; other
    weights: retrained in place or with ``train-ref --seed``): the runs of one objective with the same ``--set``
    changes and iterations, from two pi_refs or more. One row per such recipe: per pi_ref (lists, in the tables'
    order) its test success, its seeds' mean, their count and the gain; the gains' mean and spread over pi_refs
    (population std) beside the mean spread over seeds, how many pi_refs meet the bar on their own
    (``refs_at_target``: a gain of ``TARGET_GAIN`` or more, larger than that pi_ref's seeds' spread), and from three
    pi_refs on the correlation of pi_ref's test success with the gain (negative where the runs end closer together
    than their pi_refs start: a weaker pi_ref gains more, toward one level). A gain is the method's only where it
    outlasts a retrained pi_ref (the README; notebook 04 section 8 tells why; notebook 07 section 2 reads the
    correlation)."""
    groups, _, descriptions, stems = _pi_ref_groups(results)
    recipes: dict[tuple, dict[tuple, dict]] = {}  # recipe -> pi_ref -> its test success, its runs' and their tables
    for key, table, start, objective, runs in _trained_runs(groups, stems):
        recipe = (descriptions[key], objective, _recipe(runs), int(runs["iterations"].iloc[0]))
        entry = recipes.setdefault(recipe, {}).setdefault(key, {"start": start, "runs": [], "tables": []})
        entry["runs"].extend(runs["test_success"].tolist())
        entry["tables"].append(table)
    rows = []
    for (base, objective, changes, iterations), per_ref in recipes.items():
        if len(per_ref) < 2:
            continue
        refs = list(per_ref.values())
        starts = [v["start"] for v in refs]
        means = [sum(v["runs"]) / len(v["runs"]) for v in refs]
        # rounded past float noise (and -0.0 made 0.0): gains that cancel print as +0.0, not -0.0
        gains = pd.Series([round(m - s, 9) + 0.0 for m, s in zip(means, starts)])
        seed_spreads = [pd.Series(v["runs"]).std(ddof=0) for v in refs]
        rows.append({"demonstrations": base, "policy": objective, "changes": changes, "iterations": iterations,
                     "pi_refs": len(refs), "seeds": [len(v["runs"]) for v in refs], "starts": starts,
                     "means": means, "gains": gains.tolist(), "gain_mean": round(gains.mean(), 9) + 0.0,
                     "gain_std": gains.std(ddof=0),
                     "seed_spread": pd.Series(seed_spreads).mean(),
                     "refs_at_target": sum(g >= TARGET_GAIN - 1e-9 and g > s for g, s in zip(gains, seed_spreads)),
                     "start_gain_corr": (pd.Series(starts).corr(gains) if len(refs) >= MIN_REFS_FOR_CORRELATION
                                         else float("nan")),
                     "tables": [t for v in refs for t in v["tables"]]})
    return pd.DataFrame(rows)


def model_label(size: str | None) -> str:
    """A pi_ref's size as the summary figure names it: ``"2.3M"`` from ``"hidden 192, 4 layers, 2.3M parameters"``,
    with the depth added where it is not the class model's (``"2.0M, 8 layers"``); ``"1.1M"`` (the class model)
    where the table records no size."""
    if not size:
        return "1.1M"
    parts = size.split(", ")
    layers = next((p for p in parts if p.endswith(" layers")), None)
    parameters = parts[-1].removesuffix(" parameters")
    class_layers = f"{get_profile('class').model.num_layers} layers"  # the *_class_seeds.csv tables' model
    return parameters if layers in (None, class_layers) else f"{parameters}, {layers}"


def starts_and_ends(results: Path = RESULTS_DIR) -> pd.DataFrame:
    """Where every trained run starts and ends (notebook 07 section 1's figure): one row per objective of each
    ``*_class_seeds.csv`` table, with its pi_ref row's test success (``start``; for a re-anchored run the first
    pi_ref's, the one its gain is counted from), its seeds' mean, lowest and highest test success, their count, the
    model size its pi_ref records (``model_label``), how many re-anchored rounds
    came before it (``rounds``), the table's name and its first pi_ref's folder (``ref``; the demonstrations'
    description for older tables that do not record it). Tables without a pi_ref row are left out."""
    groups, labels, _, stems = _pi_ref_groups(results)
    rows = []
    for key, table, start, objective, runs in _trained_runs(groups, stems):
        size = runs["ref_model_size"].dropna() if "ref_model_size" in runs else pd.Series(dtype=str)
        rounds = runs["ref_rounds"].dropna() if "ref_rounds" in runs else pd.Series(dtype=float)
        rows.append({"table": table, "objective": objective, "pi_ref": labels[key], "ref": key[0], "start": start,
                     "end": runs["test_success"].mean(), "lowest": runs["test_success"].min(),
                     "highest": runs["test_success"].max(), "seeds": len(runs),
                     "iterations": int(runs["iterations"].iloc[0]),
                     "model": model_label(size.iloc[0] if len(size) else None),
                     "rounds": int(rounds.iloc[0]) if len(rounds) else 0})
    columns = ["table", "objective", "pi_ref", "ref", "start", "end", "lowest", "highest", "seeds", "iterations",
               "model", "rounds"]
    return pd.DataFrame(rows, columns=columns)


def runs_from_reference(ref: str, results: Path = RESULTS_DIR, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every trained run counted from the pi_ref folder ``ref`` (for a re-anchored run its first pi_ref): the rows of
    ``starts_and_ends`` whose ``ref`` it is, as table, objective, seeds' count and mean test success, the highest
    first (notebook 07 section 3, the full expert's pi_ref beside the sloppy one's runs). ``runs``: a
    ``starts_and_ends`` table already read, so a caller asking of several pi_refs reads the tables once. Empty when
    no table names ``ref``."""
    runs = starts_and_ends(results) if runs is None else runs
    found = runs.loc[runs["ref"] == ref, ["table", "objective", "seeds", "end"]].rename(columns={"end": "test_success"})
    return found.sort_values("test_success", ascending=False, kind="stable").reset_index(drop=True)


def ref_spread_table(results: Path = RESULTS_DIR) -> str | None:
    """``ref_spread`` as the README's table, gains in points; None while no recipe ran from two pi_refs."""
    spread = ref_spread(results)
    if spread.empty:
        return None
    table = pd.DataFrame({
        "demonstrations": spread["demonstrations"], "policy": spread["policy"],
        "APOConfig changes": spread["changes"], "iterations": spread["iterations"], "pi_refs": spread["pi_refs"],
        "seeds per pi_ref": [", ".join(map(str, v)) for v in spread["seeds"]],
        "pi_ref test success": [", ".join(f"{s:.1%}" for s in v) for v in spread["starts"]],
        "after training (mean over seeds)": [", ".join(f"{m:.1%}" for m in v) for v in spread["means"]],
        "gain per pi_ref": [", ".join(f"{g * 100:+.1f}" for g in v) for v in spread["gains"]],
        "gain (mean ± std over pi_refs)": [f"{m * 100:+.1f} ± {s * 100:.1f}"
                                           for m, s in zip(spread["gain_mean"], spread["gain_std"])],
        "spread over seeds (mean std)": [f"{v * 100:.1f}" for v in spread["seed_spread"]],
        f"pi_refs at +{TARGET_GAIN * 100:.0f} (gain above its seeds' std)": [
            f"{n} of {total}" for n, total in zip(spread["refs_at_target"], spread["pi_refs"])],
        "pi_ref success vs gain (correlation)": ["-" if pd.isna(c) else f"{c:+.2f}" for c in spread["start_gain_corr"]],
        "tables": [", ".join(v) for v in spread["tables"]]})
    return _markdown(table)


def bench_train_table(results: Path = RESULTS_DIR) -> str | None:
    """A row per ``bench train --save`` file: ``bench_train.json`` (the tiny π_ref) and ``bench_train_<model>.json``;
    with ``bench train --objective all --save``, one row per objective."""
    paths = sorted(results.glob("bench_train*.json"))
    if not paths:
        return None
    rows = []
    for path in paths:
        records = json.loads(path.read_text())
        for r in records if isinstance(records, list) else [records]:
            rows.append(_bench_train_row(r))
    return _markdown(pd.DataFrame(rows))


def _bench_train_row(r: dict) -> dict:
    return {"model": Path(r.get("model", "?")).name, "objective": r.get("objective", "apo"),
            "goals per iteration": r["batch_goals"], "device": r["device"], "machine": bench_machine(r),
            "threads": r["torch_threads"], "iteration s (median)": f"{r['seconds_median']:.2f}",
            "rollout s": f"{r['rollout_seconds_median']:.2f}",
            "policy forward s": f"{r['policy_forward_seconds_median']:.2f}",
            "π_ref scoring s": f"{r['ref_seconds_median']:.2f}", "backward + step s": f"{r['update_seconds_median']:.2f}",
            "generation tokens/s": _maybe(r, "generation_tokens_per_second_median", "{:,.0f}"),
            "training tokens/s": _maybe(r, "training_tokens_per_second_median", "{:,.0f}"),
            "peak memory MB": _maybe(r, "peak_memory_mb", "{:,.0f}"), "target s": f"{r['target_seconds']:.0f}"}


def bench_machine(record: dict) -> str:
    """The processor a benchmark ran on and torch's CPU kernels there (the GPU's name on CUDA), from the
    ``numerics`` that ``bench --save`` records; files saved before it recorded them say so. Seconds compare only
    within one machine: the same command differs by a factor of two or more between 2-core machines."""
    info = record.get("numerics")
    if not info:
        return "not recorded"
    if str(record.get("device", "")).startswith("cuda") and info.get("gpu"):
        return info["gpu"]
    return f"{info.get('processor') or '?'} ({info.get('cpu_capability') or '?'})"


def _maybe(record: dict, key: str, form: str) -> str:
    return form.format(record[key]) if key in record else "-"


def compare_table(results: Path = RESULTS_DIR) -> str | None:
    """One row per objective of ``python -m apo_helpers compare --save`` (``compare_class_summary.csv``)."""
    path = results / "compare_class_summary.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    target = next(c for c in df.columns if c.startswith("seconds_to_val_"))
    table = pd.DataFrame({
        "objective": df["objective"], "seeds": df["seeds"],
        "test success (mean ± std)": [f"{m:.1%} ± {s:.1%}" for m, s in zip(df["test_success"], df["test_success_std"])],
        "test mean score": df["test_score"].map("{:.3f}".format),
        "training min": (df["train_seconds"] / 60).map("{:.1f}".format),
        "stage 1 min (added in)": (df["stage1_seconds"] / 60).map("{:.1f}".format),
        f"val ≥ {target.removeprefix('seconds_to_val_')} reached by": df["seeds_reaching_target"].map("{:d} seeds".format),
        "episodes": df["episodes"].map("{:,.0f}".format),
        "generated tokens": df["generated_tokens"].map("{:,.0f}".format),
        "peak memory MB": df["peak_memory_mb"].map("{:,.0f}".format)})
    return _markdown(table)


def pretrained_table(results: Path = RESULTS_DIR) -> str | None:
    """SmolLM2 (the profile's pretrained model) zero-shot and after imitation (``pretrained_class.csv``)."""
    path = results / "pretrained_class.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    table = pd.DataFrame({
        "model": df["model"], "stage": df["stage"], "device": df["device"],
        "format-valid turns": df["format_valid_rate"].map("{:.1%}".format),
        "val success": df["success_rate"].map("{:.1%}".format), "val mean score": df["mean_score"].map("{:.3f}".format),
        "invalid actions": df["invalid_rate"].map("{:.1%}".format), "episodes": df["episodes"],
        "imitation": [f"{d} demos, batch {b}, lr {lr:g}" for d, b, lr in zip(df["demonstrations"], df["batch_size"], df["lr"])],
        "imitation s": df["train_seconds"].map("{:.0f}".format)})
    return _markdown(table)


def ref_sweep_table(results: Path = RESULTS_DIR) -> str | None:
    """pi_ref's test success against demonstrations and pretraining (``ref_sweep.csv``, ``sweep-ref --save``)."""
    path = results / "ref_sweep.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path).sort_values(["pretrain_steps", "demonstrations"])
    table = pd.DataFrame({
        "demonstrations": df["demonstrations"], "pretraining steps": df["pretrain_steps"],
        "imitation steps": df["sft_steps"],
        "test success [95% CI]": [f"{s:.1%} [{lo:.1%}, {hi:.1%}]"
                                  for s, lo, hi in zip(df["test_success_rate"], df["ci95_low"], df["ci95_high"])],
        "test mean score": df["test_mean_score"].map("{:.3f}".format),
        "invalid actions": df["invalid_rate"].map("{:.1%}".format),
        "training minutes (CPU)": (df["train_seconds"] / 60).map("{:.1f}".format)})
    return _markdown(table)


GPU_RUNS = (("gpu_run.json", "apo_gpu_seeds.csv"), ("gpu_sloppy_run.json", "apo_gpu_sloppy_gpu_seeds.csv"),
            ("gpu_sloppy_lr2e5_run.json", "apo_gpu_sloppy_lr2e5_gpu_seeds.csv"),
            ("gpu_sloppy_lr2e5_long_run.json", "apo_gpu_sloppy_lr2e5_long_gpu_seeds.csv"),
            ("gpu_sloppy_lr2e5_reanchor_run.json", "apo_gpu_sloppy_lr2e5_reanchor_gpu_seeds.csv"),
            ("gpu_sloppy_lr2e5_reanchor_run.json", "apo_gpu_sloppy_lr2e5_reanchor_r2_gpu_seeds.csv"),
            ("gpu_sloppy_lr2e5_long2_run.json", "apo_gpu_sloppy_lr2e5_long2_gpu_seeds.csv"))
"""The ``gpu`` profile's runs on lent GPUs: (the run's details, its seeds' table), one pair per lease (each lease
trains its own pi_ref: a lent machine starts bare). A seeds' table holds the seeds that reached their test
evaluation (``scripts/gpu_record.py``): the lr 2e-5 run of 13 iterations lost its seed 0 to the end of the call.
The fifth and sixth pairs are one lease's two rounds: one iteration from pi_ref, then one more from each seed's
policy re-anchored (``ROUNDS=2``); the last is one round under a deadline (``DEADLINE=760``), all three seeds
evaluated."""


def _span(values: pd.Series) -> str:
    low, high = int(values.min()), int(values.max())
    return f"{low}" if low == high else f"{low}-{high}"


def _plural(count: str, noun: str) -> str:
    """``"1 iteration"``, ``"13-14 iterations"``, ``"1 + 1 iterations"``."""
    return f"{count} {noun}" if count == "1" else f"{count} {noun}s"


def _re_anchored(runs: pd.DataFrame) -> bool:
    return "ref_rounds" in runs and runs["ref_rounds"].fillna(0).max() > 0


def _iterations(runs: pd.DataFrame) -> str:
    """The seeds' iterations (a range where a time budget stopped them apart), after the earlier rounds' for a
    re-anchored run (``ref_iterations``): ``"1 + 1"`` is one iteration from pi_ref, then one from each seed's policy."""
    text = _span(runs["iterations"])
    return f"{_span(runs['ref_iterations'])} + {text}" if _re_anchored(runs) else text


def _gpu_runs(results: Path):
    """``(run file name, seeds file name, run details, the card's name, seeds table, A*PO's learning rate or None)``
    of each run in ``GPU_RUNS`` whose two files exist; the rate is the one its ``apo_command`` or ``commands`` set."""
    for run_name, seeds_name in GPU_RUNS:
        run_path, seeds_path = results / run_name, results / seeds_name
        if run_path.exists() and seeds_path.exists():
            run = json.loads(run_path.read_text())
            device = run["device"].split(" (")[0]  # without the versions
            lr = re.search(r"\blr=(\S+)", " ".join([run.get("apo_command", ""), *run.get("commands", [])]))
            yield run_name, seeds_name, run, device, pd.read_csv(seeds_path), float(lr.group(1)) if lr else None


def gpu_table(results: Path = RESULTS_DIR) -> str | None:
    """The ``gpu`` profile's runs on GPUs: SmolLM2's imitation pi_ref and A*PO from it, one block per run in
    ``GPU_RUNS`` whose two files exist (the ``*_run.json``: the device and pi_ref's training and test result, shown
    once for a lease's rounds; the seeds' table: the A*PO rows, with the learning rate its ``apo_command`` or
    ``commands`` set). Seeds stopped by ``max_minutes`` give their range of iterations."""
    rows, shown = [], set()
    for run_name, _, run, device, df, lr in _gpu_runs(results):
        ref = run["pi_ref"]
        demonstrator = f", {run['demonstrator']}" if run.get("demonstrator") else ""
        if run_name not in shown:  # a lease's later rounds start from the same pi_ref
            shown.add(run_name)
            rows.append({"policy": f"pi_ref ({run['model']}, imitation{demonstrator})", "device": device,
                         "seeds": "-", "test success": f"{ref['test_success_rate']:.1%}",
                         "test mean score": f"{ref['test_mean_score']:.3f}",
                         "mean steps": f"{ref['test_mean_steps']:.2f}",
                         "training": f"{ref['sft_steps']} steps x {ref['sft_batch']} chats, lr {ref['lr']:g}",
                         "training s": f"{ref['train_seconds']:.0f}"})
        for objective, runs in df[df["objective"] != "pi_ref"].groupby("objective"):
            per_iteration = int(runs["episodes"].iloc[0] // runs["iterations"].iloc[0])
            rows.append({"policy": objective + (", re-anchored" if _re_anchored(runs) else ""), "device": device,
                         "seeds": len(runs), "test success": ", ".join(f"{v:.1%}" for v in runs["test_success"]),
                         "test mean score": f"{runs['test_score'].mean():.3f}",
                         "mean steps": f"{runs['test_steps'].mean():.2f}",
                         "training": f"{_plural(_iterations(runs), 'iteration')} x {per_iteration} episodes"
                                     + (f", lr {lr:g}" if lr else ""),
                         "training s": f"{runs['train_seconds'].mean():.0f}"})
    return _markdown(pd.DataFrame(rows)) if rows else None


def gpu_gains(results: Path = RESULTS_DIR) -> pd.DataFrame:
    """One row per run in ``GPU_RUNS`` whose two files exist: its pi_ref's test success, the seeds' mean and spread
    (population std) on test, the gain over pi_ref, whether the gain is larger than the spread, and the iterations
    and learning rate (notebook 07 section 2). A run of one seed has no spread to compare (``None``). Empty when no
    GPU run is committed."""
    rows = []
    for _, seeds_name, run, device, df, lr in _gpu_runs(results):
        runs = df[df["objective"] == "apo"]
        seeds, start = runs["test_success"], run["pi_ref"]["test_success_rate"]
        gain, spread = seeds.mean() - start, seeds.std(ddof=0)
        rows.append({"run": seeds_name.removesuffix("_seeds.csv"), "device": device,
                     "demonstrator": run.get("demonstrator", "full expert"), "pi_ref": start,
                     "seeds": len(seeds), "iterations": _iterations(runs), "lr": lr, "mean": seeds.mean(),
                     "spread": spread, "gain": gain, "gain > spread": bool(gain > spread) if len(seeds) > 1 else None})
    return pd.DataFrame(rows)


def generalization_table(results: Path = RESULTS_DIR) -> str | None:
    """Greedy success of pi_ref and of a run's final policies on the goals the run trained on and on unseen goals
    (``generalization_class.csv``, ``python -m apo_helpers generalization --save``; notebook 04 section 6)."""
    path = results / "generalization_class.csv"
    if not path.exists():
        return None
    from .generalization import generalization_gains, sharpening_ceiling

    raw = pd.read_csv(path)
    df = generalization_gains(raw)
    table = pd.DataFrame({
        "run (table)": df["run"], "goals": df["goals"], "goals played": df["goals played"],
        "pi_ref greedy success": df["π_ref"].map("{:.1%}".format),
        "A*PO greedy success (mean ± std over seeds)": [f"{m:.1%} ± {s:.1%}" for m, s in
                                                        zip(df["A*PO (mean of seeds)"], df["std over seeds"])],
        "gain": df["gain"].map("{:+.1%}".format), "seeds": df["seeds"]})
    ceiling = sharpening_ceiling(raw)
    bound = pd.DataFrame({
        "run or pi_ref": ceiling["run"], "unseen goals": ceiling["unseen goals"],
        "share whose pi_ref samples disagree": ceiling["share whose samples disagree"].map("{:.1%}".format),
        "pi_ref greedy success on them": ceiling["π_ref greedy success there"].map("{:.1%}".format),
        "most gain from solving them all": ceiling["most gain from them"].map("{:+.1%}".format),
        "measured gain, all unseen (mean of seeds)": ceiling["measured gain (all unseen)"].map(
            lambda v: "-" if pd.isna(v) else f"{v:+.1%}")})
    return _markdown(table) + "\n\n" + _markdown(bound)


def gain_intervals_table(results: Path = RESULTS_DIR) -> str | None:
    """Each run's (and soup's) test gain over its chain's first pi_ref with a paired bootstrap interval over the
    test goals and the seeds (``significance.gains_over_first_reference``, notebook 07 section 3)."""
    from .significance import gains_over_first_reference

    path = results / "goal_outcomes_class.csv"
    if not path.exists():
        return None
    gains = gains_over_first_reference(pd.read_csv(path), results)
    if gains.empty:
        return None
    return _markdown(pd.DataFrame({
        "policy (table)": gains["policy"], "seeds": gains["policy_seeds"],
        "test success": gains["success"].map("{:.1%}".format), "first π_ref": gains["baseline"],
        "π_ref test success": gains["baseline_success"].map("{:.1%}".format),
        "gain": gains["gain"].map("{:+.1%}".format),
        "goals gained / lost per seed": [f"{g:.1f} / {lost:.1f}" for g, lost in zip(gains["gained"], gains["lost"])],
        "95% interval (goals and seeds resampled)": [f"[{lo:+.1%}, {hi:+.1%}]" for lo, hi in zip(gains["low"],
                                                                                                 gains["high"])],
        "draws at +10 points or more": gains["draws_at_target"].map("{:.0%}".format)}))


SECTIONS = {"baselines": baselines_table, "bench-env": bench_env_table, "pi-ref": pi_ref_table,
            "bench-rollout": bench_rollout_table, "trained": trained_table, "ref-spread": ref_spread_table,
            "bench-train": bench_train_table, "compare": compare_table, "pretrained": pretrained_table,
            "ref-sweep": ref_sweep_table, "gpu": gpu_table, "generalization": generalization_table,
            "gain-intervals": gain_intervals_table, "bench-update-memory": bench_update_memory_table}


def render_readme(text: str, results: Path = RESULTS_DIR) -> str:
    """``text`` with every known section filled from ``results`` (sections without a result file are left alone)."""
    for name, make in SECTIONS.items():
        table = make(results)
        if table is None:
            continue
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        text = pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)
    return text


def section_names(text: str) -> list[str]:
    """The names of the rendered sections ``text`` holds, in order."""
    return re.findall(r"<!-- ([\w-]+):start -->", text)


def update_readme(paths=DOCUMENTS) -> list[Path]:
    """Rewrite the tables of every document in ``paths``; returns the documents that changed."""
    changed = []
    for path in map(Path, paths):
        old = path.read_text()
        new = render_readme(old)
        if new != old:
            path.write_text(new)
            changed.append(path)
    return changed
