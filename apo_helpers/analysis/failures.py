"""A failure taxonomy of WebShop episodes (introduced in notebook 06_failure_analysis).

A success rate says how often an agent fails; the taxonomy says *how*, and that decides what to fix: a policy that
cannot write RAGEN's format needs more imitation, one that loops needs a penalty or a longer context, one that buys
without picking the options has not learned the item page.

Every episode gets exactly one label. Successes are ``success``; a failure gets the first class of
``FAILURE_CLASSES`` (in that order) whose rule holds, and ``other`` when none does, so the taxonomy is total:

===================  ==================================================================================================
class                rule (first match wins)
===================  ==================================================================================================
invalid_format       nothing bought; more than half of the replies did not parse (language models only)
invalid_actions      nothing bought; more than half of the actions were rejected by the environment
search_loop          nothing bought; the same action on the same page twice or more (a cycle; RAGEN's "echo trap",
                     one action over and over, is its extreme), or 3 or more searches (back-to-search dithering)
out_of_turns         nothing bought, none of the above: browsed until the turns ran out
wrong_type           bought a product of another type (``r_type < 1``)
over_budget          right type, price above the budget (``price_ok`` False)
missing_attributes   right type, within budget, a goal attribute missing (``attributes_missing``)
wrong_options        right type, within budget, every attribute, a goal option value not selected (``options_missing``)
other                anything else (a purchase without a breakdown, or a breakdown that adds up to a success)
===================  ==================================================================================================

Why this order: the episode-level classes come first because without a purchase there is no breakdown to read. Among
them the most basic problem wins: a reply that does not parse is also an invalid action, and an agent that keeps
repeating a rejected action is not acting at all before it is looping. Among purchases, the classes follow the order
in which the mistake becomes visible to the agent. The type and the price stand on the results page (title,
``$price``), the attributes need the title or the detail pages, and the options exist only on the item page and need
clicks of their own. So a product of the right type that is over budget *and* lacks an option counts as
``over_budget``: it should never have been opened. Every term of the reward counts equally, so this is a choice about
the story, not about the points.

The classes name symptoms in the reward, not causes. Two known blind spots, both measured in notebook 06:
``wrong_options`` also holds purchases of a product that does not offer the goal's option value at all (no click
could have fixed them: a product-choice mistake, found with ``bought_product``; exercise 1 there), and a language
model's ``missing_attributes`` and ``wrong_type`` often start with a search query that dropped or replaced a word of
the instruction.

Works on both kinds of episode: ``analysis.evaluate.Episode`` (scripted agents) and ``policy.rollout.Trajectory``
(language models), both read through one small view, ``EpisodeView`` (``view``). ``Episode`` carries no format
flags, so ``invalid_format`` is only found in trajectories.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..config import figures_dir
from ..webshop import pages
from ..webshop.agents import parse_budget, parse_results
from ..webshop.catalog import Catalog, Goal, Product, default_catalog
from ..webshop.text import normalize
from .plots import save

SUCCESS = "success"
FAILURE_CLASSES = {
    "invalid_format": "never bought; more than half of the replies did not parse (RAGEN's think/answer format)",
    "invalid_actions": "never bought; more than half of the actions were rejected by the environment",
    "search_loop": "never bought; the same action on the same page twice (a cycle, an echo trap) or 3+ searches",
    "out_of_turns": "never bought; browsed without looping until the turns ran out",
    "wrong_type": "bought a product of another type (r_type < 1)",
    "over_budget": "bought the right type above the budget",
    "missing_attributes": "bought the right type within budget, but it lacks an attribute the goal asks for",
    "wrong_options": "bought the right type within budget with every attribute, but a goal option value was not "
                     "selected",
    "other": "failed in a way no rule above describes (should stay empty)",
}
"""Failure class -> one-line description, in priority order (the first whose rule holds is the label)."""
CLASSES = (SUCCESS, *FAILURE_CLASSES)
"""Every label ``classify`` can return: ``success`` then the failure classes, the column order of the tables."""

UNPARSED_SHARE = 0.5
"""``invalid_format`` when the share of unparsed replies is above this ("mostly did not parse")."""
INVALID_SHARE = 0.5
"""``invalid_actions`` when the share of rejected actions is above this."""
LOOP_REPEATS = 2
"""``search_loop`` when one (page, action) pair occurs this many times: the agent came back to a page and did the same
thing again, so it learned nothing in between (a greedy policy that sees only the page would cycle for ever). Counting
the pair, not the action, keeps honest repetition out: ``next >`` three times pages on, and an agent that rejects
items one by one clicks ``< prev`` on a different item page each time."""
LOOP_SEARCHES = 3
"""``search_loop`` when the agent searched this many times: it went back to search twice and still bought nothing."""

CLASS_COLORS = dict(zip(CLASSES, ("#55a868", "#8c8c8c", "#b0b0b0", "#c44e52", "#dd8452", "#8172b3", "#937860",
                                  "#4c72b0", "#64b5cd", "#222222")))
"""A fixed color per class, so every figure of notebook 06 colors a class the same way."""

_SEARCH = re.compile(r"search\[(.*)\]")
_CLICK = re.compile(r"click\[(.*)\]")
_NOT_OPTIONS = {normalize(b) for b in (pages.BACK, pages.PREV, pages.BUY, *pages.DETAIL_BUTTONS)}


def option_click(action: str) -> bool:
    """Whether an action, taken on an item page, clicks an option value (not buy, back, prev or a detail tab)."""
    c = _CLICK.fullmatch(action or "")
    return c is not None and c.group(1) not in _NOT_OPTIONS


@dataclass(frozen=True)
class EpisodeView:
    """What the taxonomy reads from an episode, whichever agent played it (build it with ``view``)."""

    actions: tuple[str, ...]
    """Normalized actions; for a reply that did not parse, the normalized raw reply."""
    valid: tuple[bool, ...]
    parsed: tuple[bool, ...] | None
    """Per turn, whether the reply parsed; None for scripted agents, which write actions, not replies."""
    observations: tuple[str, ...]
    """The page each action was taken on."""
    bought: bool
    success: bool
    reward: float
    breakdown: dict | None
    instruction: str
    category: str
    goal_index: int
    goal: Goal | None = None
    """The goal when the episode carries it (trajectories); ``explain`` looks it up in the catalog otherwise."""
    split: str | None = None

    @property
    def steps(self) -> int:
        return len(self.actions)

    @property
    def searches(self) -> list[str]:
        """The queries searched, in order."""
        return [m.group(1) for a in self.actions if (m := _SEARCH.fullmatch(a))]


def view(item) -> EpisodeView:
    """The common view of an ``Episode``, a ``Trajectory`` (duck-typed: no torch import) or an ``EpisodeView``."""
    if isinstance(item, EpisodeView):
        return item
    if hasattr(item, "turns"):  # policy.rollout.Trajectory
        turns, goal = item.turns, item.goal
        return EpisodeView(
            actions=tuple(normalize(u.action if u.format_ok else u.response) for u in turns),
            valid=tuple(u.valid for u in turns), parsed=tuple(u.format_ok for u in turns),
            observations=tuple(u.observation for u in turns), bought=item.breakdown is not None,
            success=item.success, reward=item.env_reward, breakdown=item.breakdown, instruction=goal.instruction,
            category=goal.category[0] if goal.category else "?", goal_index=goal.index, goal=goal, split=goal.split)
    if hasattr(item, "actions"):  # analysis.evaluate.Episode
        return EpisodeView(
            actions=tuple(normalize(a) for a in item.actions), valid=tuple(item.valid), parsed=None,
            observations=tuple(item.observations), bought=item.bought, success=item.success, reward=item.reward,
            breakdown=item.breakdown, instruction=item.instruction, category=item.category,
            goal_index=item.goal_index)
    raise TypeError(f"expected an Episode, a Trajectory or an EpisodeView, got {type(item).__name__}")


def _items(items) -> list:
    """The episodes of an ``Evaluation``, or the items themselves."""
    return list(items.episodes if hasattr(items, "episodes") else items)


# ---------------------------------------------------------------------------------------------- the rules

def repetition(v: EpisodeView) -> tuple[str, int]:
    """The action most often taken on one and the same page, and how often (the first such action on a tie)."""
    if not v.actions:
        return "", 0
    (_, action), count = Counter(zip(v.observations, v.actions)).most_common(1)[0]
    return action, count


def _share(flags) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def classify(item) -> str:
    """The one label of an episode: ``success`` or the first failure class whose rule holds (see the module)."""
    v = view(item)
    if v.success:
        return SUCCESS
    if not v.bought:
        if v.parsed is not None and _share([not p for p in v.parsed]) > UNPARSED_SHARE:
            return "invalid_format"
        if _share([not ok for ok in v.valid]) > INVALID_SHARE:
            return "invalid_actions"
        if repetition(v)[1] >= LOOP_REPEATS or len(v.searches) >= LOOP_SEARCHES:
            return "search_loop"
        return "out_of_turns"
    b = v.breakdown
    if b is None:
        return "other"
    if b["r_type"] < 1:
        return "wrong_type"
    if not b["price_ok"]:
        return "over_budget"
    if b["attributes_missing"]:
        return "missing_attributes"
    if b["options_missing"]:
        return "wrong_options"
    return "other"


# ---------------------------------------------------------------------------------------------- tables

def failure_table(items, name: str | None = None, split: str | None = None) -> pd.DataFrame:
    """One row per episode of ``items`` (an ``Evaluation`` or a list of episodes / trajectories): method, split,
    goal_index, category, class, reward, steps, instruction. ``name`` and ``split`` default to the Evaluation's
    (a trajectory knows its own split)."""
    name = name or getattr(items, "name", None) or "agent"
    split = split or getattr(items, "split", None)
    rows = []
    for item in _items(items):
        v = view(item)
        rows.append({"method": name, "split": split or v.split, "goal_index": v.goal_index, "category": v.category,
                     "class": classify(v), "reward": v.reward, "steps": v.steps, "instruction": v.instruction})
    return pd.DataFrame(rows, columns=["method", "split", "goal_index", "category", "class", "reward", "steps",
                                       "instruction"])


def _shares(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Share of each class within each group of ``by`` (columns ``CLASSES``, then ``episodes``)."""
    counts = pd.crosstab([table[c] for c in by], table["class"]).reindex(columns=list(CLASSES), fill_value=0)
    counts.columns.name = None
    episodes = counts.sum(axis=1)
    shares = counts.div(episodes, axis=0)
    shares["episodes"] = episodes
    return shares


