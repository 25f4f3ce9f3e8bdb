# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · The report
#
# **What this notebook does.** It gathers what notebooks 01-06 and the headless runs measured (the files under
# `data/results/`) into one table, `data/results/summary.csv`, shows the key figures, and writes the summary
# from those numbers: nothing below is typed by hand. `make report` runs notebooks 00-07 in order and exports them
# as HTML with the widget state embedded (`report/index.html`).
#
# Rows come from: the scripted agents (notebook 01), π_ref (notebook 02), A*PO over three seeds (notebook 04,
# `train --seeds 0 1 2`), and the comparison's objectives when it has been committed (notebook 05).

# %%
import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Image, Markdown, display

from apo_helpers.config import get_profile, RESULTS_DIR, FIGURES_DIR, TARGET_GAIN
from apo_helpers.analysis.evaluate import wilson_interval
from apo_helpers.analysis import plots
from apo_helpers.files import atomic_write_text

profile = get_profile()
print(f"profile {profile.name}: the committed numbers below are those of the class profile")

# %% [markdown]
# ## 1. The summary table

# %%
def ci(rate: float, n: int) -> str:
    low, high = wilson_interval(round(rate * n), n)
    return f"[{low:.3f}, {high:.3f}]"


def start_row(method: str, start: pd.Series, notes: str) -> dict:
    """A pi_ref's row from the pi_ref line of a seeds table (200 test goals)."""
    return {"method": method, "success_rate": start["test_success"], "success_ci95": ci(start["test_success"], 200),
            "mean_score": start["test_score"], "mean_steps": start["test_steps"],
            "invalid_rate": start["test_invalid_rate"], "train_seconds": float("nan"), "notes": notes}


def seeds_row(method: str, runs: pd.DataFrame) -> dict:
    """The mean over a recipe's seeds (notebook 04 section 6); the interval pools their 200 test goals each."""
    n = 200 * len(runs)
    return {"method": method, "success_rate": runs["test_success"].mean(),
            "success_ci95": ci(runs["test_success"].mean(), n), "mean_score": runs["test_score"].mean(),
            "mean_steps": runs["test_steps"].mean(), "invalid_rate": runs["test_invalid_rate"].mean(),
            "train_seconds": runs["train_seconds"].mean(),
            "notes": f"mean of {len(runs)} seeds (std {runs['test_success'].std(ddof=0):.3f}), "
                     f"{int(runs['iterations'].iloc[0])} iterations; interval over the pooled {n} episodes "
                     f"(notebook 04 section 6)"}


rows = []
baselines = pd.read_csv(RESULTS_DIR / "baselines_test.csv")
for r in baselines.itertuples():
    rows.append({"method": r.agent, "success_rate": r.success_rate, "success_ci95": f"[{r.ci95_low:.3f}, {r.ci95_high:.3f}]",
                 "mean_score": r.mean_score, "mean_steps": r.mean_steps, "invalid_rate": r.invalid_rate,
                 "train_seconds": 0.0, "notes": f"scripted, {r.episodes} test goals (notebook 01)"})
ref = json.loads((RESULTS_DIR / "pi_ref_class.json").read_text())
seeds_path = RESULTS_DIR / "apo_class_seeds.csv"
seeds = pd.read_csv(seeds_path) if seeds_path.exists() else None
ref_row = seeds[seeds["objective"] == "pi_ref"].iloc[0] if seeds is not None else None
rows.append({"method": "pi_ref", "success_rate": ref["test_success_rate"],
             "success_ci95": f"[{ref['test_ci95'][0]:.3f}, {ref['test_ci95'][1]:.3f}]", "mean_score": ref["test_mean_score"],
             "mean_steps": float(ref_row["test_steps"]) if ref_row is not None else float("nan"),
             "invalid_rate": ref["test_invalid_rate"], "train_seconds": ref["train_seconds"],
             "notes": f"imitation of {ref['demonstrations']} expert demonstrations (notebook 02)"})
if seeds is not None:
    for objective, runs in seeds[seeds["objective"] != "pi_ref"].groupby("objective"):
        n = 200 * len(runs)
        rows.append({"method": objective, "success_rate": runs["test_success"].mean(),
                     "success_ci95": ci(runs["test_success"].mean(), n), "mean_score": runs["test_score"].mean(),
                     "mean_steps": runs["test_steps"].mean(), "invalid_rate": runs["test_invalid_rate"].mean(),
                     "train_seconds": runs["train_seconds"].mean(),
                     "notes": f"mean of {len(runs)} seeds (std {runs['test_success'].std(ddof=0):.3f}); interval over "
                              f"the pooled {n} episodes; from pi_ref (notebook 04)"})
sloppy_path = RESULTS_DIR / "apo_sloppy_class_seeds.csv"
if sloppy_path.exists():  # notebook 04 section 6: a pi_ref whose demonstrations ignored options half the time
    rows.append(start_row("pi_ref (options ignored)", pd.read_csv(sloppy_path).query("objective == 'pi_ref'").iloc[0],
                          "imitation of a demonstrator that ignores the options in half its episodes (notebook 04)"))
sloppy_runs = [(sloppy_path, "apo", ""),  # notebook 04 section 6's recipes: their --set changes in the method name
               (RESULTS_DIR / "apo_sloppy_gs_class_seeds.csv", "apo", ", greedy search"),
               (RESULTS_DIR / "apo_sloppy_gsd_class_seeds.csv", "apo", ", greedy search, disagreeing goals"),
               (RESULTS_DIR / "apo_sloppy_gsd1024_class_seeds.csv", "apo",
                ", greedy search, disagreeing goals of 1,024"),
               (RESULTS_DIR / "apo_sloppy_gsd1024_b03_class_seeds.csv", "apo",
                ", greedy search, disagreeing goals of 1,024, beta2 0.03"),
               (RESULTS_DIR / "apo_sloppy_gsd1024_b01_class_seeds.csv", "apo",
                ", greedy search, disagreeing goals of 1,024, beta2 0.01"),
               (RESULTS_DIR / "apo_sloppy_gsd1024_b003_class_seeds.csv", "apo",
                ", greedy search, disagreeing goals of 1,024, beta2 0.003"),
               (RESULTS_DIR / "apo_sloppy_gsd1024_b03_it120_class_seeds.csv", "apo",
                ", greedy search, disagreeing goals of 1,024, beta2 0.03, 120 iterations"),
               (RESULTS_DIR / "apo_sloppy_gsv1024_b03_class_seeds.csv", "apo",
                ", greedy search, goals of 1,024 whose rewards vary, beta2 0.03"),
               (RESULTS_DIR / "apo_sloppy_gsv1024_b03_it120_class_seeds.csv", "apo",
                ", greedy search, goals of 1,024 whose rewards vary, beta2 0.03, 120 iterations"),
               (RESULTS_DIR / "apo_sloppy_gsva1024_b03_it120_class_seeds.csv", "apo",
                ", greedy search anchored, goals of 1,024 whose rewards vary, beta2 0.03, 120 iterations"),
               (RESULTS_DIR / "apo_sloppy_gsva10_1024_b03_it120_class_seeds.csv", "apo",
                ", greedy search anchored (weight 10), goals of 1,024 whose rewards vary, beta2 0.03, 120 iterations"),
               (RESULTS_DIR / "apo_sloppy_gsve3_1024_b03_class_seeds.csv", "apo",
                ", greedy search, goals of 1,024 whose rewards vary, beta2 0.03, 3 steps per batch"),
               (RESULTS_DIR / "apo_sloppy_gsv1024_b03_bg64_class_seeds.csv", "apo",
                ", greedy search, goals of 1,024 whose rewards vary, beta2 0.03, 64 goals per batch"),
               (RESULTS_DIR / "apo_sloppy_gsv1024_b03_decay_class_seeds.csv", "apo",
                ", greedy search, goals of 1,024 whose rewards vary, beta2 0.03, decaying learning rate")]
sloppy_methods = []  # the rows from that pi_ref alone (others imitated the same demonstrator on other terms)
for path, objective, recipe in sloppy_runs:
    if path.exists():
        sloppy_methods.append(f"{objective} (from pi_ref, options ignored{recipe})")
        rows.append(seeds_row(sloppy_methods[-1], pd.read_csv(path).query("objective == @objective")))
demo_tables = {int(path.name.removeprefix("apo_demos").removesuffix("_class_seeds.csv")): pd.read_csv(path)
               for path in sorted(RESULTS_DIR.glob("apo_demos*_class_seeds.csv"))}  # notebook 04 section 6
for count, table in demo_tables.items():  # pi_refs from fewer demonstrations of the full expert, then A*PO
    runs = table.query("objective == 'apo'")
    rows.append(start_row(f"pi_ref ({count} demonstrations)", table.query("objective == 'pi_ref'").iloc[0],
                          f"imitation of {int(runs['ref_demonstrations'].iloc[0])} expert demonstrations "
                          f"(notebook 02's sweep, retrained for notebook 04)"))
    rows.append(seeds_row(f"apo (from pi_ref of {count} demonstrations, greedy search, disagreeing goals)", runs))
