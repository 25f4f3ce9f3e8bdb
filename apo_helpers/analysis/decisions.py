"""The item-page decision, probed: how likely each policy is to click an option at the SAME item pages (notebook 04
section 6).

Greedy success only changes where a policy's most likely reply changes. This probe holds the state fixed: the
first item page of each greedy episode of one policy (``item_page_states``, by default pi_ref's) on goals that ask
for options; every policy then answers each of those chats ``samples`` times at temperature 1 and once greedily
(``option_click_rates``). A policy that RL moved shows a higher sampled probability of clicking an option; its
greedy success moves only on the states where that probability crosses the greedy choice, and a click pays only
when its value is one the goal asks for (``clicks_requested_value``).

``python -m apo_helpers decisions --states-from DIR --models NAME=DIR ... --save`` writes
``data/results/decisions_<profile>.csv`` (one row per policy and state).

A second probe looks one decision later (notebook 04 section 8): the *early purchases* (``early_purchases``), greedy
purchases made while the bought item offered a requested option value that was not selected, often one of two
values selected and then ``buy now``. Every policy continues each of those states ``samples`` times
(``early_purchase_rates``): how often it buys at once, how often its next click selects a missing value, and how
often the continued episode succeeds. The reward pays for the missing value, so RL can only learn to click it where
the samples try it; ``decisions --early-purchases`` writes ``data/results/early_purchases_<profile>.csv``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from tqdm.auto import tqdm

from ..apo.turn_credit import BUY_ACTION, decision_turn
from ..config import Profile, seed_everything
from ..policy.prompts import Turn, build_messages, parse_response
from ..policy.rollout import GREEDY, Sampling, generate_replies, rollout
from ..webshop.catalog import Catalog, Goal
from ..webshop.reward import option_matches
from ..webshop.text import normalize
from .evaluate import policy_goals
from .failures import bought_product, option_click

DECISION_COLUMNS = ["policy", "goal_index", "offers_requested", "samples", "p_option", "p_requested_value", "p_buy",
                    "greedy_option", "greedy_requested_value"]


@dataclass
class ItemPage:
    """One state of the probe: a goal, the chat a policy answers on its item page, and the page's actions."""

    goal: Goal
    chat: list[dict]
    actions: list[str]

    @property
    def offers_requested(self) -> bool:
        """Whether the page has a value the goal asks for (else the right move is back to the results)."""
        return any(clicks_requested_value(a, self.goal) for a in self.actions)


def item_page_states(model, tokenizer, split: str, episodes: int, profile: Profile) -> list[ItemPage]:
    """Of the first ``episodes`` goals of ``split``, those that ask for options and whose greedy episode by
    ``model`` reaches an item page: that first item page, as the policy saw it (before its reply)."""
    goals = [g for g in policy_goals(split, episodes) if g.options]
    trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env())
    pages = []
    for goal, t in zip(goals, trajectories):
        k = decision_turn(t)
        if k is not None:
            pages.append(ItemPage(goal, build_messages(t.turns[: k + 1], profile.policy.window), t.turns[k].actions))
    return pages


def _action(reply: str) -> str:
    return parse_response(reply)[1]


def clicks_one_of(action: str, wanted) -> bool:
    """Whether ``action`` clicks an option value matching one of ``wanted`` (the reward's fuzzy match, any case)."""
    if not option_click(action):
        return False
    value = action[len("click["):-1].lower()
    return any(option_matches({"clicked": value}, {str(k): want.lower() for k, want in enumerate(wanted)}))


def clicks_requested_value(action: str, goal: Goal) -> bool:
    """Whether ``action`` clicks an option value that the goal asks for."""
    return clicks_one_of(action, goal.options.values())