def class_shares(tables) -> pd.DataFrame:
    """Share of each class (success included) per method, from one ``failure_table`` or a list of them: one row per
    method in the order given, the ``CLASSES`` columns sum to 1, then ``episodes``."""
    table = tables if isinstance(tables, pd.DataFrame) else pd.concat(list(tables), ignore_index=True)
    return _shares(table, ["method"]).reindex(table["method"].unique())


def per_category(table: pd.DataFrame) -> pd.DataFrame:
    """Share of each class per (method, category): which product categories fail, and how."""
    return _shares(table, ["method", "category"])


def examples(items, cls: str, k: int = 2) -> list:
    """The first ``k`` items of ``items`` labelled ``cls`` (to read, explain or show in the viewer)."""
    if cls not in CLASSES:
        raise ValueError(f"unknown class {cls!r}; choose one of {list(CLASSES)}")
    return list(itertools.islice((item for item in _items(items) if classify(item) == cls), k))


def option_decisions(items, name: str | None = None) -> pd.DataFrame:
    """The item-page decision per episode: one row per episode with the goal's number of options, whether an
    option value was clicked on an item page at all, how many different values were clicked on the item last
    opened and whether one of them was clicked again there, whether the purchase had every requested option
    (``options_missing`` empty), and success. Notebook 04 reads it to see whether RL taught what the
    demonstrations left out (a demonstrator that ignores options: ``ExpertAgent(skip_options=...)``)."""
    name = name or getattr(items, "name", None) or "agent"
    rows = []
    for item in _items(items):
        v = view(item)
        goal = _goal_of(v, default_catalog())
        clicked = any(ok and _item_page(obs) is not None and option_click(a)
                      for obs, a, ok in zip(v.observations, v.actions, v.valid))
        last_item = _last_item_clicks(v)
        b = v.breakdown
        rows.append({"method": name, "goal_index": v.goal_index, "options": len(goal.options) if goal else 0,
                     "clicked_option": bool(clicked), "values_clicked": len(set(last_item)),
                     "clicked_again": len(last_item) > len(set(last_item)),
                     "options_right": bool(b is not None and not b["options_missing"]), "success": v.success})
    return pd.DataFrame(rows, columns=OPTION_DECISION_COLUMNS)


