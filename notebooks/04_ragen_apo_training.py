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
# # 04 · RAGEN's loop with A*PO stage 2
#
# **Learning objectives.** After this notebook you can
# 1. describe RAGEN's outer loop: batched multi-turn rollouts of the current policy, then an update;
# 2. take one A*PO iteration apart: a trajectory, its log π and log π_ref over the agent's tokens, the target
#    r − V*, the least-squares loss; and check that the tokens trained are the tokens sampled;
# 3. run the loop, read its learning curves (success, reward, KL to π_ref, loss) and evaluate on goals it never
#    trained on;
# 4. read the committed three-seed results, with their spread, against π_ref and the scripted agents;
# 5. measure what the samples explore and which decisions A*PO's target would change, why β₂ decides it, and
#    whether this model can learn the results-page choice at all;
# 6. test whether RL teaches what the demonstrations left out;
# 7. read a search for a better recipe (section 8): one question per subsection, the committed runs that answer
#    it, and what each answer rules out.
#
# The package code is `apo_helpers.apo.losses` (the objective) and `apo_helpers.apo.trainer` (the loop).
#
# **How to read it.** Sections 1–4, 9 and 10 are the lesson: the loop, one iteration, a live run, the committed
# seeds, and before/after episodes in the viewer. Sections 5–8 are the investigation of why A*PO's gain over π_ref
# stops short of the project's +10-point target; the Summary at the end gives each finding in a bullet, and each
# subsection holds the evidence behind it, from committed runs (`docs/experiments.md` has every run's command).
# Section 4 ends with the project's best recipe, from π_refs imitated from twice the demonstrations: several π_refs
# of each of two commands (the demonstrations' short think, and a think that reads on in the instruction), with the
# gain's mean over π_refs beside each π_ref's; notebook 07 section 3 compares it with every other run.
# Section 8's subsections, by the question they ask:
#
# | question | subsections of section 8 |
# |---|---|
# | how far may the policy move from π_ref? | the sweep at its start; β₂ where there is something to learn; β₂ and the goals practised, from the Xeon π_ref |
# | which goals should RL practise? | Goals whose rewards vary; Keeping what π_ref solves; Practising only the two-option goals |
# | how to keep the greedily played turns stable? | Anchoring the greedy search turn; Holding the whole distribution... |
# | is the optimizer the limit? | Fitting each batch; Is the plateau noise?; Smoothing the end of a round |
# | why does the option choice stall? | Purchases one click early; Drawing the missing value; Pages that say which option is selected; Pages that show the selection, at 2.3M |
# | is the model or the demonstrator the limit? | A wider model; How much the demonstrator leaves out |
# | what about the budget? | Where the purchases still fail: above the budget |
# | does renewing π_ref and V* help? | Re-anchoring every 60 and every 30 iterations; from another π_ref; from the Xeon π_ref; Averaging the seeds |
# | is the reward's shape the limit? | Paying successes more |
# | is stage 1's estimate the limit? | Sampling V* more precisely; How soft V*'s maximum is: β₁ |

# %%
import dataclasses
import functools
import inspect
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import HTML, display

from apo_helpers.config import get_profile, seed_everything, device, RESULTS_DIR, RUNS_DIR
from apo_helpers.apo.losses import apo_loss, ObjectiveInputs
from apo_helpers.apo.sft import load_or_train_reference, reference_dir
from apo_helpers.apo.trainer import Trainer, fit_one_batch, load_models, objective_inputs
from apo_helpers.apo.vstar import stage1
from apo_helpers.policy.rollout import rollout, Sampling
from apo_helpers.analysis.evaluate import evaluate_policy, greedy_evaluation, summary_table, wilson_interval
from apo_helpers.analysis.viewer import EpisodeViewer, episodes_html
from apo_helpers.analysis import plots

profile = get_profile()
seed_everything(profile.seed)
print(f"profile {profile.name} on {device()} (bf16 autocast on CUDA, float32 on CPU)")
print(profile.apo)

# %% [markdown]
# ## 1. The loop and the objective
#
# Each iteration of RAGEN's loop has two phases:
#
# 1. **Rollouts.** Draw B train goals that have a V* (notebook 03) and play ONE episode per goal with the current
#    policy π, all B in lockstep (notebook 02's batched rollout).
# 2. **Update.** Score each trajectory's assistant tokens under π (with gradients) and under the frozen π_ref, and
#    take one optimizer step on A*PO's least-squares loss, gradients clipped at 1.0:
#
# $$\mathcal{L}(\pi) = \frac{1}{B}\sum_{i=1}^B \Big(\beta_2 \log\frac{\pi(y_i\mid x_i)}{\pi_{ref}(y_i\mid x_i)} - \big(r(x_i, y_i) - V^*(x_i)\big)\Big)^2$$
#
# where log π(y|x) sums over every assistant token of the whole multi-turn trajectory. No critic, no ratio
# clipping, one sample per goal. The loss is a few lines:

# %%
print(inspect.getsource(apo_loss))

# %% [markdown]
# ## 2. One iteration taken apart
#
# Load π_ref, its V* table (cached by notebook 03; sampled here when missing) and a policy that starts as a copy
# of π_ref. Then play 8 goals and look at what the loss sees.

# %%
ref_dir = reference_dir(profile)
load_or_train_reference(profile)  # trains π_ref only when notebook 02 / `make report` has not
model, ref_model, tokenizer = load_models(ref_dir)
vstar = stage1(ref_model, tokenizer, profile, RUNS_DIR / "vstar")
print(f"V* table: {len(vstar.table)} goals ({'cached' if vstar.loaded else 'sampled now'})")

seed_everything(profile.seed)
goals = vstar.goals()[:8]
trajectories = rollout(model, tokenizer, goals, Sampling(temperature=profile.apo.temperature), profile.policy,
                       profile.policy_env())
inputs = objective_inputs(model, ref_model, trajectories, tokenizer, vstar, profile)
parts = pd.DataFrame({
    "turns": [t.num_turns for t in trajectories],
    "trained tokens": inputs.tokens.int().tolist(),
    "log π": inputs.logp.detach().numpy().round(2),
    "log π_ref": inputs.logp_ref.numpy().round(2),
    "r": inputs.reward.numpy().round(3),
    "V*": inputs.vstar.numpy().round(3),
    "r − V*": (inputs.reward - inputs.vstar).numpy().round(3),
})
parts

# %% [markdown]
# ### The tokens trained are the tokens sampled
#
# The rollout turns each reply's tokens into text (the environment reads text), and the update turns the chat text
# back into tokens. Before the first update π is the policy that sampled, so at temperature 1 the scored log π of
# each trajectory must equal the sum of the log-probs recorded while sampling. If the text does not re-encode to
# the sampled tokens, the loss is about sequences the model never writes:

# %%
check = pd.DataFrame({
    "log-prob while sampling": [round(sum(map(sum, t.sample_logprobs)), 2) for t in trajectories],
    "log π as scored for the update": inputs.logp.detach().numpy().round(2),
    "replies re-encoded to other tokens": [t.token_mismatches for t in trajectories]})
print(f"largest difference: {np.abs(check.iloc[:, 0] - check.iloc[:, 1]).max():.3f} nats "
      f"(sampling temperature {profile.apo.temperature})")

# %% [markdown]
# This check was missing for most of this project's history, and the difference was not small. The tiny
# tokenizer's normalizer writes a space after `[` (so that `search[` never swallows the query's first word), and its
# decoder used to leave that space in the text: `click[item 1]` came back as `click[ item 1]`, which re-encodes
# with one more space token. The same replies, decoded the old way and scored as the update scored them then:

# %%
import copy
from tokenizers import decoders

old_decoder = copy.deepcopy(tokenizer)
old_decoder.backend_tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
as_before = [dataclasses.replace(t, input_ids=[], assistant_mask=[], turns=[
    dataclasses.replace(u, response=old_decoder.decode(ids, skip_special_tokens=True).strip() if ids else u.response)
    for u, ids in zip(t.turns, t.reply_ids)]) for t in trajectories]
check["log π of the text the old decoder wrote"] = objective_inputs(
    model, ref_model, as_before, tokenizer, vstar, profile).logp.detach().numpy().round(2)
display(check)
n_turns = sum(t.num_turns for t in trajectories)
lost = (check["log-prob while sampling"] - check["log π of the text the old decoder wrote"]).sum() / n_turns
print(f"the old decoder's text was {lost:.1f} nats per turn less likely than the reply sampled "
      f"(e.g. {as_before[0].turns[-1].response!r})")

# %% [markdown]
# So every objective (A*PO and all the baselines) spent its updates on token sequences the model never writes.
# The decoder now undoes the normalizer (`policy.models.tiny_decoder`; policies saved before get it when loaded),
# every rollout counts the replies that do not re-encode to their sampled tokens (`Trajectory.token_mismatches`, the
# trainer's `token_mismatch_rate`), and `tests/test_rollout.py` fails if the old decoder comes back. A sampled reply
# can still be written in tokens the tokenizer would not choose (`[` followed by `find` instead of `▁find`); the
# trainer's history counts them (section 4's runs: well under 1% of replies).
#
# Before the first update π = π_ref, so the log-ratio is 0 and the loss is the mean squared advantage. Its
# gradient pushes log π *up* on trajectories that beat V* and *down* on those below it, each in proportion to how
# far the regression is from its target:

# %%
loss = apo_loss(inputs.logp, inputs.logp_ref, inputs.reward, inputs.vstar, profile.apo.beta2)
print(f"loss {loss.item():.4f} = mean (r - V*)^2 = {((inputs.reward - inputs.vstar) ** 2).mean().item():.4f}")
grad_logp = 2 * profile.apo.beta2 * (profile.apo.beta2 * (inputs.logp - inputs.logp_ref) - (inputs.reward - inputs.vstar)) / len(goals)
print("d loss / d log π per trajectory:", grad_logp.detach().numpy().round(4))

# %% [markdown]
# ### Can one update fit this batch?
#
# A first check for any training loop: take one batch and see whether a few optimizer steps on it bring its loss
# down. `fit_one_batch` samples one batch of `batch_goals` π_ref episodes; for each learning rate a fresh copy of
# π_ref takes 8 steps on that same batch. The loop itself takes one step per batch; `update_epochs` (an
# `APOConfig` field) lets it take several, as PPO-style loops reuse their rollouts.

# %%
fit = fit_one_batch(ref_dir, vstar, profile, lrs=(3e-4, 1e-4, 3e-5), steps=8)
fig, axes = plt.subplots(1, 2, figsize=(11, 3))
for lr, part in fit.groupby("lr"):
    axes[0].plot(part["step"], part["loss"], "o-", label=f"lr {lr:g}")
    axes[1].plot(part["step"], part["log_ratio_abs"], "o-", label=f"lr {lr:g}")
axes[0].set_title("A*PO loss on the batch"); axes[0].set_yscale("log")
axes[1].set_title("|log π/π_ref| per trajectory")
for ax in axes:
    ax.set_xlabel("optimizer steps on the same batch"); ax.legend(fontsize=8)
plots.save(fig, "04_fit_one_batch")
plt.show()
for lr, part in fit.groupby("lr", sort=False):
    loss = part.set_index("step")["loss"]
    print(f"lr {lr:g}: loss {loss[0]:.4f} -> {loss[1]:.4f} after one step ({'rose' if loss[1] > loss[0] else 'fell'}),"
          f" {loss.iloc[-1]:.4f} after {loss.index[-1]}")

# %% [markdown]
# **What this says.** Adam moves every weight by about the learning rate on its first steps, whatever the gradient's
# size, and a trajectory's log-probability is a sum over a hundred or more tokens, so even one step shifts
# log π(y|x) by nats. The regression's targets are (r − V*)/β₂ (with |r − V*| around 0.3 and β₂ = 0.1: about 3
# nats). A learning rate whose first step raises the loss has overshot them; a smaller one fits the batch step by
# step. Fitting one batch is necessary, not sufficient: the next iteration brings new samples, and what counts is
# whether they score higher (section 4's runs; section 8 takes three steps per batch in the loop).
#
# ## 3. A short live run
#
# The full runs take longer than a notebook may on a 2-core CPU (section 4 loads them). Here a short run shows the
# loop at work: rollouts, one update per iteration, a greedy evaluation on val goals every few iterations.

# %%
live = dataclasses.replace(profile, apo=dataclasses.replace(
    profile.apo, iterations=min(profile.apo.iterations, 12), eval_every=6, eval_episodes=min(profile.apo.eval_episodes, 50),
    batch_goals=min(profile.apo.batch_goals, 16)))
seed_everything(profile.seed)
model, ref_model, tokenizer = load_models(ref_dir)
trainer = Trainer(model, ref_model, tokenizer, vstar, live, seed=profile.seed, evaluator=greedy_evaluation)
state = trainer.run()
history = state.history
history[["iteration", "reward", "success", "loss", "kl", "entropy", "invalid_rate", "seconds"]].round(3).tail()

# %%
fig, axes = plt.subplots(1, 4, figsize=(14, 2.8))
for ax, column in zip(axes, ["reward", "success", "kl", "loss"]):
    ax.plot(history["iteration"], history[column], "o-", ms=3)
    ax.set_title(column); ax.set_xlabel("iteration")
fig.suptitle("live run (sampled training episodes, one per goal)", y=1.04)
plots.save(fig, "04_live_run")
state.evals

# %% [markdown]
# A dozen iterations of 16 episodes is too short for a reliable change on held-out goals; it shows the loop runs,
# the log-ratio to π_ref starts to grow and the loss stays bounded.
#
# **Several processes.** The trainer runs through `accelerate`. Launched with `accelerate launch --num_processes K`
# (or `torchrun`), every process draws the same goals, plays its share of them (`Trainer.share`) and computes the
# gradient of its share's loss; the gradients are averaged before the one optimizer step, so the K replicas stay
# identical. For A*PO, a mean over trajectories, the average of K equal shares' gradients *is* the full batch's
# gradient (`tests/test_distributed.py` checks it with two CPU processes):

# %%
print(inspect.getsource(Trainer._average_gradients))
print(f"this notebook: {trainer.accelerator.num_processes} process on {trainer.accelerator.device}")

# %% [markdown]
# The real runs follow.
#
# ## 4. The committed runs: three seeds
#
# `python -m apo_helpers train --objective apo --profile class --seeds 0 1 2 --save` trains one policy per seed
# from the same π_ref and V* table and evaluates each greedily on the test goals. Its tables are committed under
# `data/results/` (`apo_class_seeds.csv`, the per-iteration `apo_class_history.csv` and the val evaluations
# `apo_class_evals.csv`).

# %%
seeds_path = RESULTS_DIR / "apo_class_seeds.csv"
if seeds_path.exists():
    seeds = pd.read_csv(seeds_path)
    runs = seeds[seeds["objective"] == "apo"]
    ref_row = seeds[seeds["objective"] == "pi_ref"].iloc[0]
    scripted = pd.read_csv(RESULTS_DIR / "baselines_test.csv")
    result = pd.DataFrame(
        [{"policy": r.agent, "test success": r.success_rate, "spread (std over seeds)": float("nan"),
          "test score": r.mean_score, "steps": r.mean_steps} for r in scripted.itertuples() if r.agent != "oracle"]
        + [{"policy": "π_ref", "test success": ref_row["test_success"], "spread (std over seeds)": float("nan"),
            "test score": ref_row["test_score"], "steps": ref_row["test_steps"]},
           {"policy": f"A*PO ({len(runs)} seeds)", "test success": runs["test_success"].mean(),
            "spread (std over seeds)": runs["test_success"].std(ddof=0), "test score": runs["test_score"].mean(),
            "steps": runs["test_steps"].mean()}]).set_index("policy")
    gain = runs["test_success"].mean() - ref_row["test_success"]
    display(result.round(3))
    display(runs[["seed", "iterations", "test_success", "test_score", "val_success", "train_seconds"]].round(3))
    print(f"gain over π_ref: {gain:+.3f} (spread over seeds {runs['test_success'].std(ddof=0):.3f}; "
          f"the target was +0.10, larger than the spread)")
else:
    print("no committed runs yet: python -m apo_helpers train --objective apo --profile class --seeds 0 1 2 --save")

# %% [markdown]
# The learning curves of the three seeds, as the mean with the band between the lowest and the highest seed
# (training episodes are sampled at the rollout temperature, so their success sits below greedy success):

# %%
history_path, evals_path = RESULTS_DIR / "apo_class_history.csv", RESULTS_DIR / "apo_class_evals.csv"
if history_path.exists() and evals_path.exists():
    curves, evals = pd.read_csv(history_path), pd.read_csv(evals_path)
    fig, axes = plt.subplots(1, 4, figsize=(15, 3))
    for ax, column in zip(axes[:3], ["success", "kl", "loss"]):
        smooth = curves.groupby("seed")[column].transform(lambda s: s.rolling(10, min_periods=1).mean())
        plots.seed_band(ax, curves.assign(**{column: smooth}), column)
        ax.set_title(f"{column} (training episodes, 10-iteration mean)")
    plots.seed_band(axes[3], evals, "success", fmt="o-")
    axes[3].set_title("greedy success on val")
    plots.save(fig, "04_apo_seeds")
    plt.show()

# %% [markdown]
# Did the policy improve on the goals it trained on, and how far did it move from π_ref? The same runs, early
# against late (means over seeds):

# %%
if history_path.exists() and seeds_path.exists():
    last = curves["iteration"].max()
    early, late = curves[curves["iteration"] <= 20], curves[curves["iteration"] > last - 20]
    drift = pd.DataFrame({
        "sampled success (training goals)": [early["success"].mean(), late["success"].mean()],
        "reward (training goals)": [early["reward"].mean(), late["reward"].mean()],
        "|log π/π_ref| per trajectory": [early["log_ratio_abs"].mean(), late["log_ratio_abs"].mean()],
        "replies trained on other tokens than sampled": [early["token_mismatch_rate"].mean(),
                                                          late["token_mismatch_rate"].mean()],
        "greedy val success": [evals[evals["iteration"] == 0]["success"].mean(),
                               evals[evals["iteration"] == evals["iteration"].max()]["success"].mean()]},
        index=["first 20 iterations", "last 20 iterations"]).T
    display(drift.round(3))
    spread = runs["test_success"].std(ddof=0)
    verdict = ("within the spread over seeds: no measurable change from π_ref" if abs(gain) <= spread else
               "an improvement larger than the spread over seeds" if gain > 0 else
               "below π_ref by more than the spread over seeds: A*PO made it worse")
    print(f"test: A*PO {runs['test_success'].mean():.3f} vs π_ref {ref_row['test_success']:.3f} -> {verdict}")

# %% [markdown]
# **What this says.** Read the two tables together. A*PO does learn on the goals it practises: the sampled success
# and reward on the training goals rise from the first iterations to the last. What it learns does not carry over:
# greedy success on val and test, goals it never trained on, ends at or below π_ref's, and the seeds' test gain
# is negative. The stage-1 goals are 256, and 120 iterations of 32 episodes visit each about 15 times: room to fit
# those goals' own episodes rather than a rule. (Before the tokenization fix of section 2, the training success did
# not rise at all: the updates went to token sequences the model never wrote. Every result in this notebook was
# computed after the fix; earlier settings tried on the broken pipeline say nothing either way and are not
# repeated here.)
#
# One design choice from the start still stands: stage 1 uses train goals the demonstrations did not use, because
# π_ref had memorised its demonstration goals (notebook 03 measures it) and advantages there say little about
# unseen goals.

# %% [markdown]
# ### The project's best recipe, over π_refs
#
# The default recipe above is the lesson's run, not the project's best. Section 8's search ended at β₂ = 0.003's held
# recipe (`vstar_goals=600 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.003`), 60 iterations, optionally
# re-anchored: each seed's policy becomes its own π_ref, stage 1 is sampled again from it, and 60 more iterations
# follow. Its π_refs are 2.3M tiny Llamas imitated from 1,200 demonstrations that skip the options half the time
# (`train-ref --profile class --skip-options 0.5 --demonstrations 1200 --model hidden_size=192 intermediate_size=576`),
# in two families: the demonstrations' short think (`search for the instruction`), and a think that reads on in the
# instruction after each option click (`--progress-think`: `after navy: size large`). The π_refs of one command differ
# only in their initial weights and batch order (without `--seed`, and `--seed 1` to `--seed 4`). The bar is met from
# one π_ref when its seeds gain +10 points or more, by more than their spread; it is the method's only if it outlasts
# retraining π_ref, so each family's mean over its π_refs is read beside it. Every gain below is over the chain's first
# π_ref, on the same 200 test goals, with the paired 95% interval over goals and seeds (`significance.gain_interval`,
# notebook 07 section 3) and the share of resampled gains that reach +10 points. Read from the committed tables:

# %%
from apo_helpers.analysis.readme import ref_spread
from apo_helpers.analysis.significance import gain_interval
from apo_helpers.config import TARGET_GAIN

BEST_RECIPE = {  # family -> the train-ref command's seed -> the held recipe's first-round table
    family: {"no --seed": f"apo_sloppy_h192_d1200{think}_gsvk600_b003",
             **{f"--seed {k}": f"apo_sloppy_h192_d1200{think}_seed{k}_gsvk600_b003" for k in (1, 2, 3, 4)}}
    for family, think in {"short think": "", "progress think": "_think"}.items()}
ROUNDS = {1: "", 2: "_r2", 3: "_r3"}  # re-anchored rounds continue a table under its name and this suffix
outcomes_path = RESULTS_DIR / "goal_outcomes_class.csv"
outcomes = pd.read_csv(outcomes_path) if outcomes_path.exists() else None
chain_rows = []
for family, chains in BEST_RECIPE.items():
    for start_name, chain_name in chains.items():
        for round_number, suffix in ROUNDS.items():
            path = RESULTS_DIR / f"{chain_name}{suffix}_class_seeds.csv"
            if outcomes is None or not path.exists():
                continue
            table = pd.read_csv(path)
            chain, start = table[table["objective"] == "apo"], table[table["objective"] == "pi_ref"].iloc[0]
            test = gain_interval(outcomes, chain_name + suffix, chain["ref"].iloc[0], target=TARGET_GAIN)
            val = gain_interval(outcomes, chain_name + suffix, chain["ref"].iloc[0], split="val")
            chain_rows.append({
                "family": family, "π_ref": start_name, "round": round_number,
                "π_ref test success": start["test_success"],
                "A*PO test success (mean of 3)": chain["test_success"].mean(),
                "spread (std over seeds)": chain["test_success"].std(ddof=0), "test gain": test["gain"],
                "95% interval": f"[{test['low']:+.3f}, {test['high']:+.3f}]", "share ≥ +10": test["draws_at_target"],
                "val gain": val["gain"], "test score": chain["test_score"].mean(), "steps": chain["test_steps"].mean()})
if chain_rows:
    best = pd.DataFrame(chain_rows).set_index(["family", "π_ref", "round"])
    display(best.round(3))
else:
    print("no committed chain yet (docs/experiments.md has its commands)")

# %% [markdown]
# The same runs as one number per family and round: the gain's mean and spread over π_refs (`ref_spread`, which the
# README's ref-spread table prints), how many π_refs meet the bar on their own, and how π_ref's own test success
# correlates with the gain (negative: a weaker π_ref gains more, toward one level):

# %%
place = {chain + suffix: (family, number) for family, chains in BEST_RECIPE.items()  # table -> (family, round)
         for chain in chains.values() for number, suffix in ROUNDS.items()}
families = list(BEST_RECIPE)
over_refs = sorted((r for r in ref_spread(RESULTS_DIR).itertuples() if all(t in place for t in r.tables)),
                   key=lambda r: (families.index(place[r.tables[0]][0]), place[r.tables[0]][1]))
if over_refs:
    means = pd.DataFrame([{
        "family": place[r.tables[0]][0], "round": place[r.tables[0]][1], "π_refs": r.pi_refs,
        "gain per π_ref": ", ".join(f"{g:+.3f}" for g in r.gains), "mean gain": r.gain_mean,
        "std over π_refs": r.gain_std, "mean spread over seeds": r.seed_spread,
        "π_refs at +10": f"{r.refs_at_target} of {r.pi_refs}", "π_ref success vs gain": r.start_gain_corr}
        for r in over_refs]).set_index(["family", "round"])
    display(means.round(3))
    for (family, round_number), r in means.iterrows():
        met = r["mean gain"] >= TARGET_GAIN and r["mean gain"] > r["mean spread over seeds"]
        print(f"{family}, round {round_number}: {r['mean gain']:+.3f} ± {r['std over π_refs']:.3f} over "
              f"{r['π_refs']} π_refs, {r['π_refs at +10']} at the bar on their own -> target "
              f"{'met' if met else 'not met'} on average over π_refs")
else:
    print("no recipe from two π_refs yet (docs/experiments.md has its commands)")