def batched_replies(model, tokenizer, chats, sampling: Sampling, profile: Profile,
                    desc: str | None = None) -> list[str]:
    """The replies to ``chats``, ``profile.policy.batch_size`` at a time (a progress bar named ``desc`` when given):
    what the probes here and in ``analysis.purchases`` ask every policy."""
    step = profile.policy.batch_size
    starts = range(0, len(chats), step)
    return [reply for start in tqdm(starts, desc=desc, leave=False, disable=desc is None)
            for reply in generate_replies(model, tokenizer, chats[start: start + step], sampling, profile.policy)[0]]


def option_click_rates(model, tokenizer, pages: list[ItemPage], profile: Profile, name: str, samples: int = 16,
                       temperature: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """One row per page: the share of ``samples`` replies (``temperature``) that click an option, that click one of
    the values the goal asks for, that buy; whether the greedy reply clicks an option, and a requested one. Each
    policy encodes the chats with its own tokenizer."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    seed_everything(seed)
    sampled = batched_replies(model, tokenizer, [p.chat for p in pages for _ in range(samples)],
                       Sampling(temperature=temperature), profile, f"{name}: sampled replies")
    greedy = batched_replies(model, tokenizer, [p.chat for p in pages], GREEDY, profile)
    rows = []
    for i, page in enumerate(pages):
        actions = [_action(r) for r in sampled[i * samples: (i + 1) * samples]]
        rows.append({"policy": name, "goal_index": page.goal.index, "offers_requested": page.offers_requested,
                     "samples": samples, "p_option": sum(map(option_click, actions)) / samples,
                     "p_requested_value": sum(clicks_requested_value(a, page.goal) for a in actions) / samples,
                     "p_buy": sum(a == "click[buy now]" for a in actions) / samples,
                     "greedy_option": option_click(_action(greedy[i])),
                     "greedy_requested_value": clicks_requested_value(_action(greedy[i]), page.goal)})
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


def decision_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per policy (in the table's order), means over the pages: the sampled probability of clicking an option, of
    clicking a value the goal asks for, and of buying at once; the share of pages where the greedy reply clicks an
    option, and a requested one."""
    grouped = table.groupby("policy", sort=False)
    return pd.DataFrame({"pages": grouped.size(), "p(option)": grouped["p_option"].mean(),
                         "p(requested value)": grouped["p_requested_value"].mean(),
                         "p(buy now)": grouped["p_buy"].mean(),
                         "greedy: option": grouped["greedy_option"].mean(),
                         "greedy: requested value": grouped["greedy_requested_value"].mean()})


EARLY_PURCHASE_COLUMNS = ["policy", "goal_index", "options_asked", "selected_before", "samples", "temperature",
                          "p_buy", "p_missing_value", "p_other", "success"]


@dataclass
class EarlyPurchase:
    """One state of the second probe: the turns of a greedy episode before its purchase, which left requested option
    values unselected (``missing``) although the bought item offers them."""

    goal: Goal
    prefix: list[Turn]
    missing: list[str]

    @property
    def selected_before(self) -> int:
        """Requested values already selected when the episode bought."""
        return len(self.goal.options) - len(self.missing)


def early_purchases(model, tokenizer, split: str, episodes: int, profile: Profile,
                    catalog: Catalog | None = None) -> list[EarlyPurchase]:
    """Of the first ``episodes`` goals of ``split``, those that ask for options and whose greedy episode by
    ``model`` ends in ``buy now`` with a requested value unselected that the bought item offers (a click could have
    added it; a purchase of an item without the value was a choice of item, not of options)."""
    goals = [g for g in policy_goals(split, episodes) if g.options]
    trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env())
    states = []
    for goal, t in zip(goals, trajectories):
        missing = (t.breakdown or {}).get("options_missing") or []
        if not missing or not t.turns or t.turns[-1].action != BUY_ACTION:
            continue
        product = bought_product(t, catalog)
        offered = {normalize(v) for values in product.options.values() for v in values} if product else set()
        if all(normalize(v) in offered for v in missing):
            states.append(EarlyPurchase(goal, t.turns[:-1], list(missing)))
    return states


