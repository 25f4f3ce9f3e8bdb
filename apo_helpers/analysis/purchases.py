"""Where a run's failed purchases go, before and after RL (notebook 04 section 8).

A run's test success says how many goals it gained; the failure taxonomy (``analysis.failures``) says which
mistakes it stopped making and which it left. ``run_purchases`` plays pi_ref and every seed's final policy of one
or more ``train`` runs greedily on the first goals of a split and labels each episode with its failure class. Two
columns say what the results page offered where the episode chose its product (the last results page it saw):

- ``target_listed``: the product the goal was written from stood on that page;
- ``in_budget_listed``: some product of the goal's type within the goal's budget stood on that page;
- ``query_copied``: the episode's first action searched for its whole instruction, exactly as shown
  (``evaluate.copied_query``; what the demonstrations type);
- ``query_as_taught``: the episode's first action is the search the run's pi_ref saw demonstrated
  (``evaluate.taught_query`` with its ``demo_query``: ``query_copied`` for a demonstrator that typed the whole
  instruction; the instruction's description for ``train-ref --query description``);
- ``query_logprob``: the log-probability the policy gives that exact search (the reply ``explore_search`` draws)
  as its answer to the goal's first page (``exact_query_logprobs``): how far a garbled query is from a copy.

An ``over_budget`` purchase with ``in_budget_listed`` is a results-page choice that a click on the same page could
have mended (the product might still lack an attribute or an option); one without it started from a query whose
results offered nothing affordable of the right type.

``python -m apo_helpers purchases --run RUN ... --save`` merges the rows into
``data/results/purchases_<profile>.csv`` (one row per run, policy and goal); ``purchase_summary`` counts the
classes per run and policy, the seeds averaged; ``copy_summary`` sets the episodes whose query copied the instruction
beside those whose query garbled it (the held recipe types the query greedily and leaves it to pi_ref), with the
mean ``query_logprob`` on each side.

A probe holds the state fixed, as ``analysis.decisions`` does for the item page: ``over_budget_pages`` keeps the
results pages where pi_ref's greedy episode chose a product above the budget while one of the goal's type within
it was listed, and ``affordable_click_rates`` asks each policy how likely it opens such a product there (16 samples
at temperature 1, and greedily). ``purchases --run RUN ... --probe --save`` writes
``data/results/results_choices_<profile>.csv``; ``choice_summary`` sets each policy beside a uniform draw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..config import RUNS_DIR, Profile, device, seed_everything
from ..policy.models import load_policy, with_rendering
from ..policy.prompts import Turn, build_messages, format_response, parse_response, prompt_actions
from ..policy.rollout import GREEDY, Sampling, reply_logprobs, rollout
from ..webshop.agents import instruction_search, parse_results
from ..webshop.env import WebShopEnv
from ..webshop.catalog import Catalog, Goal, default_catalog
from .decisions import batched_replies
from .evaluate import copied_query, policy_goals, taught_query
from .failures import CLASSES, classify, view
from .generalization import run_seeds

PURCHASE_COLUMNS = ["run", "policy", "split", "goal_index", "class", "reward", "target_listed", "in_budget_listed",
                    "query_copied", "query_logprob", "query_as_taught"]


def _affordable(asin: str, goal: Goal, catalog: Catalog) -> bool:
    """Whether the listed product ``asin`` is of the goal's type and within its budget."""
    product = catalog.by_asin.get(asin.upper())
    return product is not None and product.product_type == goal.product_type and product.price <= goal.price_upper


def results_offer(item, catalog: Catalog | None = None) -> dict:
    """What the last results page an episode saw offered its goal: ``target_listed`` and ``in_budget_listed`` (see
    the module); both False when the episode never reached a results page. Needs the goal (a trajectory)."""
    v = view(item)
    if v.goal is None:
        raise ValueError("results_offer needs the episode's goal: pass a policy.rollout.Trajectory")
    catalog = catalog or default_catalog()
    pages = [o for o in v.observations if parse_results(o)]
    listed = [asin.upper() for asin, _, _ in parse_results(pages[-1])] if pages else []
    return {"target_listed": v.goal.asin.upper() in listed,
            "in_budget_listed": any(_affordable(a, v.goal, catalog) for a in listed)}


def purchase_rows(trajectories, run: str, policy: str, catalog: Catalog | None = None,
                  query: str = "instruction") -> list[dict]:
    """One row per episode: its failure class, reward, ``results_offer``, whether its query copied the
    instruction and whether it is the search of the demonstrator's ``query`` kind."""
    rows = []
    for t in trajectories:
        rows.append({"run": run, "policy": policy, "split": t.goal.split, "goal_index": t.goal.index,
                     "class": classify(t), "reward": float(t.env_reward), **results_offer(t, catalog),
                     "query_copied": copied_query(t), "query_as_taught": taught_query(t, query)})
    return rows


def demonstrated_query(ref_dir) -> str:
    """What the demonstrator of the pi_ref in ``ref_dir`` searched (its ``metrics.json``'s ``demo_query``;
    ``instruction``, the default, where the file predates it or is missing)."""
    path = Path(ref_dir) / "metrics.json"
    return json.loads(path.read_text()).get("demo_query", "instruction") if path.exists() else "instruction"


