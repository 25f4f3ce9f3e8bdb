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
# # 05 · Does A*PO beat PPO and GRPO here? The baselines and the efficiency comparison
#
# **Learning objectives.** After this notebook you can
# 1. write each objective as a formula and as a few lines of PyTorch: A*PO, GRPO, PPO with a critic (RAGEN's
#    StarPO), StarPO-S's variance filter, and two simpler A*PO-style variants;
# 2. say what each needs per iteration: samples per goal, a critic, a reference model, V*;
# 3. compare them fairly: same π_ref, same goals, same budget, curves against time, episodes and tokens;
# 4. read what the numbers say about A*PO's claim (same accuracy, about 2x less training time than GRPO, less memory)
#    in a multi-turn agent setting, whichever way they fall.
#
# The package code is `apo_helpers.apo.losses` (the objectives), `apo_helpers.apo.value_head` (PPO's critic),
# and `apo_helpers.apo.compare` (the comparison).

# %%
import inspect

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from apo_helpers.config import get_profile, seed_everything, device, RESULTS_DIR, RUNS_DIR
from apo_helpers.apo import losses
from apo_helpers.apo.compare import compare, OBJECTIVE_SETTINGS, USES_VSTAR
from apo_helpers.apo.sft import load_or_train_reference, reference_dir
from apo_helpers.analysis import plots

profile = get_profile()
seed_everything(profile.seed)
print(f"profile {profile.name} on {device()}")

# %% [markdown]
# ## 1. The objectives side by side
#
# All read the same batch (`ObjectiveInputs`): per trajectory the summed log π and log π_ref over the agent's
# tokens, the reward r and V*; per token the log-probs under π, π_ref and the sampling policy.
#
# | objective | loss | samples per goal | needs |
# |---|---|---|---|
# | `apo` | mean (β₂ log π/π_ref − (r − V*))² | 1 | π_ref, V* (stage 1) |
# | `grpo` | −mean_tokens min(ρA, clip(ρ, 1±ε)A), A = (r − mean_group)/std_group | n (8) | (π_ref for an optional KL) |
# | `ppo` | clipped ratio with A = G − V (GAE over turns, γ = λ = 1) + c·(V − G)² | 1 | a critic |
# | `starpo_s` | `grpo` on the 25% of goals with the highest reward variance | n (8) | |
# | `kl_pg` | −(log π / tokens)·A + λ·KL, A = clamp(r + β log π_ref/π − V*) | 1 | π_ref, V* |
# | `weighted_sft` | −w·log π / tokens + λ·KL, w = clamp(norm(r − V*) + 1, 0.1, 5) | 1 | π_ref, V* |
#
# Each is a short pure function; here are two of them:

# %%
print(inspect.getsource(losses.apo_loss))
print(inspect.getsource(losses.grpo_objective))

# %% [markdown]
# A unit test (`tests/test_objectives.py`) checks every objective on hand-computed inputs and that each moves a
# toy policy toward a rewarded action. What each objective asks of an iteration, in this project's settings:

# %%
# NBVAL_CHECK_OUTPUT
rows = []
for name in losses.OBJECTIVES:
    settings = dict(s.split("=") for s in OBJECTIVE_SETTINGS.get(name, []))
    rows.append({"objective": name, "rollouts per goal": int(settings.get("group_size", 1)),
                 "uses V* (stage 1)": name in USES_VSTAR, "critic": name == "ppo"})
pd.DataFrame(rows).set_index("objective")

# %% [markdown]
# ## 2. A short comparison, live
#
# `python -m apo_helpers compare --profile class --seeds 0 1 2 --save` trains every objective from the same π_ref
# on the same goals, with the same iterations of 32 episodes, each run in its own process so its peak memory is its
# own. The full comparison takes hours on a 2-core CPU; here a short one runs live (few iterations: it shows the
# machinery and the costs, not which objective learns best).