def clicks_missing_value(action: str, state: EarlyPurchase) -> bool:
    """Whether ``action`` selects one of the state's missing values."""
    return clicks_one_of(action, state.missing)


def early_purchase_rates(model, tokenizer, states: list[EarlyPurchase], profile: Profile, name: str,
                         samples: int = 16, temperature: float = 1.0, seed: int = 0,
                         progress: bool = False) -> pd.DataFrame:
    """One row per state: of ``samples`` episodes continued from it at ``temperature``, the share whose next reply
    buys at once, selects a missing value, or does anything else, and the share that end in success."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive (greedy play is the state's own purchase), got {temperature}")
    seed_everything(seed)
    bar = tqdm(total=len(states) * samples, desc=f"{name}: continuations at T={temperature:g}", leave=False,
               disable=not progress)
    continued = rollout(model, tokenizer, [s.goal for s in states for _ in range(samples)],
                        Sampling(temperature=temperature), profile.policy, profile.policy_env(), progress=bar,
                        prefixes=[s.prefix for s in states for _ in range(samples)]) if states else []
    bar.close()
    rows = []
    for i, state in enumerate(states):
        runs = continued[i * samples: (i + 1) * samples]
        actions = [run.turns[len(state.prefix)].action for run in runs]
        bought = sum(a == BUY_ACTION for a in actions)
        missing = sum(clicks_missing_value(a, state) for a in actions)
        rows.append({"policy": name, "goal_index": state.goal.index, "options_asked": len(state.goal.options),
                     "selected_before": state.selected_before, "samples": samples, "temperature": temperature,
                     "p_buy": bought / samples, "p_missing_value": missing / samples,
                     "p_other": (samples - bought - missing) / samples,
                     "success": sum(run.success for run in runs) / samples})
    return pd.DataFrame(rows, columns=EARLY_PURCHASE_COLUMNS)


def early_purchase_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per policy and temperature (in the table's order) and by whether a requested value was already selected,
    the states and the mean shares of ``early_purchase_rates``."""
    table = table.assign(when=table["selected_before"].map(lambda n: "some selected" if n else "none selected"))
    grouped = table.groupby(["policy", "temperature", "when"], sort=False)
    return pd.DataFrame({"states": grouped.size(), "p(buy now)": grouped["p_buy"].mean(),
                         "p(missing value)": grouped["p_missing_value"].mean(), "p(other)": grouped["p_other"].mean(),
                         "continued success": grouped["success"].mean()})


def plot_option_probabilities(table: pd.DataFrame, reference: str, panels: dict[str, list[str]],
                              column: str = "p_requested_value", axes=None):
    """One panel per entry of ``panels`` (title -> policies): each item page as a point, its ``column`` (by default
    the probability of clicking a value the goal asks for) under ``reference`` (x) against under the policy (y).
    Above the diagonal RL made it more likely; the greedy choice can only have changed where a point crosses the
    dashed 0.5 lines."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), sharey=True, squeeze=False)
        axes = axes[0]
    label = {"p_requested_value": "p(requested value)", "p_option": "p(option)"}.get(column, column)
    x = table[table["policy"] == reference].set_index("goal_index")[column]
    for ax, (title, names) in zip(axes, panels.items()):
        for name in names:
            y = table[table["policy"] == name].set_index("goal_index")[column].reindex(x.index)
            ax.scatter(x, y, s=14, alpha=0.6, label=f"{name} (mean {y.mean():.2f})")
        ax.plot([0, 1], [0, 1], color="grey", lw=1)
        ax.axhline(0.5, color="grey", ls="--", lw=0.8)
        ax.axvline(0.5, color="grey", ls="--", lw=0.8)
        ax.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03), title=title, xlabel=f"{label} under {reference}")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.17))
    axes[0].set_ylabel(f"{label} under the policy")
    return axes
