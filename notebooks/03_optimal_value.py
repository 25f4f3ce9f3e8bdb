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
# # 03 · A*PO stage 1: the optimal value V*
#
# **Learning objectives.** After this notebook you can
# 1. write V*(x) = β₁ log( (1/N) Σᵢ exp(r(x, yᵢ) / β₁) ) and say what β₁ does (mean ↔ max);
# 2. compute V* for every training instruction from N samples of the frozen π_ref, in one batched rollout;
# 3. read the distribution of V* over goals, and the advantages r − V* that stage 2 will regress onto;
# 4. judge how many samples N are worth their cost, and why the table is cached.
#
# The package code is `apo_helpers.apo.vstar` (`optimal_value`, `stage1`, the cache).

# %%
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from apo_helpers.config import get_profile, seed_everything, device, RUNS_DIR
from apo_helpers.apo.sft import load_or_train_reference
from apo_helpers.apo.vstar import optimal_value, stage1, stage1_goals, weights_hash
from apo_helpers.analysis import plots

profile = get_profile()
seed_everything(profile.seed)
print(f"profile {profile.name} on {device()}")
print(profile.apo)

# %% [markdown]
# ## 1. A soft maximum of sampled rewards
#
# A*PO's target policy is the KL-regularised optimum π*(y|x) ∝ π_ref(y|x) exp(r(x, y)/β). Its value is
# V*(x) = β log E_{y∼π_ref} exp(r(x, y)/β): π_ref's samples, *soft-maxed*. Stage 1 estimates it from N samples:
#
# $$V^*(x) \approx \beta_1 \log \frac{1}{N} \sum_{i=1}^N \exp\big(r(x, y_i)/\beta_1\big)$$
#
# computed with the log-sum-exp trick. A large β₁ gives the mean of the samples, β₁ → 0 their maximum: V* says
# "what π_ref can reach on this instruction when it is lucky", not what it reaches on average.

# %%
# NBVAL_CHECK_OUTPUT
rewards = [0.0, 0.6, 0.6, 1.0]
betas = np.logspace(-2, 1.5, 60)
values = [optimal_value(rewards, b) for b in betas]
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.semilogx(betas, values, label="V* of rewards [0, 0.6, 0.6, 1]")
ax.axhline(np.mean(rewards), ls="--", color="gray", label="mean")
ax.axhline(max(rewards), ls=":", color="black", label="max")
ax.axvline(profile.apo.beta1, color="#dd8452", lw=1, label=f"β₁ = {profile.apo.beta1} (paper)")
ax.set_xlabel("β₁"); ax.set_ylabel("V*"); ax.legend(fontsize=8); ax.set_title("β₁ moves V* from the max to the mean")
plots.save(fig, "03_vstar_beta1")
print({b: round(optimal_value(rewards, b), 4) for b in (0.01, 0.1, 0.5, 2.0, 30.0)})

# %% [markdown]
# ## 2. Stage 1 on the training goals
#
# `stage1` draws N = `apo.vstar_samples` episodes of the **frozen** π_ref per goal at temperature 1.0, as one
# batched rollout over all N × goals episodes, and tabulates the rewards (WebShop's reward plus format penalties,
# the same r that stage 2 optimises). The goals are train goals that the demonstrations did **not** use: π_ref has
# memorised its demonstration goals, and RL on them would teach it little that carries over.
#
# The table is cached under a key made of π_ref's weights hash, N, the temperature, the goals and the seed, all
# that the samples depend on: a second call loads it. V* is recomputed from the cached rewards whenever β₁ differs,
# so another β₁ needs no new samples. The cache also records how long the sampling took.

# %%
ref_model, tokenizer = load_or_train_reference(profile)
start = time.perf_counter()
result = stage1(ref_model, tokenizer, profile, RUNS_DIR / "vstar")
seconds = time.perf_counter() - start
table = result.table
print(f"{len(table)} goals x N={profile.apo.vstar_samples}: {'loaded from the cache' if result.loaded else 'sampled'} "
      f"in {seconds:.1f} s (sampling took {result.seconds} s on {device()}); key {result.key}")
table.head()

# %% [markdown]
# A second call with the same π_ref and settings finds the table by its key and does not sample:

# %%
start = time.perf_counter()
again = stage1(ref_model, tokenizer, profile, RUNS_DIR / "vstar")
print(f"loaded={again.loaded} in {time.perf_counter() - start:.2f} s (hashing π_ref's weights included)")
assert again.key == result.key and again.loaded

# %% [markdown]
# Why not the demonstration goals? π_ref was trained to imitate the expert on those exact goals, and a small model
# memorises. A quick check with a few samples on goals of each kind:

# %%
from apo_helpers.apo.vstar import sample_rewards
from apo_helpers.apo.sft import expert_demonstrations

seen = [d.goal for d in expert_demonstrations(profile, profile.reference.demonstrations)]
check_goals, check_samples = min(48, len(table)), 4
seed_everything(profile.seed)
on_seen, _ = sample_rewards(ref_model, tokenizer, seen[:check_goals], check_samples, profile, progress=False)
on_unseen, _ = sample_rewards(ref_model, tokenizer, result.goals()[:check_goals], check_samples, profile, progress=False)
pd.DataFrame({"goals": ["demonstration goals", "stage-1 goals (unseen)"],
              "sampled success": [np.mean([r >= 1 for rs in on_seen for r in rs]),
                                  np.mean([r >= 1 for rs in on_unseen for r in rs])],
              "mean reward": [np.mean(on_seen), np.mean(on_unseen)]}).set_index("goals").round(3)