OPTION_DECISION_COLUMNS = ["method", "goal_index", "options", "clicked_option", "values_clicked", "clicked_again",
                           "options_right", "success"]


def _last_item_clicks(v: EpisodeView) -> list[str]:
    """The option values clicked (valid clicks, in order) since the last results or search page: the clicks on the
    item opened last, the one bought when the episode bought."""
    clicks: list[str] = []
    for observation, action, ok in zip(v.observations, v.actions, v.valid):
        if _item_page(observation) is None:
            if parse_results(observation) or observation.endswith(pages.SEP + "Search"):
                clicks = []  # a results or search page: the next item starts with nothing selected
            continue
        if ok and option_click(action):
            clicks.append(action)
    return clicks


def option_progress(table: pd.DataFrame) -> pd.DataFrame:
    """Per method and number of options a goal asks for (goals without options left out), from an
    ``option_decisions`` table: the goals, the share where no option was clicked, where at least as many different
    values as asked were clicked, where a value was clicked again, where the purchase had every option right, and
    success. Where two-option goals fail: a second click that repeats the first is the page's fault (WebShop's text
    page looks the same after a click), a missing one the policy's."""
    part = table[table["options"] > 0].assign(
        no_click=lambda t: t["values_clicked"] == 0, enough=lambda t: t["values_clicked"] >= t["options"])
    grouped = part.groupby(["method", "options"], sort=False)
    return pd.DataFrame({"goals": grouped.size(), "no value clicked": grouped["no_click"].mean(),
                         "as many values as asked": grouped["enough"].mean(),
                         "a value clicked again": grouped["clicked_again"].mean(),
                         "every option right": grouped["options_right"].mean(),
                         "success": grouped["success"].mean()})


