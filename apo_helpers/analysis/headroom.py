"""One changed click: how close greedy pi_ref is to succeeding, and whether A*PO's target makes the change
(notebook 04 section 5).

``one_step_alternatives`` plays pi_ref's greedy episode of each goal; at every results- or item-page turn of it,
every other click the expert's demonstrations use (``webshop.agents.explorable_actions``) is tried once, written
as the expert writes it (``explain``), and the episode continued greedily. A failed goal is *fixable* when one such
change makes it succeed. Each row also holds pi_ref's log-probability of its greedy reply and of the alternative's
reply at that state.

A*PO's least squares regresses the policy towards pi*(y|x) ~ pi_ref(y|x) exp(r(x, y) / beta2). At one decision,
with greedy continuations, pi* prefers an alternative b to pi_ref's own reply a when

    log pi_ref(b|s) + Q(s, b) / beta2 > log pi_ref(a|s) + Q(s, a) / beta2,

so a confident pi_ref keeps its choice unless the return gap beats beta2 times its log-odds. ``target_choices``
replays each greedy episode with pi*'s choice at every decision for several beta2: the success of the best one-step
change that A*PO's own target asks for. The alternative's reply is one way of writing b (the expert's words), so
log pi_ref(b|s) is a lower bound of the probability of choosing b, and a flip is counted conservatively.

``search_deviations`` shows where sampling at temperature 1 spends its randomness: mostly on the search query.
``query_copies`` measures that query against the instruction it should copy: how often the greedy and the sampled
queries copy it exactly, what an exact copy earns with greedy clicks after it, and how often the samples find the
exact copy on the goals whose greedy query garbles it (``APOConfig.greedy_clicks`` and ``explore_search``).

``python -m apo_helpers headroom --ref DIR --split train --goals 100 --save`` writes
``data/results/headroom_<profile>.csv``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from ..config import Profile
from ..policy.prompts import Turn, build_messages, encode_chat, format_response
from ..policy.rollout import GREEDY, Sampling, Trajectory, rollout
from ..policy.scoring import collate, sequence_logprob_sums
from .evaluate import copied_query
from ..webshop.agents import EXPLAINED_PAGES, explain, explorable_actions
from ..webshop.catalog import Goal, default_catalog
from ..webshop.env import WebShopEnv

HEADROOM_COLUMNS = ["split", "goal_index", "greedy_success", "greedy_return", "turn", "page", "greedy_action",
                    "action", "return", "success", "logp_greedy", "logp"]
"""One row per (goal, decision, other click); a goal whose greedy episode never left the search page has one row
with turn -1 and no action (it counts among the goals, with nothing to change)."""


def _decisions(trajectory: Trajectory, env: WebShopEnv):
    """``(turn index, page, turns before it)`` for each results- or item-page turn of a played episode."""
    env.reset(options={"goal": trajectory.goal})
    page = "search"
    for k, turn in enumerate(trajectory.turns):
        if page in EXPLAINED_PAGES:
            yield k, page, trajectory.turns[:k]
        _, _, terminated, truncated, info = env.step(turn.action)
        if terminated or truncated:
            return
        page = info["page"]


def _forced(turn: Turn, action: str, page: str) -> Turn:
    """``turn`` answered with ``action``, in the expert's words."""
    response = format_response(explain(action, page), action)
    return replace(turn, response=response, think=explain(action, page), action=action, format_ok=True, valid=True,
                   reward=0.0, greedy=False, explored=True)


def _ends(goal: Goal, prefix: list[Turn], env: WebShopEnv) -> tuple[bool, float, bool]:
    """Replay ``prefix`` (its last action the alternative): ``(episode over, return, success)``."""
    env.reset(options={"goal": goal})
    total = sum(u.reward for u in prefix[:-1])
    for turn in prefix:
        _, reward, terminated, truncated, info = env.step(turn.action)
        if terminated or truncated:
            return True, total + reward, bool(info.get("success", False))
    return False, 0.0, False