def exact_query_logprobs(model, tokenizer, goals: list[Goal], profile: Profile,
                         catalog: Catalog | None = None) -> list[float]:
    """Per goal, log pi of the search for the whole instruction (the rule agent's query with its think, the reply
    ``explore_search`` draws) as the answer to the goal's first page, summed over the reply's tokens. Near 0 where
    the greedy query copies the instruction; a garbled greedy query leaves it as low as the copy is unlikely."""
    catalog = catalog or default_catalog()
    env = WebShopEnv(catalog=catalog, config=profile.policy_env())
    values = []
    for goal in goals:
        observation, info = env.reset(options={"goal": goal})
        turn = Turn(observation, prompt_actions(info["available_actions"]), info["turns_left"])
        reply = format_response(*instruction_search(observation))
        values.append(reply_logprobs(model, tokenizer, [turn], [reply], profile.policy).item())
    return values


def _run_policies(run_dir: Path, profile: Profile, runs_dir) -> tuple[Profile, list[tuple[str, Path]]]:
    """The profile rendered as the run's pi_ref was trained, and ``(name, folder)`` of pi_ref then each seed's final
    policy."""
    seeds = run_seeds(run_dir)
    ref_dir = Path(runs_dir) / seeds[0]["ref"]
    return (with_rendering(profile, ref_dir),
            [("pi_ref", ref_dir)] + [(f"seed {s['seed']}", s["folder"] / "policy") for s in seeds])


def run_purchases(run_dir, profile: Profile, split: str = "test", episodes: int | None = 200, runs_dir=RUNS_DIR,
                  progress: bool = True) -> pd.DataFrame:
    """pi_ref and each seed's final policy of a ``train`` run, greedy on the first ``episodes`` goals of ``split``:
    ``purchase_rows`` for each (pi_ref is the run's, ``runs_dir / <its ref>``, rendered as it was trained)."""
    run_dir = Path(run_dir)
    profile, policies = _run_policies(run_dir, profile, runs_dir)
    query = demonstrated_query(policies[0][1])
    goals = policy_goals(split, episodes)
    bar = tqdm(total=len(policies) * len(goals), desc=f"greedy: {run_dir.name}", disable=not progress)
    rows = []
    for name, folder in policies:
        model, tokenizer = load_policy(folder, device())
        trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env(), progress=bar)
        logprobs = exact_query_logprobs(model, tokenizer, goals, profile)
        played = purchase_rows(trajectories, run_dir.name, name, query=query)
        rows += [{**row, "query_logprob": lp} for row, lp in zip(played, logprobs)]
    bar.close()
    return pd.DataFrame(rows, columns=PURCHASE_COLUMNS)


def purchase_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: pi_ref's episodes per class and the seeds' mean, then the ``over_budget`` purchases made while a
    product of the goal's type within the budget stood on the same results page (``over budget, one in budget
    listed``). Counts of episodes, the seeds' mean a float."""
    table = _by_who(table).assign(mendable=(table["class"] == "over_budget") & table["in_budget_listed"])
    counts = pd.crosstab([table["run"], table["who"], table["policy"]], table["class"])
    counts = counts.reindex(columns=[c for c in CLASSES if c in counts.columns], fill_value=0)
    counts["over budget, one in budget listed"] = table.groupby(["run", "who", "policy"])["mendable"].sum()
    summary = counts.groupby(level=["run", "who"], sort=False).mean()
    summary.columns.name = None
    return summary


def copy_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per run (notebook 07 section 3): pi_ref's and the seeds' (mean) episodes whose first query copied the
    instruction exactly, success among them and among the rest, and the ``missing_attributes`` purchases that
    followed a garbled query: a share of episodes or a count per policy, the seeds averaged; and the mean
    log-probability of the exact query where it was copied and where it garbled (``query_logprob``; NaN for rows
    saved before it was recorded). Rows saved before the ``query_copied`` column existed are left out."""
    if "query_copied" not in table.columns:
        raise ValueError("copy_summary needs the query_copied column: rerun `purchases --run RUN ... --save`")
    table = table.dropna(subset=["query_copied"])
    copied = table["query_copied"].astype(str).str.lower() == "true"  # text when read back from the CSV
    success, missing = (table["class"] == "success").astype(float), table["class"] == "missing_attributes"
    logprob = table["query_logprob"] if "query_logprob" in table.columns else pd.Series(float("nan"), table.index)
    table = _by_who(table).assign(copied=copied, success_exact=success.where(copied), missing=missing,
                                  success_garbled=success.where(~copied), missing_after_garbled=missing & ~copied,
                                  logprob_exact=logprob.where(copied), logprob_garbled=logprob.where(~copied))
    per_policy = table.groupby(["run", "who", "policy"], sort=False).agg(
        **{"episodes": ("copied", "size"), "exact query": ("copied", "mean"),
           "success, exact query": ("success_exact", "mean"), "success, garbled query": ("success_garbled", "mean"),
           "missing attributes after a garbled query": ("missing_after_garbled", "sum"),
           "missing attributes": ("missing", "sum"),
           "log π of the exact query, copied": ("logprob_exact", "mean"),
           "log π of the exact query, garbled": ("logprob_garbled", "mean")})
    return per_policy.groupby(level=["run", "who"], sort=False).mean()


def _by_who(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with a ``who`` column: ``pi_ref``, or ``seeds (mean)`` for every seed (the summaries average them)."""
    return table.assign(who=table["policy"].where(table["policy"] == "pi_ref", "seeds (mean)"))