# %% [markdown]
# **What this says.** The held recipe meets the bar from single π_refs of both commands, and its mean over π_refs
# stays under it. In both families the gain correlates negatively with π_ref's own success: a π_ref that imitation
# happened to make stronger leaves RL less to add. From four of the five progress-think π_refs the first round ends
# within a few points of the others, whatever π_ref it starts from; the fifth (no `--seed`) ends lower, where its
# π_ref's search query leaves it, and stays there re-anchored: the rounds convert option clicks and leave the greedily
# typed query, which decides the goals that ask for no option, as π_ref had it (notebook 07 section 3 counts the
# copied queries). From the short-think π_refs the ends differ more, by how each π_ref's seeds handle the options and
# loops (section 8). The progress think raises where the runs end, and where its π_refs start by about as much.
# Re-anchoring adds a point or two from some π_refs and nothing from others. Notebook 07 section 3 compares these runs
# with every other, and the README's "Did A*PO reach +10 points" tells the levers tried on the mean.

# %% [markdown]
# ## 5. What the samples explore, and what the target asks for
#
# Two measurements explain most of section 4. First, where does sampling at temperature 1 spend its randomness?
# Each of 32 stage-1 goals is played 4 times by π_ref at temperature 1 and once greedily
# (`analysis.headroom.search_deviations`):

# %%
from apo_helpers.analysis.headroom import headroom_summary, search_deviations, target_choices

seed_everything(profile.seed)
deviations = search_deviations(ref_model, tokenizer, vstar.goals()[:32], profile, samples=4)
by_query = deviations.groupby("same_query")[["success", "reward"]].mean().rename(
    index={True: "typed the greedy query", False: "typed another query"})
by_query.insert(0, "share of samples", deviations["same_query"].value_counts(normalize=True).rename(
    index={True: "typed the greedy query", False: "typed another query"}))
display(by_query.round(3))
print(f"sampled episodes whose every action is the greedy episode's: {deviations['same_actions'].mean():.3f}; "
      f"greedy success on these goals {deviations.groupby('goal_index')['greedy_success'].first().mean():.3f}")

# %% [markdown]
# The search query is a copy of the instruction, twenty-odd tokens long, and sampling misspells it often enough to
# change the results; most such episodes fail. So most of the difference between a good and a bad sample, the signal
# the update learns from, is about typing the query, which the greedy policy (the one evaluated) already does
# right. Past the search page, π_ref's clicks are close to deterministic.
#
# Second, would A*PO's own target change π_ref's decisions if it were reached exactly? The regression's minimiser is
# π* ∝ π_ref · exp(r / β₂). At one decision s, with π_ref's greedy play after it, π* prefers another click b to
# π_ref's choice a when
#
# $$\log\pi_{ref}(b\mid s) + Q(s,b)/eta_2 > \log\pi_{ref}(a\mid s) + Q(s,a)/eta_2,$$
#
# so a confident π_ref keeps its choice unless the return gained beats β₂ times its log-odds. `python -m apo_helpers
# headroom --split train --goals 100 --save` plays π_ref's greedy episode of 100 stage-1 goals, tries every other
# click at each of its decisions (written as the expert writes it) followed by greedy play, and records the returns
# and π_ref's log-probabilities (`data/results/headroom_class.csv`). From that table, per β₂: the share of goals one
# changed click would solve (the ceiling of a one-step improvement), and the success of π*'s change at the first
# decision where it leaves π_ref (`target_choices`):

# %%
headroom_path = RESULTS_DIR / "headroom_class.csv"
if headroom_path.exists():
    alternatives = pd.read_csv(headroom_path)
    betas = (1.0, 0.3, 0.1, 0.03, 0.01)
    ceiling = headroom_summary(target_choices(alternatives, betas))
    display(ceiling.round(3))
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(ceiling.index, ceiling["pi* success"], "o-", label="π*'s one change")
    ax.axhline(ceiling["greedy success"].iloc[0], color="grey", ls="--", label="π_ref greedy")
    ax.axhline(ceiling["one-step ceiling"].iloc[0], color="green", ls=":", label="best single changed click")
    ax.axvline(profile.apo.beta2, color="black", lw=0.8)
    ax.set_xscale("log"); ax.set_xlabel("β₂"); ax.set_ylabel("success (stage-1 goals)")
    ax.set_title("what A*PO's target changes in π_ref's greedy episodes"); ax.legend(fontsize=8)
    plots.save(fig, "04_headroom")
    plt.show()
    at = ceiling.loc[profile.apo.beta2]
    print(f"β₂ = {profile.apo.beta2:g}: π* changes a decision on {at['pi* changes a decision']:.3f} of the goals; "
          f"success {at['greedy success']:.3f} -> {at['pi* success']:.3f} "
          f"(one changed click could reach {at['one-step ceiling']:.3f})")
else:
    print("no committed table yet: python -m apo_helpers headroom --split train --goals 100 --save")

# %% [markdown]
# **What this says.** Most of what separates a good sample from a bad one is the search query, which greedy play
# already types right; past the search, π_ref's clicks are nearly deterministic. Yet its greedy episodes are close to
# succeeding much more often: one changed click would solve about twice as many of these goals. A*PO's target at
# the class profile's β₂ makes few of those changes: π_ref's log-odds for its own click are larger than the return
# gained, divided by β₂, can overturn. A smaller β₂ lets the target overturn them, but the regression then asks for
# log-ratios of (r − V*)/β₂, tens of nats per trajectory (section 8's sweep shows where that leads).
#
# So a recipe needs three things at once: samples that try the clicks π_ref almost never samples, credit on those
# clicks rather than on the query, and a β₂ small enough to let the target change a confident choice. The package
# has them as settings: `APOConfig.greedy_search` (the query typed greedily, log π over the sampled turns only),
# `APOConfig.explore` (a results- or item-page turn answered, with this probability, by a uniformly drawn click
# written as the expert writes it; A*PO's least squares needs no sampling probabilities, so such turns train like
# the others) and `APOConfig.explore_once` (at most one drawn click per episode, so that the episode's r − V* is
# the advantage of that one click rather than of several at once). One-seed pilots combining them (not committed;
# β₂ 0.1 and 0.03, learning rates 3e-5 to 3e-4, batches of 32 and 64, one and four optimizer steps per batch, up to
# 150 iterations) left greedy val success within a couple of points of π_ref's, and even on the goals they trained
# on, π_ref's greedy results-page choice did not change. One batch can be fitted in a few steps (section 2), so the
# update does move the trajectories it sees; what it learns from them does not carry to the next goal.
#
# ### Teaching the choice directly
#
# Is the information in those samples enough for this model at all? Take it out of RL: branch every click at the
# first results page of π_ref's greedy episode on 1,000 train goals (greedy play after each click), keep per goal
# the click that succeeds (π_ref's own when it does), and fine-tune π_ref on those labelled turns by plain
# cross-entropy, the cleanest form any reward-driven update could give that information. A control fine-tunes on
# π_ref's own successful clicks only. Three settings: a gentle one (learning rate 1e-4), a strong one (1e-3, twice
# the steps) on the results turns alone, and the strong one with the results turns mixed into π_ref's own
# demonstrations (`replay`), so that fitting the results page cannot make the model forget the other pages.
# `python -m apo_helpers corrections --goals 1000 --save` (`analysis.corrections`) writes
# `data/results/corrections_class.json`:

# %%
corrections_path = RESULTS_DIR / "corrections_class.json"
if corrections_path.exists():
    corrections = json.loads(corrections_path.read_text())
    runs_table = pd.DataFrame([{"fine-tuned on": "- (π_ref)", "steps": 0, "lr": None, "replay": None,
                                **corrections["pi_ref"]},
                               *[{"fine-tuned on": r["labels"], **r} for r in corrections["runs"]]])
    runs_table["lr"] = runs_table["lr"].map(lambda lr: "-" if pd.isna(lr) else f"{lr:g}")
    runs_table = runs_table.rename(columns={
        "replay": "+ π_ref's demonstrations", "val_success": "greedy val success", "val_score": "val mean score",
        "branched_goals_success": "greedy success on branched goals"})
    display(runs_table[["fine-tuned on", "+ π_ref's demonstrations", "steps", "lr", "labelled_turns", "corrections",
                        "final_loss", "greedy success on branched goals", "greedy val success",
                        "val mean score"]].round(3))
    print(f"{corrections['goals']} branched goals: π_ref's own click solves {corrections['greedy_success']:.3f}, "
          f"some click solves {corrections['solved_by_some_click']:.3f} ({corrections['corrected_goals']} goals "
          f"corrected); the branched goals evaluated are the first {corrections['fit_goals']}")
    base = corrections["pi_ref"]["val_success"]
    low, high = wilson_interval(round(base * 200), 200)
    for run in corrections["runs"]:
        if run["replay"]:
            print(f"with π_ref's demonstrations, {run['labels']}: greedy val success {base:.3f} -> "
                  f"{run['val_success']:.3f} ({run['val_success'] - base:+.3f})")
    print(f"(π_ref's val success over 200 goals has the 95% interval [{low:.3f}, {high:.3f}])")
else:
    print("no committed experiment yet: python -m apo_helpers corrections --goals 1000 --save")

# %% [markdown]
# **What this says.** Three things, in the order of the rows.
#
# - *Gently, on the results turns alone* (1e-4), little moves: the loss with the corrections stays far above the
#   loss on π_ref's own clicks, and the branched goals gain a couple of points at most. The one token that names
#   the item is a small part of a reply's loss.
# - *Strongly, on the results turns alone* (1e-3), the labels are fitted to a loss near zero and the policy is
#   destroyed: success 0 everywhere, on the branched goals too. A model fine-tuned on one page only forgets the
#   others; in RL terms, an update that fits a few states hard can wreck the rest.
# - *Strongly, mixed into π_ref's demonstrations*, both copies improve on val, the control too: π_ref's own
#   imitation may not have finished: more of it looks worth a few points by itself. The corrections add to that on
#   the goals they came from and a little on val. Every val gain here is within the 95% interval of π_ref's val
#   success over 200 goals (printed above), so it is a lead, not a result.
#
# So a reward-driven update has the same two problems as this fine-tuning: a few hundred corrected choices teach
# the rule behind them (the item whose title has the instruction's attributes and whose price fits the budget)
# only weakly, and fitting them hard costs the rest of the policy unless the rest is held in place, which A*PO's
# β₂·log π/π_ref term does only for the trajectories it samples. What this experiment points to for the next
# attempt is a better starting point: π_ref imitated to convergence (and from more demonstrations, notebook 02's
# sweep), the corrections mixed in, and then RL; or the pretrained model of section 7, which reads titles and
# prices far better. Neither has been run here, and the +10-point target remains unmet.
#
# ## 6. When the demonstrations leave something out
#
# RL can add to imitation only what the reward pays for and the demonstrations did not teach. Here is such a case,
# built on purpose: a demonstrator that ignores the instruction's options (size, colour, pack...) in half of its
# episodes (`ExpertAgent(skip_options=0.5)`: it buys as soon as the price fits). WebShop's reward still pays one
# share per requested option, so a purchase without them scores less and never counts as a success. π_ref trained
# on these demonstrations clicks options less often than the demonstrator could, and A*PO from it has a clear
# thing to learn: on the item page, select the options before buying.
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5          # -> runs/pi_ref_class_skip_options_0.5
# python -m apo_helpers train --objective apo --profile class --ref runs/pi_ref_class_skip_options_0.5 \
#     --seeds 0 --iterations 60 --out runs/apo_sloppy_class --name apo_sloppy --save
# python -m apo_helpers train --objective apo --profile class --ref runs/pi_ref_class_skip_options_0.5 \
#     --seeds 0 --set greedy_search=true --out runs/apo_sloppy_gs_class --name apo_sloppy_gs --save
# python -m apo_helpers train --objective apo --profile class --ref runs/pi_ref_class_skip_options_0.5 \
#     --seeds 0 1 2 --set greedy_search=true keep_disagreeing=true --out runs/apo_sloppy_gsd_class \
#     --name apo_sloppy_gsd --save
# python -m apo_helpers train --objective apo --profile class --ref runs/pi_ref_class_skip_options_0.5 \
#     --seeds 0 1 2 --set greedy_search=true keep_disagreeing=true vstar_goals=1024 \
#     --out runs/apo_sloppy_gsd1024_class --name apo_sloppy_gsd1024 --save
# ```
#
# Four recipes, each a step toward a cleaner signal for the one decision that matters here. The first is the
# profile's A*PO. The second types the greedy search query and samples only the clicks (`greedy_search`,
# section 5): the samples then differ in the item and the options, not in a garbled query. The third also keeps
# only the goals whose 8 stage-1 samples include both a success and a failure (`keep_disagreeing`, StarPO-S's idea
# applied once): a small share of the 256 goals (the cell below prints how many), among them those where π_ref
# sometimes selects the options and is paid for it. The fourth draws those goals from a stage 1 of 1,024 train
# goals, so that the update sees several times as many of them. They commit
# `data/results/apo_sloppy{,_gs,_gsd,_gsd1024}_class_{seeds,history,evals}.csv` (each table's
# `apo_overrides` column records its `--set` changes). Besides success, each row says, of the test goals that ask
# for options, how often an option was clicked at all and how often the purchase had every one
# (`analysis.failures.option_decisions`); the full π_ref's row is computed here, live.

# %%
from apo_helpers.analysis.failures import OPTION_RATES, option_columns

SLOPPY_TABLES = {"apo_sloppy": "the profile's settings", "apo_sloppy_gs": "greedy search",
                 "apo_sloppy_gsd": "greedy search, disagreeing goals",
                 "apo_sloppy_gsd1024": "greedy search, disagreeing goals of 1,024"}
columns = {"test_success": "test success", "test_score": "test score",
           **{f"test_{key}": label for key, label in OPTION_RATES.items()}}
seed_everything(profile.seed)
full_eval, full_episodes = evaluate_policy(ref_model, tokenizer, "test", profile.apo.test_episodes, profile,
                                           progress=False)
full_row = pd.Series({"test_success": full_eval.summary()["success_rate"],
                      "test_score": full_eval.summary()["mean_score"], **option_columns(full_episodes, "test_")})
def spread(runs):
    return f"spread over seeds {runs['test_success'].std(ddof=0):.3f}" if len(runs) > 1 else "one seed, no spread"


sloppy_tables = {name: pd.read_csv(RESULTS_DIR / f"{name}_class_seeds.csv") for name in SLOPPY_TABLES
                 if (RESULTS_DIR / f"{name}_class_seeds.csv").exists()}
if sloppy_tables:
    first = next(iter(sloppy_tables.values()))
    sloppy_ref = first[first["objective"] == "pi_ref"].iloc[0]
    rows = {"π_ref from the full expert (live)": full_row[list(columns)],
            "π_ref, options ignored in 50% of demonstrations": sloppy_ref[list(columns)]}
    per_seed = []
    for name, table in sloppy_tables.items():
        recipe_runs = table[table["objective"] == "apo"]  # not `runs`: that is section 4's, read again below
        per_seed.append(recipe_runs.assign(table=name, seed=recipe_runs["seed"].astype(int)))
        label = f"{name}: {len(recipe_runs)} seed(s) × {int(recipe_runs['iterations'].iloc[0])} it."
        print(f"{name} ({SLOPPY_TABLES[name]}), trained on {int(recipe_runs['vstar_goals'].iloc[0])} goals: gain "
              f"over its π_ref {recipe_runs['test_success'].mean() - sloppy_ref['test_success']:+.3f} "
              f"({spread(recipe_runs)}; the target was +0.10); options clicked on goals that ask for them "
              f"{sloppy_ref['test_option_clicked']:.3f} -> {recipe_runs['test_option_clicked'].mean():.3f}")
        rows[label] = recipe_runs[list(columns)].mean()
        if len(recipe_runs) > 1:  # one seed has no spread to show
            rows[f"   {name}: std over seeds"] = recipe_runs[list(columns)].std(ddof=0)
    display(pd.DataFrame(rows).T.rename(columns=columns).astype(float).round(3))
    per_seed = pd.concat(per_seed).set_index(["table", "seed"])
    display(per_seed[list(columns)].rename(columns=columns).round(3))
else:
    print("no committed runs in this setting yet (commands above)")

# %% [markdown]
# The val evaluations during training (100 val goals; the mean of the seeds with the band between the lowest and
# the highest where a recipe has several): greedy success, and how often the policy clicks an option on the goals
# that ask for one.

# %%
sloppy_evals = {name: pd.read_csv(RESULTS_DIR / f"{name}_class_evals.csv") for name in SLOPPY_TABLES
                if (RESULTS_DIR / f"{name}_class_evals.csv").exists()}
if sloppy_evals:
    fig, axes = plt.subplots(1, 2, figsize=(11, 3))
    for ax, column, title in [(axes[0], "success", "greedy success on val"),
                              (axes[1], "option_clicked", "an option clicked (val goals with options)")]:
        for name, evals in sloppy_evals.items():
            plots.seed_band(ax, evals, column, label=SLOPPY_TABLES[name], fmt="o-", alpha=0.2)
        ax.set_title(title)
    axes[1].legend(fontsize=8)
    fig.suptitle("A*PO from the π_ref whose demonstrations ignored options half the time", y=1.04)
    plots.save(fig, "04_apo_sloppy_seeds")
    plt.show()

# %% [markdown]
# **What this says.** Read the option columns first. The full π_ref clicks an option on most goals that ask for one;
# the π_ref of the careless demonstrator on far fewer, and so it rarely succeeds there, while on goals without options
# the full π_ref does no better. Every recipe raises the share of option clicks somewhat, and none comes near the full
# π_ref's. Training only on the goals whose samples disagree raises it most in some seeds, little or not at all in
# others (the per-seed table), and the seeds that click options more often also buy with every option right more often
# and gain the most; drawing those goals from four times as many stage-1 goals gives the highest mean of the four
# recipes, with the largest spread. On val (the figure), those two recipes click options most often around iteration
# 20 and less after it, while the sampled success on their own training goals rises and then holds (their history
# tables): the update fits its few goals, and an earlier stop would have kept more of the change. Success follows only
# in part, because a clicked option is often the wrong value, or sits on the wrong item, and each recipe's gain
# printed above stays far short of the +10 points this notebook aims for (section 8 returns to the last recipe with
# smaller values of β₂, which moved it furthest). Faster learning did not help: in one-seed pilots at a learning rate
# of 1e-3, A*PO on the disagreeing goals lost val success within 40 iterations and `apo_split` (below) within 15
# iterations mostly wrote replies that do not parse, as at 1e-3 in the issue's prototypes; both pilots were stopped
# and are not committed.
#
# ### Credit at the decision: `apo_split`
#
# A*PO's target r − V*(x) judges the whole trajectory. With the value of an intermediate state s_k, the same target
# splits in two, and so does the log-ratio (a sum over turns):
#
# $$r - V^*(x) = \underbrace{\big[r_{<k} + V^*(s_k) - V^*(x)\big]}_{\text{search and item choice}}
#   + \underbrace{\big[r_{\geq k} - V^*(s_k)\big]}_{\text{on the item page}}$$
#
# The `apo_split` objective (this project's variant, not the paper's) cuts each trajectory at its first item page
# and regresses each part's β₂·log π/π_ref on its own target. V*(s_k) comes from N = 4 continuations of the frozen
# π_ref from that state, with stage 1's soft maximum (the environment is deterministic, so replaying the
# trajectory's actions restores the state); a purchase that skips the requested options then scores below what
# π_ref makes of the same item page, whatever the search before it did. The price: 4 short π_ref episodes more per
# trajectory in every iteration (`split_seconds` in the history).
#
# ```
# python -m apo_helpers train --objective apo_split --profile class --ref runs/pi_ref_class_skip_options_0.5 \
#     --seeds 0 1 2 --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 \
#     beta2=0.03 --out runs/apo_split_sloppy_gsvk1024_b03_rerun_class --name apo_split_sloppy_gsvk1024_b03_rerun --save
# ```

# %%
from apo_helpers.apo.losses import apo_split_loss

print(inspect.getsource(apo_split_loss).split('"""')[-1].strip())

# %% [markdown]
# Its first three seeds, like the item-page decision probed at fixed states (`python -m apo_helpers decisions`),
# were trained before the tokenization fix of section 2, and their results were withdrawn with it. Re-run on the
# fixed pipeline with the recipe section 8 ends with (the command above: greedy search held by its KL, the goals
# whose rewards vary, β₂ = 0.03), from the sloppy π_ref retrained in place, `apo_split` ends where `apo` with the
# same recipe does, at half again the cost per iteration (section 8, "Where the option habit stalls").
# (Item pages that say which option is selected, measured then too, are re-run in section 8.)

# %% [markdown]
# ### When π_ref imitated fewer demonstrations
#
# A demonstrator that leaves out one thing is one way to leave RL something to learn; fewer demonstrations is
# another, and the one RL fine-tuning of LLM agents usually starts from. Notebook 02's sweep retrains π_ref from
# 300 demonstrations of the full expert (19.5% test success against 38.5% from 600). Below, A*PO runs from that
# π_ref with the recipe that did best above (greedy search, the goals whose stage-1 samples disagree) for 60
# iterations, the point past which the val curves above stopped rising. A weaker π_ref fails every sample on most
# goals, so the goals whose samples disagree are drawn from 1,200 stage-1 goals, every train goal the profile's
# demonstrations leave. (The π_ref of 150 demonstrations was left out: in a pilot stage 1 of 512 goals its samples
# disagreed on too few of them to train on.)
#
# ```
# python -m apo_helpers train-ref --profile class --demonstrations 300     # -> runs/pi_ref_class_demos_300
# python -m apo_helpers train --objective apo --profile class --ref runs/pi_ref_class_demos_300 --seeds 0 1 2 \
#     --iterations 60 --set greedy_search=true keep_disagreeing=true vstar_goals=1200 \
#     --out runs/apo_demos300_class --name apo_demos300 --save
# ```
#
# They commit `data/results/apo_demos300_class_{seeds,history,evals}.csv`; the seeds table's `ref_demonstrations`
# column says how many successful demonstrations its π_ref imitated, `vstar_goals` how many stage-1 goals were
# kept.

# %%
DEMO_TABLES = {300: "apo_demos300"}  # pi_refs of fewer demonstrations, each with its A*PO seeds
demo_tables = {count: pd.read_csv(RESULTS_DIR / f"{name}_class_seeds.csv") for count, name in DEMO_TABLES.items()
               if (RESULTS_DIR / f"{name}_class_seeds.csv").exists()}
if demo_tables:
    gains = []
    for count, table in demo_tables.items():
        demo_runs, demo_ref = table[table["objective"] == "apo"], table[table["objective"] == "pi_ref"].iloc[0]
        success = demo_runs["test_success"]
        gain, seed_spread = success.mean() - demo_ref["test_success"], success.std(ddof=0)
        gains.append({"demonstrations asked": count, "imitated": int(demo_runs["ref_demonstrations"].iloc[0]),
                      "stage-1 goals kept": int(demo_runs["vstar_goals"].iloc[0]),
                      "π_ref test success": demo_ref["test_success"], "A*PO test success": success.mean(),
                      "std over seeds": seed_spread, "gain": gain,
                      "per seed": ", ".join(f"{v:.3f}" for v in success),
                      "π_ref test score": demo_ref["test_score"], "A*PO test score": demo_runs["test_score"].mean(),
                      "invalid actions (π_ref → A*PO)": f"{demo_ref['test_invalid_rate']:.3f} → "
                                                        f"{demo_runs['test_invalid_rate'].mean():.3f}",
                      "gain > 0.10 and > spread": bool(gain >= 0.10 and gain > seed_spread)})
    display(pd.DataFrame(gains).set_index("demonstrations asked").round(3))
else:
    print("no committed runs from the smaller π_refs yet (commands above)")

# %% [markdown]
# The same runs against the number of demonstrations (left: notebook 02's π_refs, greedy on test, with A*PO's
# seeds; the full-expert A*PO of section 4 ran with the profile's settings for 120
# iterations, so it is drawn apart), and their greedy val success during training (right):