@torch.no_grad()
def reply_logprobs(model, tokenizer, chats: list[list[dict]], micro_batch: int = 64) -> np.ndarray:
    """log pi(last reply | chat) for chats ending in an assistant reply (window=1: that reply only is masked)."""
    model.eval()
    out = []
    dev = next(model.parameters()).device
    for start in range(0, len(chats), micro_batch):
        encoded = [encode_chat(tokenizer, chat) for chat in chats[start: start + micro_batch]]
        ids, attn, mask = collate([e[0] for e in encoded], [e[1] for e in encoded], tokenizer.pad_token_id, dev)
        out.append(sequence_logprob_sums(model, ids, attn, mask).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def one_step_alternatives(model, tokenizer, goals: list[Goal], profile: Profile, progress: bool = True) -> pd.DataFrame:
    """One row per (goal, decision of its greedy episode, other click): the return of that click followed by greedy
    play, and pi_ref's log-probabilities of its greedy reply and of the click's reply (``HEADROOM_COLUMNS``)."""
    if profile.policy.window != 1:
        raise ValueError(f"one_step_alternatives scores one turn's reply per chat (policy.window=1), got "
                         f"window={profile.policy.window}")
    env_config, catalog = profile.policy_env(), default_catalog()
    greedy = rollout(model, tokenizer, goals, GREEDY, profile.policy, env_config)
    rows, prefixes, own_chats, chats = [], [], [], []
    for goal, t in zip(goals, greedy):
        env = WebShopEnv(split=goal.split, catalog=catalog, config=env_config)  # replays each alternative
        decisions = list(_decisions(t, WebShopEnv(split=goal.split, catalog=catalog, config=env_config)))
        if not decisions:  # never left the search page: the goal counts, with nothing to change
            rows.append({"split": goal.split, "goal_index": goal.index, "greedy_success": t.success,
                         "greedy_return": t.reward, "turn": -1, "page": "", "greedy_action": "", "action": "",
                         "return": float("nan"), "success": False, "own_chat": -1, "goal": goal, "prefix": None})
            chats.append(None)
        for k, page, before in decisions:
            own_chats.append(build_messages(t.turns[: k + 1], profile.policy.window, include_last_response=True))
            for action in explorable_actions(t.turns[k].actions):
                if action == t.turns[k].action:
                    continue
                prefix = [*before, _forced(t.turns[k], action, page)]
                over, value, success = _ends(goal, prefix, env)
                rows.append({"split": goal.split, "goal_index": goal.index, "greedy_success": t.success,
                             "greedy_return": t.reward, "turn": k, "page": page,
                             "greedy_action": t.turns[k].action, "action": action, "return": value,
                             "success": success, "own_chat": len(own_chats) - 1, "goal": goal,
                             "prefix": None if over else prefix})
                chats.append(build_messages(prefix, profile.policy.window, include_last_response=True))
    todo = [row for row in rows if row["prefix"] is not None]  # the other rows' returns are known
    bar = tqdm(total=len(todo), desc="greedy play after one changed click", disable=not progress)
    continued = rollout(model, tokenizer, [row["goal"] for row in todo], GREEDY, profile.policy, env_config,
                        prefixes=[row["prefix"] for row in todo], progress=bar) if todo else []
    bar.close()
    for row, c in zip(todo, continued):
        row["return"], row["success"] = c.reward, c.success
    table = pd.DataFrame(rows, columns=[*HEADROOM_COLUMNS, "own_chat"])
    scored = [k for k, chat in enumerate(chats) if chat is not None]
    table["logp"] = np.nan
    table.loc[scored, "logp"] = reply_logprobs(model, tokenizer, [chats[k] for k in scored])
    own_logp = np.append(reply_logprobs(model, tokenizer, own_chats), np.nan)  # own_chat -1 (no decision): NaN
    table["logp_greedy"] = own_logp[table["own_chat"].to_numpy(dtype=int)]
    return table[HEADROOM_COLUMNS]


def target_choices(table: pd.DataFrame, betas=(1.0, 0.3, 0.1, 0.03, 0.01)) -> pd.DataFrame:
    """Per goal and beta2: the greedy episode with pi*'s choice at its first decision where pi* leaves pi_ref's
    reply (``pi* ~ pi_ref exp(Q / beta2)``, Q the return of greedy play after the choice), and whether that
    succeeds. Columns: split, goal_index, beta2, greedy_success, fixable (one changed click succeeds), changed
    (pi* leaves pi_ref's choice somewhere), success (of pi*'s one change, or pi_ref's episode when none)."""
    out = []
    for (split, index), goal_rows in table.groupby(["split", "goal_index"], sort=False):
        greedy_success = bool(goal_rows["greedy_success"].iloc[0])
        fixable = not greedy_success and bool(goal_rows["success"].any())
        for beta in betas:
            changed, success = False, greedy_success
            for _, state in goal_rows[goal_rows["turn"] >= 0].groupby("turn", sort=True):
                own = state["logp_greedy"].iloc[0] + state["greedy_return"].iloc[0] / beta
                scores = state["logp"] + state["return"] / beta
                if scores.max() > own:
                    changed, success = True, bool(state["success"].loc[scores.idxmax()])
                    break
            out.append({"split": split, "goal_index": index, "beta2": beta, "greedy_success": greedy_success,
                        "fixable": fixable, "changed": changed, "success": success})
    return pd.DataFrame(out)


def headroom_summary(choices: pd.DataFrame) -> pd.DataFrame:
    """Per beta2: greedy success, the share of goals one changed click would solve (the one-step ceiling), and the
    success of pi*'s one change at the first decision where it departs from pi_ref."""
    grouped = choices.groupby("beta2", sort=False)
    return pd.DataFrame({"goals": grouped.size(), "greedy success": grouped["greedy_success"].mean(),
                         "one-step ceiling": grouped.apply(lambda g: (g["greedy_success"] | g["fixable"]).mean()),
                         "pi* changes a decision": grouped["changed"].mean(),
                         "pi* success": grouped["success"].mean()}).rename_axis("beta2")


def search_deviations(model, tokenizer, goals: list[Goal], profile: Profile, samples: int = 4,
                      temperature: float = 1.0) -> pd.DataFrame:
    """Where sampling spends its randomness: ``samples`` episodes per goal at ``temperature`` against the greedy
    episode of the same goal. One row per sampled episode: whether its search query is the greedy one, whether its
    whole action sequence is, its reward and success."""
    greedy = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env())
    sampled = rollout(model, tokenizer, [g for g in goals for _ in range(samples)], Sampling(temperature=temperature),
                      profile.policy, profile.policy_env())
    rows = []
    for k, t in enumerate(sampled):
        g = greedy[k // samples]
        rows.append({"goal_index": t.goal.index, "same_query": t.turns[0].action == g.turns[0].action,
                     "same_actions": [u.action for u in t.turns] == [u.action for u in g.turns],
                     "reward": t.reward, "success": t.success, "greedy_success": g.success})
    return pd.DataFrame(rows)


CLICKS = ("results", "item", "detail")
"""The pages ``query_copies`` answers greedily after a sampled query (``APOConfig.greedy_clicks``' pages)."""


def query_copies(model, tokenizer, goals: list[Goal], profile: Profile, samples: int = 8,
                 temperature: float = 1.0) -> pd.DataFrame:
    """The search query against the instruction it copies, one row per goal: whether the greedy episode's query
    copies the instruction exactly (``evaluate.copied_query``) and whether it succeeds; of ``samples`` episodes whose
    query is sampled at ``temperature`` and whose clicks are greedy, the share that copy it exactly, their success
    rate, and the success rates of the exact and of the other samples (NaN when there are none)."""
    greedy = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env())
    sampled = rollout(model, tokenizer, [g for g in goals for _ in range(samples)],
                      Sampling(temperature=temperature, greedy_pages=CLICKS), profile.policy, profile.policy_env())
    rows = []
    for k, g in enumerate(greedy):
        own = sampled[k * samples:(k + 1) * samples]
        exact = np.array([copied_query(t) for t in own])
        success = np.array([t.success for t in own], dtype=float)
        rows.append({"goal_index": g.goal.index, "greedy_copied": copied_query(g), "greedy_success": g.success,
                     "sampled_copied": exact.mean(), "sampled_success": success.mean(),
                     "success_copied": success[exact].mean() if exact.any() else np.nan,
                     "success_garbled": success[~exact].mean() if (~exact).any() else np.nan})
    return pd.DataFrame(rows)


def query_summary(table: pd.DataFrame) -> pd.DataFrame:
    """``query_copies`` per kind of goal (all, greedy query exact, greedy query garbled): goals, greedy success, the
    share of sampled queries that copy the instruction, the success of the samples, and the success of an exact and
    of a garbled sampled query (means over the goals that have such samples)."""
    kinds = {"all goals": table, "greedy query exact": table[table["greedy_copied"]],
             "greedy query garbled": table[~table["greedy_copied"]]}
    return pd.DataFrame({kind: {"goals": len(part), "greedy success": part["greedy_success"].mean(),
                                "sampled queries exact": part["sampled_copied"].mean(),
                                "sampled success": part["sampled_success"].mean(),
                                "success, exact samples": part["success_copied"].mean(),
                                "success, garbled samples": part["success_garbled"].mean()}
                         for kind, part in kinds.items()}).T