HELD = "greedy search held by its distributions' KL (weight 0.01)"  # APOConfig.greedy_kl
XEON = "options ignored, 2.3M-parameter model, retrained on an Intel Xeon"  # the pi_ref many runs below share
XEON_SEED1 = "options ignored, 2.3M-parameter model, init seed 1, retrained on an Intel Xeon"
AVX2 = "options ignored, 2.3M-parameter model, retrained on an AMD EPYC with AVX2 kernels"
XEON75 = "options ignored in three quarters, 2.3M-parameter model, retrained on an Intel Xeon"
DRAWN = "option values drawn on 30% of the item-page turns (explore_options 0.3)"
PRODUCTS = "products drawn on 30% of the results-page turns (explore_results 0.3)"
OWN_REF_RUNS = {  # the best recipe from pi_refs of their own (table: label, pi_ref imitated[, the recipe if another])
    "apo_selected_gsv1024_b03": ("options ignored, selection shown", "the demonstrations that ignore the options half "
                                 "the time, on item pages that say which option is selected"),
    "apo_forget_gsv1024_b03": ("options checked, not selected", "demonstrations that choose the item as the expert "
                               "does but, half the time, select no option"),
    "apo_rerun_gsv1024_b03": ("full expert, retrained", "the full expert's demonstrations, the same command as pi_ref's "
                              "retrained on another machine (other weights, another test score)"),
    "apo_sloppy1200_gsv600_b03": ("options ignored, 1,200 demonstrations", "twice as many demonstrations that ignore "
                                  "the options half the time (stage 1 on the 600 train goals they leave)"),
    "apo_full1200_gsv600_b03": ("full expert, 1,200 demonstrations", "the full expert's demonstrations on 1,200 goals "
                                "(stage 1 on the 600 train goals they leave)"),
    "apo_sloppy_gsv1024_b03_rerun": ("options ignored, retrained", "the demonstrations that ignore the options half "
                                     "the time, retrained in place (other weights, another test score)"),
    "apo_sloppy_seed1_gsv1024_b03": ("options ignored, init seed 1", "the demonstrations that ignore the options half "
                                     "the time from other initial weights and batch order (`train-ref --seed 1`)"),
    "apo_sloppy_seed2_gsv1024_b03": ("options ignored, init seed 2", "the demonstrations that ignore the options half "
                                     "the time from other initial weights and batch order (`train-ref --seed 2`)"),
    "apo_selected_gsvk1024_b03": ("options ignored, selection shown, retrained", "the demonstrations that ignore the "
                                  "options half the time, on item pages that say which option is selected, retrained "
                                  "in place (other weights, another test score)", HELD),
    "apo_sloppy_h192_gsvk1024_b03": ("options ignored, 2.3M-parameter model", "the demonstrations that ignore the "
                                     "options half the time by a tiny Llama of hidden size 192 (`train-ref --model "
                                     "hidden_size=192 intermediate_size=576`)", HELD),
    "apo_sloppy_h192_seed1_gsvk1024_b03": ("options ignored, 2.3M-parameter model, init seed 1", "the demonstrations "
                                           "that ignore the options half the time by a tiny Llama of hidden size 192 "
                                           "from other initial weights and batch order (`train-ref --model "
                                           "hidden_size=192 intermediate_size=576 --seed 1`)", HELD),
    "apo_sloppy_h192_seed2_gsvk1024_b03": ("options ignored, 2.3M-parameter model, init seed 2", "the demonstrations "
                                           "that ignore the options half the time by a tiny Llama of hidden size 192 "
                                           "from other initial weights and batch order (`train-ref --model "
                                           "hidden_size=192 intermediate_size=576 --seed 2`)", HELD),
    "apo_sloppy_h192_xeon_gsvk1024_b03": (XEON,
                                          "the demonstrations that ignore the options half the time by a tiny Llama "
                                          "of hidden size 192, the first such pi_ref's command run again on another "
                                          "processor (`train-ref --model hidden_size=192 intermediate_size=576`)",
                                          HELD),
    "apo_sloppy_h192_seed1_xeon_gsvk1024_b03": (XEON_SEED1,
                                                "the demonstrations that ignore the options half the time by a tiny "
                                                "Llama of hidden size 192 from other initial weights and batch order, "
                                                "the second such pi_ref's command run again on another processor "
                                                "(`train-ref --model hidden_size=192 intermediate_size=576 --seed 1`)",
                                                HELD),
    "apo_sloppy_h192_avx2_gsvk1024_b03": (AVX2,
                                          "the demonstrations that ignore the options half the time by a tiny Llama "
                                          "of hidden size 192, the first such pi_ref's command run again on a "
                                          "processor where torch picks AVX2 kernels (`train-ref --model "
                                          "hidden_size=192 intermediate_size=576`)", HELD),
    "apo_sloppy_h256_gsvk512_b03": ("options ignored, 3.9M-parameter model", "the demonstrations that ignore the "
                                    "options half the time by a tiny Llama of hidden size 256 (`train-ref --model "
                                    "hidden_size=256 intermediate_size=768`)", f"{HELD}, stage 1 on 512 goals"),
    "apo_sloppy_h256_seed1_gsvk512_b03": ("options ignored, 3.9M-parameter model, init seed 1", "the demonstrations "
                                          "that ignore the options half the time by a tiny Llama of hidden size 256 "
                                          "from other initial weights and batch order (`train-ref --model "
                                          "hidden_size=256 intermediate_size=768 --seed 1`)",
                                          f"{HELD}, stage 1 on 512 goals"),
    **{f"apo_sloppy{tag}_h192_gsvk1024_b03": (f"options ignored in {share}, 2.3M-parameter model", "the demonstrations "
                                              f"that ignore the options in {share} of the episodes by a tiny Llama of "
                                              f"hidden size 192 (`train-ref --skip-options {flag} --model "
                                              "hidden_size=192 intermediate_size=576`)", HELD)
       for tag, share, flag in (("25", "a quarter", "0.25"), ("75", "three quarters", "0.75"))},
    "apo_selected_h192_gsvk1024_b03": ("options ignored, selection shown, 2.3M-parameter model", "the demonstrations "
                                       "that ignore the options half the time, on item pages that say which option "
                                       "is selected, by a tiny Llama of hidden size 192 (`train-ref "
                                       "--show-selected-options --model hidden_size=192 intermediate_size=576`)",
                                       HELD),
    "apo_sloppy_l8_xeon_gsvk1024_b003": ("options ignored, 2.0M-parameter model of 8 layers, trained on an Intel Xeon",
                                         "the demonstrations that ignore the options half the time by a tiny Llama "
                                         "twice as deep as the class model and as wide (`train-ref --model "
                                         "num_layers=8`)", f"{HELD}, beta2 0.003"),
    "apo_full_h192_xeon_gsvk1024_b003": ("full expert, 2.3M-parameter model, trained on an Intel Xeon",
                                         "the full expert's demonstrations by a tiny Llama of hidden size 192 "
                                         "(`train-ref --model hidden_size=192 intermediate_size=576`)",
                                         f"{HELD}, beta2 0.003"),
    "apo_sloppy_h256_xeon_gsvk1024_b003": ("options ignored, 3.9M-parameter model, trained on an Intel Xeon",
                                           "the demonstrations that ignore the options half the time by a tiny Llama "
                                           "of hidden size 256, the first such pi_ref's command run again on another "
                                           "processor with one thread (`train-ref --model hidden_size=256 "
                                           "intermediate_size=768`)", f"{HELD}, beta2 0.003"),
    "apo_sloppy75_h192_xeon_gsvk1024_b003": (XEON75,
                                             "the demonstrations that ignore the options in three quarters of the "
                                             "episodes by a tiny Llama of hidden size 192, the three-quarters π_ref's "
                                             "command run again on another processor (`train-ref --skip-options 0.75 "
                                             "--model hidden_size=192 intermediate_size=576`)", f"{HELD}, beta2 0.003")}