# %%
load_or_train_reference(profile)
live_iterations = 1 if profile.name == "ci" else 3
summary, curves = compare(list(losses.OBJECTIVES), [profile.seed], profile.name,
                          RUNS_DIR / f"compare_live_{profile.name}", str(reference_dir(profile)),
                          str(RUNS_DIR / "vstar"), iterations=live_iterations,
                          extra=[f"eval_every={live_iterations}", "eval_episodes=" + str(min(50, profile.apo.eval_episodes)),
                                 "test_episodes=" + str(min(50, profile.apo.test_episodes))],
                          progress=lambda line: None)
summary.set_index("objective").round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
per_iteration = summary.set_index("objective")["train_seconds"] / live_iterations
per_iteration.plot.barh(ax=axes[0], color="#4c72b0"); axes[0].set_xlabel("seconds per iteration")
summary.set_index("objective")["peak_memory_mb"].plot.barh(ax=axes[1], color="#dd8452")
axes[1].set_xlabel("peak memory (MiB; RSS on CPU, allocated on GPU)")
fig.suptitle(f"cost of one iteration of {profile.apo.batch_goals} episodes, on {device()}")
plots.save(fig, "05_cost_per_iteration")

# %% [markdown]
# ## 3. The committed comparison
#
# When `data/results/compare_class_summary.csv` and `compare_class_curves.csv` exist (from the command above), the
# curves of val success against wall-clock seconds, episodes and generated tokens are drawn here with the spread
# over seeds, and the table gives test success ± spread, time to the target val success, episodes, tokens and peak
# memory, with A*PO's stage 1 added in.

# %%
summary_path, curves_path = RESULTS_DIR / "compare_class_summary.csv", RESULTS_DIR / "compare_class_curves.csv"
if summary_path.exists() and curves_path.exists():
    committed, committed_curves = pd.read_csv(summary_path), pd.read_csv(curves_path)
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.2))
    for ax, x in zip(axes, ["seconds", "episodes", "tokens"]):
        for objective, part in committed_curves.groupby("objective"):
            band = part.groupby("iteration").agg(x=(x, "mean"), mean=("success", "mean"), low=("success", "min"),
                                                  high=("success", "max"))
            ax.plot(band["x"], band["mean"], label=objective)
            ax.fill_between(band["x"], band["low"], band["high"], alpha=0.2)
        ax.set_xlabel(x); ax.set_ylabel("val success (greedy)")
    axes[0].legend(fontsize=8)
    plots.save(fig, "05_compare_curves")
    display(committed.set_index("objective").round(3))
else:
    print("no committed comparison yet: python -m apo_helpers compare --profile class --seeds 0 1 2 --save")

# %% [markdown]
# ## 4. Exercises
#
# 1. **Group size.** GRPO's advantage is zero for a goal whose n samples all score the same. With the stage-1
#    table of notebook 03, what share of goals would give GRPO no signal at n = 8? (Hint: `successes` is 0 or 8
#    and every reward equal.) Put it in `my_share`.
# 2. **Fair budgets.** GRPO spends 8 episodes per goal, A*PO 1 plus N = 8 once in stage 1. After how many passes
#    over the goals does A*PO's total number of episodes fall below GRPO's?

# %%
from apo_helpers.apo.vstar import stage1
from apo_helpers.apo.trainer import load_models

_, ref_model, tokenizer = load_models(reference_dir(profile))
table = stage1(ref_model, tokenizer, profile, RUNS_DIR / "vstar").table
my_share = None  # your answer to exercise 1
expected = table["rewards"].map(lambda r: len(set(r)) == 1).mean()
print("fill in my_share" if my_share is None else
      ("correct" if abs(my_share - expected) < 1e-6 else f"not quite: {expected:.3f}"))

# %% [markdown]
# ## Summary
#
# - Every objective is a small function of the same batch; they differ in what an iteration must pay for: samples
#   per goal (GRPO, StarPO-S), a critic (PPO), or a one-off stage 1 (A*PO and its variants).
# - The comparison runs each in its own process, on the same π_ref, goals and budget, and reports time, episodes,
#   tokens and memory beside success, with stage 1 counted separately and added in.
