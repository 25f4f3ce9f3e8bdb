"""Where a run's failed purchases go, before and after RL (notebook 04 section 8).

A run's test success says how many goals it gained; the failure taxonomy (``analysis.failures``) says which
mistakes it stopped making and which it left. ``run_purchases`` plays pi_ref and every seed's final policy of one
or more ``train`` runs greedily on the first goals of a split and labels each episode with its failure class. Two
columns say what the results page offered where the episode chose its product (the last results page it saw):

- ``target_listed``: the product the goal was written from stood on that page;
- ``in_budget_listed``: some product of the goal's type within the goal's budget stood on that page.

An ``over_budget`` purchase with ``in_budget_listed`` is a results-page choice that a click on the same page could
have mended (the product might still lack an attribute or an option); one without it started from a query whose
results offered nothing affordable of the right type.

``python -m apo_helpers purchases --run RUN ... --save`` merges the rows into
``data/results/purchases_<profile>.csv`` (one row per run, policy and goal); ``purchase_summary`` counts the
classes per run and policy, the seeds averaged.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..config import RUNS_DIR, Profile, device
from ..policy.models import load_policy, with_rendering
from ..policy.rollout import GREEDY, rollout
from ..webshop.agents import parse_results
from ..webshop.catalog import Catalog, default_catalog
from .evaluate import policy_goals
from .failures import CLASSES, classify, view
from .generalization import run_seeds

PURCHASE_COLUMNS = ["run", "policy", "split", "goal_index", "class", "reward", "target_listed", "in_budget_listed"]


def results_offer(item, catalog: Catalog | None = None) -> dict:
    """What the last results page an episode saw offered its goal: ``target_listed`` and ``in_budget_listed`` (see
    the module); both False when the episode never reached a results page. Needs the goal (a trajectory)."""
    v = view(item)
    if v.goal is None:
        raise ValueError("results_offer needs the episode's goal: pass a policy.rollout.Trajectory")
    catalog = catalog or default_catalog()
    pages = [o for o in v.observations if parse_results(o)]
    listed = [asin.upper() for asin, _, _ in parse_results(pages[-1])] if pages else []
    products = catalog.by_asin
    in_budget = [a for a in listed if a in products and products[a].product_type == v.goal.product_type
                 and products[a].price <= v.goal.price_upper]
    return {"target_listed": v.goal.asin.upper() in listed, "in_budget_listed": bool(in_budget)}


def purchase_rows(trajectories, run: str, policy: str, catalog: Catalog | None = None) -> list[dict]:
    """One row per episode: its failure class, reward and ``results_offer``."""
    rows = []
    for t in trajectories:
        rows.append({"run": run, "policy": policy, "split": t.goal.split, "goal_index": t.goal.index,
                     "class": classify(t), "reward": float(t.env_reward), **results_offer(t, catalog)})
    return rows


def run_purchases(run_dir, profile: Profile, split: str = "test", episodes: int | None = 200, runs_dir=RUNS_DIR,
                  progress: bool = True) -> pd.DataFrame:
    """pi_ref and each seed's final policy of a ``train`` run, greedy on the first ``episodes`` goals of ``split``:
    ``purchase_rows`` for each (pi_ref is the run's, ``runs_dir / <its ref>``, rendered as it was trained)."""
    run_dir = Path(run_dir)
    seeds = run_seeds(run_dir)
    ref_dir = Path(runs_dir) / seeds[0]["ref"]
    profile = with_rendering(profile, ref_dir)
    goals = policy_goals(split, episodes)
    policies = [("pi_ref", ref_dir)] + [(f"seed {s['seed']}", s["folder"] / "policy") for s in seeds]
    bar = tqdm(total=len(policies) * len(goals), desc=f"greedy: {run_dir.name}", disable=not progress)
    rows = []
    for name, folder in policies:
        model, tokenizer = load_policy(folder, device())
        trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env(), progress=bar)
        rows += purchase_rows(trajectories, run_dir.name, name)
    bar.close()
    return pd.DataFrame(rows, columns=PURCHASE_COLUMNS)


def purchase_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: pi_ref's episodes per class and the seeds' mean, then the ``over_budget`` purchases made while a
    product of the goal's type within the budget stood on the same results page (``over budget, one in budget
    listed``). Counts of episodes, the seeds' mean a float."""
    table = table.assign(who=table["policy"].where(table["policy"] == "pi_ref", "seeds (mean)"),
                         mendable=(table["class"] == "over_budget") & table["in_budget_listed"])
    counts = pd.crosstab([table["run"], table["who"], table["policy"]], table["class"])
    counts = counts.reindex(columns=[c for c in CLASSES if c in counts.columns], fill_value=0)
    counts["over budget, one in budget listed"] = table.groupby(["run", "who", "policy"])["mendable"].sum()
    summary = counts.groupby(level=["run", "who"], sort=False).mean()
    summary.columns.name = None
    return summary