E30_REFS = (("", ""), ("_seed1", ", init seed 1"))  # the pi_refs re-anchored every 30 iterations: name part, label
SAME_REF_RUNS = {  # more runs from one of those pi_refs (table: its pi_ref's label, the recipe's change)
    "apo_rerun_gsv1024_b01": ("full expert, retrained", "beta2 0.01"),
    "apo_rerun_gsv1024_b01_it120": ("full expert, retrained", "beta2 0.01, 120 iterations"),
    "apo_rerun_gsv1024_b01_h200": ("full expert, retrained", "beta2 0.01, trained on a GPU"),
    "apo_sloppy1200_gsv600_b03_it120": ("options ignored, 1,200 demonstrations", "120 iterations"),
    "apo_sloppy_gsvk1024_b03_it120": ("options ignored, retrained", f"{HELD}, 120 iterations"),
    "apo_sloppy_gsvk1024_b03_rerun": ("options ignored, retrained", HELD),
    "apo_sloppy_gsvk1024_b03_lr6e4_rerun": ("options ignored, retrained", f"{HELD}, learning rate 6e-4"),
    "apo_sloppy_gsv1024_b03_t16": ("options ignored, retrained", "rollouts at temperature 1.6"),
    "apo_sloppy_gsv1024_b03_t16_h100": ("options ignored, retrained", "rollouts at temperature 1.6, trained on a GPU"),
    "apo_sloppy_seed1_gsvk1024_b03": ("options ignored, init seed 1", HELD),
    "apo_sloppy_seed2_gsvk1024_b03": ("options ignored, init seed 2", HELD),
    "apo_sloppy_seed1_gsvk1024_b03_t16": ("options ignored, init seed 1", f"{HELD}, rollouts at temperature 1.6"),
    "apo_sloppy_seed2_gsvk1024_b03_t16": ("options ignored, init seed 2", f"{HELD}, rollouts at temperature 1.6"),
    "apo_sloppy_seed1_gsvk1024_b03_it120": ("options ignored, init seed 1", f"{HELD}, 120 iterations"),
    "apo_sloppy_seed2_gsvk1024_b03_it120": ("options ignored, init seed 2", f"{HELD}, 120 iterations"),
    "apo_sloppy_seed2_gsvk1024_b03_it180": ("options ignored, init seed 2", f"{HELD}, 180 iterations"),
    "apo_split_sloppy_gsvk1024_b03_rerun": ("options ignored, retrained", f"{HELD}, credit split at the item page"),
    "apo_sloppy_gsvko03_b03": ("options ignored, retrained", f"{HELD}, {DRAWN}"),
    "apo_sloppy_gsvko03_b03_it120": ("options ignored, retrained", f"{HELD}, {DRAWN}, 120 iterations"),
    "apo_selected_gsvko03_b03": ("options ignored, selection shown, retrained", f"{HELD}, {DRAWN}"),
    "apo_sloppy_h192_gsvk1024_b03_it120": ("options ignored, 2.3M-parameter model", f"{HELD}, 120 iterations"),
    "apo_sloppy_h192_seed1_gsvk1024_b03_it120": ("options ignored, 2.3M-parameter model, init seed 1",
                                                 f"{HELD}, 120 iterations"),
    "apo_sloppy_h192_seed2_gsvk1024_b03_it120": ("options ignored, 2.3M-parameter model, init seed 2",
                                                 f"{HELD}, 120 iterations"),
    "apo_sloppy_h192_seed2_gsvk1024_b03_it180": ("options ignored, 2.3M-parameter model, init seed 2",
                                                 f"{HELD}, 180 iterations"),
    "apo_sloppy_h192_gsvko03_b03": ("options ignored, 2.3M-parameter model", f"{HELD}, {DRAWN}"),
    "apo_sloppy_h192_seed1_gsvko03_b03": ("options ignored, 2.3M-parameter model, init seed 1", f"{HELD}, {DRAWN}"),
    "apo_sloppy_h192_gsvkr03_b03": ("options ignored, 2.3M-parameter model", f"{HELD}, {PRODUCTS}"),
    "apo_sloppy_h192_gsvkr03h_b03": ("options ignored, 2.3M-parameter model",
                                     f"{HELD}, {PRODUCTS}, failed draws held at pi_ref"),
    "apo_sloppy_h192_gsvk1024_b03_two": ("options ignored, 2.3M-parameter model",
                                         f"{HELD}, only the goals that ask for two options"),
    "apo_sloppy_h192_gsvk1024_b03_r2": ("options ignored, 2.3M-parameter model",
                                        f"{HELD}, 60 iterations, re-anchored on each seed's policy, 60 more"),
    "apo_sloppy_h192_gsvk1024_b03_r3": ("options ignored, 2.3M-parameter model",
                                        f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 more each"),
    "apo_sloppy_h192_gsvk1024_b03_r4": ("options ignored, 2.3M-parameter model",
                                        f"{HELD}, 60 iterations, re-anchored 3 times on each seed's policy, 60 more each"),
    "apo_sloppy_h192_gsvk1024_b03_r3_solved05": ("options ignored, 2.3M-parameter model",
                                                 f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 "
                                                 f"more each, the last with half the goals always solved"),
    "apo_sloppy_h192_gsvk1024_b03_r3_decay": ("options ignored, 2.3M-parameter model",
                                              f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 "
                                              f"more each, the last with a decaying learning rate"),
    "apo_sloppy_h192_gsvk1024_b03_r3_ema95": ("options ignored, 2.3M-parameter model",
                                              f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 "
                                              f"more each, the last played and saved as its weights' moving average"),
    "apo_sloppy_h192_gsvk1024_b03_r3_ema95_it120": ("options ignored, 2.3M-parameter model",
                                                     f"{HELD}, 60 iterations, re-anchored twice on each seed's "
                                                     f"policy, 60 more and then 120, the last played and saved as "
                                                     f"its weights' moving average"),
    "apo_sloppy_h192_gsvk1024_b03_sb1": ("options ignored, 2.3M-parameter model",
                                         f"{HELD}, 60 iterations, successes paid double (success_bonus=1)"),
    "apo_sloppy_h192_gsvk1024_b03_sb1_r2": ("options ignored, 2.3M-parameter model",
                                            f"{HELD}, 60 iterations, re-anchored on each seed's policy, 60 more, "
                                            f"successes paid double (success_bonus=1) in both rounds"),
    "apo_sloppy_h192_gsvk1024_b03_r3_sb1": ("options ignored, 2.3M-parameter model",
                                            f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 "
                                            f"more each, the last with successes paid double (success_bonus=1)"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_n16": (XEON, f"{HELD}, V* from 16 samples per goal"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_n16f8": (XEON,
                                                f"{HELD}, V* from 16 samples per goal, goals kept by their first 8 "
                                                f"(filter_samples=8)"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_opt1": (XEON, f"{HELD}, only the goals that ask for an option (min_options=1)"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_v003": (XEON, f"{HELD}, V*'s soft maximum at beta1 = beta2 = 0.03"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_v01": (XEON, f"{HELD}, V*'s soft maximum at beta1 = 0.1"),
    "apo_sloppy_h192_xeon_gsvk1024_b01": (XEON, f"{HELD}, beta2 0.01"),
    "apo_sloppy_h192_xeon_gsvk1024_b003": (XEON, f"{HELD}, beta2 0.003"),
    "apo_sloppy_h192_xeon_gsvk1024_b001": (XEON, f"{HELD}, beta2 0.001 (the paper's)"),
    "apo_sloppy_h192_xeon_gsvk1024_b001_k001": (XEON, "greedy search held by its distributions' KL (weight 0.001), "
                                                      "beta2 0.001"),
    "apo_sloppy_h192_xeon_gsvk1024_b003_k003": (XEON, "greedy search held by its distributions' KL (weight 0.003), "
                                                      "beta2 0.003"),
    "apo_sloppy_h192_xeon_gsvk1024_b003_r2": (XEON, f"{HELD}, beta2 0.003, 60 iterations, re-anchored once on each "
                                                    f"seed's policy, 60 more"),
    "apo_sloppy_h192_xeon_gsvk1024_b003_it120": (XEON, f"{HELD}, beta2 0.003, 120 iterations"),
    "apo_sloppy_h192_xeon_gsvko03h_b003": (XEON, f"{HELD}, beta2 0.003, {DRAWN}, failed draws held at pi_ref"),
    "apo_sloppy_h192_xeon_gsvko03h_b03": (XEON, f"{HELD}, {DRAWN}, failed draws held at pi_ref"),
    "apo_sloppy_h192_xeon_gsvk1024_b003_t07": (XEON, f"{HELD}, beta2 0.003, rollouts at temperature 0.7"),
    "apo_sloppy75_h192_xeon_gsvko03h_b003": (XEON75, f"{HELD}, beta2 0.003, {DRAWN}, failed draws held at pi_ref"),
    "apo_sloppy_h192_seed1_xeon_gsvk1024_b003": (XEON_SEED1, f"{HELD}, beta2 0.003"),
    "apo_sloppy_h192_seed1_xeon_gsvk1024_b01": (XEON_SEED1, f"{HELD}, beta2 0.01"),
    "apo_sloppy_h192_seed1_xeon_gsvk1024_b003_r2": (XEON_SEED1, f"{HELD}, beta2 0.003, 60 iterations, re-anchored "
                                                                f"once on each seed's policy, 60 more"),
    "apo_sloppy_h192_xeon_gsvk1024_b001_k001_r2": (XEON, "greedy search held by its distributions' KL (weight "
                                                         "0.001), beta2 0.001, 60 iterations, re-anchored once on "
                                                         "each seed's policy, 60 more"),
    "apo_sloppy_h192_xeon_gsdk1024_b03": (XEON,
                                          f"{HELD}, the goals whose samples disagree (keep_disagreeing) in place of "
                                          f"those whose rewards vary"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_r3_v01": (XEON,
                                                 f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 "
                                                 f"more each, the last with V*'s soft maximum at beta1 = 0.1"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_r2": (XEON,
                                             f"{HELD}, 60 iterations, re-anchored once on each seed's policy, 60 more"),
    "apo_sloppy_h192_xeon_gsvk1024_b03_r3": (XEON,
                                             f"{HELD}, 60 iterations, re-anchored twice on each seed's policy, 60 "
                                             f"more each"),
    "apo_sloppy_h192_avx2_gsvk1024_b03_r2": (AVX2,
                                             f"{HELD}, 60 iterations, re-anchored once on each seed's policy, 60 more"),
    "apo_sloppy_h192_avx2_gsvk1024_b003": (AVX2, f"{HELD}, beta2 0.003"),
    "apo_sloppy_h192_gsvk1024_b003": ("options ignored, 2.3M-parameter model", f"{HELD}, beta2 0.003"),
    "apo_sloppy_h192_gsvk1024_b003_it120": ("options ignored, 2.3M-parameter model",
                                            f"{HELD}, beta2 0.003, 120 iterations"),
    "apo_sloppy_h192_gsvk1024_b03_soup_r2": ("options ignored, 2.3M-parameter model",
                                             f"{HELD}, 60 iterations, re-anchored on the seeds' averaged weights, 60 more"),
    "apo_sloppy_h192_gsvk1024_b03_soup_r3": ("options ignored, 2.3M-parameter model",
                                             f"{HELD}, 60 iterations, re-anchored twice on the seeds' averaged weights, "
                                             f"60 more each"),
    **{f"apo_sloppy_h192{ref}_gsvk1024_b03_e30": (f"options ignored, 2.3M-parameter model{init}",
                                                  f"{HELD}, 30 iterations") for ref, init in E30_REFS},
    **{f"apo_sloppy_h192{ref}_gsvk1024_b03_e30_r{n}": (f"options ignored, 2.3M-parameter model{init}",
                                                       f"{HELD}, 30 iterations, re-anchored {times} on each seed's "
                                                       f"policy, 30 more{each}")
       for ref, init in E30_REFS for n, times, each in ((2, "once", ""), (3, "twice", " each"), (4, "3 times", " each"))},
    "apo_sloppy_h192_seed1_gsvko03_b03_it120": ("options ignored, 2.3M-parameter model, init seed 1",
                                                f"{HELD}, {DRAWN}, 120 iterations"),
    "apo_sloppy_h256_seed1_gsvk512_b03_it120": ("options ignored, 3.9M-parameter model, init seed 1",
                                                f"{HELD}, stage 1 on 512 goals, 120 iterations"),
    "apo_sloppy_h256_seed1_gsvk1024_b03": ("options ignored, 3.9M-parameter model, init seed 1",
                                           f"{HELD}, stage 1 on 1,024 goals"),
    "apo_sloppy_h256_seed1_gsvk1024_b03_it120": ("options ignored, 3.9M-parameter model, init seed 1",
                                                 f"{HELD}, stage 1 on 1,024 goals, 120 iterations")}
own_ref_tables, own_ref_rows = {}, {}  # pi_ref label -> its seeds table, its A*PO row's label
for name, (what, imitated, *recipe) in OWN_REF_RUNS.items():
    path = RESULTS_DIR / f"{name}_class_seeds.csv"
    if path.exists():
        table = own_ref_tables[what] = pd.read_csv(path)
        rows.append(start_row(f"pi_ref ({what})", table.query("objective == 'pi_ref'").iloc[0],
                              f"imitation of {imitated}"))
        own_ref_rows[what] = f"apo (from pi_ref, {'; '.join([what, *recipe])})"
        rows.append(seeds_row(own_ref_rows[what], table.query("objective == 'apo'")))
same_ref_tables = {}
for name, (what, recipe) in SAME_REF_RUNS.items():
    path = RESULTS_DIR / f"{name}_class_seeds.csv"
    if path.exists() and what in own_ref_tables:
        table = same_ref_tables[name] = pd.read_csv(path)
        runs = table.query("objective != 'pi_ref'")  # apo, or apo_split
        rows.append(seeds_row(f"{runs['objective'].iloc[0]} (from pi_ref, {what}; {recipe})", runs))
QUERY_RUNS = {  # from the full-expert pi_ref, only the search query sampled and trained
    "apo_query_v1200_b01": "query sampled, clicks greedy"}
query_tables = {}
for name, recipe in QUERY_RUNS.items():
    path = RESULTS_DIR / f"{name}_class_seeds.csv"
    if path.exists():
        query_tables[name] = pd.read_csv(path)
        rows.append(seeds_row(f"apo (from pi_ref, {recipe})", query_tables[name].query("objective == 'apo'")))
compare_path = RESULTS_DIR / "compare_class_summary.csv"
compare_table = pd.read_csv(compare_path) if compare_path.exists() else None
if compare_table is not None:
    batch = get_profile("class").apo.batch_goals
    for r in compare_table.itertuples():
        rows.append({"method": f"{r.objective} (comparison)", "success_rate": r.test_success,
                     "success_ci95": ci(r.test_success, 200 * r.seeds), "mean_score": r.test_score,
                     "mean_steps": float("nan"), "invalid_rate": float("nan"), "train_seconds": r.train_seconds,
                     "notes": f"mean of {r.seeds} seeds (std {r.test_success_std:.3f}), {r.episodes / batch:.0f} "
                              f"iterations of {batch} episodes, stage 1 {r.stage1_seconds:.0f} s extra; interval over "
                              f"the pooled {200 * r.seeds} episodes (notebook 05)"})
summary = pd.DataFrame(rows)
if profile.name == "class":
    atomic_write_text(RESULTS_DIR / "summary.csv", summary.to_csv(index=False, float_format="%.4f"))
with pd.option_context("display.max_rows", None):  # every row, however many runs the report holds
    display(summary.set_index("method").round(3))

# %% [markdown]
# The table is too long to read as bars. The figure keeps two views: on the left the class pipeline (the scripted
# agents, π_ref, the A*PO seeds and the comparison's objectives, all from the same π_ref); on the right every trained
# run as one point, where its π_ref started (across) and where its seeds ended (up). A run on the dashed line would
# meet the target.

# %%
from apo_helpers.analysis.readme import starts_and_ends

SCRIPTED = ("random", "rule", "expert", "oracle")
in_pipeline = summary["method"].isin([*SCRIPTED, "pi_ref", "apo"]) | summary["method"].str.endswith("(comparison)")
pipeline = summary[in_pipeline]
runs_start_end = starts_and_ends(RESULTS_DIR)
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1, 1.15]})
colors = ["#999999" if m in SCRIPTED else "#dd8452" if m.endswith("(comparison)") else "#4c72b0"
          for m in pipeline["method"]]
left.barh(pipeline["method"], pipeline["success_rate"], color=colors)
left.set_xlim(0, 1); left.set_xlabel("test success (greedy)"); left.invert_yaxis()
left.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
left.set_title("the class pipeline on the 200 test goals")
plots.start_and_end(runs_start_end, target=TARGET_GAIN, ax=right,
                    title=f"all {len(runs_start_end)} trained runs: where π_ref started, where the seeds ended")
plots.save(fig, "07_summary")
plt.show()
run_gains = runs_start_end["end"] - runs_start_end["start"]  # section 3's `gains` is another table
above = runs_start_end[run_gains >= TARGET_GAIN]
print(f"runs whose seeds' mean gained 10 points or more: {len(above)} of {len(runs_start_end)}; the highest mean "
      f"ends at {runs_start_end['end'].max():.1%}, the largest gain is {run_gains.max():+.1%}")

# %% [markdown]
# ## 2. What the numbers say

# %%
get = summary.set_index("method")
lines = [f"- The scripted expert solves {get.loc['expert', 'success_rate']:.1%} of the test goals and the rule agent "
         f"{get.loc['rule', 'success_rate']:.1%}; the random agent {get.loc['random', 'success_rate']:.1%}.",
         f"- Imitation gives π_ref {get.loc['pi_ref', 'success_rate']:.1%} (95% interval "
         f"{get.loc['pi_ref', 'success_ci95']}), mean score {get.loc['pi_ref', 'mean_score']:.3f}."]
if "apo" in get.index:
    gain = get.loc["apo", "success_rate"] - get.loc["pi_ref", "success_rate"]
    spread = seeds[seeds["objective"] == "apo"]["test_success"].std(ddof=0)
    verdict = ("within the spread over seeds: no measurable change" if abs(gain) <= spread else
               "an improvement larger than the spread over seeds" if gain > 0 else
               "worse than π_ref by more than the spread over seeds")
    lines.append(f"- A*PO from π_ref reaches {get.loc['apo', 'success_rate']:.1%} on average over its seeds: "
                 f"{gain:+.1%} against π_ref, {verdict} ({spread:.1%}); the target was +10 points.")
if "pi_ref (options ignored)" in get.index:
    start = get.loc["pi_ref (options ignored)", "success_rate"]
    prefix = "(from pi_ref, options ignored"
    trained = [f"{m.replace(prefix + ', ', '(').replace(prefix + ')', '').strip()} {get.loc[m, 'success_rate']:.1%} "
               f"({get.loc[m, 'success_rate'] - start:+.1%})"
               for m in sloppy_methods]
    lines.append(f"- From the π_ref whose demonstrations ignored the options half the time ({start:.1%}): "
                 f"{', '.join(trained)}; the target was +10 points (notebook 04 sections 6 and 8, β₂ in 8).")
for count, table in demo_tables.items():
    start = get.loc[f"pi_ref ({count} demonstrations)", "success_rate"]
    runs = table.query("objective == 'apo'")["test_success"]
    lines.append(f"- From the π_ref of {count} demonstrations ({start:.1%}), A*PO with greedy search on the goals whose "
                 f"samples disagree reaches {runs.mean():.1%} ({runs.mean() - start:+.1%}, spread over seeds "
                 f"{runs.std(ddof=0):.1%}; the target was +10 points; notebook 04 section 6).")
for name, (what, imitated, *recipe) in OWN_REF_RUNS.items():
    if what in own_ref_tables:
        start = get.loc[f"pi_ref ({what})", "success_rate"]
        trained = get.loc[own_ref_rows[what]]
        spread = own_ref_tables[what].query("objective == 'apo'")["test_success"].std(ddof=0)
        lines.append(f"- The imitation of {imitated} gives a π_ref of {start:.1%}; A*PO from it "
                     f"{''.join(f'with the {r} ' for r in recipe)}(`{name}`) "
                     f"{trained['success_rate']:.1%} ({trained['success_rate'] - start:+.1%}, spread over seeds "
                     f"{spread:.1%}; the target was +10 points).")
from apo_helpers.analysis.readme import ref_spread

spread_over_refs = ref_spread(RESULTS_DIR)
for r in spread_over_refs.itertuples():  # one recipe from several pi_refs imitated alike
    lines.append(f"- One recipe ({r.changes}, {r.iterations} iterations) from {r.pi_refs} π_refs imitated from the same "
                 f"demonstrations ({r.demonstrations}) gains {', '.join(f'{g:+.1%}' for g in r.gains)}: "
                 f"{r.gain_mean:+.1%} ± {r.gain_std:.1%} over π_refs, against a spread over seeds of "
                 f"{r.seed_spread:.1%} (the target was +10 points).")
if not spread_over_refs.empty and spread_over_refs["start_gain_corr"].notna().any():
    w = spread_over_refs.loc[spread_over_refs["pi_refs"].idxmax()]  # the recipe run from the most pi_refs
    closer = np.std(w.means) < np.std(w.starts)
    lines.append(f"- From the {w.pi_refs} π_refs of the widest of these ({w.changes}, {w.iterations} iterations), "
                 f"π_ref's test success and the gain correlate at {w.start_gain_corr:+.2f}: the π_refs start between "
                 f"{min(w.starts):.1%} and {max(w.starts):.1%} (spread {np.std(w.starts):.1%}) and the runs end between "
                 f"{min(w.means):.1%} and {max(w.means):.1%} (spread {np.std(w.means):.1%})"
                 + ("; the weaker π_refs gain more and the runs end closer together than they start, so the recipe "
                    "brings its π_refs toward a common level rather than adding a fixed amount." if closer and w.start_gain_corr < 0
                    else "."))
for name, (what, recipe) in SAME_REF_RUNS.items():
    if name in same_ref_tables:
        start = get.loc[f"pi_ref ({what})", "success_rate"]
        runs = same_ref_tables[name].query("objective != 'pi_ref'")["test_success"]
        lines.append(f"- From the same π_ref ({what}), {recipe} (`{name}`): {runs.mean():.1%} "
                     f"({runs.mean() - start:+.1%}, spread over seeds {runs.std(ddof=0):.1%}).")
for name, recipe in QUERY_RUNS.items():
    if name in query_tables:
        table = query_tables[name]
        start, runs = table.query("objective == 'pi_ref'").iloc[0], table.query("objective == 'apo'")
        lines.append(f"- From π_ref, with the {recipe} (`{name}`): {runs['test_success'].mean():.1%} "
                     f"({runs['test_success'].mean() - start['test_success']:+.1%}, spread over seeds "
                     f"{runs['test_success'].std(ddof=0):.1%}); greedy queries that copy the instruction "
                     f"{start['test_query_copied']:.1%} -> {runs['test_query_copied'].mean():.1%} (the target "
                     f"was +10 points).")
if compare_table is not None:
    c = compare_table.set_index("objective")
    best = c["test_success"].idxmax()
    collapsed = c.index[c["test_success"] < 0.05].tolist()
    beat = c.index[c["test_success"] - c["test_success_std"] > get.loc["pi_ref", "success_rate"]].tolist()
    lines.append(f"- In the comparison (same π_ref, goals and budget, {c['seeds'].iloc[0]} seeds) the best objective on "
                 f"test is `{best}` ({c.loc[best, 'test_success']:.1%}); A*PO {c.loc['apo', 'test_success']:.1%}, GRPO "
                 f"{c.loc['grpo', 'test_success']:.1%}; above π_ref by more than their seed spread: "
                 f"{', '.join(f'`{o}`' for o in beat) or 'none'}."
                 + (f" Collapsed (below 5%): {', '.join(f'`{o}`' for o in collapsed)} (notebook 05 shows why)."
                    if collapsed else ""))
    bench_path = RESULTS_DIR / "bench_train_objectives.json"
    if bench_path.exists():
        cost = pd.DataFrame(json.loads(bench_path.read_text())).set_index("objective")["seconds_median"]
        iterations = c.loc["apo", "episodes"] / get_profile("class").apo.batch_goals
        with_stage1 = (cost["grpo"] * iterations) / (cost["apo"] * iterations + c.loc["apo", "stage1_seconds"])
        ratio = cost["grpo"] / cost["apo"]
        reading = ("in line with the paper's ~2x" if ratio >= 1.8 else
                   "A*PO is cheaper per iteration, by less than the paper's ~2x" if ratio > 1.1 else
                   "no per-iteration saving for A*PO in this multi-turn setting")
        lines.append(f"- One iteration of 32 episodes, timed in a quiet process (`bench train --objective all`): A*PO "
                     f"{cost['apo']:.1f} s, GRPO {cost['grpo']:.1f} s (GRPO/A*PO = {ratio:.2f}: {reading}); over the "
                     f"comparison's {iterations:.0f} iterations with A*PO's stage 1 added in, GRPO/A*PO = "
                     f"{with_stage1:.2f}.")
headroom_path = RESULTS_DIR / "headroom_class.csv"
if headroom_path.exists():  # notebook 04 section 5: what A*PO's target would change in pi_ref's greedy episodes
    from apo_helpers.analysis.headroom import headroom_summary, target_choices

    beta2 = get_profile("class").apo.beta2
    at = headroom_summary(target_choices(pd.read_csv(headroom_path), (beta2,))).iloc[0]
    lines.append(f"- On {at['goals']:.0f} stage-1 goals, one changed click in π_ref's greedy episode would raise success "
                 f"from {at['greedy success']:.1%} to {at['one-step ceiling']:.1%}; A*PO's exact target at β₂ = "
                 f"{beta2:g} changes a decision on {at['pi* changes a decision']:.1%} of them, for "
                 f"{at['pi* success']:.1%} (notebook 04 section 5).")
corrections_path = RESULTS_DIR / "corrections_class.json"
if corrections_path.exists():  # notebook 04 section 5: pi_ref fine-tuned on the clicks that solve its failed goals
    corrections = json.loads(corrections_path.read_text())
    tuned = [r for r in corrections["runs"] if r["labels"] == "with corrections"]
    lines.append(f"- π_ref fine-tuned on the successful results-page click of {corrections['goals']} train goals "
                 f"({corrections['corrected_goals']} of them corrections of its own click): greedy val success "
                 f"{corrections['pi_ref']['val_success']:.1%} -> " + ", ".join(
                     f"{r['val_success']:.1%} ({r['steps']} steps at lr {r['lr']:g}"
                     f"{', mixed into its demonstrations' if r['replay'] else ''})" for r in tuned) +
                 "; on the branched goals themselves " + f"{corrections['pi_ref']['branched_goals_success']:.1%} -> "
                 + ", ".join(f"{r['branched_goals_success']:.1%}" for r in tuned) + " (notebook 04 section 5).")
pretrained_path = RESULTS_DIR / "pretrained_class.csv"
if pretrained_path.exists():
    smol = pd.read_csv(pretrained_path)
    zero, after = smol.iloc[0], smol.iloc[-1]
    lines.append(f"- {zero['model']} ({zero['parameters_m']}M parameters, {zero['device']}): format-valid turns "
                 f"{zero['format_valid_rate']:.0%} zero-shot, {after['format_valid_rate']:.0%} {after['stage']}; val "
                 f"success {zero['success_rate']:.0%} -> {after['success_rate']:.0%} over {after['episodes']} episodes "
                 "(notebook 02: a smoke signal on a CPU, not a measurement).")
failures_path = RESULTS_DIR / "failures_class.csv"
if failures_path.exists():
    shares = pd.read_csv(failures_path)
    test = shares[(shares["split"] == "test") & (shares["method"] == "π_ref")].iloc[0]
    classes = [c for c in shares.columns if c not in ("split", "method", "success", "episodes")]
    top = max(classes, key=lambda c: test[c])
    lines.append(f"- π_ref's most common failure on test is `{top}` ({test[top]:.1%} of its episodes; notebook 06).")
display(Markdown("\n".join(lines)))

# %% [markdown]
# ### The pretrained model on a lent GPU
#
# SmolLM2-135M-Instruct imitated the same demonstrators (the `gpu` profile; the README's GPU table), and A*PO ran
# from it on GPUs lent for one session each: a few iterations per seed, and each lease trains its own π_ref, since a
# lent machine starts bare. Each run's seeds against its π_ref on the 200 test goals (a seed whose call ended before
# its test evaluation has no result: the `_long` run lost its seed 0 so; the `_reanchor` lease ran two rounds of one
# iteration, the second re-anchored on each seed's own policy, its `_r2` row):

# %%
from apo_helpers.analysis.readme import gpu_gains

gpu_runs = gpu_gains(RESULTS_DIR)
if not gpu_runs.empty:
    display(gpu_runs.round({"pi_ref": 3, "mean": 3, "spread": 3, "gain": 3}))
    lines = []
    for _, r in gpu_runs.iterrows():
        rate = "" if pd.isna(r["lr"]) else f" at lr {r['lr']:g}"
        spread = ("" if pd.isna(r["gain > spread"]) else f", spread over seeds {r['spread']:.1%}, "
                  + ("smaller than the gain" if r["gain > spread"] else "not smaller than the gain"))
        lines.append(f"- `{r['run']}` ({r['demonstrator']}, {r['device']}): π_ref {r['pi_ref']:.1%}; A*PO{rate}, "
                     f"{r['iterations']} iterations, {r['mean']:.1%} over {r['seeds']} seed(s): {r['gain']:+.1%}"
                     f"{spread} (the target was +10 points).")
    display(Markdown("\n".join(lines)))

# %% [markdown]
# ## 3. How sure are the gains? Intervals over goals and seeds
#
# A run's gain is measured on 200 test goals with three seeds, and both are draws of chance: three other seeds, or
# another 200 goals, would give another number. The spread over seeds above covers the first; the second is shared
# by every policy, because π_ref and the runs play the same goals, so a comparison is *paired*. The paired bootstrap
# resamples both at once, 10,000 times: the goals with replacement (one draw for both policies), and each run's
# seeds with replacement; the 2.5th and 97.5th percentiles of the resampled gains bound a 95% interval
# (`apo_helpers.analysis.significance`). The per-goal outcomes are the greedy episodes of every seed's final policy
# and of the chain's first π_ref: `python -m apo_helpers outcomes --run runs/NAME_class ... --policy SOUP ... --save`
# writes `data/results/goal_outcomes_class.csv`; the check below ties them to the runs' committed seeds tables.

# %%
from apo_helpers.analysis.significance import check_against_seeds, gain_interval, gains_over_first_reference

outcomes_path = RESULTS_DIR / "goal_outcomes_class.csv"
gains = pd.DataFrame()
if outcomes_path.exists():
    outcomes = pd.read_csv(outcomes_path)
    checked = check_against_seeds(outcomes, RESULTS_DIR)  # raises if any seed's outcomes differ from its table
    print(f"{len(checked)} policies' per-goal outcomes match their seeds tables")
    gains = gains_over_first_reference(outcomes, RESULTS_DIR, target=TARGET_GAIN)
    gains["label"] = gains["policy"] + [" (one policy)" if n == 1 else "" for n in gains["policy_seeds"]]
    fig = plots.gain_intervals(gains, target=TARGET_GAIN, title="gain over the chain's first π_ref, 95% paired interval")
    plots.save(fig, "07_gain_intervals")
    plt.show()
gains.round(3)

# %% [markdown]
# The comparisons the findings (README, `docs/experiments.md`) rest on, read the same way: does re-anchoring beat
# the run it continued, does the third round differ from the fourth, do the soups differ from the seeds, and does
# putting back the goals π_ref always solves (`keep_solved`, notebook 04 section 8) change the third round, do
# a decaying learning rate (`lr_decay`) or a moving average of the weights (`ema`) in that round, and does paying
# successes double (`success_bonus`) change the first round or the third? And from the π_ref retrained on an Intel
# Xeon, does V* from 16 samples per goal change the first round, with the goals those samples keep and with the
# goals eight of them keep, does practising only the goals that ask for an option change it, does V*'s soft maximum
# taken nearer the best sample (β₁ = 0.1, and β₁ = β₂ = 0.03) change it, does re-anchoring add to it, and then
# to itself, what it added from the first π_ref, and does β₁ = 0.1 change the second re-anchored round? Last, do
# β₂ = 0.01 and the goals whose samples disagree (`keep_disagreeing`), measured before from the 1.1M π_ref, change the
# first round from this one, does β₂ below 0.01 add to it, how does one round at β₂ = 0.003 compare with the
# twice re-anchored round, does re-anchoring add to β₂ = 0.003, does β₂ = 0.001 gain with the search turn's KL
# weight scaled down with it, and β₂ = 0.003 with it scaled the same way (`greedy_kl=0.003`), and do re-anchoring
# that round or 120 iterations at β₂ = 0.003 add to them? And from
# a second π_ref retrained on the Xeon (the `--seed 1` command), does β₂ = 0.003 end above the held β₂ = 0.03, as
# it did from the first, where does β₂ = 0.01 fall between them, and does re-anchoring add to β₂ = 0.003 there?
# And from the strongest 2.3M π_ref, the one retrained on an AMD EPYC with AVX2 kernels, does re-anchoring add to
# the held recipe there, and does β₂ = 0.003 end above 0.03 from it too? And from the first 2.3M π_ref, the one
# every re-anchored round above started from, does β₂ = 0.003 end above 0.03, how does its one round compare
# with the rounds re-anchored once and twice, do 60 more iterations with the same π_ref and V* add to it, or does
# its seeds' soup, and in rounds of 30 iterations, does re-anchoring the first round add to it? And from the Xeon
# π_ref again, does drawing the option values with the failed draws held at
# π_ref (`explore_options=0.3 hold_failed_draws=True`) add to β₂ = 0.003, or to the held β₂ = 0.03? And are
# rollouts sampled at temperature 0.7 better to learn from than at 1.0, at β₂ = 0.003? And does β₂ = 0.003 from a
# π_ref imitated for a third of the first π_ref's steps (400 instead of 1,200) end where it ends from the first? And
# from a π_ref imitated from twice the demonstrations (1,200 goals), where does it end against the first π_ref's run,
# and does re-anchoring it once add? And from a second π_ref of that command (`--seed 1`), where do its rounds end
# against the first π_ref's, does re-anchoring add there, once and a second time, and where does it end against the
# first 2.3M π_ref's chain re-anchored twice? And from a third π_ref of that command (`--seed 2`), where do its two
# rounds end against the first π_ref's? And from a fourth (`--seed 3`), where does its first round end against the first
# and third π_refs' first rounds, and does re-anchoring it once add? And from a fifth (`--seed 4`), where does its first
# round end against the second's, which started 3 points higher, and the fourth's, and does re-anchoring it once add?
# And does a first round whose rollouts end an episode at a repeated action (`stop_repeats`) or price each repeat
# (`repeat_penalty=0.1`) end above the held first round, from the third π_ref, whose seeds lost goals to such loops, and
# from the others it ran from? Does drawing the option values as the policy reads them (`option_draw=policy`) end above
# the held first round from the third, fourth and fifth π_refs? And where does a π_ref of six layers on the fourth's and
# fifth's commands end against their 4-layer siblings, and re-anchored once, against its own first round and against the
# 4-layer siblings re-anchored once? And from the five commands with demonstrations whose think
# reads on in the instruction (`--progress-think`), where does the held first round end against the short-think (and,
# from the third's, the priced-repeats) and six-layer first rounds, and re-anchored once, against its own first round
# and against the short-think chains re-anchored once? And does leaving the repeated turns out of the winning
# trajectories' credit (`credit_repeats=False`) end above the held first round, from the third π_ref, whose seeds
# looped, and from the fifth's think π_ref, and against the priced repeats from the third? And does replaying earlier
# iterations' winning trajectories in each update (`replay=16`) end above the held first round from the third's,
# fourth's and fifth's think π_refs? And does sampling the search turn, three quarters of its queries drawn as the
# whole instruction and the failed draws held at π_ref (`explore_search=0.75 hold_failed_draws=True`), end above the
# held first round from the fifth's think π_ref, whose greedy search the held recipe leaves as it was? And does
# crediting the turns before the first item page apart from the rest (`apo_split`: they are regressed onto
# r_<k + V*(s_k) - V*(x)), with the query drawn as before, failed draws held or not, end above the same draws trained
# on the whole return? And do those draws end above themselves at 60 iterations when resumed to 120, with the gradient
# on the query's tokens multiplied by 4 (`search_grad_weight=4`), or regressed onto the V* of π_ref's own greedy query
# (`vstar_greedy_search`, which credits a winning drawn query above what π_ref earns with its own)?
# And does the held first round from the think π_ref without `--seed`, given 1,200 practice goals besides the 600
# train goals its demonstrations leave (`practice_goals=1200`), end above the same round on the 600 alone and above
# that round re-anchored once? And does the held first round from a π_ref of the first π_ref's command whose
# demonstrations search only the instruction's description (`train-ref --query description`: the part before the
# options and the budget, a shorter span to copy) end above the same round from the π_ref that copies the whole
# instruction, from the first π_ref's command and from the fifth's (`--seed 4`)? And from a π_ref of the first
# command whose demonstrations search the instruction without its budget (`--query request`: the description's
# results, the option phrases kept in the reply), against both, and against the instruction π_ref of that command
# rebuilt beside it on the same CPU kind (an AMD EPYC with AVX2 kernels, which writes other weights)? And how far does
# that rebuild's round end from the first build's, and the second command's (`--seed 1`) rebuild from its first build's?
# Each difference is given on val too where both sides were played there (the `(val)` columns): the same question asked
# of 200 other unseen goals.

# %%
if not gains.empty:
    held, xeon, avx2 = ("apo_sloppy_h192_gsvk1024_b03", "apo_sloppy_h192_xeon_gsvk1024_b03",
                        "apo_sloppy_h192_avx2_gsvk1024_b03")
    d1200, d1200_seed1, d1200_seed2, d1200_seed3, d1200_seed4 = (
        f"apo_sloppy_h192_d1200{seed}_gsvk600_b003" for seed in ("", "_seed1", "_seed2", "_seed3", "_seed4"))
    l6_seed3, l6_seed4 = (name.replace("h192", "h192_l6") for name in (d1200_seed3, d1200_seed4))  # six layers
    think, think_seed1, think_seed2, think_seed3, think_seed4 = (
        name.replace("_d1200", "_d1200_think") for name in (d1200, d1200_seed1, d1200_seed2, d1200_seed3, d1200_seed4))
    es075h = think_seed4.replace("gsvk600", "v600") + "_es075h"  # the query drawn, failed draws held
    split_es075h = f"apo_split_{es075h.removeprefix('apo_')}"  # the same with the credit split at the item page
    split_es075 = split_es075h.removesuffix("h")  # ... and the failed draws not held
    es075h_it120, es075h_sw4, es075h_vgs = (f"{es075h}_{suffix}" for suffix in ("it120", "sw4", "vgs"))
    vgs, vgs_seed2, vgs_seed3 = (f"{name.replace('gsvk600', 'v600')}_es075h_vgs"
                                 for name in (think, think_seed2, think_seed3))
    practice = think.replace("gsvk600", "gsvk600p1200")  # 1,200 practice goals beside the 600 train goals
    described, described_seed4 = (name.replace("_d1200", "_d1200_qdesc") for name in (d1200, d1200_seed4))
    requested = d1200.replace("_d1200", "_d1200_qreq")  # the instruction without its budget, options kept
    d1200_avx2 = d1200.replace("_d1200", "_d1200_avx2")  # the first command rebuilt on AVX2 kernels: other weights
    d1200_seed1_avx2 = d1200_seed1.replace("_seed1", "_seed1_avx2")  # the second command, rebuilt the same way
    d1200_seed2_avx2 = d1200_seed2.replace("_seed2", "_seed2_avx2")  # the third command, rebuilt the same way
    pairs = [(f"{held}_r3", held), (f"{held}_r3", f"{held}_r4"), (f"{held}_r3_soup", f"{held}_r3"),
             (f"{held}_r3", f"{held}_soup_r3"), (f"{held}_r3_solved05", f"{held}_r3"),
             (f"{held}_r3_decay", f"{held}_r3"), (f"{held}_r3_ema95", f"{held}_r3"),
             (f"{held}_r3_ema95_it120", f"{held}_r3_ema95"), (f"{held}_sb1", held), (f"{held}_sb1_r2", f"{held}_r2"),
             (f"{held}_r3_sb1", f"{held}_r3"),
             (f"{xeon}_n16", xeon), (f"{xeon}_n16f8", xeon), (f"{xeon}_n16f8", f"{xeon}_n16"), (f"{xeon}_opt1", xeon),
             (f"{xeon}_v003", xeon), (f"{xeon}_v01", xeon), (f"{xeon}_v003", f"{xeon}_v01"),
             (f"{xeon}_r2", xeon), (f"{xeon}_r3", f"{xeon}_r2"), (f"{avx2}_r2", avx2),
             ("apo_sloppy_h192_avx2_gsvk1024_b003", avx2), ("apo_sloppy_h192_avx2_gsvk1024_b003", f"{avx2}_r2"),
             ("apo_sloppy_h192_gsvk1024_b003", held), ("apo_sloppy_h192_gsvk1024_b003", f"{held}_r2"),
             ("apo_sloppy_h192_gsvk1024_b003", f"{held}_r3"),
             ("apo_sloppy_h192_gsvk1024_b003_it120", "apo_sloppy_h192_gsvk1024_b003"),
             ("apo_sloppy_h192_gsvk1024_b003_it120", f"{held}_r3"),
             ("apo_sloppy_h192_gsvk1024_b003_soup", "apo_sloppy_h192_gsvk1024_b003"),
             ("apo_sloppy_h192_gsvk1024_b003_e30_r2", "apo_sloppy_h192_gsvk1024_b003_e30"),
             ("apo_sloppy_h192_gsvk1024_b003_e30_r2", "apo_sloppy_h192_gsvk1024_b003"),
             ("apo_sloppy_h192_gsvk1024_b003_e30_r2", f"{held}_r3"),
             (f"{xeon}_r3_v01", f"{xeon}_r3"),
             ("apo_sloppy_h192_xeon_gsvk1024_b01", xeon), ("apo_sloppy_h192_xeon_gsdk1024_b03", xeon),
             ("apo_sloppy_h192_xeon_gsvk1024_b003", "apo_sloppy_h192_xeon_gsvk1024_b01"),
             ("apo_sloppy_h192_xeon_gsvk1024_b001", "apo_sloppy_h192_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003", f"{xeon}_r3"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_r2", "apo_sloppy_h192_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_r2", f"{xeon}_r3"),
             ("apo_sloppy_h192_xeon_gsvk1024_b001_k001", "apo_sloppy_h192_xeon_gsvk1024_b001"),
             ("apo_sloppy_h192_xeon_gsvk1024_b001_k001", "apo_sloppy_h192_xeon_gsvk1024_b01"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_k003", "apo_sloppy_h192_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_k003", "apo_sloppy_h192_xeon_gsvk1024_b001_k001"),
             ("apo_sloppy_h192_xeon_gsvk1024_b001_k001_r2", "apo_sloppy_h192_xeon_gsvk1024_b001_k001"),
             ("apo_sloppy_h192_xeon_gsvk1024_b001_k001_r2", "apo_sloppy_h192_xeon_gsvk1024_b003_r2"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_it120", "apo_sloppy_h192_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_it120", "apo_sloppy_h192_xeon_gsvk1024_b003_r2"),
             ("apo_sloppy_h192_seed1_xeon_gsvk1024_b003", "apo_sloppy_h192_seed1_xeon_gsvk1024_b03"),
             ("apo_sloppy_h192_seed1_xeon_gsvk1024_b01", "apo_sloppy_h192_seed1_xeon_gsvk1024_b03"),
             ("apo_sloppy_h192_seed1_xeon_gsvk1024_b003", "apo_sloppy_h192_seed1_xeon_gsvk1024_b01"),
             ("apo_sloppy_h192_seed1_xeon_gsvk1024_b003_r2", "apo_sloppy_h192_seed1_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_xeon_gsvko03h_b003", "apo_sloppy_h192_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_xeon_gsvko03h_b03", xeon),
             ("apo_sloppy_h192_xeon_gsvko03h_b003", "apo_sloppy_h192_xeon_gsvko03h_b03"),
             ("apo_sloppy_h192_xeon_gsvk1024_b003_t07", "apo_sloppy_h192_xeon_gsvk1024_b003"),
             ("apo_sloppy_h192_sft400_gsvk1024_b003", "apo_sloppy_h192_gsvk1024_b003"),
             (d1200, "apo_sloppy_h192_gsvk1024_b003"), (f"{d1200}_r2", d1200),
             (d1200_seed1, d1200), (f"{d1200_seed1}_r2", d1200_seed1), (f"{d1200_seed1}_r2", f"{d1200}_r2"),
             (f"{d1200_seed1}_r2", f"{held}_r3"), (f"{d1200_seed1}_r3", f"{d1200_seed1}_r2"),
             (d1200_seed2, d1200), (f"{d1200_seed2}_r2", d1200_seed2), (f"{d1200_seed2}_r2", f"{d1200}_r2"),
             (d1200_seed3, d1200), (d1200_seed3, d1200_seed2), (f"{d1200_seed3}_r2", d1200_seed3),
             (f"{d1200_seed3}_r2", f"{d1200}_r2"), (d1200_seed4, d1200_seed1), (d1200_seed4, d1200_seed3),
             (f"{d1200_seed4}_r2", d1200_seed4), (f"{d1200_seed2}_stop", d1200_seed2),
             (f"{d1200_seed2}_rp01", d1200_seed2), (f"{d1200_seed2}_rp01", f"{d1200_seed2}_stop"),
             (f"{d1200_seed4}_rp01", d1200_seed4), (f"{d1200_seed3}_rp01", d1200_seed3),
             (f"{d1200_seed4}_po03h", d1200_seed4), (f"{d1200_seed2}_po03h", d1200_seed2),
             (f"{d1200_seed3}_po03h", d1200_seed3),
             (l6_seed4, d1200_seed4), (l6_seed3, d1200_seed3), (f"{l6_seed3}_r2", l6_seed3),
             (f"{l6_seed3}_r2", f"{d1200_seed3}_r2"), (f"{l6_seed4}_r2", l6_seed4), (f"{l6_seed4}_r2", f"{d1200_seed4}_r2"),
             (think_seed2, d1200_seed2), (think_seed2, f"{d1200_seed2}_rp01"),
             (think_seed3, d1200_seed3), (think_seed4, d1200_seed4), (think_seed3, l6_seed3), (think_seed4, l6_seed4),
             (f"{think_seed3}_r2", think_seed3), (f"{think_seed4}_r2", think_seed4),
             (f"{think_seed3}_r2", f"{d1200_seed3}_r2"), (f"{think_seed4}_r2", f"{d1200_seed4}_r2"),
             (f"{think_seed4}_nrc", think_seed4), (f"{d1200_seed2}_nrc", d1200_seed2),
             (f"{d1200_seed2}_nrc", f"{d1200_seed2}_rp01"), (f"{think_seed2}_r2", think_seed2),
             (f"{think_seed2}_r2", f"{d1200_seed2}_r2"), (f"{think_seed4}_rep16", think_seed4),
             (f"{think_seed2}_rep16", think_seed2), (f"{think_seed2}_rep16", f"{think_seed2}_r2"),
             (f"{think_seed3}_rep16", think_seed3),
             (es075h, think_seed4), (split_es075, think_seed4), (split_es075, es075h),
             (split_es075h, think_seed4), (split_es075h, es075h), (split_es075h, split_es075),
             (es075h_it120, es075h), (es075h_sw4, es075h), (es075h_vgs, es075h), (es075h_vgs, think_seed4),
             (vgs_seed3, think_seed3), (vgs_seed2, think_seed2), (think_seed1, d1200_seed1),
             (think, d1200), (f"{think}_r2", think), (f"{think}_r2", f"{d1200}_r2"), (vgs, think),
             (practice, think), (practice, f"{think}_r2"), (described, d1200),
             (described_seed4, d1200_seed4), (requested, d1200), (requested, described),
             (d1200_avx2, requested), (d1200_avx2, d1200), (d1200_seed1_avx2, d1200_seed1),
             (f"{d1200_avx2}_r2", d1200_avx2), (f"{d1200_avx2}_r2", f"{d1200}_r2"),
             (f"{d1200_seed1_avx2}_r2", d1200_seed1_avx2), (f"{d1200_seed1_avx2}_r2", f"{d1200_seed1}_r2"),
             (d1200_seed2_avx2, d1200_seed2), (d1200_seed2_avx2, f"{d1200_seed2}_r2"),
             (f"{d1200_seed2_avx2}_r2", d1200_seed2_avx2), (f"{d1200_seed2_avx2}_r2", f"{d1200_seed2}_r2")]
    between = pd.DataFrame([gain_interval(outcomes, a, b) for a, b in pairs
                            if {a, b} <= set(outcomes["policy"])])
    # The same pairs on val where both sides were played there: a test difference that val does not repeat is
    # more likely the 200 test goals' luck than the recipe's doing.
    on_val = set(outcomes.query("split == 'val'")["policy"])
    between = between.merge(pd.DataFrame(
        [gain_interval(outcomes, a, b, split="val") for a, b in zip(between["policy"], between["baseline"])
         if {a, b} <= on_val], columns=["policy", "baseline", "gain", "low", "high"]),
        on=["policy", "baseline"], how="left", suffixes=("", " (val)"))
    best = gains.iloc[0]
    lines = [f"- The largest gain, `{best['policy']}` over its first π_ref, is {best['gain']:+.1%} with a 95% "
             f"interval of [{best['low']:+.1%}, {best['high']:+.1%}]; {best['draws_at_target']:.0%} of the resampled gains "
             f"reach +10 points."]
    run = gains[gains["policy_seeds"] > 1].iloc[0]  # the best run of several seeds
    lines.append(f"- Goal by goal, the seeds of `{run['policy']}` ({run['gain']:+.1%}) solve on average "
                 f"{run['gained']:.1f} of the test goals that π_ref fails and fail {run['lost']:.1f} of the "
                 f"{run['baseline_success'] * run['goals']:.0f} that π_ref solves: the goals lost cost "
                 f"{run['lost'] / run['goals']:.1%} of test success. Over all {len(gains)} policies, "
                 f"{gains['lost'].mean():.1f} goals are lost on average for {gains['gained'].mean():.1f} gained.")
    above_zero, covers_target = int((gains["low"] > 0).sum()), int((gains["high"] >= TARGET_GAIN).sum())
    lines.append(f"- {above_zero} of the {len(gains)} policies have their whole interval above 0; {covers_target} "
                 f"reach +10 points within theirs, and {int((gains['low'] >= TARGET_GAIN).sum())} have the whole interval "
                 f"above +10.")
    for _, r in between.iterrows():
        verdict = "includes 0: these goals and seeds cannot tell them apart" if r.low <= 0 <= r.high else "excludes 0"
        on_val_text = ("" if pd.isna(r["gain (val)"]) else
                       f" On val: {r['gain (val)']:+.1%} [{r['low (val)']:+.1%}, {r['high (val)']:+.1%}].")
        lines.append(f"- `{r.policy}` against `{r.baseline}`: {r.gain:+.1%} [{r.low:+.1%}, {r.high:+.1%}], "
                     f"{r.draws_above_zero:.0%} of the resampled differences above 0; the interval {verdict}."
                     + on_val_text)
    display(Markdown("\n".join(lines)))
    display(between.round(3))

# %% [markdown]
# The val split holds 200 more goals no policy trained on. It is a less clean yardstick than test (every run
# evaluated its first 100 every 20 iterations, and the recipes' curves were compared on them), so it is read here as
# a second sample of unseen goals, not as the bar: `outcomes ... --split val --save` plays all 200, and the check
# compares each seed's first 100 with its table's `val_success`.

# %%
val_gains = pd.DataFrame()


def pooled_gain(outcomes, policy, baseline):
    """A policy's success minus its baseline's over every goal of both held-out splits (mean over seeds)."""
    success = lambda name: outcomes.query("policy == @name").groupby(["split", "goal_index"])["success"].mean()
    return (success(policy) - success(baseline)).mean()


if outcomes_path.exists() and (outcomes["split"] == "val").any():
    val_checked = check_against_seeds(outcomes, RESULTS_DIR, split="val")
    print(f"{len(val_checked)} seeds' val outcomes match their seeds tables on the goals their runs evaluated")
    val_gains = gains_over_first_reference(outcomes, RESULTS_DIR, target=TARGET_GAIN, split="val")
    both = gains[["policy", "gain", "low", "high"]].merge(
        val_gains[["policy", "gain", "low", "high"]], on="policy", suffixes=(" (test)", " (val)")).set_index("policy")
    several = val_gains[val_gains["policy_seeds"] > 1]
    best_val = several.iloc[0]
    display(Markdown(
        f"- On val, the largest gain of a run of several seeds is `{best_val['policy']}`'s, {best_val['gain']:+.1%} "
        f"[{best_val['low']:+.1%}, {best_val['high']:+.1%}]; {int((several['gain'] >= TARGET_GAIN).sum())} of the "
        f"{len(several)} runs gain +10 points or more on val on average, and "
        f"{int((val_gains['low'] >= TARGET_GAIN).sum())} of all {len(val_gains)} policies have the whole interval above "
        f"+10. The gains on the two splits correlate at {both['gain (test)'].corr(both['gain (val)']):.2f} over the "
        f"{len(both)} policies played on both. On both splits together, `{best_val['policy']}` gains "
        f"{pooled_gain(outcomes, best_val['policy'], best_val['baseline']):+.1%} over the "
        f"{outcomes.query('policy == @best_val.baseline')['goal_index'].size} goals; the bar is the test split's."))
    display(both.sort_values("gain (test)", ascending=False).round(3))

# %% [markdown]
# ### β₂ swept from one π_ref
#
# β₂ weighs the log-ratio to π_ref in A*PO's regression target, so the policy the loss is minimised by,
# log π*/π_ref = (r − V*)/β₂, lies farther from π_ref the smaller β₂ is. But the loss's gradient with respect to
# log π, 2β₂(β₂ log π/π_ref − (r − V*)), shrinks with β₂ too, while the greedy search turn's KL term keeps its fixed
# weight (`greedy_kl=0.01`). The paper's 10⁻³ was set for single-turn math with answers of about 1,000 tokens;
# notebook 04 section 8 swept it from the 1.1M π_ref. Here the held recipe (greedy search turn, goals whose rewards
# vary, 60 iterations, three seeds) from the π_ref retrained on an Intel Xeon, at four values. The KL, log-ratio and
# gradient norm (before clipping at 1.0) are each seed's mean over iterations 40 to 59 of the training batches (the
# KL in nats per trajectory, summed over its assistant tokens). Each run's paired interval against its neighbour is
# in the table above.

# %%
from apo_helpers.analysis.sweeps import labelled_summary, sweep_summary, sweep_table

XEON_BETA2_RUNS = {0.03: "apo_sloppy_h192_xeon_gsvk1024_b03", 0.01: "apo_sloppy_h192_xeon_gsvk1024_b01",
                   0.003: "apo_sloppy_h192_xeon_gsvk1024_b003", 0.001: "apo_sloppy_h192_xeon_gsvk1024_b001"}


def show_beta2_sweep(runs: dict, title: str, figure: str):
    """The sweep's table, its reading and its figure, from the committed tables of ``runs`` (β₂: run name)."""
    sweep = sweep_table(runs)
    if sweep["value"].nunique() < 2:
        return
    summary = sweep_summary(sweep)
    display(summary.drop(columns="run").round(3))
    success = summary["test success"]
    tops = [value for value in success.index if np.isclose(success[value], success.max())]  # ties named together
    top, low, high = tops[0], summary.index.min(), summary.index.max()
    reached = (summary["gain over π_ref"] >= TARGET_GAIN).sum()
    display(Markdown(
        f"- Over {len(summary)} values of β₂ the best is β₂ = {' and '.join(f'{v:g}' for v in tops)}"
        f"{' (tied)' if len(tops) > 1 else ''}: {success[top]:.1%} on test, "
        f"{summary.loc[top, 'gain over π_ref']:+.1%} over π_ref ({sweep['ref_test_success'].iloc[0]:.1%}); "
        f"{reached} of the values reach the +10-point target.\n"
        f"- The late KL is "
        + ", ".join(f"{summary.loc[v, 'KL (late)']:.2f} nats at β₂ = {v:g}" for v in sorted(summary.index)[::-1])
        + f"; the gradient norm is {summary.loc[high, 'gradient norm (late)']:.3f} at β₂ = {high:g} "
        f"and {summary.loc[low, 'gradient norm (late)']:.3f} at {low:g}."))
    fig = plots.sweep_effect(sweep, target=TARGET_GAIN, title=title)
    plots.save(fig, figure)
    plt.show()


show_beta2_sweep(XEON_BETA2_RUNS, "β₂ from the Xeon π_ref, held recipe, 60 iterations (three seeds each)",
                 "07_beta2_sweep")

# %% [markdown]
# Does the sweep's shape belong to that π_ref? The same recipe from the second π_ref retrained on the Xeon (the
# `train-ref ... --seed 1` command), at three of the four values:

# %%
XEON_SEED1_BETA2_RUNS = {0.03: "apo_sloppy_h192_seed1_xeon_gsvk1024_b03",
                         0.01: "apo_sloppy_h192_seed1_xeon_gsvk1024_b01",
                         0.003: "apo_sloppy_h192_seed1_xeon_gsvk1024_b003"}
show_beta2_sweep(XEON_SEED1_BETA2_RUNS,
                 "β₂ from the second Xeon π_ref, held recipe, 60 iterations (three seeds each)",
                 "07_beta2_sweep_seed1")

# %% [markdown]
# And from the strongest 2.3M π_ref, the one retrained on an AMD EPYC with AVX2 kernels, at the two ends that
# mattered on the Xeon π_refs, the held β₂ = 0.03 and 0.003:

# %%
AVX2_BETA2_RUNS = {0.03: "apo_sloppy_h192_avx2_gsvk1024_b03", 0.003: "apo_sloppy_h192_avx2_gsvk1024_b003"}
show_beta2_sweep(AVX2_BETA2_RUNS, "β₂ from the AVX2 π_ref, held recipe, 60 iterations (three seeds each)",
                 "07_beta2_sweep_avx2")

# %% [markdown]
# And from the first 2.3M π_ref (retrained for this run with its `train-ref` command on the same kind of machine,
# an AMD EPYC with AVX-512 kernels: its stage-1 table's key, which hashes π_ref's weights, is the one its held
# seeds used), the π_ref whose chain re-anchored twice came closest to the target:

# %%
FIRST_BETA2_RUNS = {0.03: "apo_sloppy_h192_gsvk1024_b03", 0.003: "apo_sloppy_h192_gsvk1024_b003"}
show_beta2_sweep(FIRST_BETA2_RUNS, "β₂ from the first 2.3M π_ref, held recipe, 60 iterations (three seeds each)",
                 "07_beta2_sweep_first")

# %% [markdown]
# Is the search turn's KL weight what holds the smallest β₂ back? A*PO's gradient scales with β₂, the KL term's
# with `greedy_kl`; at β₂ = 0.01 and `greedy_kl=0.01` the two stand in a ratio of 1. The same ratio at β₂ = 0.001
# takes `greedy_kl=0.001` (run `apo_sloppy_h192_xeon_gsvk1024_b001_k001`, otherwise the held recipe), and at
# β₂ = 0.003, the best first round from this π_ref, `greedy_kl=0.003` (`apo_sloppy_h192_xeon_gsvk1024_b003_k003`):

# %%
SCALED_KL_RUNS = {"β₂ 0.01, greedy_kl 0.01": "apo_sloppy_h192_xeon_gsvk1024_b01",
                  "β₂ 0.001, greedy_kl 0.01": "apo_sloppy_h192_xeon_gsvk1024_b001",
                  "β₂ 0.001, greedy_kl 0.001": "apo_sloppy_h192_xeon_gsvk1024_b001_k001",
                  "β₂ 0.003, greedy_kl 0.01": "apo_sloppy_h192_xeon_gsvk1024_b003",
                  "β₂ 0.003, greedy_kl 0.003": "apo_sloppy_h192_xeon_gsvk1024_b003_k003"}
scaled_summary = labelled_summary(SCALED_KL_RUNS)
if scaled_summary is not None:
    display(scaled_summary.drop(columns="run").round(3))
    lines = []
    for beta2 in ("0.001", "0.003"):
        scaled, fixed = (scaled_summary.loc[f"β₂ {beta2}, greedy_kl {w}"] for w in (beta2, "0.01"))
        lines.append(
            f"- With the KL weight scaled down with β₂, β₂ = {beta2} ends at {scaled['test success']:.1%} "
            f"({scaled['gain over π_ref']:+.1%} over π_ref, {int(scaled['seeds'])} seeds) against "
            f"{fixed['test success']:.1%} at the fixed weight, with a late KL of {scaled['KL (late)']:.2f} nats "
            f"against {fixed['KL (late)']:.2f}.")
    display(Markdown("\n".join(lines + ["- The paired intervals are in section 3's table above."])))

# %% [markdown]
# Does drawing the value the policy leaves out help once the draws that fail cost nothing? With option values drawn
# on 30% of the item-page turns (`explore_options=0.3`), a drawn value is wrong more often than right, and A*PO's
# regression pushes a failed draw's tokens down; `hold_failed_draws=True` regresses every trajectory with a drawn
# turn whose return fell below V* onto an advantage of 0 instead, so only the draws that paid move the policy
# (notebook 04 section 8). From the Xeon π_ref, at the held β₂ = 0.03 and at β₂ = 0.003, against the same β₂
# without draws; the option columns are the seeds' means on the test goals that ask for an option:

# %%
DRAWN_HELD_RUNS = {"β₂ 0.03, no draws": "apo_sloppy_h192_xeon_gsvk1024_b03",
                   "β₂ 0.03, values drawn, failed draws held": "apo_sloppy_h192_xeon_gsvko03h_b03",
                   "β₂ 0.003, no draws": "apo_sloppy_h192_xeon_gsvk1024_b003",
                   "β₂ 0.003, values drawn, failed draws held": "apo_sloppy_h192_xeon_gsvko03h_b003"}
drawn_summary = labelled_summary(DRAWN_HELD_RUNS)
if drawn_summary is not None:
    display(drawn_summary.drop(columns="run").round(3))
    lines = []
    for beta2 in ("0.03", "0.003"):
        drawn, plain = (drawn_summary.loc[f"β₂ {beta2}, {what}"] for what in ("values drawn, failed draws held",
                                                                               "no draws"))
        lines.append(f"- At β₂ = {beta2} the draws end at {drawn['test success']:.1%} ({drawn['gain over π_ref']:+.1%} "
                     f"over π_ref) against {plain['test success']:.1%} without them; an option clicked on "
                     f"{drawn['option clicked']:.1%} of the goals that ask for one ({plain['option clicked']:.1%}), "
                     f"every value right on {drawn['every value right']:.1%} ({plain['every value right']:.1%}).")
    display(Markdown("\n".join(lines + ["- The paired intervals are in section 3's table above."])))

# %% [markdown]
# Does a sloppier demonstrator leave the draws more to add? The draws above start from a π_ref that already clicks an
# option on many of the goals that ask for one, so they add to a habit the demonstrations half show. A demonstrator that
# ignores the options in three quarters of its episodes leaves a π_ref that seldom clicks one, and at β₂ = 0.03 the held
# recipe barely moved such a π_ref (notebook 04 section 8, "How much the demonstrator leaves out"). Its `train-ref`
# command run again on the Intel Xeon (`--skip-options 0.75`, the half-sloppy Xeon π_ref's goals, initial weights and
# steps otherwise), then β₂ = 0.003 from it with and without the held draws, beside the same two runs from the
# half-sloppy Xeon π_ref. Each run is measured against its own π_ref; the option columns are on the test goals that ask
# for an option:

# %%
from apo_helpers.analysis.sweeps import across_references

SLOPPIER_RUNS = {"options ignored in half, no draws": "apo_sloppy_h192_xeon_gsvk1024_b003",
                 "options ignored in half, values drawn, failed draws held": "apo_sloppy_h192_xeon_gsvko03h_b003",
                 "options ignored in three quarters, no draws": "apo_sloppy75_h192_xeon_gsvk1024_b003",
                 "options ignored in three quarters, values drawn, failed draws held":
                     "apo_sloppy75_h192_xeon_gsvko03h_b003"}
sloppier = across_references(SLOPPIER_RUNS)
if sloppier is not None:
    display(sloppier.drop(columns="run").round(3).T)  # one column per run: four wide rows would not fit
    lines = []
    for share in ("half", "three quarters"):
        plain, drawn = (sloppier.loc[f"options ignored in {share}, {what}"]
                        for what in ("no draws", "values drawn, failed draws held"))
        lines.append(
            f"- Options ignored in {share}: π_ref {plain['π_ref test success']:.1%} on test, clicking an option on "
            f"{plain['π_ref: option clicked']:.1%} of the goals that ask for one. Without draws the seeds end at "
            f"{plain['test success']:.1%} ({plain['gain over π_ref']:+.1%}, spread {plain['std over seeds']:.1%}), "
            f"with them at {drawn['test success']:.1%} ({drawn['gain over π_ref']:+.1%}, spread "
            f"{drawn['std over seeds']:.1%}); an option clicked on {plain['option clicked']:.1%} and "
            f"{drawn['option clicked']:.1%}, every value right on {plain['every value right']:.1%} and "
            f"{drawn['every value right']:.1%}.")
    reached = sloppier[(sloppier["gain over π_ref"] >= TARGET_GAIN)
                       & (sloppier["gain over π_ref"] > sloppier["std over seeds"])].index.tolist()
    lines.append(f"- Runs here at +10 points or more on test, by more than their spread over seeds: "
                 f"{', '.join(reached) or 'none'}. The paired intervals, on test and on val, are in section 3's tables "
                 "above.")
    display(Markdown("\n".join(lines)))

# %% [markdown]
# Is it the samples' noise that keeps a run from converting more of the goals within reach? Evaluation is greedy,
# but the rollouts sample every click at temperature 1.0, so many of the clicks a run learns from are ones greedy
# play would not make. Sampling them at temperature 0.7 keeps them nearer the greedy decisions a run has to flip.
# log π stays the untempered policy's, so A*PO's regression target is unchanged, and the stage-1 table sampled at
# 1.0 serves both runs (the same V* and the same goals). From the Xeon π_ref at β₂ = 0.003; "batch success (late)"
# is the training batches' success over iterations 40 to 59, the option columns as above:

# %%
from apo_helpers.analysis.sweeps import committed_tables

COOLER_RUNS = {"rollouts at temperature 1.0": "apo_sloppy_h192_xeon_gsvk1024_b003",
               "rollouts at temperature 0.7": "apo_sloppy_h192_xeon_gsvk1024_b003_t07"}
cooler_summary = labelled_summary(COOLER_RUNS)
if cooler_summary is not None:
    cooler_summary["batch success (late)"] = [
        committed_tables(name)["history"].query("40 <= iteration <= 59")["success"].mean()
        for name in cooler_summary["run"]]
    display(cooler_summary.drop(columns="run").round(3))
    cool, warm = (cooler_summary.loc[f"rollouts at temperature {t}"] for t in ("0.7", "1.0"))
    display(Markdown(
        f"- At temperature 0.7 the training batches succeed on {cool['batch success (late)']:.1%} of their episodes "
        f"late in the run against {warm['batch success (late)']:.1%} at 1.0, and the seeds end at "
        f"{cool['test success']:.1%} on test ({cool['gain over π_ref']:+.1%} over π_ref) against "
        f"{warm['test success']:.1%} ({warm['gain over π_ref']:+.1%}), at {cool['val success']:.1%} on val against "
        f"{warm['val success']:.1%}; an option clicked on {cool['option clicked']:.1%} of the goals that ask for one "
        f"({warm['option clicked']:.1%}), every value right on {cool['every value right']:.1%} "
        f"({warm['every value right']:.1%}).\n"
        "- The paired interval is in section 3's table above."))

# %% [markdown]
# How far is the target from what the same model learns when no option is left out of its demonstrations? The full
# expert's demonstrations, imitated by a tiny Llama on the same Intel Xeon with the sloppy π_ref's goals, initial
# weights and steps (`train-ref --model hidden_size=192 intermediate_size=576` for 2.3M parameters, `hidden_size=256
# intermediate_size=768` for 3.9M; the 3.9M pair trained side by side with one thread each), give the success imitation
# reaches when it is shown every option click. Beside it the sloppy π_ref, the target above it and the best of the runs
# counted from it (every recipe and round tried, each a run of several seeds; its mean); below, what each does on the
# test goals that ask for an option (a full expert's π_ref only where a run started from it). Each π_ref is one policy:
# π_refs imitated alike spread by several points (section 2), so the columns compare one draw of each.

# %%
from apo_helpers.analysis.readme import runs_from_reference
from apo_helpers.analysis.sweeps import option_behaviour

CEILINGS = {  # label: (the sloppy pi_ref's folder, the full expert's pi_ref's folder), trained alike on one machine
    "2.3M parameters, Intel Xeon": ("pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_xeon",
                                    "pi_ref_class_hidden_size_192_intermediate_size_576_xeon"),
    "3.9M parameters, Intel Xeon": ("pi_ref_class_skip_options_0.5_hidden_size_256_intermediate_size_768_xeon",
                                    "pi_ref_class_hidden_size_256_intermediate_size_768_xeon")}
ceiling_rows, behaviours = [], {}
for label, (sloppy, full) in CEILINGS.items():
    paths = [RESULTS_DIR / f"{name}.json" for name in (sloppy, full)]
    # section 1's starts_and_ends table, read once for every pi_ref here; runs of several seeds only
    from_sloppy, from_full = (runs_from_reference(ref, runs=runs_start_end).query("seeds > 1")
                              for ref in (sloppy, full))
    if not all(path.exists() for path in paths) or from_sloppy.empty:
        continue
    sloppy_ref, full_ref = (json.loads(path.read_text()) for path in paths)
    best = from_sloppy.iloc[0]  # the highest test mean
    ceiling_rows.append({
        "model": label, "π_ref, options ignored in half": sloppy_ref["test"]["success_rate"],
        "target (+10 points)": sloppy_ref["test"]["success_rate"] + TARGET_GAIN, "best run from it": best["test_success"],
        "π_ref, full expert": full_ref["test"]["success_rate"],
        "best run − full expert": best["test_success"] - full_ref["test"]["success_rate"],
        "best run from the full expert's": from_full["test_success"].iloc[0] if len(from_full) else float("nan"),
        "val: π_ref, options ignored in half": sloppy_ref["val"]["success_rate"],
        "val: π_ref, full expert": full_ref["val"]["success_rate"],
        "run": best["table"], "runs counted": len(from_sloppy)})
    # what each does on the test goals that ask for an option (a pi_ref's row is in every table run from it)
    behaviours[label] = {"π_ref, options ignored in half": option_behaviour(best["table"], "pi_ref"),
                         f"best run from it ({best['table']})": option_behaviour(best["table"])}
    if len(from_full):
        best_full = from_full["table"].iloc[0]
        behaviours[label]["π_ref, full expert"] = option_behaviour(best_full, "pi_ref")
        behaviours[label][f"best run from it ({best_full})"] = option_behaviour(best_full)
if ceiling_rows:
    ceilings = pd.DataFrame(ceiling_rows).set_index("model")
    display(ceilings.round(3).T)  # one column per model: easier to read than one wide row
    lines = []
    for label, r in ceilings.iterrows():
        full_best = r["best run from the full expert's"]
        lines.append(
            f"- {label}: imitating the full expert reaches {r['π_ref, full expert']:.1%} on test "
            f"({r['val: π_ref, full expert']:.1%} on val), against {r['π_ref, options ignored in half']:.1%} "
            f"({r['val: π_ref, options ignored in half']:.1%}) from the demonstrations that ignore the options half "
            f"the time. "
            + (f"The best of the {int(r['runs counted'])} runs" if r["runs counted"] > 1 else "The one run")
            + f" from the sloppy π_ref, `{r['run']}`, ends at "
            f"{r['best run from it']:.1%} on test, {r['best run − full expert']:+.1%} against the full expert's "
            f"π_ref. The target, {r['target (+10 points)']:.1%}, lies "
            f"{r['target (+10 points)'] - r['π_ref, full expert']:+.1%} from what imitating every option click "
            f"gives this model."
            + ("" if pd.isna(full_best) else f" From the full expert's π_ref the best run ends at {full_best:.1%}."))
    display(Markdown("\n".join(lines)))
    for label, policies in behaviours.items():
        print(f"{label}: greedy on test (a run's column is its seeds' mean)")
        display(pd.DataFrame(policies).round(3))

# %% [markdown]
# ### What the rounds leave as it was: the first query
#
# The held recipe types the search greedily and leaves it out of log π (`greedy_search`, notebook 04 section 5), so
# A*PO never changes the query. `purchases --run RUN --save` plays π_ref and each seed greedily on the 200 test goals
# and records whether the first query copied the instruction exactly (`query_copied`) and the log-probability each
# policy gives the exact copy on the goal's first page (`query_logprob`, `exact_query_logprobs`: the reply that
# `explore_search` draws); `copy_summary` sets the episodes that copied beside those that garbled it, for the runs
# played since those columns exist.

# %%
from apo_helpers.analysis.purchases import copy_summary

purchases_path = RESULTS_DIR / "purchases_class.csv"
purchases = pd.read_csv(purchases_path) if purchases_path.exists() else pd.DataFrame()
if "query_copied" in purchases.columns and purchases["query_copied"].notna().any():
    copies = copy_summary(purchases)
    ref_rows, seed_rows = copies.xs("pi_ref", level="who"), copies.xs("seeds (mean)", level="who")
    moved = (seed_rows["exact query"] - ref_rows["exact query"]).abs().max()
    gap = (copies["success, exact query"] - copies["success, garbled query"])
    display(Markdown(
        f"- Over {len(ref_rows)} runs, π_ref's greedy query copies the instruction on "
        f"{ref_rows['exact query'].min():.1%} to {ref_rows['exact query'].max():.1%} of the test goals, and no run's "
        f"seeds move that share by more than {100 * moved:.1f} points on average.\n"
        f"- The episodes whose query copied the instruction succeed {100 * gap.min():.1f} to {100 * gap.max():.1f} "
        f"points more often than those whose query garbled it, in every row (π_ref and seeds alike).\n"
        f"- {copies['missing attributes after a garbled query'].sum() / copies['missing attributes'].sum():.0%} of "
        f"the purchases that lack an attribute followed a garbled query (all rows below together)."))
    garbled_logp = "log π of the exact query, garbled"
    moved_logp = (seed_rows[garbled_logp] - ref_rows[garbled_logp]).dropna()
    if not moved_logp.empty:
        display(Markdown(
            f"- Where a policy's greedy query garbles the instruction, π_ref gives the exact query a log-probability "
            f"of {ref_rows[garbled_logp].dropna().mean():.1f} nats on average "
            f"({ref_rows['log π of the exact query, copied'].dropna().mean():.2f} where it copies); over the "
            f"{len(moved_logp)} runs with `query_logprob`, the seeds move it by {moved_logp.min():+.1f} to "
            f"{moved_logp.max():+.1f} nats."))
    display(copies.round(3))

# %% [markdown]
# ## 4. Key figures

# %%
for name in ["01_baselines", "02_pi_ref_test", "03_vstar_distribution", "04_apo_seeds", "04_headroom",
             "05_compare_curves", "05_compare_dynamics", "06_failure_classes", "07_gain_intervals",
             "07_beta2_sweep"]:
    path = FIGURES_DIR / f"{name}.png"
    if path.exists():
        display(Markdown(f"**{name}**"), Image(filename=str(path), width=720))

# %% [markdown]
# ## 5. Reproducing this report
#
# `make report` trains π_ref and the three A*PO seeds when they are missing (`runs/`), executes notebooks 00-07
# under the `class` profile and exports `report/index.html`. On a 2-core CPU the training dominates: π_ref takes
# the time recorded in `data/results/pi_ref_class.json`, each A*PO seed the time recorded in
# `data/results/apo_class_seeds.csv`:

# %%
times = {"pi_ref (minutes)": ref["train_seconds"] / 60}
if seeds is not None:
    times["A*PO per seed (minutes)"] = seeds[seeds["objective"] == "apo"]["train_seconds"].mean() / 60
pd.Series(times).round(1)