# %%
ref_sweep_path = RESULTS_DIR / "ref_sweep.csv"
if demo_tables and ref_sweep_path.exists():
    ref_points = pd.read_csv(ref_sweep_path)
    ref_points = ref_points[ref_points["pretrain_steps"] > 0][["demonstrations", "test_success_rate"]]
    profile_ref = json.loads((RESULTS_DIR / "pi_ref_class.json").read_text())  # the 600 of notebook 02, pretrained too
    ref_points = pd.concat([ref_points, pd.DataFrame([{"demonstrations": get_profile("class").reference.demonstrations,
                                             "test_success_rate": profile_ref["test_success_rate"]}])])
    ref_points = ref_points.sort_values("demonstrations")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
    axes[0].plot(ref_points["demonstrations"], ref_points["test_success_rate"], "o-", color="grey", label="π_ref (notebook 02)")
    for count, table in demo_tables.items():
        success = table[table["objective"] == "apo"]["test_success"]
        plots.seed_range(axes[0], count, success, fmt="s", color="C0",
                         label=f"A*PO, greedy search, disagreeing goals ({len(success)} seeds, min-max)")
    if seeds_path.exists():
        full = pd.read_csv(seeds_path).query("objective == 'apo'")["test_success"]
        plots.seed_range(axes[0], get_profile("class").reference.demonstrations, full, fmt="D", color="C3",
                         label="A*PO, profile's settings (section 4)")
    axes[0].set_xscale("log")
    axes[0].minorticks_off()  # label only the demonstration counts
    axes[0].set_xticks(ref_points["demonstrations"], [str(v) for v in ref_points["demonstrations"]])
    axes[0].set_xlabel("demonstrations π_ref imitated")
    axes[0].set_title("greedy test success")
    axes[0].set_ylim(top=ref_points["test_success_rate"].max() + 0.15)  # room for the legend above the points
    axes[0].legend(fontsize=8, loc="upper left")
    for count in demo_tables:
        demo_evals = pd.read_csv(RESULTS_DIR / f"{DEMO_TABLES[count]}_class_evals.csv")
        plots.seed_band(axes[1], demo_evals, "success", label=f"from the π_ref of {count}", fmt="o-", alpha=0.2)
    axes[1].set_title("greedy success on val (100 goals)")
    axes[1].legend(fontsize=8)
    plots.save(fig, "04_apo_fewer_demos")
    plt.show()

# %% [markdown]
# Which goals carried the signal? The goals kept for training are those where π_ref's stage-1 samples disagree;
# compare how often its samples succeed there with how often greedy play succeeds on val goals:

# %%
for count, name in DEMO_TABLES.items():
    if count not in demo_tables:
        continue
    demo_history, demo_evals = (pd.read_csv(RESULTS_DIR / f"{name}_class_{kind}.csv") for kind in ("history", "evals"))
    kept = int(demo_tables[count].query("objective == 'apo'")["vstar_goals"].iloc[0])
    last_iteration = demo_history["iteration"].max()
    early, late = demo_history[demo_history["iteration"] <= 20], demo_history[demo_history["iteration"] > last_iteration - 20]
    at_start, at_end = (demo_evals[demo_evals["iteration"] == i] for i in (0, demo_evals["iteration"].max()))
    print(f"π_ref of {count} demonstrations: sampled success on its {kept} training goals {early['success'].mean():.3f} "
          f"(first 20 iterations) -> {late['success'].mean():.3f} (last 20); greedy val success "
          f"{at_start['success'].mean():.3f} -> {at_end['success'].mean():.3f} (mean of the seeds)")

# %% [markdown]
# **What this says.** A weaker π_ref does not leave A*PO more to gain here. The π_ref of 300 demonstrations fails
# most goals in all 8 of its stage-1 samples, so the goals with a signal to learn from are a small share of the
# 1,200, and they are the goals it already solves in about half of its samples, far more often than greedy play
# solves a val goal. The update raises the sampled success on those goals a little further, as in section 4, and
# greedy val and test success stay within a point or two of π_ref's: what separates the goals it solves from the
# goals it never solves is not something those updates teach. Where π_ref's samples never succeed, A*PO's target
# has nothing to point to; to start from a weaker π_ref, RL needs exploration that finds successes on those goals,
# which sampling at temperature 1 from this π_ref rarely does.

# %% [markdown]
# ### Goals practised, goals never seen
#
# In every recipe above, sampled success rises on the training goals while greedy success on val and test stays
# where π_ref left it. Two readings fit that: greedy play does not change even on the goals the policy practised, or
# it changes there and the change does not carry over to new goals. `python -m apo_helpers generalization --run
# runs/apo_demos300_class runs/apo_sloppy_gsd1024_class runs/apo_sloppy_gsd1024_b03_it120_class
# runs/apo_sloppy_gsv1024_b03_class runs/apo_sloppy_gsva1024_b03_it120_class --save` (`analysis.generalization`;
# the last three runs are section 8's, the same recipe at β₂ = 0.03, the last two on the goals whose rewards vary, the
# last of all 120 iterations with the search turn anchored) tells them apart. The same command with `--run
# runs/apo_sloppy_h256_seed1_gsvk512_b03_it120_class runs/apo_sloppy_h256_seed1_gsvk1024_b03_it120_class` adds
# section 8's held recipe from the second 3.9M-parameter π_ref, 120 iterations on 203 and on 402 practised goals,
# and with `--run runs/apo_sloppy_h192_seed1_gsvk1024_b03_it120_class` the same recipe from the second 2.3M π_ref,
# with `--run runs/apo_sloppy_h192_seed1_gsvko03_b03_it120_class` the same again with option values drawn (section
# 8's `explore_options`), and with `--run runs/apo_sloppy_h192_gsvk1024_b03_class
# runs/apo_sloppy_h192_gsvko03_b03_class` the held recipe and the draws from the first 2.3M π_ref after 60
# iterations. It plays π_ref and each seed's final policy greedily on three groups of goals: the goals the run trained on; every
# val and test goal; and those val and test goals on which π_ref's 8 samples, drawn as in stage 1, disagree, the
# held-out goals chosen by the rule that chose the training goals, so that before training the two groups are
# alike; for a run that draws option values, π_ref's samples are drawn with the draws too, as its stage 1 drew them.
# It writes `data/results/generalization_class.csv` (the runs' final policies are not committed; the command needs
# the run folders the `train` commands above leave; π_ref's samples of the unseen goals are cached beside the V*
# tables, so runs from one π_ref share them).

# %%
from apo_helpers.analysis.generalization import GROUPS, generalization_gains, sharpening_ceiling

generalization_path = RESULTS_DIR / "generalization_class.csv"
if generalization_path.exists():
    seen_unseen = pd.read_csv(generalization_path)
    gains_by_group = generalization_gains(seen_unseen)
    display(gains_by_group.set_index(["run", "goals"]).round(3))
    run_names = list(dict.fromkeys(gains_by_group["run"]))  # runs with seeds (a pi_ref alone has no gains)
    panel_columns = min(3, len(run_names))  # at most three panels side by side, more runs wrap onto further rows
    panel_rows = -(-len(run_names) // panel_columns)
    fig, axes = plt.subplots(panel_rows, panel_columns, figsize=(5.5 * panel_columns, 3.9 * panel_rows),
                             squeeze=False)
    for ax in axes.flat[len(run_names):]:
        ax.axis("off")
    for ax, run_name in zip(axes.flat, run_names):
        part = seen_unseen[seen_unseen["run"] == run_name]
        positions = np.arange(len(GROUPS))
        ref_bars = [part[(part["policy"] == "pi_ref") & (part["goals"] == g)]["greedy_success"].iloc[0] for g in GROUPS]
        ax.bar(positions - 0.2, ref_bars, width=0.4, color="grey", label="π_ref")
        for k, group in enumerate(GROUPS):
            seeds_here = part[(part["policy"] != "pi_ref") & (part["goals"] == group)]["greedy_success"]
            plots.seed_range(ax, k + 0.2, seeds_here, fmt="s", color="C0",
                             label=f"A*PO ({len(seeds_here)} seeds: mean, min-max)" if k == 0 else None)
        counts = part.groupby("goals")["n_goals"].first()
        ax.set_xticks(positions, [f"{g}\n({counts[g]} goals)" for g in GROUPS], fontsize=8)
        ax.set_ylabel("greedy success"); ax.set_ylim(0, 1)
        ax.set_title(f"{run_name}\n(from {part['ref'].iloc[0]})", fontsize=9)  # two lines: titles sit side by side
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    plots.save(fig, "04_apo_seen_unseen")
    plt.show()
    for run_name in run_names:
        by_group = gains_by_group[gains_by_group["run"] == run_name].set_index("goals")
        like, every = by_group.loc["unseen, samples disagree"], by_group.loc["unseen, all"]
        print(f"{run_name}: gain over π_ref on the goals it trained on {by_group.loc['trained on', 'gain']:+.3f}, "
              f"on unseen goals whose samples disagree {like['gain']:+.3f}, on all unseen goals {every['gain']:+.3f}, "
              f"of which the disagreeing goals account for "
              f"{like['gain'] * like['goals played'] / every['goals played']:+.3f}; share of the disagreeing goals "
              f"π_ref's greedy play fails that the seeds solve (net) {like['gain'] / (1 - like['π_ref']):.2f}")
else:
    print("no committed table yet: python -m apo_helpers generalization --run RUN_FOLDER ... --save")

# %% [markdown]
# How much could a policy gain on all unseen goals by solving every unseen goal on which π_ref's samples disagree
# (`sharpening_ceiling`: those goals' share times the share of them π_ref's greedy play fails), against what the
# seeds gained? Section 4's policies were not kept, so its π_ref is measured alone, sampled as those runs sampled
# (`generalization --ref runs/pi_ref_class --save`; the row without seeds):

# %%
if generalization_path.exists():
    display(sharpening_ceiling(seen_unseen).set_index("run").round(3))

# %% [markdown]
# **What this says.** From the two π_refs sampled with the greedy search, the goals with a signal are few, and
# solving every one of them that greedy play fails would add about the target (options skipped) or well under it
# (300 demonstrations); the seeds realised a fraction of that. The full-expert π_ref sampled as in section 4
# disagrees with itself on far more goals, mostly because a sample that types another query fails where greedy play
# succeeds (section 5); even so, the goals greedy play fails and some sample solves leave room above the target,
# and section 4's runs realised none of it. So the ceiling explains the weaker π_refs' small gains, not the
# headline run's: there, what A*PO learned from its 256 training goals did not reach the goals it never saw.

# %% [markdown]
# **What this says.** The two runs part ways on the goals they trained on. From the π_ref that skipped the
# options, greedy success rises far on its training goals and by about half as much on the unseen goals whose
# samples disagree: what the update learned there (select the options the goal asks for) is a rule, and it carries
# over to goals of the same kind. From the π_ref of 300 demonstrations it rises a little on the training goals and
# not on the like unseen goals (a few dozen goals, so a few points either way are noise): what moved there was
# specific to the goals practised. Both agree on the rest: the unseen goals whose samples disagree are a small share
# of all unseen goals, so a gain confined to them moves overall success by a few points.
#
# Section 8's run at β₂ = 0.03 is the same recipe with room to move further from π_ref, and it gains more in every
# group. Its gain on all unseen goals is also larger than what the unseen goals whose samples disagree account for
# (the last number printed for it): at the smaller β₂ the option rule reaches goals on which π_ref's samples never
# disagreed, where the recipe at β₂ = 0.1 gained next to nothing. Of the two runs on the goals whose rewards vary,
# the one anchored and trained for 120 iterations does as well on its training goals as the 60-iteration run, and
# less well on every group of unseen goals (the printed gains): the extra iterations fitted the goals practised
# without carrying further to new ones.
#
# The two runs from section 8's second 3.9M π_ref (named `apo_sloppy_h256_seed1_...`) gain about as much on the
# unseen goals whose samples disagree as on the goals they practised: what they learn carries over. But that π_ref disagrees
# with itself on fewer unseen goals than the 1.1M options-skipping π_ref, and the ceiling from them (the table
# above) lies under the target's ten points: from this π_ref, sharpening what it already samples cannot reach the
# target, and its seeds realise about half of that ceiling. The second 2.3M π_ref disagrees with itself on more
# unseen goals, and its ceiling comes to about the target: at no size measured does sharpening what π_ref already
# samples leave room well above the ten points.
#
# Drawing option values (`apo_sloppy_h192_seed1_gsvko03_b03_it120` from that π_ref, `apo_sloppy_h192_gsvko03_b03`
# from the first 2.3M π_ref, each beside the held recipe from the same π_ref) tests whether that ceiling is what
# holds the gain. With the draws, π_ref's samples disagree on more of the unseen goals, and the ceiling rises well
# above the target; the seeds' gain on all unseen goals stays where the held recipe's is, from both π_refs. The
# printed shares say how: from the second π_ref both runs convert about the same share of the disagreeing goals
# π_ref's greedy play fails, from the first the draws convert a smaller share of their larger pool. More goals within
# reach did not make a run learn more of them: the limit is how much of the reachable goals one run converts, not
# how many there are.
#
# ### What the target asks of this model
#
# Notebook 02's sweep retrains π_ref with more demonstrations of the full expert. Its last point imitates every
# train goal: the 600 of the class π_ref, the 1,200 stage 1 draws from, and nothing more. That is roughly the most
# any update driven by the train goals could hand this model: the expert solves nearly all of them, so RL that
# learned to act like the expert on every one of them would show the model what this point shows it, no more
# (RL also sees failures and its own states, so this is a yardstick, not a bound). Set against it, the target:

# %%
from apo_helpers.webshop.catalog import default_catalog

if seeds_path.exists() and ref_sweep_path.exists():
    sweep_points = pd.read_csv(ref_sweep_path).query("pretrain_steps > 0").set_index("demonstrations")
    every_train_goal = len(default_catalog().split("train"))
    class_demonstrations = get_profile("class").reference.demonstrations
    start = ref_row["test_success"]  # section 4's pi_ref and runs
    yardstick = pd.DataFrame([
        {"policy": f"π_ref ({class_demonstrations} demonstrations, section 4's start)", "test success": start},
        {"policy": "A*PO (section 4, mean of seeds)", "test success": runs["test_success"].mean()},
        {"policy": "the target: π_ref + 0.10", "test success": start + 0.10}]
        + [{"policy": f"imitation of {count} demonstrations ({int(row['successful_demonstrations'])} successful)"
                      + (": every train goal" if count == every_train_goal else ""),
            "test success": row["test_success_rate"], "95% CI": f"[{row['ci95_low']:.3f}, {row['ci95_high']:.3f}]"}
           for count, row in sweep_points.iterrows() if count > class_demonstrations]).set_index("policy")
    display(yardstick.round(3))
    if every_train_goal in sweep_points.index:
        top = sweep_points.loc[every_train_goal, "test_success_rate"]
        print(f"the target asks for {start + 0.10:.3f}; imitating the expert on every train goal "
              f"reaches {top:.3f}, {top - start:+.3f} over π_ref")
else:
    print("needs section 4's runs and notebook 02's sweep (data/results/ref_sweep.csv)")

# %% [markdown]
# **What this says.** Imitating the expert on every train goal, three times the class π_ref's demonstrations,
# reaches no higher than imitating 1,200 of them, and stays below the target. This is at notebook 02's budget (the
# same 1,200 imitation steps, so more demonstrations means fewer passes over each): a yardstick, not a limit of the
# data. Still, it puts the target in proportion: with this model, even the expert's own choice on every train goal
# does not buy +10 points on the test goals, and RL from the same goals learns from less (a sampled episode and its
# score, not the expert's choice), and in the runs above only where π_ref's samples disagree. The levers left are
# the model (the pretrained SmolLM2 of section 7, whose RL at this scale needs a GPU) and the goals (more, and more
# varied, than the catalog's train split).

# %% [markdown]
# ## 7. A pretrained π_ref on a GPU
#
# The `gpu` profile swaps the tiny Llama for SmolLM2-135M-Instruct, a real pretrained LLM, and ran once on an H100
# lent to this project for 30 minutes: `train-ref --profile gpu` (imitation of the same expert) and then
# `train --profile gpu --iterations 20 --set vstar_goals=128 eval_every=10 eval_episodes=64 checkpoint_every=100
# lr=1e-5` (a budget cut to fit the lease). Its files are committed: `gpu_run.json` (device, π_ref's training,
# V*'s statistics) and `apo_gpu_{seeds,history,evals}.csv`. This notebook only reads them; no GPU is needed here.
# The run predates the tokenization fix of section 2, which it did not need: SmolLM2's byte-level tokenizer decodes
# the expert's replies to text that encodes back to the same tokens (its history has no `token_mismatch_rate`
# column yet, so rare non-canonical samples went uncounted).

# %%
gpu_run_path = RESULTS_DIR / "gpu_run.json"
if gpu_run_path.exists() and seeds_path.exists():
    gpu_run = json.loads(gpu_run_path.read_text())
    gpu_seeds = pd.read_csv(RESULTS_DIR / "apo_gpu_seeds.csv")
    gpu_history = pd.read_csv(RESULTS_DIR / "apo_gpu_history.csv")
    gpu_ref, gpu_apo = gpu_seeds[gpu_seeds["objective"] == "pi_ref"].iloc[0], gpu_seeds[gpu_seeds["objective"] == "apo"]
    print(f"{gpu_run['device']}; π_ref imitation: {gpu_run['pi_ref']['sft_steps']} steps in "
          f"{gpu_run['pi_ref']['train_seconds']:.0f} s")
    first = curves[curves["iteration"] <= len(gpu_history)]  # section 4's tiny model over the same iterations
    explore = pd.DataFrame({
        "π_ref greedy test success": [ref_row["test_success"], gpu_ref["test_success"]],
        "A*PO greedy test success": [runs["test_success"].mean(), gpu_apo["test_success"].mean()],
        "sampled success (training goals)": [first["success"].mean(), gpu_history["success"].mean()],
        "entropy per token (nats)": [first["entropy"].mean(), gpu_history["entropy"].mean()],
        "|log π/π_ref| per trajectory": [first["log_ratio_abs"].mean(), gpu_history["log_ratio_abs"].mean()],
        "iteration seconds (median)": [first["seconds"].median(), gpu_history["seconds"].median()]},
        index=[f"tiny Llama, class profile, CPU (first {len(gpu_history)} iterations)",
               f"SmolLM2-135M, gpu profile, {gpu_run['device'].split(' (')[0]}"]).T
    display(explore.round(3))
    v = gpu_run["vstar"]
    mixed = v["goals"] - v["goals_all_8_succeed"] - v["goals_none_succeed"]
    print(f"stage 1 on the GPU: {mixed} of {v['goals']} goals have {v['N']} samples with both a success and a "
          f"failure; mean V* {v['vstar_mean']:.3f} against a mean sampled reward of {v['sample_mean']:.3f}")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3))
    for ax, column in zip(axes, ["success", "entropy"]):
        plots.seed_band(ax, first, column, label="tiny Llama (3 seeds)")
        ax.plot(gpu_history["iteration"], gpu_history[column], "o-", label="SmolLM2-135M (1 seed)")
        ax.set_xlabel("iteration"); ax.legend(fontsize=8)
    axes[0].set_title("sampled success (training episodes)"); axes[1].set_title("entropy per token (nats)")
    axes[1].set_yscale("log")
    plots.save(fig, "04_gpu_run")
    plt.show()
else:
    print("no committed GPU run: see the README's section on the gpu profile")

# %% [markdown]
# **What this says.** Imitation makes the pretrained model a much better π_ref than the tiny one, in a minute of
# GPU time: pretraining is worth more here than anything RL did to the tiny model. A*PO's 20 iterations left it
# where it was. Look at the entropy: the imitated SmolLM2 is far more certain of each token than the tiny π_ref, so
# its samples at temperature 1.0 mostly replay what greedy decoding does, and the sampled success sits close to
# the greedy one. Stage 1 still found goals whose 8 samples disagree (`gpu_run.json`: V*'s statistics), so the
# signal is not zero; this run was simply far shorter than the tiny model's and at a small learning rate. What a
# longer lease would try first: the full 120 iterations, larger learning rates, several seeds.
#
# ### From the sloppy demonstrator, at a larger learning rate
#
# A later 15-minute lease on an H200 asked section 6's question of the pretrained model: SmolLM2 imitates the
# demonstrator who ignores the options in half its episodes (`train-ref --profile gpu --skip-options 0.5`), and
# three seeds of the recipe section 8 arrives at start from it at lr 5e-5, five times the run above, side by side
# under a wall-clock budget (`max_minutes`: the iteration that ends past it is the last one, so each seed still reaches its
# test evaluation). The commands are in `gpu_sloppy_run.json`; the seeds' tables are
# `apo_gpu_sloppy_gpu_{seeds,history,evals}.csv`.

# %%
sloppy_run_path, sloppy_seeds_path = RESULTS_DIR / "gpu_sloppy_run.json", RESULTS_DIR / "apo_gpu_sloppy_gpu_seeds.csv"
if sloppy_run_path.exists() and sloppy_seeds_path.exists():
    sloppy_run = json.loads(sloppy_run_path.read_text())
    sloppy_seeds = pd.read_csv(sloppy_seeds_path)
    sloppy_history = pd.read_csv(RESULTS_DIR / "apo_gpu_sloppy_gpu_history.csv")
    print(f"{sloppy_run['device']}; stage 1 kept {sloppy_run['vstar']['goals']} of "
          f"{sloppy_run['vstar']['goals_sampled']} goals")
    sloppy_columns = {"iterations": "iterations", "test_success": "test success", "test_invalid_rate": "invalid actions",
                      "test_steps": "steps", "test_option_clicked": "options clicked (goals asking some)",
                      "test_options_right": "every option right",
                      "test_success_without_options": "success, goals asking none"}
    sloppy_rows = sloppy_seeds.assign(policy=[f"A*PO seed {s:.0f}" if o == "apo" else "π_ref (SmolLM2, sloppy)"
                                              for o, s in zip(sloppy_seeds["objective"], sloppy_seeds["seed"])])
    display(sloppy_rows.set_index("policy")[list(sloppy_columns)].rename(columns=sloppy_columns).round(3))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3))
    for seed, seed_history in sloppy_history.groupby("seed"):
        axes[0].plot(seed_history["iteration"], seed_history["log_ratio_abs"], "o-", label=f"seed {seed}")
        axes[1].plot(seed_history["iteration"], seed_history["success"], "o-", label=f"seed {seed}")
    axes[0].set_title("|log π/π_ref| per trajectory (nats)"); axes[1].set_title("sampled success (training episodes)")
    for ax in axes:
        ax.set_xlabel("iteration"); ax.legend(fontsize=8)
    plots.save(fig, "04_gpu_sloppy_run")
    plt.show()
else:
    print("no committed GPU run from the sloppy demonstrator: see the README's section on the gpu profile")

# %% [markdown]
# **What this says.** The pretrained π_ref copies the sloppy habit only in part, as the tiny ones do, and it is a
# far better policy than any of them: RL has the same option habit to add, from a stronger start. But at 5e-5 a
# single update (at half that rate, the warm-up's first step) already moves each trajectory's log-probability
# several nats from π_ref (left panel), the sampled success, after one rise, falls below the first batch's by the
# fourth iteration (right), and every seed ends below π_ref on test: one stops clicking options altogether, one breaks down into invalid
# actions, one still clicks options but picks the wrong values. With the run above, whose log-ratio stayed under
# half a nat at 1e-5, the two learning rates bracket the one to try next; a pretrained model's learning rate is a
# setting to sweep first, not to carry over from the tiny model.
#
# ## 8. Searching for a better recipe, from β₂ on
#
# This section starts with β₂, the knob the issue asks to sweep, then asks in turn each question of the reading
# guide at the top of this notebook, one subsection per question, each from committed runs.
#
# The paper's β₂ = 1e-3 was set for single-turn math with ~1k-token answers. Here a trajectory has a few hundred
# assistant tokens and rewards in [−1, 1]; the regression's optimum sets log π/π_ref = (r − V*)/β₂, so β₂ bounds
# how far a trajectory's log-probability may move. `python -m apo_helpers sweep --name beta2 --values ... --save`
# runs one shorter run per value (same seed, goals and budget) and commits `data/results/sweep_beta2_class.csv`.

# %%
sweep_path, sweep_history_path = RESULTS_DIR / "sweep_beta2_class.csv", RESULTS_DIR / "sweep_beta2_class_history.csv"
if sweep_path.exists() and sweep_history_path.exists():
    sweep, sweep_history = pd.read_csv(sweep_path), pd.read_csv(sweep_history_path)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3))
    for beta2, part in sweep_history.groupby("beta2"):
        axes[0].plot(part["iteration"], part["log_ratio_abs"].rolling(5, min_periods=1).mean(), label=f"β₂ = {beta2}")
        axes[1].plot(part["iteration"], part["reward"].rolling(5, min_periods=1).mean(), label=f"β₂ = {beta2}")
    axes[0].set_title("|log π/π_ref| per trajectory (5-iteration mean)"); axes[0].set_yscale("log")
    axes[1].set_title("training reward (5-iteration mean)")
    for ax in axes:
        ax.set_xlabel("iteration"); ax.legend(fontsize=8)
    plots.save(fig, "04_beta2_sweep")
    plt.show()
    display(sweep.round(3))
else:
    print("no committed sweep yet: python -m apo_helpers sweep --name beta2 --values 0.01 0.1 1.0 --save")