# %% [markdown]
# ## 3. What V* says about the goals

# %%
samples = profile.apo.vstar_samples
summary = pd.Series({
    "goals": len(table),
    "mean sampled reward": table["mean"].mean(),
    "mean V*": table["vstar"].mean(),
    "mean max reward": table["max"].mean(),
    "sampled success": table["successes"].sum() / (len(table) * samples),
    "goals solved at least once": (table["successes"] > 0).mean(),
    "goals never above 0": (table["max"] <= 0).mean(),
})
summary.round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
axes[0].hist(table["vstar"], bins=30, color="#4c72b0", alpha=0.8, label="V*")
axes[0].hist(table["mean"], bins=30, color="#dd8452", alpha=0.5, label="mean reward")
axes[0].set_xlabel("per goal"); axes[0].set_ylabel("goals"); axes[0].legend(fontsize=8)
axes[0].set_title(f"V* (β₁ = {profile.apo.beta1}) sits between the mean and the max")
counts = table["successes"].value_counts().reindex(range(samples + 1), fill_value=0)
axes[1].bar(counts.index, counts.values, color="#55a868")
axes[1].set_xlabel(f"successful samples out of {samples}"); axes[1].set_ylabel("goals")
axes[1].set_title("how often π_ref solves each goal")
plots.save(fig, "03_vstar_distribution")

# %% [markdown]
# Stage 2 regresses β₂ log(π/π_ref) onto the **advantage** r − V*. Because V* is a soft *maximum*, it sits above
# the mean reward, so the average advantage is negative: a sample must beat π_ref's usual result to be pushed up.
# A goal whose samples all score the same gives every sample an advantage of 0: nothing to learn there. Here are
# the advantages of π_ref's stage-1 samples against their goal's V*:

# %%
advantages = np.concatenate([np.asarray(r) - v for r, v in zip(table["rewards"], table["vstar"])])
fig, ax = plt.subplots(figsize=(6, 3))
ax.hist(advantages, bins=40, color="#8172b3")
ax.axvline(0, color="black", lw=1)
ax.set_xlabel("r − V*"); ax.set_ylabel("samples"); ax.set_title("advantages of π_ref's samples")
plots.save(fig, "03_advantages")
print(f"samples with r - V* < 0: {np.mean(advantages < -1e-9):.2f}, = 0: {np.mean(np.abs(advantages) <= 1e-9):.2f}, "
      f"> 0: {np.mean(advantages > 1e-9):.2f}; mean advantage {advantages.mean():+.3f}")

# %% [markdown]
# ## 4. How many samples? The estimate against its cost
#
# V* from fewer samples is cheaper and noisier, and biased low (a soft max of fewer draws is smaller on average).
# We can measure both without sampling again: re-estimate V* from bootstrap draws (with replacement) of n of each
# goal's N cached rewards. The cost column scales stage 1's measured sampling time.

# %%
rng = np.random.default_rng(profile.seed)
rows = []
for n in [k for k in (1, 2, 4, 8, 16) if k <= samples]:
    estimates = np.array([[optimal_value(rng.choice(r, n, replace=True), profile.apo.beta1) for _ in range(20)]
                          for r in table["rewards"]])
    rows.append({"N": n, "mean V*": estimates.mean(), "spread (std over draws)": estimates.std(axis=1).mean(),
                 "episodes": n * len(table),
                 "seconds": n / samples * result.seconds if result.seconds else float("nan")})
pd.DataFrame(rows).set_index("N").round(4)

# %% [markdown]
# The spread falls roughly as 1/√n while the cost grows as n; the paper's N = 8 is a middle ground. Stage 1's cost is
# paid once per π_ref, and the comparison in notebook 05 adds it to A*PO's bill.
#
# ## 5. Exercises
#
# 1. Compute by hand V* of rewards [1, 0, 0, 0] with β₁ = 0.5, then check it with `optimal_value`.
# 2. Which β₁ makes V* of the table's goals equal, on average, to the mean sampled reward plus half the gap to the
#    max? (Hint: evaluate `optimal_value` on `table["rewards"]` over a grid of β₁.)
# 3. Turn on `drop_unsolved` (`dataclasses.replace(profile.apo, drop_unsolved=True)`): how many goals go?

# %%
# Self-check for exercise 1: replace None with your number.
my_answer = None
expected = optimal_value([1, 0, 0, 0], 0.5)
if my_answer is None:
    print("fill in my_answer; hint: 0.5 * log((e^2 + 3) / 4)")
else:
    print("correct" if abs(my_answer - expected) < 1e-3 else f"not quite: V* = {expected:.4f}")

# %% [markdown]
# ## Summary
#
# - V* is a soft maximum of π_ref's sampled rewards; β₁ sets how soft.
# - Stage 1 is one batched rollout of the frozen π_ref, N samples per goal, cached by π_ref's weights hash.
# - Most of π_ref's own samples fall below V*: stage 2 will push the policy toward its better-than-usual episodes.
#
# Next: notebook 04 uses this table inside RAGEN's loop.
