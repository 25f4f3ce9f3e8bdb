"""The item-page decision, probed: how likely each policy is to click an option at the SAME item pages (notebook 04).

Greedy success only changes where a policy's most likely reply changes. This probe holds the state fixed: the
first item page of each greedy episode of one policy (``item_page_states``, by default pi_ref's) on goals that ask
for options; every policy then answers each of those chats ``samples`` times at temperature 1 and once greedily
(``option_click_rates``). A policy that RL moved shows a higher sampled probability of clicking an option; its
greedy success moves only on the states where that probability crosses the greedy choice.

``python -m apo_helpers decisions --states-from DIR --models NAME=DIR ... --save`` writes
``data/results/decisions_<profile>.csv`` (one row per policy and state).
"""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from ..apo.turn_credit import decision_turn
from ..config import Profile, seed_everything
from ..policy.prompts import build_messages, parse_response
from ..policy.rollout import GREEDY, Sampling, generate_replies, rollout
from .evaluate import policy_goals
from .failures import option_click

DECISION_COLUMNS = ["policy", "goal_index", "samples", "p_option", "p_buy", "greedy_option"]


def item_page_states(model, tokenizer, split: str, episodes: int, profile: Profile) -> tuple[list, list[list[dict]]]:
    """``(goals, chats)``: of the first ``episodes`` goals of ``split``, those that ask for options and whose greedy
    episode by ``model`` reaches an item page, with the chat the policy answers there (before its reply)."""
    goals = [g for g in policy_goals(split, episodes) if g.options]
    trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env())
    kept, chats = [], []
    for goal, t in zip(goals, trajectories):
        k = decision_turn(t)
        if k is not None:
            kept.append(goal)
            chats.append(build_messages(t.turns[: k + 1], profile.policy.window))
    return kept, chats


def _action(reply: str) -> str:
    return parse_response(reply)[1]


def option_click_rates(model, tokenizer, goals: list, chats: list[list[dict]], profile: Profile, name: str,
                       samples: int = 16, temperature: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """One row per state: the share of ``samples`` replies (``temperature``) that click an option, that buy, and
    whether the greedy reply clicks an option. Each policy encodes the chats with its own tokenizer."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    seed_everything(seed)
    repeated = [c for c in chats for _ in range(samples)]
    replies = []
    step = profile.policy.batch_size
    for start in tqdm(range(0, len(repeated), step), desc=f"{name}: sampled replies", leave=False):
        replies += generate_replies(model, tokenizer, repeated[start: start + step], Sampling(temperature=temperature),
                                    profile.policy)[0]
    greedy = []
    for start in range(0, len(chats), step):
        greedy += generate_replies(model, tokenizer, chats[start: start + step], GREEDY, profile.policy)[0]
    rows = []
    for i, goal in enumerate(goals):
        actions = [_action(r) for r in replies[i * samples: (i + 1) * samples]]
        rows.append({"policy": name, "goal_index": goal.index, "samples": samples,
                     "p_option": sum(map(option_click, actions)) / samples,
                     "p_buy": sum(a == "click[buy now]" for a in actions) / samples,
                     "greedy_option": option_click(_action(greedy[i]))})
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def decision_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per policy (in the table's order): mean sampled probability of clicking an option and of buying at once,
    the share of states where an option click is more likely than not, and the share where the greedy reply clicks."""
    grouped = table.groupby("policy", sort=False)
    return pd.DataFrame({"states": grouped.size(), "p(option), sampled": grouped["p_option"].mean(),
                         "p(buy now), sampled": grouped["p_buy"].mean(),
                         "states with p(option) > 0.5": grouped["p_option"].apply(lambda p: (p > 0.5).mean()),
                         "greedy clicks an option": grouped["greedy_option"].mean()})


def plot_option_probabilities(table: pd.DataFrame, reference: str, panels: dict[str, list[str]], axes=None):
    """One panel per entry of ``panels`` (title -> policies): each item page as a point, its probability of clicking
    an option under ``reference`` (x) against under the policy (y). Above the diagonal RL made the click more likely;
    the greedy choice can only have changed where a point crosses the dashed 0.5 lines."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), sharey=True, squeeze=False)
        axes = axes[0]
    x = table[table["policy"] == reference].set_index("goal_index")["p_option"]
    for ax, (title, names) in zip(axes, panels.items()):
        for name in names:
            y = table[table["policy"] == name].set_index("goal_index")["p_option"].reindex(x.index)
            ax.scatter(x, y, s=14, alpha=0.6, label=f"{name} (mean {y.mean():.2f})")
        ax.plot([0, 1], [0, 1], color="grey", lw=1)
        ax.axhline(0.5, color="grey", ls="--", lw=0.8)
        ax.axvline(0.5, color="grey", ls="--", lw=0.8)
        ax.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03), title=title, xlabel=f"p(option) under {reference}")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17))
    axes[0].set_ylabel("p(option) under the policy")
    return axes