# %% [markdown]
# ### β₂ where there is something to learn
#
# That sweep starts from the full π_ref, which leaves A*PO little to learn, and ran 20 iterations. Section 6's best
# recipe (the π_ref that skipped the options half the time, greedy search, the disagreeing goals of 1,024 stage-1
# goals) has a decision to learn, and section 5 says a smaller β₂ lets the target overturn a confident choice.
# So the same recipe at β₂ = 0.03, 0.01 and 0.003, three seeds of 60 iterations each (the val curves of section 6
# stop rising by then), beside section 6's three seeds at the profile's β₂ = 0.1 (120 iterations); the β₂ = 0.03
# runs then continue from their checkpoints to 120 iterations (`--resume`), the budget of the β₂ = 0.1 runs:
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_disagreeing=True greedy_search=True beta2=0.03 \
#     --out runs/apo_sloppy_gsd1024_b03_class --name apo_sloppy_gsd1024_b03 --save
# ```
#
# (and `beta2=0.01`, `_b01`; `beta2=0.003`, `_b003`; the 120-iteration tables are `_b03_it120`). The KL and
# |log π/π_ref| columns average the training history over iterations 40 to 59, a window every run has.

# %%
@functools.cache  # the next subsection reads some of the same runs
def committed_run(name):
    """A committed `train --name NAME --save`'s seeds, history and evals tables."""
    return {part: pd.read_csv(RESULTS_DIR / f"{name}_class_{part}.csv") for part in ("seeds", "history", "evals")}


def committed_runs(names):
    """The committed runs among ``names`` (those whose tables exist) and π_ref's test row from the first of them."""
    runs = {name: committed_run(name) for name in names if (RESULTS_DIR / f"{name}_class_seeds.csv").exists()}
    start = next(iter(runs.values()))["seeds"].query("objective == 'pi_ref'").iloc[0] if runs else None
    return runs, start


def seeds_summary(tables, start) -> pd.Series:
    """A committed run's test columns (mean over seeds), its gain over π_ref (``start``) and the seeds' spread."""
    trained = tables["seeds"].query("objective != 'pi_ref'")  # apo (or section 6's apo_split)
    return pd.Series({"iterations": trained["iterations"].iloc[0], "goals practised": trained["vstar_goals"].iloc[0],
                      **trained[list(columns)].mean(),
                      "gain over π_ref": trained["test_success"].mean() - start["test_success"],
                      "invalid actions (test)": trained["test_invalid_rate"].mean(), "seeds": len(trained),
                      "std over seeds": trained["test_success"].std(ddof=0),
                      "lowest seed": trained["test_success"].min(), "highest seed": trained["test_success"].max()})


def runs_summary(runs, labels, start) -> pd.DataFrame:
    """One row per committed run (labelled by ``labels``): its ``seeds_summary`` against the same π_ref ``start``."""
    return pd.DataFrame({labels[name]: seeds_summary(tables, start) for name, tables in runs.items()}).T.astype(float)


def print_targets(table):
    """Issue 4's bar for each row: at least +10 points over π_ref, and a gain above the spread over seeds."""
    for label, row in table.iterrows():
        met = row["gain over π_ref"] >= 0.10 and row["gain over π_ref"] > row["std over seeds"]
        print(f"{label}: {row['gain over π_ref']:+.3f} over π_ref, spread {row['std over seeds']:.3f}, lowest seed "
              f"{row['lowest seed']:.3f}: target (+0.10, gain above the spread) {'met' if met else 'not met'}")


def plot_seed_curves(runs, labels, panels, window, title, figure_name):
    """One figure, one colour per run, one line per seed: greedy val success, then per ``panels`` entry
    ``(history column, panel title, log scale)`` that column's rolling mean over ``window`` iterations (a run without
    the column leaves it out). Per seed: a collapse would vanish in a mean."""
    fig, axes = plt.subplots(1, 1 + len(panels), figsize=(5 * (1 + len(panels)), 3))
    for (name, tables), color in zip(runs.items(), ("tab:red", "tab:blue", "tab:green", "tab:purple")):
        for seed, curve in tables["evals"].groupby("seed"):
            axes[0].plot(curve["iteration"], curve["success"], "o-", color=color, alpha=0.7,
                         label=labels[name] if seed == 0 else None)
        for seed, curve in tables["history"].groupby("seed"):
            smooth = curve.set_index("iteration").rolling(window, min_periods=1).mean(numeric_only=True)
            for ax, (column, _, _) in zip(axes[1:], panels):
                if column in smooth:
                    ax.plot(smooth.index, smooth[column], color=color, alpha=0.7,
                            label=labels[name] if seed == 0 else None)
    axes[0].set_title("greedy success on val, per seed")
    for ax, (_, panel_title, log_scale) in zip(axes[1:], panels):
        ax.set_title(panel_title)
        if log_scale:
            ax.set_yscale("log")
    for ax in axes:
        ax.set_xlabel("iteration")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, -0.02),
               ncol=min(len(runs), 4), fontsize=8)  # one legend below the panels: inside them it hid the curves
    fig.suptitle(title, y=1.04)
    plots.save(fig, figure_name)
    plt.show()


BETA2_TABLES = [(0.1, "apo_sloppy_gsd1024"), (0.03, "apo_sloppy_gsd1024_b03_it120"), (0.03, "apo_sloppy_gsd1024_b03"),
                (0.01, "apo_sloppy_gsd1024_b01"), (0.003, "apo_sloppy_gsd1024_b003")]
beta2_runs = {name: (beta2, committed_run(name))
              for beta2, name in BETA2_TABLES if (RESULTS_DIR / f"{name}_class_seeds.csv").exists()}
if len(beta2_runs) > 1:
    start = next(t["seeds"] for _, t in beta2_runs.values()).query("objective == 'pi_ref'").iloc[0]
    summary = {"π_ref (start)": start[list(columns)], "full-expert π_ref (section 6, live)": full_row[list(columns)]}
    for name, (beta2, tables) in beta2_runs.items():  # section 6's test columns, then the spread and the history
        trained = tables["seeds"].query("objective == 'apo'")
        late = tables["history"].query("40 <= iteration <= 59")  # a window every run has
        summary[f"β₂ = {beta2:g}, {int(trained['iterations'].iloc[0])} it."] = pd.Series({
            **trained[list(columns)].mean(), "seeds": len(trained),
            "std over seeds": trained["test_success"].std(ddof=0),
            "KL (it. 40-59)": late["kl"].mean(), "|log π/π_ref| (it. 40-59)": late["log_ratio_abs"].mean(),
            "sampled success, training goals (it. 40-59)": late["success"].mean()})
    beta2_table = pd.concat(summary, axis=1, sort=False).T.astype(float).rename(columns=columns)
    beta2_table.insert(1, "gain over π_ref", beta2_table["test success"] - start["test_success"])
    display(beta2_table.round(3))
    fig, axes = plt.subplots(1, 3, figsize=(14, 3))
    for name, (beta2, tables) in beta2_runs.items():
        if f"{name}_it120" in beta2_runs:  # its first 60 iterations are the longer run's
            continue
        label = f"β₂ = {beta2:g}"
        plots.seed_band(axes[0], tables["evals"], "success", label=label, fmt="o-", alpha=0.15)
        plots.seed_band(axes[1], tables["evals"], "option_clicked", label=label, fmt="o-", alpha=0.15)
        ratio = tables["history"].groupby("iteration")["log_ratio_abs"].mean().rolling(5, min_periods=1).mean()
        axes[2].plot(ratio.index, ratio, label=label)
    axes[0].set_title("greedy success on val"); axes[1].set_title("an option clicked (val goals with options)")
    axes[2].set_title("|log π/π_ref| per trajectory (5-it. mean)"); axes[2].set_xlabel("iteration")
    axes[2].set_yscale("log"); axes[2].legend(fontsize=8)
    fig.suptitle("section 6's best recipe at four values of β₂ (mean of seeds, band: lowest to highest)", y=1.04)
    plots.save(fig, "04_beta2_sloppy")
    plt.show()
    trained_rows = beta2_table.iloc[2:]  # the runs, below the two π_refs
    best = trained_rows["gain over π_ref"].idxmax()
    gap = full_row["test_success"] - start["test_success"]
    print(f"largest gain: {best}, {trained_rows.loc[best, 'gain over π_ref']:+.3f} over π_ref "
          f"(std over seeds {trained_rows.loc[best, 'std over seeds']:.3f}; the target was +0.10)")
    print(f"the full-expert π_ref is {gap:+.3f} above this π_ref: +0.10 asks A*PO to recover {0.10 / gap:.0%} of what "
          f"the skipped demonstrations would have taught; the best run recovered "
          f"{trained_rows.loc[best, 'gain over π_ref'] / gap:.0%}")
else:
    print("run the commands above to compare β₂ on this recipe")

# %% [markdown]
# **What this says.** Here β₂ was the setting that mattered. At the profile's 0.1 the update moves the option decision
# a little and unevenly across seeds; at 0.03 and below, every seed clicks an option on most test goals that ask for
# one, buys with every option right several times as often as π_ref, and closes most of the gap to the full-expert
# π_ref's success on those goals. The rule learned on the disagreeing training goals now reaches unseen goals, and the
# seeds agree: the gain is several times their spread. A smaller β₂ lets the regression ask for larger log-ratios (the
# KL column grows as β₂ shrinks), which is what section 5 said overturning a confident choice needs. Below 0.03 it buys
# nothing more: the sampled success on the training goals keeps rising while test success does not, and at 60
# iterations the goals without options lose a little. Twice the iterations at 0.03 adds about a point, within the
# spread.
#
# The best of these runs is still short of the +10-point target (printed above), and the last line says why the target
# is steep here: the full-expert π_ref, imitated from the demonstrator that never skipped the options, sits about as
# far above π_ref as the target asks (the last line), so meeting the target means recovering most or all of what
# the skipped demonstrations would have taught, from a sampled episode and its score. What is left is mostly the option *values* (the
# every-option-right column stays below the full π_ref's) and, at 60 iterations, a small loss on goals without
# options.

# %% [markdown]
# ### Goals whose rewards vary
#
# Section 6's generalization table bounds what the disagreeing goals can give: solving every unseen goal whose π_ref
# samples disagree, and that π_ref's greedy play fails, would add about the target and no more. The rest must come from
# goals on which every sample of π_ref failed. Many of those still score differently from sample to sample: a sample
# that picked one requested option more earns more of WebShop's graded reward, so A*PO's target r − V* already ranks
# them, and `keep_disagreeing` threw them away. StarPO-S's own filter keeps prompts by the spread of their rewards, not
# by success; `keep_varying` keeps every stage-1 goal whose 8 rewards are not all equal (the same V* cache, filtered
# differently), and the runs below repeat the β₂ = 0.03 runs with it, 60 iterations, then continued to 120:
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True beta2=0.03 \
#     --out runs/apo_sloppy_gsv1024_b03_class --name apo_sloppy_gsv1024_b03 --save
# ```
#
# (the 120-iteration tables are `_gsv1024_b03_it120`, from a copy of the folder with `--resume --iterations 120`).

# %%
FILTER_TABLES = {"apo_sloppy_gsd1024_b03": "disagreeing goals", "apo_sloppy_gsd1024_b03_it120": "disagreeing goals",
                 "apo_sloppy_gsv1024_b03": "goals whose rewards vary",
                 "apo_sloppy_gsv1024_b03_it120": "goals whose rewards vary"}
filter_runs, start = committed_runs(FILTER_TABLES)
if len(filter_runs) > 1:
    rows = {}
    for name, tables in filter_runs.items():
        row = seeds_summary(tables, start)
        rows[f"{FILTER_TABLES[name]}, {int(row['iterations'])} it."] = row
    filter_table = pd.DataFrame(rows).T.astype(float).rename(columns=columns)
    display(filter_table.round(3))
    fig, axes = plt.subplots(1, 3, figsize=(15, 3))
    for name, tables in filter_runs.items():
        if f"{name}_it120" in filter_runs:  # its first 60 iterations are the longer run's
            continue
        plots.seed_band(axes[0], tables["evals"], "success", label=FILTER_TABLES[name], fmt="o-", alpha=0.15)
        history = tables["history"].assign(share=lambda h: h["trained_tokens"] / h["generated_tokens"])
        for seed, curve in history.groupby("seed"):  # per seed: a collapse would vanish in a mean
            smooth = curve.set_index("iteration")[["invalid_rate", "share"]].rolling(5, min_periods=1).mean()
            axes[1].plot(smooth.index, smooth["invalid_rate"], label=f"{FILTER_TABLES[name]}, seed {seed}")
            axes[2].plot(smooth.index, smooth["share"], label=f"{FILTER_TABLES[name]}, seed {seed}")
    axes[0].set_title("greedy success on val (band: lowest to highest seed)"); axes[0].legend(fontsize=8)
    axes[1].set_title("invalid actions in the rollouts (5-it. mean)"); axes[1].set_xlabel("iteration")
    axes[2].set_title("trained tokens per generated token (5-it. mean)"); axes[2].set_xlabel("iteration")
    axes[2].legend(fontsize=7)
    fig.suptitle("β₂ = 0.03: the goals RL practises", y=1.04)
    plots.save(fig, "04_goal_filter")
    plt.show()
    print_targets(filter_table)
else:
    print("run the commands above to compare the goal filters")

# %% [markdown]
# **What this says.** Keeping the goals whose rewards vary more than doubles the goals RL practises, from the same
# stage-1 samples. At 60 iterations it matches the disagreeing goals' 120-iteration result in half the iterations, with
# a smaller spread over seeds, and still falls short of +10 points (printed above): the extra
# goals, on which no sample of π_ref succeeded, move the option choices a little further, not past the target. On
# val and test together (section 6's generalization table) this run gains the most on all unseen goals of any run,
# and more of that gain comes from goals on which π_ref's samples agreed: the goals it added were such goals.
#
# Continued to 120 iterations, one seed collapsed (its row's lowest seed and invalid-action rate; the middle panel) and
# a second began to drift the same way. The
# right panel says where: as its invalid actions rise, the share of generated tokens that are trained falls, because the
# failing turns are the search turns. Under `greedy_search` the query is typed greedily and left out of log π, so
# nothing in the regression ties that turn to π_ref; the updates on the click turns share its weights and, in this
# seed, broke its format (replayed greedily on test goals, the policy writes search replies without the closing tags).
# An invalid search earns the format penalty, but no gradient reaches the tokens that caused it, so the loop feeds
# itself. The disagreeing-goals runs did not drift this way in 120 iterations, but nothing in the objective prevents it.
# The next step is in the method, not in the budget: keep the greedy turns inside the KL term of the regression (or let
# π_ref type the query), then train longer.

# %% [markdown]
# ### Anchoring the greedy search turn
#
# `greedy_anchor` adds the missing tie. The greedy turns are scored too, apart from the sampled ones, and their
# log-ratio gets A*PO's regression with an advantage of 0: a turn typed greedily was not drawn from π, so the episode's
# outcome says nothing about how good its reply was, and the least-squares answer for it is π = π_ref:
#
# $$\mathcal{L} = \frac{1}{B}\sum_i \big(\beta_2 \log\tfrac{\pi}{\pi_{\text{ref}}}(\text{sampled turns of } y_i)
#   - (r_i - V^*(x_i))\big)^2 + w\,\frac{1}{B}\sum_i \big(\beta_2 \log\tfrac{\pi}{\pi_{\text{ref}}}
#   (\text{greedy turns of } y_i)\big)^2$$
#
# With w = 1 both terms weigh the same. The pull grows with the drift: a few tenths of a nat cost next to nothing,
# while a search reply whose format broke, which π_ref finds very unlikely, costs as much as a wrong advantage. The same
# recipe as the 120-iteration run above, from the start, with the anchor:
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 120 --set vstar_goals=1024 keep_varying=True greedy_search=True beta2=0.03 greedy_anchor=1.0 \
#     --out runs/apo_sloppy_gsva1024_b03_it120_class --name apo_sloppy_gsva1024_b03_it120 --save
# ```
#
# and the same with `greedy_anchor=10.0` (`--name apo_sloppy_gsva10_1024_b03_it120`), a pull ten times stronger.

# %%
ANCHOR_TABLES = {"apo_sloppy_gsv1024_b03_it120": "search turn free",
                 "apo_sloppy_gsva1024_b03_it120": "search turn anchored, w = 1",
                 "apo_sloppy_gsva10_1024_b03_it120": "search turn anchored, w = 10"}
anchor_runs, start = committed_runs(ANCHOR_TABLES)
if len(anchor_runs) > 1:
    anchor_table = runs_summary(anchor_runs, ANCHOR_TABLES, start).rename(columns=columns)
    display(anchor_table.round(3))
    plot_seed_curves(anchor_runs, ANCHOR_TABLES, [  # log scale: tenths of a nat when held, hundreds in a collapse
        ("invalid_rate", "invalid actions in the rollouts (5-it. mean)", False),
        ("anchor_log_ratio_abs", "|log π/π_ref| of the greedy turns (5-it. mean)", True)], window=5,
        title="β₂ = 0.03, goals whose rewards vary: the greedy search turn free or anchored",
        figure_name="04_greedy_anchor")
    print_targets(anchor_table)
else:
    print("run the command above (and the goal-filter runs before it) to compare")

# %% [markdown]
# **What this says.** At w = 1 the anchor removed the collapse: over 120 iterations no seed's rollouts drift into
# invalid actions (middle panel) and the share of generated tokens that are trained stays where it started, while the
# free run lost a seed. The search turn's log-ratio to π_ref does move, by a few nats at times in one seed, and is
# pulled back (right panel). It did not add to the gain: the anchored seeds end below the free run's 60-iteration
# result (the goal-filter table above), and no row meets the target (printed). The anchor holds the search reply's
# log-probability near π_ref's, but greedy decoding follows the argmax, and where π_ref itself is close to a tie
# between two replies a small log-ratio is enough to flip it: seed 0's evaluation has more invalid actions than the
# others, and replayed, a few of its test episodes type the prompt's placeholder `search[<query>]` over and over.
#
# A ten times stronger pull made things worse, not better: one seed at w = 10 collapsed in its last iterations (its
# lowest seed and invalid actions in the table; in the right panel its greedy turns' log-ratio runs to hundreds of
# nats as its invalid actions rise). The anchor's gradient
# only pushes down the log-probability of whatever greedy reply the policy now prefers to π_ref, and says nothing about
# where that probability should go; weighted ten times it becomes an unlearning step without a destination. What
# would give one is a KL to π_ref over the whole next-token distribution at the greedy turns' positions (π_ref's
# distribution as the target, not only the log-ratio of the reply that was typed): `APOConfig.greedy_kl`, measured
# after the noise runs below.

# %% [markdown]
# ### Fitting each batch: `update_epochs`
#
# Every run above fits its targets loosely. The regression asks β₂ log π/π_ref of a trajectory to equal r − V*; with
# β₂ = 0.03 and |r − V*| around 0.2 that is several nats, yet the KL to π_ref stays near 2 nats, and the loss on each
# fresh batch (measured before its step) never falls below its first value, the mean of (r − V*)²: one Adam step per
# batch moves the policy a little, and the next batch brings other goals. A*PO's least squares holds on any samples
# (the targets do not depend on the policy that drew them), so the loop may take several steps on each batch, as
# section 2's "Can one update fit this batch?" did on one, for one more forward and backward pass per step. The
# goals-whose-rewards-vary recipe with three steps per batch (`micro_batch=16` only bounds memory; evaluations and
# checkpoints every 10 iterations):
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 30 --set vstar_goals=1024 keep_varying=True greedy_search=True beta2=0.03 update_epochs=3 \
#     eval_every=10 checkpoint_every=10 micro_batch=16 \
#     --out runs/apo_sloppy_gsve3_1024_b03_class --name apo_sloppy_gsve3_1024_b03 --save
# ```

# %%
EPOCH_TABLES = {"apo_sloppy_gsv1024_b03": "1 step per batch", "apo_sloppy_gsve3_1024_b03": "3 steps per batch"}
epoch_runs, start = committed_runs(EPOCH_TABLES)
if len(epoch_runs) > 1:
    rows = {}
    for name, tables in epoch_runs.items():
        window = tables["history"].query("20 <= iteration <= 29")  # a window both runs have
        row = seeds_summary(tables, start)
        rows[f"{EPOCH_TABLES[name]}, {int(row['iterations'])} it."] = pd.concat([
            row,
            pd.Series({"|log π/π_ref| (it. 20-29)": window["log_ratio_abs"].mean(),
                       "loss on fresh batches (it. 20-29)": window["loss"].mean(),
                       "rollout invalid actions (it. 20-29)": window["invalid_rate"].mean()})])
    epoch_table = pd.DataFrame(rows).T.astype(float).rename(columns=columns)
    display(epoch_table.round(3))
    plot_seed_curves(epoch_runs, EPOCH_TABLES, [
        ("log_ratio_abs", "|log π/π_ref| per trajectory (3-it. mean)", True),
        ("loss", "A*PO loss on each fresh batch (3-it. mean)", True)], window=3,
        title="β₂ = 0.03, goals whose rewards vary: one or three optimizer steps per batch",
        figure_name="04_update_epochs")
    print_targets(epoch_table)
else:
    print("run the command above to compare")

# %% [markdown]
# **What this says.** Three steps do fit each batch better (in the history, `loss_last_epoch`, the loss before the
# third step, is typically about a quarter below the batch's first loss), but the loss on the next, fresh batch rises instead of falling
# (right panel), the log-ratio to π_ref runs to tens and hundreds of nats (middle panel) and every seed broke within
# 30 iterations: two into invalid replies (val success 0 from iteration 20), and the third stopped clicking options
# altogether and ends below π_ref (the table's lowest and highest seeds). What one batch's regression fits does not
# carry over to the next batch's goals; it pushes the sampled replies of one batch by nats, and the error compounds.
# So the loose fit of the one-step loop is not what holds the gain back, and A*PO's one step per fresh batch, the
# paper's and RAGEN's loop, is the stable regime here. No row meets the target (printed).

# %% [markdown]
# ### Is the plateau noise? Bigger batches, a decaying learning rate
#
# In every stable run greedy val success stops rising after about 20 iterations while the sampled success on the
# training batches keeps creeping up. If the plateau were the noise of 32-episode gradients at a constant learning
# rate, the policy would wander around a better point without settling on it; two changes would then lift it:
# twice the goals per batch (half the gradient's variance, the same number of steps) and a learning rate that
# decays (`APOConfig.lr_decay`: a cosine to 10% of `lr` at the run's end, so the last steps are small). Each is
# the 60-iteration goals-whose-rewards-vary recipe with one change:
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True beta2=0.03 batch_goals=64 \
#     --out runs/apo_sloppy_gsv1024_b03_bg64_class --name apo_sloppy_gsv1024_b03_bg64 --save
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True beta2=0.03 lr_decay=True \
#     --out runs/apo_sloppy_gsv1024_b03_decay_class --name apo_sloppy_gsv1024_b03_decay --save
# ```

# %%
NOISE_TABLES = {"apo_sloppy_gsv1024_b03": "32 goals per batch", "apo_sloppy_gsv1024_b03_bg64": "64 goals per batch",
                "apo_sloppy_gsv1024_b03_decay": "32 goals, decaying lr"}
noise_runs, start = committed_runs(NOISE_TABLES)
if len(noise_runs) > 1:
    rows = {}
    for name, tables in noise_runs.items():
        late = tables["history"].query("iteration > 40")
        rows[NOISE_TABLES[name]] = pd.concat([seeds_summary(tables, start), pd.Series({
            "episodes": tables["seeds"].query("objective == 'apo'")["episodes"].mean(),
            "sampled success, training batches (it. 41-60)": late["success"].mean(),
            "|log π/π_ref| (it. 41-60)": late["log_ratio_abs"].mean()})])
    noise_table = pd.DataFrame(rows).T.astype(float).rename(columns=columns)
    display(noise_table.round(3))
    plot_seed_curves(noise_runs, NOISE_TABLES, [
        ("success", "sampled success, training batches (10-it. mean)", False),
        ("log_ratio_abs", "|log π/π_ref| per trajectory (10-it. mean)", False)], window=10,
        title="β₂ = 0.03, goals whose rewards vary: less gradient noise", figure_name="04_noise")
    print_targets(noise_table)
else:
    print("run the commands above to compare")

# %% [markdown]
# **What this says.** Neither change lifts the plateau. With twice the goals per batch the gradient is less noisy
# (its norm is smaller, the log-ratio to π_ref no larger) and the sampled success on the training batches is as
# high, yet greedy val success settles at the same level after 20 iterations and test success ends a little lower,
# with fewer successes on the goals that ask for no option (the seeds table's `test_success_without_options`): more
# episodes per step did not buy a better decision rule. The decaying learning rate ends with the smallest log-ratio
# and about the same test success as the constant one. The differences among the three rows are a few of the 200
# test goals. So the plateau is not the noise of 32-episode gradients: whatever the batch or the step size, A*PO's
# regression settles this model where it does, and what it still gets wrong (the option values, the item whose
# price fits) is what section 5's corrections showed the model learns only weakly even from plain labels. No row
# meets the target (printed).