# ---------------------------------------------------------------------------------------------- the results page, probed

CHOICE_COLUMNS = ["policy", "goal_index", "products", "affordable", "samples", "p_affordable", "greedy_affordable"]


@dataclass
class ResultsPage:
    """One state of the probe: a goal, the chat a policy answers on the results page where a greedy episode chose
    a product above the budget, and the clicks on that page that open a product of the goal's type within it."""

    goal: Goal
    chat: list[dict]
    products: int
    affordable: list[str]


def _product_click(asin: str, position: int, actions: list[str]) -> str:
    """How the page's ``actions`` name the product at ``position`` (from 1): by position or by ASIN."""
    by_position = f"click[item {position}]"
    return by_position if by_position in actions else f"click[{asin.lower()}]"


def over_budget_pages(model, tokenizer, split: str, episodes: int | None, profile: Profile,
                      catalog: Catalog | None = None) -> list[ResultsPage]:
    """Of the first ``episodes`` goals of ``split``, those whose greedy episode by ``model`` bought above the budget
    while its last results page listed a product of the goal's type within the budget: that page, as the policy
    saw it (before its reply)."""
    catalog = catalog or default_catalog()
    goals = policy_goals(split, episodes)
    trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env())
    states = []
    for goal, t in zip(goals, trajectories):
        pages = [k for k, u in enumerate(t.turns) if parse_results(u.observation)]
        if classify(t) != "over_budget" or not pages:
            continue
        turn = t.turns[pages[-1]]
        listed = parse_results(turn.observation)
        affordable = [_product_click(asin, i + 1, turn.actions) for i, (asin, _, _) in enumerate(listed)
                      if _affordable(asin, goal, catalog)]
        if affordable:
            states.append(ResultsPage(goal, build_messages(t.turns[: pages[-1] + 1], profile.policy.window),
                                      len(listed), affordable))
    return states


def affordable_click_rates(model, tokenizer, states: list[ResultsPage], profile: Profile, name: str,
                           samples: int = 16, seed: int = 0, progress: bool = False) -> pd.DataFrame:
    """One row per state: the share of ``samples`` replies (temperature 1) that open an affordable product of the
    goal's type, and whether the greedy reply does."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    seed_everything(seed)
    sampled = batched_replies(model, tokenizer, [s.chat for s in states for _ in range(samples)],
                              Sampling(temperature=1.0), profile, f"{name}: replies" if progress else None)
    greedy = batched_replies(model, tokenizer, [s.chat for s in states], GREEDY, profile)
    rows = []
    for i, state in enumerate(states):
        actions = [parse_response(r)[1] for r in sampled[i * samples: (i + 1) * samples]]
        rows.append({"policy": name, "goal_index": state.goal.index, "products": state.products,
                     "affordable": len(state.affordable), "samples": samples,
                     "p_affordable": sum(a in state.affordable for a in actions) / samples,
                     "greedy_affordable": parse_response(greedy[i])[1] in state.affordable})
    return pd.DataFrame(rows, columns=CHOICE_COLUMNS)


def run_choices(run_dir, profile: Profile, split: str = "test", episodes: int | None = 200, samples: int = 16,
                runs_dir=RUNS_DIR, progress: bool = True) -> pd.DataFrame:
    """``affordable_click_rates`` of pi_ref and each seed's final policy of a run at pi_ref's ``over_budget_pages``
    (the same states for every policy); the ``run`` column names the run."""
    run_dir = Path(run_dir)
    profile, policies = _run_policies(run_dir, profile, runs_dir)
    states, tables = None, []
    for name, folder in policies:  # pi_ref first: its greedy episodes give the states
        model, tokenizer = load_policy(folder, device())
        states = states if states is not None else over_budget_pages(model, tokenizer, split, episodes, profile)
        tables.append(affordable_click_rates(model, tokenizer, states, profile, name, samples, progress=progress))
    return pd.concat(tables, ignore_index=True).assign(run=run_dir.name)


def choice_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per run and policy: the states, the mean sampled probability of opening an affordable product of the goal's
    type, the share of states whose greedy reply does, and what a uniform draw over the page's products would give."""
    grouped = table.assign(uniform=table["affordable"] / table["products"]).groupby(["run", "policy"], sort=False)
    return pd.DataFrame({"states": grouped.size(), "p(affordable)": grouped["p_affordable"].mean(),
                         "greedy: affordable": grouped["greedy_affordable"].mean(),
                         "uniform draw": grouped["uniform"].mean()})