OPTION_RATES = {"option_clicked": "an option clicked", "options_right": "every option right",
                "success_with_options": "success (with options)",
                "success_without_options": "success (without options)"}
"""``option_rates``' keys and the column names ``option_summary`` gives them."""


def option_rates(table: pd.DataFrame) -> dict:
    """Of the goals of an ``option_decisions`` table that ask for options: the share where an option was clicked,
    where the purchase had them all, and the success rate; and the success rate on the goals without options (which
    the item-page decision cannot change). NaN where a group is empty."""
    with_options, without = table[table["options"] > 0], table[table["options"] == 0]

    def share(column, part):
        return float(part[column].mean()) if len(part) else float("nan")

    return {"option_goals": len(with_options), "option_clicked": share("clicked_option", with_options),
            "options_right": share("options_right", with_options),
            "success_with_options": share("success", with_options),
            "success_without_options": share("success", without)}


def option_columns(items, prefix: str = "") -> dict:
    """The ``OPTION_RATES`` of some episodes as result columns (``prefix`` + key): what every A*PO evaluation and
    pi_ref's row of ``train`` record."""
    rates = option_rates(option_decisions(items))
    return {prefix + key: rates[key] for key in OPTION_RATES}


def option_summary(tables) -> pd.DataFrame:
    """``option_rates`` per method (from one or several ``option_decisions`` tables), one row each, readable
    column names."""
    table = tables if isinstance(tables, pd.DataFrame) else pd.concat(list(tables), ignore_index=True)
    rows = []
    for method, part in table.groupby("method", sort=False):
        rates = option_rates(part)
        rows.append({"method": method, "goals with options": rates["option_goals"],
                     **{label: rates[key] for key, label in OPTION_RATES.items()},
                     "success (all)": float(part["success"].mean())})
    return pd.DataFrame(rows).set_index("method")


# ---------------------------------------------------------------------------------------------- explanations

def _item_page(observation: str) -> tuple[str, float] | None:
    """(title, price) of an item page, None for any other page."""
    parts = observation.split(pages.SEP)
    at = next((i for i, p in enumerate(parts) if p.startswith("Price: $")), None)
    if at is None or at == 0:
        return None
    return parts[at - 1], float(parts[at][len("Price: $"):])


def _goal_of(v: EpisodeView, catalog: Catalog) -> Goal | None:
    """The episode's goal: its own, else the catalog goal with its index and instruction."""
    if v.goal is not None:
        return v.goal
    splits = [v.split] if v.split in catalog.goals else list(catalog.goals)
    return next((g for s in splits for g in catalog.goals[s]
                 if g.index == v.goal_index and g.instruction == v.instruction), None)


def _product(title: str, price: float, catalog: Catalog) -> Product | None:
    return next((p for p in catalog.products if p.title == title and abs(p.price - price) < 0.005), None)


def bought_product(item, catalog: Catalog | None = None) -> Product | None:
    """The catalog product an episode bought (found by the title and price on the page where ``buy now`` was
    clicked); None when nothing was bought or no product matches."""
    v = view(item)
    page = _item_page(v.observations[-1]) if v.bought and v.observations else None
    return _product(*page, catalog or default_catalog()) if page else None