# %% [markdown]
# ### Holding the whole distribution, sampling the clicks hotter, and a retrained π_ref
#
# Four later measurements are committed as tables without a cell of their own here; the README's trained table and
# notebook 07 show their numbers. The first three started from the sloppy π_ref retrained in place: the same
# `train-ref --skip-options 0.5` command on another machine, whose CPU rounds differently, so other weights in the
# same folder and a test score half a point lower (the rows marked "retrained in place").
#
# - **The same recipe from the retrained π_ref** (`apo_sloppy_gsv1024_b03_rerun`) gains far less than from the first
#   one: its seeds take up the option habit as before, but lose some of the goals that ask for no option. How
#   much a recipe gains depends on the π_ref draw by more than on the seed, so a comparison of recipes is fair only
#   from one π_ref.
# - **`greedy_kl`** holds the greedy search turn by the exact KL(π ‖ π_ref) of its whole next-token distribution
#   (`apo_sloppy_gsvk1024_b03_it120`): 120 iterations without the drift into invalid replies, ending about level with
#   the free 60-iteration recipe from the same π_ref.
# - **Hotter rollouts** (`temperature`, `apo_sloppy_gsv1024_b03_t16` and the `_h100` tables from a lent GPU): the
#   clicks after the search are nearly deterministic under π_ref (section 5), and A*PO's least squares holds on
#   samples from any policy (log π is always the untempered policy's; stage 1 stays at temperature 1), so the loop
#   may sample its clicks hotter to try more option values. At 1.6 it ends a little above the same recipe at 1,
#   by about the seeds' spread, on the CPU and on the GPU; the hotter rollouts fail more often themselves, and the
#   greedy choice of option value moves little.
# - **Two more π_refs from the same demonstrations** (`train-ref --skip-options 0.5 --seed 1` and `--seed 2`: other
#   initial weights and batch order only) score several points apart on test before any RL, and the best recipe
#   from them (`apo_sloppy_seed1_gsv1024_b03`, `apo_sloppy_seed2_gsv1024_b03`) gains about as little as from the
#   retrained one; from one of them a seed broke into invalid search replies within its 60 iterations. The README
#   sets the recipe's gain from all four π_refs side by side (`analysis.readme.ref_spread`): the first π_ref's large
#   gain was the best of four draws, and the spread over π_refs is many times the spread over seeds, which is why
#   the target's comparison with the seeds' spread alone flatters a recipe measured from one π_ref.
# - **`greedy_kl` from three of those π_refs** (`apo_sloppy_seed1_gsvk1024_b03`, `apo_sloppy_seed2_gsvk1024_b03`,
#   `apo_sloppy_gsvk1024_b03_rerun`, 60 iterations): no seed broke, including from the π_ref whose free run lost
#   one, and the gains over the π_refs sit close together, a little above the seeds' spread and far below the
#   target: holding the search turn removes the collapse that made the free recipe's gains range so widely, not the
#   ceiling. Held and sampled at temperature 1.6 together (`_t16` tables), it gains nothing on average: the hotter
#   rollouts succeed less often and the seeds barely take up the option habit. Run to 120 iterations from
#   all three π_refs (`_it120` tables), the held seeds stay stable and gain a little more: under a point from the
#   two π_refs whose seeds learned fastest, five from the slowest, whose seeds took up the option habit only in
#   their second 60 iterations (the README's ref-spread table has the gains).
#
# None meets the target.

# %% [markdown]
# ### Where the option habit stalls: purchases one click early
#
# Every recipe above raises how often the policy clicks an option on the goals that ask for one, and none solves
# more than about one in six of those goals. Two measurements look at the item page, where that is decided. First,
# credit at the item page: section 6's `apo_split` with the held recipe, against `apo` with the same recipe from the
# same π_ref (the one retrained in place; section 6 has the command):

# %%
SPLIT_TABLES = {"apo_sloppy_gsvk1024_b03_rerun": "apo, search held by its KL",
                "apo_split_sloppy_gsvk1024_b03_rerun": "apo_split, search held by its KL"}
split_runs, split_start = committed_runs(SPLIT_TABLES)
if split_runs:
    split_table = runs_summary(split_runs, SPLIT_TABLES, split_start)
    split_table["seconds per iteration"] = [tables["history"]["seconds"].mean() for tables in split_runs.values()]
    display(split_table.rename(columns=columns).round(3))
    print_targets(split_table)
else:
    print("run section 6's apo_split command to compare")

# %% [markdown]
# Second, the purchases themselves. The probe holds the state fixed (`analysis.decisions.early_purchases`): π_ref's
# greedy test episodes that bought while the bought item offered a requested option value left unselected, whether
# none or some of the requested values had been selected. Each policy continues each of those states 16 times, at
# temperature 1 and at 1.6 (`early_purchase_rates`): its next reply buys at once, selects a missing value, or does
# something else, and the continued episode succeeds or not. The policies: π_ref and the held recipe's seeds after
# 60 and after 120 iterations, all from the same π_ref:
#
# ```
# python -m apo_helpers decisions --profile class --states-from runs/pi_ref_class_skip_options_0.5 \
#     --models pi_ref=runs/pi_ref_class_skip_options_0.5 \
#              kl60_seed0=runs/apo_sloppy_gsvk1024_b03_rerun_class/seed_0/policy ... (seeds 1, 2) \
#              kl120_seed0=runs/apo_sloppy_gsvk1024_b03_it120_class/seed_0/policy ... (seeds 1, 2) \
#     --early-purchases --temperatures 1.0 1.6 --save
# ```
#
# and the early purchases of the first seed's own greedy episodes, continued by it (`--states-from` and `--models`
# its policy folder, `--temperatures 1.0 --save --name own_states`).

# %%
from apo_helpers.analysis.decisions import early_purchase_summary

early_path = RESULTS_DIR / "early_purchases_class.csv"
if early_path.exists():
    early = pd.read_csv(early_path)
    groups = {"pi_ref": "π_ref", "kl60": "held, 60 it.", "kl120": "held, 120 it."}
    early["policy"] = early["policy"].str.replace(r"_seed\d+$", "", regex=True).map(groups)  # seeds pooled
    states = early.query("policy == 'π_ref' and temperature == 1.0")
    print(f"{len(states)} states: {(states['selected_before'] > 0).sum()} with some requested value selected, "
          f"{(states['selected_before'] == 0).sum()} with none")
    early_summary = early_purchase_summary(early).drop(columns="states")
    display(early_summary.round(3))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
    for ax, when in zip(axes, ["some selected", "none selected"]):
        part = early_summary.xs(when, level="when")
        labels = [f"{policy.replace(', ', chr(10))}\nT={t:g}" for policy, t in part.index]  # one word a line
        bottom = np.zeros(len(part))
        for column, color in (("p(missing value)", "tab:green"), ("p(buy now)", "tab:red"), ("p(other)", "tab:grey")):
            ax.bar(labels, part[column], bottom=bottom, color=color, label=column)
            bottom += part[column].to_numpy()
        ax.plot(labels, part["continued success"], "ko", label="continued episode succeeds")
        ax.set_title(f"the purchase with {when.replace('some', 'a requested value').replace('none', 'no value')}")
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_ylabel("share of 16 continuations")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    plots.save(fig, "04_early_purchases")
    plt.show()
else:
    print("run the command above to probe the early purchases")
own_path = RESULTS_DIR / "early_purchases_own_states_class.csv"
if own_path.exists():  # the trained policy's own early purchases, where it still stops short
    own = pd.read_csv(own_path)
    print(f"held seed 0 (60 iterations), its own greedy early purchases: {(own['selected_before'] > 0).sum()} with "
          f"some requested value selected, {(own['selected_before'] == 0).sum()} with none")
    display(early_purchase_summary(own).drop(columns="states").round(3))

# %% [markdown]
# **What this says.** The two measurements agree. `apo_split` judges the item-page turns against what π_ref makes
# of the same page, yet it ends where `apo` does, with the same option rates, at half again the seconds per
# iteration: the credit was not what held the item page back. The probe shows what does. Where π_ref bought with no
# requested value selected, the held seeds buy at once far less often and select a missing value about three times
# as often as π_ref: that is the option habit RL learned, the same after 60 and after 120 iterations. Where a
# requested value was already selected, every policy buys at once in most continuations and selects the missing
# value in a few percent of them, in every seed under 6%; sampled at 1.6, the continuations turn to other clicks
# (wrong values, replies that do not parse), not to the missing value. And the trained policy's own early purchases
# stop one value short more often than π_ref's do. RL learned to select an option, not to complete the set: the
# second value is a click the samples almost never try, and A*PO's regression learns only from what is sampled, so
# at a few percent of a handful of states per batch it sees that click pay about once in many iterations. The states
# with a value already selected are few (the count above), so their rates are rough.

# %% [markdown]
# ### Drawing the missing value: `explore_options`
#
# If the second value is a click the samples never try, the rollouts can try it for the policy.
# `explore_options=0.3` answers 30% of the item-page turns on which some of the item's options still have no value
# with a click drawn uniformly from those options' values (`WebShopEnv.unselected_option_actions`; the draw reads
# the page, not the goal), in stage 1 and in the rollouts. A*PO's least squares needs no sampling probabilities, so
# the drawn turns train like the others. The held recipe with it, from the same π_ref, for 60 iterations (then its
# seeds continued to 120 with `--iterations 120 --resume`, as the held recipe's were), and the probe above on its
# 60-iteration seeds; the tables after the first compare the same from two of section 8's 2.3M-parameter π_refs
# (`docs/experiments.md` gives their commands):
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5 --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     explore_options=0.3 --out runs/apo_sloppy_gsvko03_b03_class --name apo_sloppy_gsvko03_b03 --save
# python -m apo_helpers decisions --profile class --states-from runs/pi_ref_class_skip_options_0.5 \
#     --models xo60_seed0=runs/apo_sloppy_gsvko03_b03_class/seed_0/policy ... (seeds 1, 2) \
#     --early-purchases --temperatures 1.0 --save --name explore_options
# ```

# %%
PROBE_LABELS = {"pi_ref": "π_ref", "kl60": "held, 60 it.", "xo60": "held + explore_options, 60 it."}  # seeds pooled
EXPLORE_TABLES = {"apo_sloppy_gsvk1024_b03_rerun": "held recipe, 60 it.",
                  "apo_sloppy_gsvko03_b03": "held + explore_options, 60 it.",
                  "apo_sloppy_gsvk1024_b03_it120": "held recipe, 120 it.",
                  "apo_sloppy_gsvko03_b03_it120": "held + explore_options, 120 it."}
EXPLORE_WIDER_TABLES = [  # the same comparison from two 2.3M-parameter π_refs (section 8's wider model)
    {"apo_sloppy_h192_seed1_gsvk1024_b03": "2.3M seed 1: held recipe, 60 it.",
     "apo_sloppy_h192_seed1_gsvko03_b03": "2.3M seed 1: held + explore_options, 60 it.",
     "apo_sloppy_h192_seed1_gsvk1024_b03_it120": "2.3M seed 1: held recipe, 120 it.",
     "apo_sloppy_h192_seed1_gsvko03_b03_it120": "2.3M seed 1: held + explore_options, 120 it."},
    {"apo_sloppy_h192_gsvk1024_b03": "2.3M: held recipe, 60 it.",
     "apo_sloppy_h192_gsvko03_b03": "2.3M: held + explore_options, 60 it."}]


def explore_comparison(labels):
    """The committed runs among ``labels``, gains over the π_ref they all start from, and the share of drawn turns
    in their rollouts; None when fewer than two are committed."""
    runs, start = committed_runs(labels)
    if len(runs) < 2:
        return None
    table = runs_summary(runs, labels, start)
    table["drawn turns (training)"] = [float(tables["history"]["explored_rate"].mean()) for tables in runs.values()]
    return table


for labels in [EXPLORE_TABLES, *EXPLORE_WIDER_TABLES]:
    explore_table = explore_comparison(labels)
    if explore_table is None:
        print("run the commands above (and those in docs/experiments.md) to compare:", ", ".join(labels))
        continue
    display(explore_table.rename(columns=columns).round(3))
    print_targets(explore_table)
explore_probe = RESULTS_DIR / "early_purchases_explore_options_class.csv"
if explore_probe.exists() and early_path.exists():  # the same states, temperature 1, seeds pooled
    probed = pd.concat([pd.read_csv(early_path), pd.read_csv(explore_probe)]).query("temperature == 1.0")
    probed["policy"] = probed["policy"].str.replace(r"_seed\d+$", "", regex=True).map(PROBE_LABELS)
    display(early_purchase_summary(probed.dropna(subset=["policy"])).drop(columns="states").round(3))

# %% [markdown]
# **What this says.** Drawing the values did not move the purchase. After 60 iterations the seeds end where the
# held recipe ends, with about the same option rates, and their training batches succeed less often (a drawn value
# is more often a wrong one than the missing one); after 120 they end a little above it, by about the seeds' spread,
# and still far from the target, and that difference is on the goals that ask for no option, not on those that ask
# for some (the success columns with and without options). At the probe's states they buy at once and select the missing value about as often
# as the held seeds do. The rollouts now try the second value in a share of the one-short
# states, and the draw that hits it pays, yet that click did not become the policy's own in 60 iterations: a uniform
# draw hits the requested value once in as many tries as the option has values, and the trajectory-level
# regression spreads that one success's credit over every token of the episode.
#
# From the 2.3M π_refs the draws do no better. After 60 iterations the seeds end below the held recipe's from the
# second π_ref (fewer option clicks) and a little above it, within the seeds' spread, from the first; from both their
# training batches succeed less often. From the second, continued to 120 iterations, they end below the held
# recipe's mean and within its seeds' range, their spread narrower. Section 6's seen/unseen measurement of that run
# says what the draws changed: more unseen goals on which π_ref's samples disagree, and no more of them converted.

# %% [markdown]
# ### Pages that say which option is selected
#
# On two-option goals the best runs above often click one value twice or stop after one: WebShop's item page looks
# the same after an option click, and only the policy's memory of its actions says what is selected.
# `PolicyConfig.show_selected_options` writes the selection beside each option's name (`size (selected: large)`;
# the rules and the reward are unchanged). A π_ref of its own imitates the same sloppy demonstrator on such pages,
# and the best recipe above runs from it (its own stage 1, the same settings):
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --show-selected-options
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5_selected --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True beta2=0.03 \
#     --out runs/apo_selected_gsv1024_b03_class --name apo_selected_gsv1024_b03 --save
# ```

# %%
def table_with_own_refs(runs, labels):
    """Each committed run's π_ref row (from its own seeds table: each rendering or retrain has its own π_ref)
    followed by its A*PO row, gains over that π_ref."""
    rows = {}
    for name, tables in runs.items():
        own_ref = tables["seeds"].query("objective == 'pi_ref'").iloc[0]
        rows[f"{labels[name]}: π_ref"] = pd.Series({**own_ref[list(columns)].astype(float),
                                                    "invalid actions (test)": own_ref["test_invalid_rate"]})
        rows[f"{labels[name]}: A*PO"] = seeds_summary(tables, own_ref)
    order = rows[f"{labels[name]}: A*PO"].index  # seeds_summary's columns, π_ref's rows leave gaps
    return pd.DataFrame(rows).T[order].astype(float).rename(columns=columns)


SUCCESS_AND_INVALID = [("success", "sampled success, training batches (10-it. mean)", False),  # plot_seed_curves
                       ("invalid_rate", "invalid actions in the rollouts (10-it. mean)", False)]


def compare_own_refs(labels, title, figure_name, least=1):
    """The committed runs among ``labels``, each under its own π_ref (``table_with_own_refs``); their seeds' val
    success, sampled success and invalid actions in one figure; the target's verdict per run. Needs at least
    ``least`` committed runs, else says so."""
    runs, _ = committed_runs(labels)
    if len(runs) < least:
        print("run the commands above to compare")
        return
    table = table_with_own_refs(runs, labels)
    display(table.round(3))
    plot_seed_curves(runs, labels, SUCCESS_AND_INVALID, window=10, title=title, figure_name=figure_name)
    print_targets(table.dropna(subset=["gain over π_ref"]))


SELECTED_TABLES = {"apo_sloppy_gsv1024_b03": "WebShop's pages", "apo_selected_gsv1024_b03": "pages show the selection"}
compare_own_refs(SELECTED_TABLES, "β₂ = 0.03, goals whose rewards vary: item pages that show the selection",
                 "04_selected", least=2)

# %% [markdown]
# **What this says.** Showing the selection helps imitation, not RL. The π_ref imitated on such pages starts well
# above the other one, as high as the best A*PO run from WebShop's pages, and clicks an option on more of the goals
# that ask for one. A*PO from it loses test success in every seed, and its invalid actions rise (right panel).
# Replaying its greedy episodes shows what the invalid actions are: option values that are not on the page (a colour
# asked for by the instruction, clicked on an item that does not offer it), so the item chosen was already the
# wrong one. The limit is again what this model reads on the
# results and item pages, not what the page tells it; the rendering is not the lever for the target.

# %% [markdown]
# On these pages the second value is no longer a matter of memory: after one click the page reads
# `size (not selected)`. So they are where drawing the missing value (`explore_options`, above) has the best chance,
# and the held recipe, which keeps the greedy search from drifting, had not been run from them. The same π_ref
# command (its folder was missing here, so it was retrained: its own row below), then the held recipe without and
# with the draws, and the early-purchase probe from its states:
#
# ```
# python -m apo_helpers train --profile class --ref runs/pi_ref_class_skip_options_0.5_selected --seeds 0 1 2 \
#     --iterations 60 --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_selected_gsvk1024_b03_class --name apo_selected_gsvk1024_b03 --save
# # the same with explore_options=0.3: --out runs/apo_selected_gsvko03_b03_class --name apo_selected_gsvko03_b03
# python -m apo_helpers decisions --profile class --states-from runs/pi_ref_class_skip_options_0.5_selected \
#     --models pi_ref=runs/pi_ref_class_skip_options_0.5_selected \
#              kl60_seed0=runs/apo_selected_gsvk1024_b03_class/seed_0/policy ... (seeds 1, 2) \
#              xo60_seed0=runs/apo_selected_gsvko03_b03_class/seed_0/policy ... (seeds 1, 2) \
#     --early-purchases --temperatures 1.0 --save --name selected
# ```

# %%
SELECTED_HELD_TABLES = {"apo_selected_gsvk1024_b03": "selection shown, held recipe",
                        "apo_selected_gsvko03_b03": "selection shown, held + explore_options"}
compare_own_refs(SELECTED_HELD_TABLES,
                 "item pages that show the selection: the held recipe, with and without drawn option values",
                 "04_selected_explore")
selected_probe = RESULTS_DIR / "early_purchases_selected_class.csv"
if selected_probe.exists():
    selected_probed = pd.read_csv(selected_probe).query("temperature == 1.0")
    selected_probed["policy"] = selected_probed["policy"].str.replace(r"_seed\d+$", "", regex=True).map(PROBE_LABELS)
    display(early_purchase_summary(selected_probed).drop(columns="states").round(3))

# %% [markdown]
# **What this says.** Stating on the page what is still missing does not make the missing click learnable either.
# From this π_ref the held recipe ends at or below where it started, and the drawn values bring it back to about
# π_ref's level. The held seeds click an option on no more goals than π_ref; with the drawn values they click one on
# a few more, with the values mostly wrong: neither takes up the option habit that the seeds from WebShop's pages
# learned (the options-clicked and every-option-right columns against π_ref's). At the probe's states, this π_ref buys at once even more readily than the one on
# WebShop's pages, and the seeds move only a little of that to the missing value. The page can say `not selected`;
# the tiny model still has to read which requested value belongs there and click it, and its samples seldom do.

# %% [markdown]
# ### A wider model
#
# Every π_ref above is the profile's tiny Llama of 1.1M parameters. `train-ref --model` resizes it for a π_ref of
# its own: at hidden size 192 (feed-forward 576, the same 4 layers and heads) it has 2.3M parameters, at hidden size
# 256 (feed-forward 768) 3.9M, and each imitates the same sloppy demonstrations for the same steps. An A*PO
# iteration costs about five times as much at 3.9M on the CPU, so there stage 1 covers 512 goals instead of 1,024;
# the rest is the held recipe:
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --model hidden_size=192 intermediate_size=576
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_class --name apo_sloppy_h192_gsvk1024_b03 --save
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --model hidden_size=256 intermediate_size=768
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_256_intermediate_size_768 \
#     --set vstar_goals=512 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h256_gsvk512_b03_class --name apo_sloppy_h256_gsvk512_b03 --save
# ```
#
# Two more 2.3M π_refs come from `train-ref ... --seed 1` and `--seed 2` (other initial weights and batch order),
# a second 3.9M π_ref from `--seed 1`, and the held recipe from each as from the first of its size; from the second
# 3.9M π_ref also with stage 1 on 1,024 goals, as the smaller π_refs practise (`apo_sloppy_h256_seed1_gsvk1024_b03`,
# the commands in `docs/experiments.md`). The table sets them beside the held recipe from three 1.1M-parameter π_refs of the same
# demonstrations, each row pair with its own π_ref; the figure draws each seed of the first 2.3M run, of the first
# 3.9M run and of one 1.1M run.

# %%
WIDER_TABLES = {"apo_sloppy_gsvk1024_b03_rerun": "1.1M, π_ref retrained in place",
                "apo_sloppy_seed1_gsvk1024_b03": "1.1M, π_ref seed 1",
                "apo_sloppy_seed2_gsvk1024_b03": "1.1M, π_ref seed 2",
                "apo_sloppy_h192_gsvk1024_b03": "2.3M",
                "apo_sloppy_h192_seed1_gsvk1024_b03": "2.3M, π_ref seed 1",
                "apo_sloppy_h192_seed2_gsvk1024_b03": "2.3M, π_ref seed 2",
                "apo_sloppy_h256_gsvk512_b03": "3.9M",
                "apo_sloppy_h256_seed1_gsvk512_b03": "3.9M, π_ref seed 1",
                "apo_sloppy_h256_seed1_gsvk1024_b03": "3.9M, π_ref seed 1, stage 1 on 1,024 goals"}
wider_runs, _ = committed_runs(WIDER_TABLES)
if "apo_sloppy_h256_gsvk512_b03" in wider_runs:
    wider_table = table_with_own_refs(wider_runs, WIDER_TABLES)
    display(wider_table.round(3))
    plot_seed_curves({name: wider_runs[name] for name in ("apo_sloppy_seed1_gsvk1024_b03", "apo_sloppy_h192_gsvk1024_b03",
                                                          "apo_sloppy_h256_gsvk512_b03") if name in wider_runs},
                     WIDER_TABLES, SUCCESS_AND_INVALID, window=10,
                     title="the held recipe from a 1.1M, a 2.3M and a 3.9M-parameter π_ref", figure_name="04_wider")
    print_targets(wider_table.dropna(subset=["gain over π_ref"]))
else:
    print("run the commands above to compare")

# %% [markdown]
# **What this says.** The first 3.9M π_ref starts lower than every 1.1M one: it copies the sloppy demonstrator's habit of
# skipping the options more faithfully (its options-clicked column), which is a worse policy and more room for RL.
# From it the held recipe gains more on average than from any 1.1M π_ref in the same 60 iterations, and every seed
# clicks options on more of the goals that ask for some; one seed reaches the target's +10 points. But the seeds
# spread several times as widely as the 1.1M runs', another seed gains about nothing, and the mean stays short of
# the target. The gains again come from the option habit, with the values still often wrong; only the best seed
# also gains on the goals that ask for no option. Its stage 1 kept about half as many goals to practise (512
# sampled, not 1,024, for the cost), and the sampled success of its training batches is still climbing at iteration
# 60 (middle panel). The second 3.9M π_ref starts lower still, and its seeds agree closely: each takes up the option
# habit about as far as the first's seeds did on average, none gains much on the goals that ask for no option, and
# their mean gain is a little under the first's. The first's wide spread over seeds belonged to that π_ref, not to
# the size. Stage 1 on 1,024 goals from the second 3.9M π_ref keeps twice as many goals to practise, about as many
# as from the smaller π_refs, and its seeds end a little below those that practised half as many: the number of
# practised goals is not what holds the 3.9M gain down at 60 iterations. Continued to 120 iterations (the README's
# `apo_sloppy_h256_seed1_gsvk1024_b03_it120`) they end within a point of every other run from that π_ref.
#
# The 2.3M π_refs, with the full 1,024 stage-1 goals, sit between the two: all three start among the 1.1M π_refs,
# their seeds agree with each other about as closely as the 1.1M runs' do, and the mean gain from each lies above
# every 1.1M π_ref's, as high as the first 3.9M one's at most. The three 2.3M π_refs' gains are close to each other: at
# this size the gain is not one π_ref's luck. The first two's seeds click options about as often as those from the
# 1.1M π_ref retrained in place, the third's less often, from a π_ref that clicked them least (the options
# columns); all hold the goals that ask for no option about where their π_ref had them or a little above. Greedy
# val success settles within the first 20 iterations for the first 2.3M π_ref, as at 1.1M (left panel). Continued to 120
# iterations (the README's tables `apo_sloppy_h192_gsvk1024_b03_it120`, `apo_sloppy_h192_seed1_gsvk1024_b03_it120`
# and `apo_sloppy_h192_seed2_gsvk1024_b03_it120`), the 2.3M π_refs' seeds gain about a point more on average (the
# third's two, as its seeds took up the option habit late), where the 1.1M π_refs' held seeds about doubled their
# gain in their second 60 iterations; one seed of the second 2.3M π_ref passes the target's ten points there, and
# its seeds spread several times as widely as at 60 iterations. The third's seeds run on to 180 iterations
# (`apo_sloppy_h192_seed2_gsvk1024_b03_it180`) end a point and a half below their 120. So the gain grows from
# 1.1M to 2.3M parameters and stops there: over two 3.9M π_refs it is about the 2.3M π_refs' gain (the README's
# ref-spread table), and it stays short of the target at every size measured. A larger model is a lever of a few
# points, not a recipe that meets the bar.

# %% [markdown]
# ### Where the purchases still fail: above the budget
#
# Every lever above aimed at the item page. The failure taxonomy (notebook 06) says where the rest of the failures
# lie. `analysis.purchases` plays π_ref and each seed's final policy greedily on the test goals, labels each
# episode with its failure class and reads what the last results page offered: the goal's own product
# (`target_listed`), and any product of the goal's type within its budget (`in_budget_listed`). An `over_budget`
# purchase made while such a product stood on the same page is a results-page choice that one other click could
# have changed:
#
# ```
# python -m apo_helpers purchases --profile class --save --run runs/apo_sloppy_h192_gsvk1024_b03_class \
#     runs/apo_sloppy_h192_gsvko03_b03_class runs/apo_sloppy_h192_gsvkr03_b03_class \
#     runs/apo_sloppy_h192_gsvkr03h_b03_class
# python -m apo_helpers purchases --profile class --probe --save --run runs/apo_sloppy_h192_gsvk1024_b03_class \
#     runs/apo_sloppy_h192_gsvko03_b03_class runs/apo_sloppy_h192_gsvkr03h_b03_class
# ```
#
# The second command holds the state fixed, as section 6's probe does at the item page: at each results page where
# π_ref's greedy episode bought above the budget while an affordable product of the goal's type was listed, every
# policy answers 16 times at temperature 1 and once greedily, and the table gives how often it opens such a
# product, beside what a uniform draw over the page's products would give.
#
# The third of those runs tries that click: `explore_results=0.3` answers 30% of the results-page turns with a click
# on one of the page's products drawn uniformly (`agents.product_clicks`; the draw knows nothing of the goal, not
# its budget, not its words), in stage 1 and in the rollouts, with the held recipe from the first 2.3M π_ref
# (`docs/experiments.md` gives its commands). Two of its seeds broke (below), their results-page replies clicks that name no
# product (`click[]`, `click[item ]`);
# the run after it is the same with `hold_failed_draws=True`: a trajectory with a drawn turn whose return fell
# below V* is regressed onto an advantage of 0, held at π_ref, instead of pushed down, while a draw that beat V*
# trains as usual (stage 1 is the same, its cache reused).

# %%
from apo_helpers.analysis.failures import CLASSES, plot_failure_classes
from apo_helpers.analysis.purchases import choice_summary, purchase_summary

RESULTS_EXPLORE_TABLES = {"apo_sloppy_h192_gsvk1024_b03": "2.3M: held recipe, 60 it.",
                          "apo_sloppy_h192_gsvko03_b03": "2.3M: held + explore_options, 60 it.",
                          "apo_sloppy_h192_gsvkr03_b03": "2.3M: held + explore_results, 60 it.",
                          "apo_sloppy_h192_gsvkr03h_b03": "2.3M: held + explore_results, failed draws held, 60 it."}
results_explore = explore_comparison(RESULTS_EXPLORE_TABLES)
if results_explore is None:
    print("run the commands in docs/experiments.md to compare:", ", ".join(RESULTS_EXPLORE_TABLES))
else:
    display(results_explore.rename(columns=columns).round(3))
    print_targets(results_explore)
purchases_path = RESULTS_DIR / "purchases_class.csv"
if purchases_path.exists():
    played = pd.read_csv(purchases_path)  # the file holds runs from other π_refs too: keep the four compared here
    played = played[played["run"].str.removesuffix("_class").isin(RESULTS_EXPLORE_TABLES)]
    purchases = purchase_summary(played)
    assert purchases.xs("pi_ref", level="who").nunique().le(1).all(), "the four runs should share one π_ref"
    labels = {(run, who): "2.3M π_ref" if who == "pi_ref" else RESULTS_EXPLORE_TABLES.get(run.removesuffix("_class"), run)
              for run, who in purchases.index}
    purchases = purchases.set_axis([labels[i] for i in purchases.index]).groupby(level=0, sort=False).first()
    display(purchases.round(1))
    classes = [c for c in CLASSES if c in purchases]
    plot_failure_classes(purchases[classes].div(purchases[classes].sum(axis=1), axis=0), "04_purchases",
                         title="How the greedy test episodes end, π_ref and its seeds (mean)")
    plt.show()
else:
    print("run the command above: python -m apo_helpers purchases ... --save")
choices_path = RESULTS_DIR / "results_choices_class.csv"
if choices_path.exists():
    choices = choice_summary(pd.read_csv(choices_path))
    choices.index = [f"{RESULTS_EXPLORE_TABLES.get(run.removesuffix('_class'), run)}: {policy}"
                     for run, policy in choices.index]
    display(choices.round(3))
else:
    print("run the command above: python -m apo_helpers purchases --probe ... --save")

# %% [markdown]
# **What this says.** The held recipe's gain, with or without drawn option values, comes entirely from the goals
# whose purchase lacked an option: the seeds leave as many purchases above the budget, and as many lacking an
# attribute, as π_ref makes, and in most of the purchases above the budget a product of the goal's type within the
# budget stood on the same results page (the last column). The results-page choice is as untouched by RL as
# π_ref's query was (section 5): its samples almost never try another product.
#
# Drawing the product there gives the samples what they lacked. Stage 1 with `explore_results` finds a success on
# far more of its goals than without it, more than drawing option values did (`docs/experiments.md` has the count), and keeps
# more of them to practise. The run breaks all the same: two of the three seeds drift from π_ref in the second half
# of the run and their replies turn invalid, and the seed that holds gains about what the held recipe gains, with no
# fewer purchases above the budget. A drawn product is a click π_ref almost never samples; where it fails, the
# regression can push those unlikely tokens further down at little cost, and the weights they share with every
# other reply move with them (a reading the runs fit, not one measured here).
#
# Holding the failed draws at π_ref removes the break: every seed stays close to π_ref and ends above it. It does
# not teach the choice: the seeds buy above the budget as often as π_ref, with an affordable product on the same
# page as often, and their gain again comes from the options, a little smaller than the held recipe's.
#
# The probe says the same at fixed states. At those results pages π_ref opens an affordable product far less often
# than a uniform draw over the page would: its choice leans toward the product above the budget (a reading: the
# demonstrator chose among the products within the budget, and π_ref learned which titles match better than which
# prices fit). On average every run's seeds open one more often than π_ref, in samples and greedily, the held
# recipe's the most; the run that drew products moved it least. Whether the draws that paid
# were too few or the rule too hard for this model (comparing each price with the budget is, like the option value,
# reading a number off the instruction and matching it on the page), these runs do not tell.


# %% [markdown]
# ### Renewing π_ref and V*: re-anchoring every 60 iterations
#
# Every run above regresses toward the π_ref it started from, and judges each return against a V* measured once,
# from π_ref's samples, before the first iteration. As the policy improves, both grow stale: a goal it now solves
# every time is still practised, the bar it is judged by is π_ref's, and a goal it has brought within reach since was
# never selected. Re-anchoring starts a second run from each seed's final policy as that seed's π_ref: stage 1
# samples the policy on the same 1,024 goals and keeps those whose rewards vary for it, and the regression holds the
# new run to it instead of to the first π_ref. `train --ref` takes the folder per seed (`{seed}` in the path); the
# policy folder's `lineage.json` names the first π_ref, which stays the table's π_ref row, so the gain is measured
# from where the first run started:
#
# ```
# python -m apo_helpers vstar --profile class --ref runs/apo_sloppy_h192_gsvk1024_b03_class/seed_0/policy \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03   # seed_1, seed_2 alike
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref 'runs/apo_sloppy_h192_gsvk1024_b03_class/seed_{seed}/policy' \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_r2_class --name apo_sloppy_h192_gsvk1024_b03_r2 --save
# ```
#
# Each further round is the same two commands with the last round's folder as `--ref` (`..._r2_class/seed_{seed}`
# gives `_r3`, `_r3_class/seed_{seed}` gives `_r4`). The table sets the rounds beside the same 60-iteration run
# continued from its checkpoints to 120 with its first π_ref and V*; the figure draws each seed of each, a round's
# iterations counted after those of the rounds before it. Its KL panel is to each run's own π_ref: a re-anchored
# seed starts again from zero.

# %%
REANCHOR_TABLES = {"apo_sloppy_h192_gsvk1024_b03": "2.3M: held recipe, 60 it.",
                   "apo_sloppy_h192_gsvk1024_b03_it120": "2.3M: held recipe, 120 it.",
                   "apo_sloppy_h192_gsvk1024_b03_r2": "2.3M: held recipe, 60 it., re-anchored once, 60 it.",
                   "apo_sloppy_h192_gsvk1024_b03_r3": "2.3M: held recipe, 60 it., re-anchored twice, 60 it. each",
                   "apo_sloppy_h192_gsvk1024_b03_r4": "2.3M: held recipe, 60 it., re-anchored 3 times, 60 it. each"}


def lineage_iterations(trained):
    """Per seed, the iterations trained by the runs before this one (a re-anchored run's lineage; 0 for a run that
    started from π_ref, whose older tables have no such column)."""
    return trained.get("ref_iterations", pd.Series(0, index=trained.index)).fillna(0)


def after_earlier_runs(tables):
    """A run's curves with its iterations counted after those of the runs before it."""
    trained = tables["seeds"].query("objective != 'pi_ref'")
    before = int(lineage_iterations(trained).iloc[0])
    return {part: table.assign(iteration=table["iteration"] + before) if part != "seeds" else table
            for part, table in tables.items()}


reanchor_runs, reanchor_start = committed_runs(REANCHOR_TABLES)
if "apo_sloppy_h192_gsvk1024_b03_r2" in reanchor_runs:
    reanchor_table = runs_summary(reanchor_runs, REANCHOR_TABLES, reanchor_start)
    display(reanchor_table.rename(columns=columns).round(3))
    print_targets(reanchor_table)
    curves = {name: after_earlier_runs(tables) for name, tables in reanchor_runs.items()
              if name != "apo_sloppy_h192_gsvk1024_b03"}  # its 60 iterations are the 120-iteration run's first half
    plot_seed_curves(curves, REANCHOR_TABLES,
                     [*SUCCESS_AND_INVALID, ("kl", "KL to the run's own π_ref (10-it. mean)", False)], window=10,
                     title="One run continued, or re-anchored every 60 iterations", figure_name="04_reanchor")
else:
    print("run the commands above to compare:", ", ".join(REANCHOR_TABLES))

# %% [markdown]
# **What this says.** Renewing π_ref and V* did what 60 more iterations toward the first π_ref did not: the
# re-anchored seeds end higher than the continued ones, each of them, and agree with each other about as closely.
# Stage 1 from the seeds' policies kept about as many goals to practise as from π_ref, but other ones: goals the
# first run had learned to solve every time dropped out, goals it had brought within reach came in, so the second
# run's training batches succeed less often than the continued run's (second panel): it practises harder goals. The
# re-anchored seeds' KL starts again from zero and stays below the continued run's (right panel); their invalid
# replies stay rare on test. Their purchases lack an option less often than after the first 60 iterations and go
# above the budget a little less often (`docs/experiments.md` gives the counts): the gain still comes mostly from the item page.
#
# The rounds do not keep adding. The second re-anchoring adds less than the first, for the largest mean gain from
# any π_ref in this notebook, and the third ends lower on test than the second while its val success stays where
# the second's was: each round's stage 1 keeps fewer goals whose rewards vary, the later rounds' rollouts make more
# invalid replies (third panel), and after two rounds the runs move around a plateau short of the target (printed)
# rather than up. Whether the first round's gain holds over the other 2.3M π_refs, these runs do not tell (the
# "Not tried yet" of `docs/experiments.md`).

# %% [markdown]
# ### Re-anchoring every 30 iterations
#
# Renewing π_ref and V* paid once and then stalled; does renewing them more often pay more? The same chain with
# rounds of 30 iterations (`--iterations 30`), round 1 from π_ref (`..._e30`), each later round from the last one's
# seeds (`..._e30_r2` from `..._e30_class/seed_{seed}`, and so on), against the 60-iteration rounds and the run that
# never renews. The figure puts every round's test success where its lineage's iterations end: the mean over seeds,
# the band from the lowest to the highest seed, π_ref at 0 and the target (+10 points) dashed.

# %%
SCHEDULES = {"never (one run, 60 and 120 it.)": ["apo_sloppy_h192_gsvk1024_b03", "apo_sloppy_h192_gsvk1024_b03_it120"],
             "every 60 iterations": ["apo_sloppy_h192_gsvk1024_b03", *(f"apo_sloppy_h192_gsvk1024_b03_r{n}"
                                                                      for n in (2, 3, 4))],
             "every 30 iterations": ["apo_sloppy_h192_gsvk1024_b03_e30", *(f"apo_sloppy_h192_gsvk1024_b03_e30_r{n}"
                                                                          for n in (2, 3, 4))]}


def test_success_by_iterations(names):
    """Each committed run's seeds' test success, and its gain over the lineage's π_ref, at the iterations its
    lineage has trained (π_ref's at 0)."""
    runs, start = committed_runs(names)
    rows = [{"iteration": 0, "test_success": start["test_success"]}] if runs else []  # greedy: one value
    for tables in runs.values():
        trained = tables["seeds"].query("objective != 'pi_ref'")
        points = trained.assign(iteration=trained["iterations"] + lineage_iterations(trained))
        rows += points[["iteration", "seed", "test_success"]].to_dict("records")
    points = pd.DataFrame(rows, columns=["iteration", "seed", "test_success"]).astype({"iteration": int})
    return points.assign(gain=points["test_success"] - (start["test_success"] if runs else 0.0))


def plot_by_iterations(point_sets, column, target, ylabel, title, figure_name, fmt=lambda label: "o-", markers=None):
    """Each lineage's ``column`` against iterations since π_ref (the mean over seeds, the band from the lowest to the
    highest seed) with the target dashed, and ``markers`` (label -> (a lineage's label, a table of ``iteration`` and
    ``column``)) as single policies in that lineage's colour; saves the figure and returns the table of means."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bands = {label: plots.seed_band(ax, points, column, label=label, fmt=fmt(label), alpha=0.15)
             for label, points in point_sets.items()}
    colors = {label: line.get_color() for label, line in zip(point_sets, ax.lines)}
    for (label, (lineage, points)), shape in zip((markers or {}).items(), "sD^v"):
        ax.plot(points["iteration"], points[column], shape, color=colors[lineage], markersize=9,
                markerfacecolor="none", label=label)
    ax.axhline(target, color="gray", linestyle="--", label="target: π_ref + 10 points")
    ax.set_ylabel(ylabel); ax.set_xlabel("iterations since π_ref"); ax.set_title(title); ax.legend(fontsize=8)
    plots.save(fig, figure_name)
    plt.show()
    return pd.DataFrame({label: band["mean"] for label, band in bands.items()}).rename_axis("iterations").round(3)


schedule_points = {label: test_success_by_iterations(names) for label, names in SCHEDULES.items()}
if len(schedule_points["every 30 iterations"]) > 1:
    start_success = schedule_points["every 30 iterations"].query("iteration == 0")["test_success"].iloc[0]
    display(plot_by_iterations(schedule_points, "test_success", start_success + 0.10, "greedy test success",
                               "Renewing π_ref and V*: how often", "04_reanchor_schedule"))
else:
    print("run the commands above to compare:", ", ".join(SCHEDULES["every 30 iterations"]))


# %% [markdown]
# **What this says.** Renewing π_ref and V* every 30 iterations gets to the 60-iteration rounds' level in half the
# iterations, and no further. Stage 1 after 30 iterations keeps more goals to practise than after 60 (the policy
# solves fewer of them every time yet), and the second round's seeds agree closely; from then on both schedules
# move around the same level, below the dashed target, while val success stays flat. How often the anchor is
# renewed sets how fast the runs get there, not where they stop; what stops them is what the rest of this notebook
# found: the option values and the budget, numbers read off the instruction and matched on the page.

# %% [markdown]
# ### Re-anchoring from another π_ref
#
# Every re-anchored run so far starts from one π_ref, the first of the three 2.3M ones, and the held recipe's gain
# from those three differs by more than the seeds of one do. So the same 30-iteration chain from the second
# (`train-ref ... --seed 1`, the same demonstrations, other initial weights and batch order):
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --model hidden_size=192 intermediate_size=576 --seed 1
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 30 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_seed_1 \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_seed1_gsvk1024_b03_e30_class --name apo_sloppy_h192_seed1_gsvk1024_b03_e30 --save
# ```
#
# then each round's stage 1 and 30 iterations from the last round's seeds as above (`..._seed1_..._e30_r2`, `_r3`).
# The two π_refs start from different success rates, so the figure draws the gain over each lineage's own π_ref:
# the chain that renews every 30 iterations beside the run that never does, for each π_ref.

# %%
REF_LINEAGES = {"first π_ref, never": SCHEDULES["never (one run, 60 and 120 it.)"],
                "first π_ref, every 30": SCHEDULES["every 30 iterations"],
                "second π_ref, never": ["apo_sloppy_h192_seed1_gsvk1024_b03", "apo_sloppy_h192_seed1_gsvk1024_b03_it120"],
                "second π_ref, every 30": ["apo_sloppy_h192_seed1_gsvk1024_b03_e30",
                                           *(f"apo_sloppy_h192_seed1_gsvk1024_b03_e30_r{n}" for n in (2, 3, 4))]}

lineage_points = {label: test_success_by_iterations(names) for label, names in REF_LINEAGES.items()}
if len(lineage_points["second π_ref, every 30"]) > 1:
    display(plot_by_iterations(lineage_points, "gain", 0.10, "test success − its π_ref's",
                               "Re-anchoring every 30 iterations, from two π_refs", "04_reanchor_refs",
                               fmt=lambda label: "o-" if label.startswith("first") else "s-"))
else:
    print("run the commands above to compare:", ", ".join(REF_LINEAGES["second π_ref, every 30"]))

# %% [markdown]
# **What this says.** From the second π_ref the chain does not rise the way it rose from the first. Its first round
# is the 60-iteration run's first 30 iterations, as from the first π_ref, and gains less; re-anchored, its seeds
# stay close together but level off below the line of the same π_ref's run that never renews, while from the first
# π_ref the renewed chain runs above its own. The table of means beside the figure gives the
# gains. What re-anchoring added from the first π_ref belongs to that π_ref more than to the method: over π_refs it
# is about the size of the spread between them, and no lineage here reaches the dashed target.

# %% [markdown]
# ### Averaging the seeds: one soup as every seed's next π_ref
#
# The three seeds of a run start from the same π_ref and stay close to it, so their weights can be averaged into one
# policy, a "model soup" (WARP merges policies RL-trained from one initialisation this way). Two uses of it: the soup
# itself as the run's final policy, evaluated greedily like any other, and the soup as every seed's next π_ref, a
# re-anchoring whose stage 1 is sampled once per round instead of once per seed. `average` writes the soup with the
# seeds' lineage, so a run from it is still measured against the first π_ref:
#
# ```
# python -m apo_helpers average runs/apo_sloppy_h192_gsvk1024_b03_class/seed_{0,1,2}/policy \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_soup
# python -m apo_helpers evaluate --profile class --agent runs/apo_sloppy_h192_gsvk1024_b03_soup --split test \
#     --name apo_sloppy_h192_gsvk1024_b03_soup --save             # and --split val --episodes 100, as runs evaluate
# python -m apo_helpers vstar --profile class --ref runs/apo_sloppy_h192_gsvk1024_b03_soup \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/apo_sloppy_h192_gsvk1024_b03_soup \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_soup_r2_class --name apo_sloppy_h192_gsvk1024_b03_soup_r2 --save
# ```
#
# The next round averages that run's seeds (`--out runs/apo_sloppy_h192_gsvk1024_b03_soup_r2_soup`) and trains
# `..._soup_r3` from it. Every run's soup is `<run>_soup`, evaluated the same way; those of the chain that
# re-anchors each seed on its own policy (`_r2`, `_r3`, `_r4` above) too. The figure draws both chains' seeds
# (the mean and the band from the lowest to the highest seed) and their soups (markers) against the iterations
# since π_ref; the table sets each soup beside the mean of the seeds it averages, on test and on the first 100 val
# goals (the runs' own final evaluation).

# %%
SOUP_CHAINS = {"each seed its own π_ref": ["apo_sloppy_h192_gsvk1024_b03",
                                           *(f"apo_sloppy_h192_gsvk1024_b03_r{n}" for n in (2, 3, 4))],
               "every seed the soup": ["apo_sloppy_h192_gsvk1024_b03",
                                       *(f"apo_sloppy_h192_gsvk1024_b03_soup_r{n}" for n in (2, 3))]}
evaluations_path = RESULTS_DIR / "evaluations_class.csv"


def soups_of(names):
    """Each committed run's soup (``<run>_soup`` in evaluations_class.csv) beside the mean of the seeds it averages:
    test and val success at the iterations the run's lineage has trained."""
    evaluations = pd.read_csv(evaluations_path).query("k == 0") if evaluations_path.exists() else pd.DataFrame()
    rows = []  # val: the first 100 goals, which the runs' own final evaluation plays
    for name, tables in committed_runs(names)[0].items():
        soup = evaluations.query("agent == @name + '_soup'").set_index("split")["success_rate"] if len(evaluations) else []
        if "test" not in soup:
            continue
        trained = tables["seeds"].query("objective != 'pi_ref'")
        rows.append({"run": name, "iteration": int((trained["iterations"] + lineage_iterations(trained)).iloc[0]),
                     "seeds (test)": trained["test_success"].mean(), "soup (test)": soup["test"],
                     "seeds (val)": trained["val_success"].mean(), "soup (val)": soup.get("val")})
    return pd.DataFrame(rows)


soup_points = {label: test_success_by_iterations(names) for label, names in SOUP_CHAINS.items()}
soups = {label: soups_of(names) for label, names in SOUP_CHAINS.items()}
if len(soup_points["every seed the soup"]) > 4 and all(len(table) for table in soups.values()):
    start_success = soup_points["every seed the soup"].query("iteration == 0")["test_success"].iloc[0]
    markers = {f"{label}: soup": (label, table.rename(columns={"soup (test)": "test_success"}))
               for label, table in soups.items()}
    display(plot_by_iterations(soup_points, "test_success", start_success + 0.10, "greedy test success",
                               "Re-anchoring on each seed's policy or on the seeds' soup", "04_soups",
                               markers=markers))
    display(pd.concat(soups.values()).drop_duplicates("run").set_index("run").round(3))  # seeds: their mean
else:
    print("run the commands above to compare:", ", ".join(SOUP_CHAINS["every seed the soup"][1:]))

# %% [markdown]
# **What this says.** The seeds' weights average without harm: on test every soup plays within a point or two of
# the mean of the seeds it averages, above it in most rounds, and on the val goals the soups of the rounds whose
# seeds re-anchored on their own policies play a few points above theirs (the table). That is one policy per run at
# no training cost, not a step to the target: no soup reaches the dashed line, and the best of them sits where the
# best seed of its round does.
# As every seed's next π_ref the soup does no better than each seed's own policy: the chain re-anchored on soups
# stays at or below the other at each round, and its third round's stage 1 keeps fewer goals whose rewards vary
# than any seed's of the other chain. A soup averages away the seeds' differences, and with them some of the goals
# one seed had brought within reach and another had not; what the rounds converge to is the same plateau.