def _selected(v: EpisodeView, product: Product | None) -> list[str]:
    """Option values selected on the bought item's page when buying (clicked values when the product is unknown)."""
    chosen: dict[str, str] = {}
    for action in _last_item_clicks(v):  # a later click on the same option replaces the earlier one
        value = _CLICK.fullmatch(action).group(1)
        names = [n for n, vals in (product.options.items() if product else []) if value in map(normalize, vals)]
        chosen[names[0] if names else value] = value
    return list(chosen.values())


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _quoted(values) -> str:
    values = [f'"{x}"' for x in values]
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def explain(item, catalog: Catalog | None = None) -> str:
    """A paragraph in plain English, built from the episode's data: the goal, what was searched, what was opened or
    bought, what the reward found missing, the price against the budget, and the class with its rule."""
    v = view(item)
    catalog = catalog or default_catalog()
    goal = _goal_of(v, catalog)
    cls = classify(v)
    budget = goal.price_upper if goal else parse_budget(v.instruction)
    text = [f'The goal was "{v.instruction}"'
            + (f' (target: "{goal.target_title}", product type "{goal.product_type}").' if goal else ".")]
    invalid, unparsed = v.valid.count(False), (v.parsed or ()).count(False)
    problems = ", ".join(f"{n} {what}" for n, what in ((invalid, "invalid"), (unparsed, "unparsed")) if n)
    queries = v.searches
    searched = (f"searched {_times(len(queries))} ({_quoted(queries[:4])}"
                f"{', ...' if len(queries) > 4 else ''})" if queries else "never searched")
    text.append(f"In {v.steps} step{'s' * (v.steps != 1)}{f' ({problems})' if problems else ''} the agent {searched}.")
    if not v.bought:
        opened = list(dict.fromkeys(page[0] for o in v.observations if (page := _item_page(o))))
        text.append((f"It opened {len(opened)} item{'s' * (len(opened) != 1)} "
                     f"({_quoted(opened[:3])}{', ...' if len(opened) > 3 else ''})" if opened else "It opened no item")
                    + " and never bought anything.")
        action, count = repetition(v)
        if count > 1:
            text.append(f'It took "{action}" {_times(count)} on the same page.')
    else:
        page = _item_page(v.observations[-1]) if v.observations else None
        b = v.breakdown or {}
        if page:
            title, price = page
            over = price > budget
            text.append(f'It bought "{title}" for ${price:.2f}, {"over" if over else "within"} the budget of '
                        f"${budget:.2f}" + (f" by ${price - budget:.2f}." if over else "."))
            selected = _selected(v, _product(title, price, catalog))
            text.append(f"It selected {_quoted(selected)}." if selected else "It selected no option.")
        else:
            text.append(f"It bought a product {'within' if b.get('price_ok') else 'over'} the budget of ${budget:.2f}.")
        if b.get("r_type", 1) < 1:
            wanted = f'"{goal.product_type}"' if goal else "another type"
            text.append(f"That is the wrong kind of product: the goal wants the type {wanted} "
                        f"(type reward {b['r_type']:g}, {b['title_score']:.0%} of the type's words in the title).")
        if b.get("attributes_missing"):
            text.append(f"It lacks the attribute{'s' * (len(b['attributes_missing']) > 1)} "
                        f"{_quoted(b['attributes_missing'])} the goal asks for.")
        if b.get("options_missing"):
            text.append(f"The goal's option value{'s' * (len(b['options_missing']) > 1)} "
                        f"{_quoted(b['options_missing'])} {'was' if len(b['options_missing']) == 1 else 'were'} "
                        "not selected.")
    text.append(f"Reward {v.reward:.2f}. Class: {cls}"
                + (f" ({FAILURE_CLASSES[cls]})." if cls in FAILURE_CLASSES else "."))
    return " ".join(text)


# ---------------------------------------------------------------------------------------------- figure

def plot_failure_classes(shares: pd.DataFrame, path=None, title: str = "How episodes end", ax=None):
    """Stacked horizontal bars: per method (row of ``class_shares``), the share of each class, in the fixed
    ``CLASS_COLORS``. ``path``: a figure name (saved as ``figures/<name>.png``) or a ``.png`` path; saved with
    ``plots.save``. Returns the figure."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7, 0.5 + 0.45 * max(1, len(shares))))
    present = [c for c in CLASSES if c in shares and shares[c].sum() > 0]
    left = pd.Series(0.0, index=shares.index)
    labels = [str(m) for m in shares.index]
    for cls in present:
        ax.barh(labels, shares[cls], left=left, color=CLASS_COLORS[cls], label=cls, edgecolor="white", linewidth=0.5)
        left = left + shares[cls]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()  # the first method on top
    ax.set_xlabel("share of episodes")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if path is not None:
        path = Path(path)
        if path.suffix == ".png":
            save(fig, path.stem, path.parent)
        else:
            save(fig, str(path), figures_dir())
    return fig