# %% [markdown]
# ### Keeping what π_ref solves: `keep_solved`
#
# Every run above loses some of the test goals its first π_ref solves greedily: notebook 07 section 3 replays the
# policies goal by goal and counts, beside the goals each gains, the goals it loses. `keep_varying` drops the
# stage-1 goals on which every sample succeeded, so nothing in a batch asks the policy to keep doing what π_ref does
# right. `keep_solved=0.5` puts half of them back (a fixed draw from the cached table, so stage 1 is not sampled
# again): there r = V* = 1, A*PO's target asks for no change, and the regression holds the log-ratio to π_ref at 0.
# The third round of the chain that re-anchors each seed on its own policy, with and without them, from the same
# round-2 policies and stage-1 tables:
#
# ```
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref "runs/apo_sloppy_h192_gsvk1024_b03_r2_class/seed_{seed}/policy" \
#     --set vstar_goals=1024 keep_varying=True keep_solved=0.5 greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_r3_solved05_class --name apo_sloppy_h192_gsvk1024_b03_r3_solved05 --save
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_gsvk1024_b03_r3_solved05_class --save
# ```
#
# The table gives each run's seeds on test (mean, spread, gain over the first π_ref) and, from the per-goal
# outcomes, the test goals gained and lost per seed.

# %%
from apo_helpers.analysis.significance import gain_interval, gained_and_lost

outcomes_path = RESULTS_DIR / "goal_outcomes_class.csv"  # per-goal outcomes (notebook 07 section 3)
outcomes = pd.read_csv(outcomes_path) if outcomes_path.exists() else pd.DataFrame(columns=["policy"])


def ledger_table(labels):
    """The committed runs of ``labels`` on test (mean, spread, gain over their first π_ref) and, when their per-goal
    outcomes are committed, the test goals each seed gains and loses against π_ref and the gain's 95% interval
    (notebook 07 section 3); None while a run is missing."""
    runs, start = committed_runs(labels)
    if len(runs) < len(labels):
        return None
    table = runs_summary(runs, labels, start)[
        ["goals practised", "test_success", "gain over π_ref", "std over seeds", "lowest seed", "highest seed"]]
    if set(labels) | {start["ref"]} <= set(outcomes["policy"]):
        moved = {labels[name]: {**gained_and_lost(outcomes, name, start["ref"]),
                                "gain, 95% interval": "[{low:+.3f}, {high:+.3f}]".format(
                                    **gain_interval(outcomes, name, start["ref"]))}
                 for name in labels}
        table = table.join(pd.DataFrame(moved).T.astype({"gained": float, "lost": float}).rename(
            columns={"gained": "test goals gained per seed", "lost": "test goals lost per seed"}))
    return table.round(3)


SOLVED_RUNS = {"apo_sloppy_h192_gsvk1024_b03_r3": "round 3: goals whose rewards vary",
               "apo_sloppy_h192_gsvk1024_b03_r3_solved05": "round 3: and half the goals always solved"}
solved_table = ledger_table(SOLVED_RUNS)
if solved_table is not None:
    display(solved_table)
else:
    print("run the commands above to compare: apo_sloppy_h192_gsvk1024_b03_r3_solved05")

# %% [markdown]
# **What this says.** Putting the always-solved goals back moves neither side of the ledger by more than the
# noise: the seeds lose about as many of π_ref's solved test goals as the round without them, gain a few fewer, and
# the run ends inside the interval of the round it repeats. The goals lost are not lost for want of an anchor on
# the training goals π_ref already solves; holding the log-ratio at 0 there does not reach the unseen test goals
# that tip over when the rest of the policy moves.

# %% [markdown]
# ### Smoothing the end of a round: `lr_decay` and `ema`
#
# How the third round's seeds agree, goal by goal: for the test goals π_ref fails and those it solves, how many of
# the three seeds solve each (notebook 07 section 3's per-goal outcomes; `significance.seed_agreement`).

# %%
from apo_helpers.analysis.significance import seed_agreement

R3 = "apo_sloppy_h192_gsvk1024_b03_r3"
r3_start = committed_runs([R3])[1]
if r3_start is not None and {R3, r3_start["ref"]} <= set(outcomes["policy"]):
    display(seed_agreement(outcomes, R3, r3_start["ref"]))
else:
    print(f"run `python -m apo_helpers outcomes --profile class --run runs/{R3}_class --save` to count them")

# %% [markdown]
# Many of the goals the round gains, and every goal it loses, are solved by some seeds and not by others. If the
# last few batches' noise tips those borderline goals, the weights a round ends with are worth smoothing. Two ways,
# each the third round again from the same round-2 policies and stage-1 tables: `lr_decay=True` takes ever smaller
# steps (a cosine to 10% of the learning rate where the run ends), and `ema=0.95` keeps an exponential moving
# average of the weights, about the last 20 steps, which the evaluations play and `train` saves as the policy (the
# rollouts still sample the trained weights):
#
# ```
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref "runs/apo_sloppy_h192_gsvk1024_b03_r2_class/seed_{seed}/policy" \
#     --set vstar_goals=1024 keep_varying=True lr_decay=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_r3_decay_class --name apo_sloppy_h192_gsvk1024_b03_r3_decay --save
# python -m apo_helpers train ... --set ... ema=0.95 ... \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_r3_ema95_class --name apo_sloppy_h192_gsvk1024_b03_r3_ema95 --save
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_gsvk1024_b03_r3_decay_class \
#     runs/apo_sloppy_h192_gsvk1024_b03_r3_ema95_class --save
# ```
#
# The averaged round was also continued from its checkpoints to 120 iterations, in a copy of its folder
# (`--iterations 120 --resume`, `--name apo_sloppy_h192_gsvk1024_b03_r3_ema95_it120`).

# %%
SMOOTHED_RUNS = {R3: "round 3: the held recipe",
                 "apo_sloppy_h192_gsvk1024_b03_r3_decay": "round 3: learning rate decayed (lr_decay)",
                 "apo_sloppy_h192_gsvk1024_b03_r3_ema95": "round 3: weights averaged (ema=0.95)",
                 "apo_sloppy_h192_gsvk1024_b03_r3_ema95_it120": "round 3: weights averaged, 120 iterations"}
smoothed_table = ledger_table(SMOOTHED_RUNS)
if smoothed_table is not None:
    display(smoothed_table)
    for name in list(SMOOTHED_RUNS)[1:]:
        if {name, R3} <= set(outcomes["policy"]):
            paired = gain_interval(outcomes, name, R3)
            print(f"{SMOOTHED_RUNS[name]} against the held round 3: {paired['gain']:+.3f} "
                  f"[{paired['low']:+.3f}, {paired['high']:+.3f}]")
    played = [name for name in SMOOTHED_RUNS if name in set(outcomes["policy"])]
    if r3_start is not None and r3_start["ref"] in set(outcomes["policy"]):  # how the seeds agree, run by run
        display(pd.concat({SMOOTHED_RUNS[name]: seed_agreement(outcomes, name, r3_start["ref"]) for name in played}))
else:
    print("run the commands above to compare:", ", ".join(list(SMOOTHED_RUNS)[1:]))

# %% [markdown]
# **What this says.** Neither way of smoothing moves the round: each ends inside the interval of the held round
# it repeats, with about as many of π_ref's solved test goals lost and as many of its failed ones gained, and the
# seeds still split on the borderline goals as often (the second table). The averaged weights end level with the
# held round, and smaller last steps a little lower if anything; 60 more iterations of the averaged round add
# nothing. So the seeds do not disagree because of their
# last few batches: each seed's path over its 180 iterations of rollouts leaves it with a different set of
# borderline decisions, and that spread is what three seeds measure.

# %% [markdown]
# ### Paying successes more: `success_bonus`
#
# WebShop's reward is graded: a purchase with the right product and every attribute but the wrong option value
# still scores about 0.8, so a success stands only about 0.2 above that near miss, while the test bar counts
# successes alone. `success_bonus=b` trains on (r + b·[r = 1]) / (1 + b) in both stages: a perfect return stays 1,
# every other is scaled by 1 / (1 + b). At b = 1 the gap between a success and a near miss doubles, and the gaps
# among failures halve. Stage 1's cache keeps the sampled rewards, so V* is recomputed from the same samples
# (`vstar.training_reward`). The first round from the first 2.3M π_ref, and the third round from the same round-2
# policies as the held chain's, each again with the bonus:
#
# ```
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#     --set vstar_goals=1024 keep_varying=True success_bonus=1.0 greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_sb1_class --name apo_sloppy_h192_gsvk1024_b03_sb1 --save
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref "runs/apo_sloppy_h192_gsvk1024_b03_r2_class/seed_{seed}/policy" \
#     --set vstar_goals=1024 keep_varying=True success_bonus=1.0 greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_r3_sb1_class --name apo_sloppy_h192_gsvk1024_b03_r3_sb1 --save
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_gsvk1024_b03_sb1_class \
#     runs/apo_sloppy_h192_gsvk1024_b03_r3_sb1_class --save
# ```
#
# The bonus's own chain then re-anchors each seed on its first-round policy (stage 1 sampled again from it, as
# for the held chain's second round: `--ref "runs/apo_sloppy_h192_gsvk1024_b03_sb1_class/seed_{seed}/policy"`,
# `--name apo_sloppy_h192_gsvk1024_b03_sb1_r2`).
#
# The first table is the ledger, the second what the seeds do on the test goals that ask for options.

# %%
R1 = "apo_sloppy_h192_gsvk1024_b03"
BONUS_RUNS = {R1: "round 1: WebShop's graded reward",
              f"{R1}_sb1": "round 1: successes paid double (success_bonus=1)",
              f"{R1}_r2": "round 2: WebShop's graded reward",
              f"{R1}_sb1_r2": "round 2: successes paid double in both rounds",
              R3: "round 3: WebShop's graded reward",
              f"{R3}_sb1": "round 3: successes paid double (success_bonus=1)"}
bonus_runs, bonus_start = committed_runs(BONUS_RUNS)
if len(bonus_runs) == len(BONUS_RUNS):
    display(ledger_table(BONUS_RUNS))
    for bonus, held in ((f"{R1}_sb1", R1), (f"{R1}_sb1_r2", f"{R1}_r2"), (f"{R3}_sb1", R3)):
        if {bonus, held} <= set(outcomes["policy"]):
            paired = gain_interval(outcomes, bonus, held)
            print(f"{BONUS_RUNS[bonus]} against {BONUS_RUNS[held]}: {paired['gain']:+.3f} "
                  f"[{paired['low']:+.3f}, {paired['high']:+.3f}]")
    option_cells = [f"test_{key}" for key in OPTION_RATES]
    options_table = runs_summary(bonus_runs, BONUS_RUNS, bonus_start)[option_cells]
    options_table.loc["first π_ref"] = bonus_start[option_cells].astype(float)
    display(options_table.rename(columns=columns).round(3))
else:
    print("run the commands above to compare:", ", ".join(name for name in BONUS_RUNS if name not in bonus_runs))

# %% [markdown]
# **What this says.** Paying successes double moves no round beyond the noise: each paired interval against the
# round it repeats holds 0, the first round a little above its twin, the second level with it, the third a little
# below. The seeds click an option and choose the requested value about as often with the bonus as without. So
# the small lead of a success over a near miss is not what holds the value choice back: at β₂ = 0.03 even that lead
# asks for a log-ratio of several nats on the trajectories that choose right. What the tiny model lacks is reading
# the value off the instruction, and a larger reward for reading it does not teach that in these rounds.

# %% [markdown]
# ### Sampling V* more precisely: `vstar_samples=16`
#
# Every target r − V* leans on stage 1's estimate. V* of a goal comes from N = 8 samples of π_ref, and the goal
# keeps that value for the whole run: a goal whose samples happened to score high is pushed down each time it is
# drawn, one whose samples scored low is pushed up. Sixteen samples per goal halve the variance of that estimate, at
# twice stage 1's cost. The rounds below start from one more 2.3M π_ref: the first 2.3M π_ref's `train-ref`
# command run again, on an Intel Xeon where the first ran on an AMD EPYC (the README's Development section: the
# processor's vector kernels make it another policy), kept as its own folder; then the held recipe with N = 8 and
# with N = 16, three seeds each, at most four side by side with one thread each (six such trainers ran out of
# the machine's memory; the seeds tables' `peak_memory_mb` says what each took):
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --model hidden_size=192 intermediate_size=576
# #   (moved to runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_xeon)
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_xeon \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_class --name apo_sloppy_h192_xeon_gsvk1024_b03 --save
# #   the same with vstar_samples=16 added to --set: --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_n16_class
# #   --name apo_sloppy_h192_xeon_gsvk1024_b03_n16
# #   and with vstar_samples=16 filter_samples=8 (the same cached samples, goals kept by their first eight):
# #   --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_n16f8_class --name apo_sloppy_h192_xeon_gsvk1024_b03_n16f8
# #   and N = 8 with min_options=1 (only the goals that ask for an option):
# #   --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_opt1_class --name apo_sloppy_h192_xeon_gsvk1024_b03_opt1
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_xeon_gsvk1024_b03_class \
#     runs/apo_sloppy_h192_xeon_gsvk1024_b03_n16_class --save
# ```
#
# Notebook 07 shows the runs against this π_ref (section 1's table: `apo_sloppy_h192_xeon_gsvk1024_b03`,
# `apo_sloppy_h192_xeon_gsvk1024_b03_n16`, `_n16f8` and `_opt1`) and the paired intervals between them on the same test
# goals (section 3's comparisons); the stage-1 seconds and goals kept are in their seeds tables (`vstar_seconds`,
# `vstar_goals`).

# %% [markdown]
# **What this says.** Sixteen samples per goal cost twice stage 1's time and end lower, not higher: the paired
# interval (notebook 07 section 3) against the same π_ref's eight-sample round lies below zero or touches it, and
# the seeds click an option on fewer of the goals that ask for some (their seeds tables' `test_option_clicked`). Notebook 03 section 4 shows how V*'s spread shrinks with N; that spread is
# not what holds the gain down here. Stage 1 with more samples also keeps more goals, those whose rewards vary only
# in a larger sample, on which π_ref seldom errs or seldom succeeds. The third round separates the two: V* from the
# same sixteen samples, but the goals chosen by the eight-sample rule applied to each goal's first eight
# (`filter_samples=8`, so the practised set is about the N = 8 round's in size and kind). It ends about where N = 8
# ends and above N = 16 with all its goals (notebook 07 section 3's paired intervals), and its seeds click an option
# as often as the N = 8 seeds: the sharper V* changes little either way, and the goals the larger sample adds dilute
# the batches that teach the option habit. The reverse does not add: practising only the goals that ask for an
# option (`min_options=1`: the eight-sample goals that ask for none left out) ends where every varying goal ends,
# its seeds clicking an option about as often. From this π_ref the held recipe itself gains less than from the three
# 2.3M π_refs before it (the README's ref-spread table).

# %% [markdown]
# ### How soft V*'s maximum is: β₁
#
# V* is a soft maximum of a goal's N sampled rewards, and β₁ sets how soft (notebook 03 section 1's figure). At the
# paper's β₁ = 0.5 and rewards in [0, 1], V* sits just above the samples' mean, so the target r − V* is close to a
# centred advantage: the regression mostly lifts the samples that beat their goal's mean. A*PO's own derivation ties
# V* to the β of its target π* ∝ π_ref·exp(r/β), which is β₂ here; with β₁ = β₂ = 0.03 V* sits next to the best
# sample, almost every target is negative, and the regression mostly pushes down the samples that fall short of it.
# The samples do not depend on β₁ (the cache key leaves it out, and `stage1` recomputes V* from the cached rewards),
# so both settings reuse the Xeon π_ref's N = 8 table:
#
# ```
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_xeon \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 beta1=0.03 \
#     --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_v003_class --name apo_sloppy_h192_xeon_gsvk1024_b03_v003 --save
# #   the same with beta1=0.1: --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_v01_class
# #   --name apo_sloppy_h192_xeon_gsvk1024_b03_v01
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_xeon_gsvk1024_b03_v003_class \
#     runs/apo_sloppy_h192_xeon_gsvk1024_b03_v01_class --save
# ```
#
# **What this says.** Notebook 07 shows both runs in section 1's table and pairs them with β₁ = 0.5 on the same test
# goals in section 3. The consistent β₁ ends lowest, and its seeds gain about as many of the goals π_ref fails as
# the paper's β₁ does but lose several times as many of the goals it solves (section 3's goals gained and lost per
# seed): pushing down every sample that falls short of its goal's best pushes down each decision in it, the right
# ones too, since a trajectory's log-ratio is one sum over its turns. β₁ = 0.1 ends level with 0.5, in the first
# round and in the Xeon chain's second re-anchored round (the same `train` from `_r2`'s seeds with `beta1=0.1`,
# `--out runs/apo_sloppy_h192_xeon_gsvk1024_b03_r3_v01_class`, paired with `_r3` in notebook 07). The paper's
# decoupled β₁ is the right choice here; a softer one has nowhere to go, since V* at 0.5 is already almost the mean.

# %% [markdown]
# ### Re-anchoring from the Xeon π_ref
#
# The largest gain in this notebook comes from re-anchoring every 60 iterations, and only from the first 2.3M π_ref;
# from the second, the chain with rounds of 30 iterations did not rise. The π_ref of the last subsection gives the
# 60-iteration chain a second lineage: each seed of its held round (N = 8) becomes its own π_ref, stage 1 is sampled
# again from it, and 60 more iterations regress toward it, three seeds side by side with one thread each:
#
# ```
# python -m apo_helpers vstar --profile class --ref runs/apo_sloppy_h192_xeon_gsvk1024_b03_class/seed_0/policy \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03   # seed_1, seed_2 alike
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref 'runs/apo_sloppy_h192_xeon_gsvk1024_b03_class/seed_{seed}/policy' \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_xeon_gsvk1024_b03_r2_class --name apo_sloppy_h192_xeon_gsvk1024_b03_r2 --save
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_xeon_gsvk1024_b03_r2_class --save
# ```
#
# Notebook 07 shows the round against this π_ref (section 1's table: `apo_sloppy_h192_xeon_gsvk1024_b03_r2`), the
# paired interval against the round it continued (section 3's comparisons), and both rounds' gains with the first
# π_ref's chain in its figure of intervals; the README's ref-spread table sets the two lineages' re-anchored rounds
# side by side.

# %% [markdown]
# **What this says.** From this π_ref too, re-anchoring lifts the round it continues: every seed ends at or above
# where its held round ended, and the seeds click an option on more of the test goals that ask for one (their seeds
# tables' `test_option_clicked`). The lift is smaller than from the first π_ref, and the paired interval against the
# held round (notebook 07 section 3) still holds zero; the round's gain over this π_ref stays under the first
# π_ref's once re-anchored round, since its held round gained less to begin with. Renewing π_ref and V* repeats as a
# step from a second lineage of 60-iteration rounds, and the ref-spread table's row for those rounds shows that the
# step does not close the distance to the target from either π_ref.
#
# A second re-anchored round from this π_ref (each seed of that round as its own π_ref again, the same commands with
# `_r2_class` in `--ref` and `--out runs/apo_sloppy_h192_xeon_gsvk1024_b03_r3_class`) levels off where the first
# ended: the paired interval against it (notebook 07 section 3) centres near zero, where from the first π_ref the
# second round still added a little. The chain of this π_ref stops one round earlier than the first's, at a smaller
# gain, and the ref-spread table's row for twice re-anchored rounds sets the two lineages side by side.

# %% [markdown]
# ### β₂ and the goals practised, from the Xeon π_ref
#
# Re-anchoring lets a seed move further from its first π_ref one round at a time; a smaller β₂ lets it move further
# within a round, since the regression then asks for log-ratios of (r − V*)/β₂. From the 1.1M π_ref, before the
# search turn was held, β₂ below 0.03 bought nothing ("β₂ where there is something to learn" above). The held
# recipe from the Xeon π_ref at β₂ = 0.01, 0.003 and 0.001, and at β₂ = 0.03 on the goals whose samples disagree
# (`keep_disagreeing`, the filter of section 6) instead of those whose rewards vary; the cached N = 8 samples serve
# all four (β₂ and the filters are not in the cache key):
#
# ```
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_xeon \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.01 \
#     --out runs/apo_sloppy_h192_xeon_gsvk1024_b01_class --name apo_sloppy_h192_xeon_gsvk1024_b01 --save
# #   beta2=0.003: --out runs/apo_sloppy_h192_xeon_gsvk1024_b003_class --name apo_sloppy_h192_xeon_gsvk1024_b003
# #   beta2=0.001: --out runs/apo_sloppy_h192_xeon_gsvk1024_b001_class --name apo_sloppy_h192_xeon_gsvk1024_b001
# #   keep_disagreeing=True in place of keep_varying=True (beta2=0.03):
# #   --out runs/apo_sloppy_h192_xeon_gsdk1024_b03_class --name apo_sloppy_h192_xeon_gsdk1024_b03
# python -m apo_helpers outcomes --profile class --run runs/apo_sloppy_h192_xeon_gsvk1024_b01_class \
#     runs/apo_sloppy_h192_xeon_gsvk1024_b003_class runs/apo_sloppy_h192_xeon_gsdk1024_b03_class \
#     runs/apo_sloppy_h192_xeon_gsvk1024_b001_class --save
# ```
#
# **What this says.** Notebook 07 shows these runs in section 1's table and pairs each with the held recipe
# (β₂ = 0.03, varying goals) on the same test goals in section 3. At β₂ = 0.01 every seed ends above every seed of
# the held round and level with the twice re-anchored round from this π_ref, with as many options clicked and
# values right as that round (the seeds tables' `test_option_clicked` and `test_options_right`), and a larger KL
# to π_ref in its history: one round at the smaller β₂ travels as far as two re-anchorings at the larger, without a
# new stage 1, and stops where they stop. At β₂ = 0.003 the round ends a little higher again, level with the
# re-anchored round within the paired interval: with the search turn held, a smaller β₂ buys distance per round,
# unlike from the 1.1M π_ref before the search was held, and none of it reaches the target.
# The paper's β₂ = 0.001 does not continue the trend: its seeds end below every seed at 0.003, with a KL to π_ref
# back down to the held round's. The loss's gradient with respect to log π, 2β₂(β₂ log π/π_ref − (r − V*)), shrinks
# with β₂ while the search turn's KL term keeps its weight; notebook 07 section 3 ("β₂ swept from one π_ref") draws
# the four values' success, KL and gradient norm side by side, and β₂ = 0.001 with that weight scaled down with it
# (`greedy_kl=0.001`): freed, it travels further from π_ref than any first round and ends level with β₂ = 0.01.
# Re-anchoring the β₂ = 0.003 seeds (a stage 1 from each seed's policy, then 60 more iterations at 0.003, as in
# "Re-anchoring from the Xeon π_ref" above; run `apo_sloppy_h192_xeon_gsvk1024_b003_r2`) leaves their mean level
# with the round it continued and spreads them: one seed ends above every other policy from this π_ref, another
# below the round it continued, and their invalid replies rise above π_ref's. Re-anchored the same way, the
# scaled-weight β₂ = 0.001 seeds (run `apo_sloppy_h192_xeon_gsvk1024_b001_k001_r2`) choose the requested values a
# little more often and end no higher than the round they continued. Nor do the β₂ = 0.003 seeds continued to 120
# iterations with the same π_ref and V* (run `apo_sloppy_h192_xeon_gsvk1024_b003_it120`): their training batches
# succeed more often and their KL keeps growing, while greedy success on test stays where 60 iterations left it.
# The disagreeing goals, fewer than half of the varying ones, end level with them, as they did from the 1.1M π_ref.
#
# Is β₂ = 0.003's lead this π_ref's? The second 2.3M π_ref's command (`--seed 1`) run again on the Xeon gives
# another policy, one that seldom clicks an option; from it the held recipe and β₂ = 0.003, three seeds each:
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --seed 1 \
#     --model hidden_size=192 intermediate_size=576 \
#     --out runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_seed_1_xeon
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576_seed_1_xeon \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.003 \
#     --out runs/apo_sloppy_h192_seed1_xeon_gsvk1024_b003_class --name apo_sloppy_h192_seed1_xeon_gsvk1024_b003 --save
# #   beta2=0.03: --out runs/apo_sloppy_h192_seed1_xeon_gsvk1024_b03_class --name apo_sloppy_h192_seed1_xeon_gsvk1024_b03
# #   beta2=0.01: --out runs/apo_sloppy_h192_seed1_xeon_gsvk1024_b01_class --name apo_sloppy_h192_seed1_xeon_gsvk1024_b01
# ```
#
# The held recipe gains less from this π_ref than from any other 2.3M one, and β₂ = 0.003 again ends above it by
# about what it did from the first Xeon π_ref, its seeds clicking an option far more often (notebook 07's section 1
# rows and section 3 pair; the README's ref-spread table sets the two π_refs' gains side by side). The smaller β₂'s
# lead is the recipe's; its gain is still about half the target.
# Re-anchored the same way (run `apo_sloppy_h192_seed1_xeon_gsvk1024_b003_r2`), these β₂ = 0.003 seeds click and
# choose the requested options more often and end within a point of the round they continued, as from the first
# Xeon π_ref: from both, a second round at β₂ = 0.003 holds the gain where the first left it. β₂ = 0.01 from this
# π_ref ends level with 0.003, so the two sweeps (notebook 07 section 3 draws both) agree: below 0.03 the first round
# gains a few points more, they cannot tell 0.01 from 0.003 apart, and no value reaches the target.

# %% [markdown]
# ### How much the demonstrator leaves out
#
# Every sloppy π_ref above imitated a demonstrator that ignores the options in half of its episodes. That share
# sets what RL can add: the more demonstrations skip the options, the more test goals π_ref leaves unsolved for
# the option habit, and the less often its samples try the clicks that A*PO must reinforce. Two more 2.3M π_refs
# from the same demonstrator at a quarter and at three quarters (the same goals, initial weights and steps), and
# the held recipe's three seeds from each for 60 iterations:
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.75 --model hidden_size=192 intermediate_size=576
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.75_hidden_size_192_intermediate_size_576 \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy75_h192_gsvk1024_b03_class --name apo_sloppy75_h192_gsvk1024_b03 --save
# ```
#
# and the same with `0.25` and `sloppy25`. The table puts each run under its own π_ref; the figure draws π_ref and
# the seeds (their mean and range) against the share, for test success and for how often an option is clicked on
# the test goals that ask for some.

# %%
SHARE_TABLES = {"apo_sloppy25_h192_gsvk1024_b03": 0.25, "apo_sloppy_h192_gsvk1024_b03": 0.5,
                "apo_sloppy75_h192_gsvk1024_b03": 0.75}
SHARE_LABELS = {name: f"options ignored in {share:.0%}" for name, share in SHARE_TABLES.items()}


def plot_by_share(runs, panels, figure_name):
    """Per ``panels`` entry ``(seeds-table column, title)``: π_ref, and the seeds' mean with the band from the lowest
    to the highest seed, against the share of demonstrations that ignore the options (``SHARE_TABLES``)."""
    rows = pd.concat([tables["seeds"].assign(share=SHARE_TABLES[name]) for name, tables in runs.items()])
    refs, trained = rows.query("objective == 'pi_ref'"), rows.query("objective != 'pi_ref'")
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.2))
    for ax, (column, title) in zip(axes, panels):
        plots.seed_band(ax, trained, column, x="share", label="A*PO, mean and seeds' range", fmt="o-", alpha=0.2)
        ax.plot(refs["share"], refs[column], "s--", color="black", label="π_ref")
        ax.set(title=title, xlabel="share of demonstrations that ignore the options", xticks=refs["share"])
    axes[0].legend(fontsize=8)
    fig.suptitle("The held recipe (60 iterations) from 2.3M π_refs of more or less sloppy demonstrators", y=1.04)
    plots.save(fig, figure_name)
    plt.show()


share_runs, _ = committed_runs(SHARE_TABLES)
if len(share_runs) > 1:
    share_table = table_with_own_refs(share_runs, SHARE_LABELS)
    display(share_table.round(3))
    plot_by_share(share_runs, [("test_success", "test success"),
                               ("test_option_clicked", "an option clicked (test goals that ask for options)")],
                  "04_demonstrator_share")
    print_targets(share_table.dropna(subset=["gain over π_ref"]))
else:
    print("run the commands above to compare")

# %% [markdown]
# **What this says.** A sloppier demonstrator does not leave more for RL to learn; it leaves less that RL can find.
# At three quarters π_ref clicks an option on few of the goals that ask for some, so its samples seldom try the
# click, stage 1 keeps about half as many goals whose rewards vary (the goals-practised column), and the seeds end
# about where π_ref started: A*PO reinforces what the samples already do, it does not discover a click they almost
# never make. At a quarter π_ref already clicks options on most such goals, and its seeds end at about the click
# rate, and the success on goals with options, that the seeds from the half-sloppy π_ref reach. So where the seeds
# end is set by the model (which values it reads right), not by the demonstrator; the demonstrator sets only where
# π_ref starts, and the gain is the distance between the two. Half gains the most of the three shares, a quarter
# a little less, and none comes near the +10 points of the target (the lines printed under the figure).

# %% [markdown]
# ### Pages that show the selection, at 2.3M
#
# Two-option goals are where every policy above fails most: after one option click WebShop's item page looks the
# same, and the policy, which sees the earlier actions only as a list, clicks the same value again or buys with the
# second missing. At 1.1M, pages that state the selection (`show_selected_options`, above) helped imitation and
# not RL. The 2.3M model is the size at which the seeds took up the option habit from WebShop's pages, so the same
# rendering at that size: a π_ref of its own (the first 2.3M π_ref's demonstrations, initial weights and steps, on
# pages that show the selection), its own stage 1, and the held recipe's three seeds for 60 iterations:
#
# ```
# python -m apo_helpers train-ref --profile class --skip-options 0.5 --show-selected-options \
#     --model hidden_size=192 intermediate_size=576
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_selected_hidden_size_192_intermediate_size_576 \
#     --set vstar_goals=1024 keep_varying=True greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_selected_h192_gsvk1024_b03_class --name apo_selected_h192_gsvk1024_b03 --save
# ```
#
# Then each π_ref and its seeds on the test goals that ask for options: the item-page probe (section 6's
# `decisions`: at the first item page of π_ref's greedy episodes, how likely each policy clicks an option) and
# their greedy episodes counted by how many options a goal asks for (`analysis.failures.option_progress`); one
# call per rendering, since a call probes policies of one rendering together:
#
# ```
# python -m apo_helpers decisions --profile class \
#     --states-from runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#     --models pi_ref=runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#              seed0=runs/apo_sloppy_h192_gsvk1024_b03_class/seed_0/policy ... (seeds 1, 2) --save --name h192
# # the same from the selected π_ref and runs/apo_selected_h192_gsvk1024_b03_class: --name selected_h192
# # the first π_ref with its seeds re-anchored twice (runs/apo_sloppy_h192_gsvk1024_b03_r3_class): --name h192_r3
# ```

# %%
from apo_helpers.analysis.decisions import decision_summary
from apo_helpers.analysis.failures import option_progress

SELECTED_H192_TABLES = {"apo_sloppy_h192_gsvk1024_b03": "2.3M, WebShop's pages",
                        "apo_selected_h192_gsvk1024_b03": "2.3M, pages show the selection"}
PROGRESS_FILES = {"2.3M, WebShop's pages": "option_progress_h192_class.csv",
                  "2.3M, WebShop's pages, re-anchored twice": "option_progress_h192_r3_class.csv",
                  "2.3M, pages show the selection": "option_progress_selected_h192_class.csv"}


def progress_by_policy(files):
    """``option_progress`` of each committed table of greedy test episodes, π_ref's row, then its seeds' episodes
    pooled (three per goal, so their rates are the seeds' mean)."""
    tables = []
    for pages, file in files.items():
        if (RESULTS_DIR / file).exists():
            table = pd.read_csv(RESULTS_DIR / file)
            who = table["method"].where(table["method"] == "pi_ref", "A*PO seeds").replace("pi_ref", "π_ref")
            tables.append(table.assign(method=f"{pages}: " + who))
    if not tables:
        return None
    return option_progress(pd.concat(tables, ignore_index=True)).rename(columns={"goals": "episodes"})


compare_own_refs(SELECTED_H192_TABLES,
                 "The held recipe from 2.3M π_refs: WebShop's pages and pages that show the selection",
                 "04_selected_h192", least=2)
for pages, file in PROGRESS_FILES.items():  # the probe's table sits beside each progress table
    probe = RESULTS_DIR / file.replace("option_progress", "decisions")
    if probe.exists():
        print(f"{pages}: the item-page probe at π_ref's states")
        display(decision_summary(pd.read_csv(probe)).round(3))
progress = progress_by_policy(PROGRESS_FILES)
if progress is not None:
    display(progress.round(3))

# %% [markdown]
# **What this says.** At 2.3M a page that states the selection helps neither imitation (at 1.1M it had helped
# imitation only) nor RL. Its π_ref starts where the π_ref on WebShop's pages starts, and the held recipe from it
# gains less: at the same item pages its seeds move far less of the probability from `buy now` to an option (the
# probe), on the test goals two of three click an option barely more often than their π_ref, and their training
# batches' sampled success rises less (the middle panel). The counts by number of options say where the whole family
# stops. On the goals that ask for one option, the seeds from WebShop's pages click a value where π_ref clicked none
# and solve far more of them: that is where their gain comes from. On the goals that ask for two, a quarter of the
# test goals, no policy of either rendering succeeds more than once. On WebShop's pages most of the seeds' episodes
# there select one value and buy, some after clicking it twice; on the pages that show the selection the seeds never
# click a value twice and never select both values either. The page removed the repeat, not the stop: the second
# value is a click RL does not find on either page (the early-purchase probe above measured the same at 1.1M). The
# best run of this notebook, the seeds re-anchored twice, adds to the one-option goals, where its seeds click an
# option on most item pages, and not to the two-option ones. With the two-option goals out of reach, the target has to
# come from the other three quarters of the test goals.

# %% [markdown]
# ### Practising only the two-option goals
#
# The second value is a click the seeds' samples try in a few percent of the continuations after one selected
# value, and only a quarter of the goals practised ask for two options, so few batches hold such a click at all.
# `APOConfig.min_options=2` keeps only the stage-1 goals that ask for two (a filter applied after the cache, like
# `keep_varying`: the first 2.3M π_ref's stage 1 is reused), so that state comes up about four times as often per
# batch; the held recipe otherwise, three seeds for 60 iterations:
#
# ```
# python -m apo_helpers train --profile class --seeds 0 1 2 --iterations 60 \
#     --ref runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#     --set vstar_goals=1024 keep_varying=True min_options=2 greedy_search=True greedy_kl=0.01 beta2=0.03 \
#     --out runs/apo_sloppy_h192_gsvk1024_b03_two_class --name apo_sloppy_h192_gsvk1024_b03_two --save
# python -m apo_helpers decisions --profile class \
#     --states-from runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#     --models pi_ref=runs/pi_ref_class_skip_options_0.5_hidden_size_192_intermediate_size_576 \
#              seed0=runs/apo_sloppy_h192_gsvk1024_b03_two_class/seed_0/policy ... (seeds 1, 2) --save --name h192_two
# ```

# %%
TWO_OPTION_TABLES = {"apo_sloppy_h192_gsvk1024_b03": "2.3M, every goal whose rewards vary",
                     "apo_sloppy_h192_gsvk1024_b03_two": "2.3M, only the two-option goals"}
compare_own_refs(TWO_OPTION_TABLES,
                 "The held recipe from the first 2.3M π_ref: goals whose rewards vary, or two-option goals only",
                 "04_two_option_goals", least=2)
two_option_progress = progress_by_policy({"2.3M, every goal whose rewards vary": "option_progress_h192_class.csv",
                                          "2.3M, only the two-option goals": "option_progress_h192_two_class.csv"})
if two_option_progress is not None:
    display(two_option_progress.round(3))

# %% [markdown]
# **What this says.** Four times the practice does not teach the second value. The seeds trained on the two-option
# goals alone end close to the seeds trained on every goal whose rewards vary, a little lower, with a narrower
# spread. What they learn is the first click: they click an option on more of the test goals than π_ref, and that
# habit carries to the one-option goals they never practised, which is where most of their gain comes from. On the
# two-option goals themselves they select both values hardly more often than π_ref and succeed once per seed, as
# before, and their training batches succeed in a few percent of the episodes throughout (the middle panel). The
# reward pays each value alike, so a purchase with one value right already scores well above one with none, and the
# regression rewards the first click as much as the second; the second is still the click the samples seldom try.

# %% [markdown]
# ## 9. Before and after, on the same goals
#
# The viewer shows π_ref's and the trained policy's greedy episodes on the same test goals. The trained policy is
# seed 0 of the committed runs when its folder is on this machine, else the live run's policy.

# %%
trained_dir = RUNS_DIR / f"apo_{profile.name}" / "seed_0" / "policy"
if (trained_dir / "model.safetensors").exists():
    from apo_helpers.policy.models import load_policy
    after_model, _ = load_policy(trained_dir, device())
    label = "A*PO seed 0"
else:
    after_model, label = model, "live run"
n = min(40, profile.apo.test_episodes)
seed_everything(profile.seed)
before_eval, before = evaluate_policy(ref_model, tokenizer, "test", n, profile, name="π_ref", progress=False)
after_eval, after = evaluate_policy(after_model, tokenizer, "test", n, profile, name=label, progress=False)
changed = [i for i, (b, a) in enumerate(zip(before, after)) if b.success != a.success]
print(f"{len(changed)} of {n} goals changed outcome; fixed: {sum(after[i].success for i in changed)}, "
      f"broken: {sum(before[i].success for i in changed)}")
summary_table([before_eval, after_eval]).round(3)

# %%
# NBVAL_IGNORE_OUTPUT
EpisodeViewer([after[i] for i in changed] or after[:10], title=f"{label}: goals whose outcome changed")

# %%
HTML(episodes_html([x for i in changed[:2] for x in (before[i], after[i])], max_episodes=4))

# %% [markdown]
# ## 10. Exercises
#
# 1. **The optimum.** For one trajectory with log π_ref = −20, r = 1 and V* = 0.6, which log π makes the loss zero
#    with β₂ = 0.1? Put it in `my_logp` and check it below.
# 2. **β₂.** Rerun section 3 with `beta2` ten times larger and ten times smaller. What happens to the KL column?
# 3. **Open.** The policy's log-probs cover the think text as well as the action. Rerun with
#    `logprob_tokens="answer"`: does the KL stay smaller? Does the success change?
# 4. **The split.** A trajectory earns no reward before its first item page and r = 0.9 at the end; V*(x) = 0.6 and
#    π_ref's continuations give V*(s_k) = 0.7. What are `apo_split`'s two targets (search part, item-page part)?
#    Put them in `my_targets` and check them below; then say which part a purchase that skipped the options
#    (r = 0.5) would push down, and by how much.

# %%
my_logp = None  # your answer to exercise 1
if my_logp is None:
    print("fill in my_logp; hint: β₂ (log π − log π_ref) = r − V*")
else:
    value = apo_loss(torch.tensor([float(my_logp)]), torch.tensor([-20.0]), torch.tensor([1.0]), torch.tensor([0.6]),
                     0.1).item()
    print("correct" if value < 1e-8 else f"the loss is still {value:.4f}")

# %%
my_targets = None  # your answer to exercise 4: (search part, item-page part)
if my_targets is None:
    print("fill in my_targets; hint: the two parts add up to r − V*(x)")
else:
    # beta2 * log-ratio of each part set to the proposed target: the loss is 0 only for the right targets
    before, after = (torch.tensor([float(t) / 0.1]) for t in my_targets)
    zero, r, rewards_before = torch.zeros(1), torch.tensor([0.9]), torch.zeros(1)
    value = apo_split_loss(before, zero, after, zero, r, rewards_before, torch.tensor([0.6]), torch.tensor([0.7]),
                           0.1).item()
    print("correct" if value < 1e-8 else f"the loss is still {value:.4f}")

# %% [markdown]
# ## Summary
#
# - RAGEN's loop alternates batched multi-turn rollouts and one update; A*PO's update is a least-squares regression
#   of β₂ log(π/π_ref) onto r − V*, with one sample per goal and no critic.
# - An RL loop must train on the tokens it sampled. Decoding to text and encoding again can silently change them;
#   here it did, for every reply, until the check of section 2 was added.
# - The table in section 4 is what three seeds of the full run did on test goals none of them trained on: the
#   sampled success on the training goals rises, greedy success on unseen goals does not follow.
# - Section 5 says why the update has little to work with: sampling mostly varies the search query, which greedy
#   play already types right, and A*PO's target π* ∝ π_ref·exp(r/β₂) overturns a confident π_ref's click only when
#   the return gained, divided by β₂, beats its log-odds; one changed click would solve many more goals than the
#   target at β₂ = 0.1 changes.
# - Handing the same information to the model as plain labels (the click that solves each of 1,000 train goals)
#   shows the two limits an update meets here: fitted on the results page alone, the labels either barely move
#   the policy or wreck it; mixed into π_ref's demonstrations they help a little, and more imitation alone helps
#   about as much. The tiny model learns the results-page rule only weakly from a few hundred corrections, and
#   π_ref may not have been imitated to convergence: a better π_ref, not another objective, is the next step to the
#   +10-point target, which is not met.
# - RL can add to imitation only what the reward pays for and the demonstrations did not show. Section 6 builds
#   such a case (demonstrations that skip the options half the time) and counts the item-page decision: A*PO
#   moves that decision only when it trains on the goals whose stage-1 samples disagree, and even then success
#   gains less than the target asks, since the option values chosen are often wrong. From a π_ref imitated from
#   half the demonstrations A*PO gains as little: the goals whose samples disagree are few and already half
#   solved, and what it learns there does not reach the goals π_ref never solves.
# - Where the gains live: greedy success rises on the goals a run trained on and, from the π_ref that skipped the
#   options, on unseen goals of the same kind (those whose π_ref samples disagree). From the weaker π_refs those
#   goals are too few for +10 points overall even if every one were solved; from the full-expert π_ref there is
#   room, and section 4's runs realised none of it. Imitating the expert on every train goal, at notebook 02's
#   budget, also stays below the +10-point target.
# - β₂ decides how far that option decision moves (section 8): from the profile's 0.1 down to 0.03, the rule learned
#   on the disagreeing training goals reaches unseen goals in every seed and the gain over π_ref about doubles,
#   several times the seeds' spread; smaller values buy nothing more. The best run is still short of +10 points,
#   which from this π_ref asks for about the whole gap to the full-expert π_ref.
# - Which goals RL practises matters next (section 8): keeping every goal whose stage-1 rewards vary, not only those
#   with a success, reaches the same test gain in half the iterations and the largest gain on all unseen goals, still
#   short of +10 points on test; trained longer, one seed broke its greedily typed search turn, which the
#   regression leaves out of log π. Anchoring those turns' log-ratio to π_ref kept every seed stable for 120
#   iterations but gained less; holding them by the KL to π_ref's whole next-token distribution (`greedy_kl`) kept
#   every seed stable from three π_refs trained alike, for gains a little above the seeds' spread at 60 iterations
#   and larger at 120, under half the target.
# - The one-step loop fits its targets loosely, but that is not the limit: three optimizer steps per batch fit each
#   batch better, raise the loss on the next one and broke every seed within 30 iterations (section 8).
# - Nor is the gradient's noise the limit: 64 goals per batch, or a learning rate decaying to a tenth, end where 32
#   goals at a constant rate do, or a little lower (section 8).
# - Item pages that say which option is selected give a better π_ref by imitation alone, and A*PO from it ends lower
#   than it started (section 8): the options it clicks wrongly are values the chosen item does not offer.
# - Where the option habit stops (section 8): RL teaches the policy to select an option where it would have bought
#   with none, not to complete the set. After one selected value its continuations still buy at once, and the
#   missing value is a click its samples almost never try, with the credit split at the item page (`apo_split`) or
#   sampled hotter alike. That click is where the rest of the +10 points would have to come from.
# - Trying that click for the policy does not make it the policy's own (section 8): drawing values of the unselected
#   options on 30% of the item-page turns (`explore_options`) ends where the held recipe ends, and its seeds select
#   the missing value no more often; nor on pages that state which option is still unselected. The tiny π_ref's
#   choice of option value, which even imitation of the full expert gets right on under half of the goals that ask
#   for one, bounds what RL adds from it.
# - A wider tiny Llama (3.9M parameters, section 8) imitates the skipping habit more faithfully and starts lower;
#   the held recipe from it gains more on average than from the 1.1M π_refs, one seed of three by the target's ten
#   points, but the mean stays short of the target; from a second 3.9M π_ref its seeds agree closely and gain a
#   little less, and less again when stage 1 keeps twice as many goals to practise. At 2.3M parameters three
#   π_refs start among the 1.1M ones and the gains from all three lie above the 1.1M π_refs', close to each other,
#   their seeds as close as the 1.1M runs': more from 1.1M to 2.3M, no more at 3.9M, short of the target at each.
# - The ceiling is not the limit either (sections 6 and 8): drawing option values from a 2.3M π_ref puts more unseen
#   goals within reach of π_ref's samples, enough that solving them would clear the target, and the seeds' gain on
#   all unseen goals does not move, from either of two π_refs. What a next method has to raise is how much of the
#   reachable goals one run learns.
# - The results page is the other decision RL leaves alone (section 8): a fifth of the 2.3M π_ref's test purchases
#   go above the budget, most with an affordable product of the right type on the same page, and its seeds make as
#   many. Drawing products there (`explore_results`) puts the most goals within reach of any lever and breaks two
#   seeds of three; with the failed draws held at π_ref the seeds stay stable and still buy above the budget as
#   often as π_ref.
# - Renewing π_ref and V* converts more (section 8): after 60 iterations, each seed's final policy as its own π_ref,
#   stage 1 sampled again from it, and 60 more iterations end every seed above where 120 iterations toward the
#   first π_ref end. A second round adds less, for the largest mean gain in this notebook; a third ends lower on
#   test: the rounds level off short of the target. Rounds of 30 iterations reach the same level in half the
#   iterations and level off there too. From a second π_ref trained alike the same chain gains less than that
#   π_ref's run that never renews: the first π_ref's rise does not carry over. Averaging the seeds' weights into one
#   soup (`average`) plays within a point or two of their mean, mostly above it; as every seed's next π_ref it does
#   no better than each seed's own policy.
# - How sloppy the demonstrator is sets where π_ref starts, not where RL stops (section 8): from 2.3M π_refs whose
#   demonstrations ignore the options a quarter, half or three quarters of the time, the seeds of the first two end
#   at about the same option habit, and from the third, whose samples seldom click an option, the habit barely
#   grows. No share reaches the target.
# - Two-option goals, a quarter of the test goals, are out of reach of the 2.3M π_refs and their seeds (section 8):
#   they select one value and buy, or click it twice, and succeed on at most one of them. Pages that state the
#   selection at 2.3M remove the repeated click and not the stop, and the held recipe gains less from them than from
#   WebShop's pages.
# - Practising only the two-option goals (`min_options=2`, section 8) teaches the first option click, which carries
#   to the one-option goals, and not the second: the seeds still succeed on about one two-option test goal each.
# - Every run also loses some of the test goals π_ref solved (section 8, counted in notebook 07 section 3), and
#   putting back the goals π_ref's samples always solve (`keep_solved`), where A*PO's target holds the policy at
#   π_ref, does not stop it. Nor does smoothing the end of a round, with a decaying learning rate (`lr_decay`) or a
#   moving average of the weights (`ema`): the seeds' disagreement on borderline goals is not the noise of their
#   last batches.
# - Paying successes double (`success_bonus=1`, section 8), so that a success stands further above a purchase with a
#   wrong option value, leaves the first, second and third rounds where WebShop's graded reward leaves them.
# - A more precise V* (`vstar_samples=16`, section 8) does not help either: from a fourth 2.3M π_ref, the first's
#   command run again on another processor, sixteen samples per goal end below eight, and about level with eight
#   when the goals are chosen from eight of the sixteen (`filter_samples=8`): the goals a larger N adds cost the
#   gain, the sharper V* buys none.
# - Nor does a V* nearer the best sample (section 8, "How soft V*'s maximum is"): β₁ = β₂, the β of A*PO's own
#   derivation, makes almost every target negative, and its seeds gain as many goals as at the paper's β₁ = 0.5 and
#   lose several times as many of those π_ref solved; β₁ = 0.1 ends level with 0.5.
# - From that fourth π_ref, one re-anchored round of 60 iterations lifts every seed again (section 8), less than
#   from the first π_ref, and a second round adds nothing more: re-anchoring repeats as a step, levels off one
#   round sooner, and stays short of the target.
# - From that π_ref too, a smaller β₂ does within one round what re-anchoring does across rounds (section 8, "β₂ and
#   the goals practised"): at β₂ = 0.01 the first round ends where the twice re-anchored one ended, and no further.
# - The project's best recipe (section 4) is β₂ = 0.003's held recipe from 2.3M π_refs imitated from twice the
#   demonstrations, run from five π_refs of each of two commands and re-anchored once. It clears the +10-point target,
#   by more than its seeds' spread, from single π_refs of both commands, and not on average over them: in both the gain
#   falls as π_ref's own success rises, so a π_ref that imitation made stronger leaves RL less to add. A think that
#   reads on in the instruction after each option click lifts where the runs end and where the π_refs start alike
#   (notebook 07 section 3 and the README's "Did A*PO reach +10 points").
