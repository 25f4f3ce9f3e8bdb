"""Seen and unseen goals: did a run's gains reach the goals it never trained on? (notebook 04 section 6)

A run's held-out score answers two questions at once: did the policy get better at the goals it practised, and did
that carry over to goals it has never seen. ``seen_and_unseen`` separates them. It plays pi_ref and every seed's
final policy greedily on

- ``trained on``: the run's own training goals (stage 1 with the run's settings, read from the V* cache), and
- ``unseen, all``: every goal of the held-out splits (val and test), and
- ``unseen, samples disagree``: the held-out goals chosen the way the training goals were chosen with
  ``keep_disagreeing`` (N samples of pi_ref, drawn as in stage 1, include a success and a failure), so that before
  training the two groups are alike: goals pi_ref solves sometimes, not always.

If the policies gain on the first group and not on the second, the update fitted the goals it practised and did
not learn the rule behind them. ``generalization_gains`` puts the seeds' mean gain over pi_ref per group side by
side; ``sharpening_ceiling`` says how much solving every disagreeing unseen goal could add to success on all of
them, the most an update that learns only where pi_ref's samples disagree can gain. ``reference_only`` measures
the unseen groups of a pi_ref alone (for a run whose policies were not kept).

``python -m apo_helpers generalization --run runs/apo_demos300_class --ref runs/pi_ref_class --save`` merges its
rows into ``data/results/generalization_<profile>.csv`` (one row per run, policy and group of goals).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..apo.sft import with_reference_goals
from ..apo.vstar import stage1
from ..config import RUNS_DIR, Profile, device, with_overrides
from ..policy.models import load_policy, with_rendering
from ..policy.rollout import GREEDY, rollout
from .evaluate import policy_goals

GROUPS = ("trained on", "unseen, samples disagree", "unseen, all")
GENERALIZATION_COLUMNS = ["run", "ref", "policy", "goals", "n_goals", "greedy_success", "mean_score"]


def run_seeds(run_dir) -> list[dict]:
    """The ``metrics.json`` of every ``seed_*`` folder of a ``train`` run that saved its final policy, by seed; a
    clear error when there is none or when the seeds disagree on pi_ref, the settings or the V* table (a re-anchored
    run's seeds each have their own, from their own earlier policies: ``train --ref .../seed_{seed}/policy``)."""
    run_dir = Path(run_dir)
    seeds = []
    for folder in sorted(run_dir.glob("seed_*")):
        if (folder / "metrics.json").exists() and (folder / "policy").is_dir():
            seeds.append({**json.loads((folder / "metrics.json").read_text()), "folder": folder})
    if not seeds:
        raise FileNotFoundError(f"{run_dir}: no seed_*/ folder with metrics.json and policy/ (a finished `train` run)")
    reanchored = any(s.get("ref_rounds") for s in seeds)
    for field in ("ref", "apo_overrides", "profile", "ref_rounds", *(() if reanchored else ("vstar_key",))):
        values = {str(s.get(field)) for s in seeds}
        if len(values) > 1:
            raise ValueError(f"{run_dir}: the seeds disagree on {field} ({sorted(values)}); compare one recipe per run")
    return sorted(seeds, key=lambda s: s["seed"])


def disagreeing_goals(model, tokenizer, goals, profile: Profile, progress: bool = True, cache_dir=None):
    """The goals among ``goals`` on which N samples of ``model``, drawn as stage 1 draws them, include a success and
    a failure (the rule of ``APOConfig.keep_disagreeing``, applied by the same ``filter_goals``).

    The samples are stage 1's on these goals, seeded with the profile's seed; with ``cache_dir`` they are kept under
    the same kind of key as a V* table, so every run from one pi_ref and sampling settings shares them instead of
    drawing them again (minutes per run at the larger sizes)."""
    only_disagreeing = dataclasses.replace(profile.apo, keep_disagreeing=True, keep_varying=False, drop_unsolved=False)
    return stage1(model, tokenizer, dataclasses.replace(profile, apo=only_disagreeing), cache_dir, goals=goals,
                  seed=profile.seed, progress=progress).goals()


def greedy_results(model, tokenizer, goals, profile: Profile, progress=None) -> dict:
    """Greedy episodes of ``model`` on ``goals``: ``{(split, goal_index): (success, reward)}``."""
    trajectories = rollout(model, tokenizer, goals, GREEDY, profile.policy, profile.policy_env(), progress=progress)
    return {(g.split, g.index): (bool(t.success), float(t.env_reward)) for g, t in zip(goals, trajectories)}


def seen_and_unseen(run_dir, profile: Profile, vstar_dir=RUNS_DIR / "vstar", runs_dir=RUNS_DIR,
                    unseen_splits=("val", "test"), unseen_goals: int | None = None,
                    progress: bool = True) -> pd.DataFrame:
    """Greedy success of pi_ref and of each seed's final policy on the run's training goals and on unseen goals
    (``GROUPS``); ``unseen_goals`` caps the goals taken from each held-out split (None: all of them).

    The run's pi_ref is ``runs_dir / <its ref>``; its settings come from the seeds' ``apo_overrides``, and stage 1
    must find the V* table the run trained on (``vstar_key``) in ``vstar_dir``, or sample it again."""
    run_dir = Path(run_dir)
    seeds = run_seeds(run_dir)
    first = seeds[0]
    if first.get("profile") and first["profile"] != profile.name:
        raise ValueError(f"{run_dir} was trained under the {first['profile']!r} profile, not {profile.name!r}")
    if first.get("ref_rounds"):
        raise ValueError(f"{run_dir} was re-anchored: each seed trained on goals chosen from its own earlier policy's "
                         f"samples, so there is no one set of goals it trained on; measure the run it continued")
    ref_dir = Path(runs_dir) / first["ref"]
    profile = with_rendering(with_overrides(profile, (first.get("apo_overrides") or "").split()), ref_dir)
    profile = with_reference_goals(profile, ref_dir)  # the stage-1 goals the run trained on
    ref_model, tokenizer = load_policy(ref_dir, device())
    trained = stage1(ref_model, tokenizer, profile, vstar_dir, progress=progress)
    if trained.key != first["vstar_key"]:
        raise ValueError(f"{run_dir} trained on the V* table {first['vstar_key']}, but its pi_ref ({ref_dir}) and "
                         f"settings give {trained.key}: is {ref_dir} the pi_ref it started from?")
    groups = {"trained on": trained.goals(),
              **unseen_groups(ref_model, tokenizer, profile, unseen_splits, unseen_goals, progress, vstar_dir)}
    policies = [("pi_ref", ref_model)] + [(f"seed {s['seed']}", s["folder"] / "policy") for s in seeds]
    return _greedy_rows(policies, tokenizer, groups, profile, run_dir.name, first["ref"], progress)


def reference_only(ref_dir, profile: Profile, unseen_splits=("val", "test"), unseen_goals: int | None = None,
                   progress: bool = True, vstar_dir=None) -> pd.DataFrame:
    """The unseen groups of ``seen_and_unseen`` for a pi_ref alone (the profile's sampling settings): how many held-out
    goals a run from it could sharpen, before any run exists or when its policies were not kept. The rows' run is
    the pi_ref folder's name."""
    ref_dir = Path(ref_dir)
    profile = with_rendering(profile, ref_dir)
    ref_model, tokenizer = load_policy(ref_dir, device())
    groups = unseen_groups(ref_model, tokenizer, profile, unseen_splits, unseen_goals, progress, vstar_dir)
    return _greedy_rows([("pi_ref", ref_model)], tokenizer, groups, profile, ref_dir.name, ref_dir.name, progress)


def unseen_groups(ref_model, tokenizer, profile: Profile, splits, goals_per_split: int | None,
                  progress: bool = True, cache_dir=None) -> dict:
    """``{"unseen, samples disagree": [...], "unseen, all": [...]}`` over the first goals of ``splits`` (pi_ref's
    samples cached under ``cache_dir`` when given: ``disagreeing_goals``)."""
    unseen = [g for split in splits for g in policy_goals(split, goals_per_split)]
    return {"unseen, samples disagree": disagreeing_goals(ref_model, tokenizer, unseen, profile, progress, cache_dir),
            "unseen, all": unseen}


def _greedy_rows(policies, tokenizer, groups: dict, profile: Profile, run: str, ref: str, progress: bool):
    """One row per policy and group: greedy success and mean score (one episode per distinct goal and policy)."""
    subsets_last = sorted(groups, key=lambda name: name == GROUPS[1])  # the disagreeing goals are among "all"
    played = list({(g.split, g.index): g for name in subsets_last for g in groups[name]}.values())
    bar = tqdm(total=len(policies) * len(played), desc=f"greedy: {run}", disable=not progress)
    rows = []
    for name, model in policies:
        if not hasattr(model, "generate"):  # a folder: load it only when its turn comes
            model, _ = load_policy(model, device())
        results = greedy_results(model, tokenizer, played, profile, progress=bar)
        for group, goals in groups.items():
            outcomes = [results[(g.split, g.index)] for g in goals]
            rows.append({"run": run, "ref": ref, "policy": name, "goals": group, "n_goals": len(goals),
                         "greedy_success": sum(s for s, _ in outcomes) / len(goals) if goals else float("nan"),
                         "mean_score": sum(r for _, r in outcomes) / len(goals) if goals else float("nan")})
    bar.close()
    return pd.DataFrame(rows, columns=GENERALIZATION_COLUMNS)


def generalization_gains(table: pd.DataFrame) -> pd.DataFrame:
    """Per run (in the table's order) and group of goals (in ``GROUPS``' order): pi_ref's greedy success, the seeds'
    mean and spread, and the gain. A pi_ref measured alone (``reference_only``) has no seeds and no row here."""
    rows = []
    for run in dict.fromkeys(table["run"]):
        for group in GROUPS:
            part = table[(table["run"] == run) & (table["goals"] == group)]
            if part.empty:
                continue
            ref = part[part["policy"] == "pi_ref"]["greedy_success"]
            seeds = part[part["policy"] != "pi_ref"]["greedy_success"]
            if ref.empty:
                raise ValueError(f"run {run!r}, goals {group!r}: needs a pi_ref row")
            if seeds.empty:
                continue
            rows.append({"run": run, "goals": group, "goals played": int(part["n_goals"].iloc[0]),
                         "π_ref": float(ref.iloc[0]), "A*PO (mean of seeds)": float(seeds.mean()),
                         "std over seeds": float(seeds.std(ddof=0)), "gain": float(seeds.mean() - ref.iloc[0]),
                         "seeds": len(seeds)})
    return pd.DataFrame(rows, columns=["run", "goals", "goals played", "π_ref", "A*PO (mean of seeds)",
                                       "std over seeds", "gain", "seeds"])


def sharpening_ceiling(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: what greedy success on all unseen goals could gain if the policy solved every unseen goal whose
    pi_ref samples disagree (those pi_ref's greedy play fails: ``n_disagree * (1 - success there) / n_all``),
    against the seeds' measured gain. Goals whose samples all fail give A*PO's target nothing to point to, so an
    update that learns only where pi_ref's samples disagree gains at most this much."""
    rows = []
    for run, part in table.groupby("run", sort=False):
        ref = part[part["policy"] == "pi_ref"].set_index("goals")
        seeds = part[part["policy"] != "pi_ref"]
        if not set(GROUPS[1:]) <= set(ref.index):
            raise ValueError(f"run {run!r}: needs pi_ref rows for {GROUPS[1]!r} and {GROUPS[2]!r}")
        n_disagree, n_all = int(ref.loc[GROUPS[1], "n_goals"]), int(ref.loc[GROUPS[2], "n_goals"])
        fails = n_disagree * (1 - ref.loc[GROUPS[1], "greedy_success"]) if n_disagree else 0.0
        measured = (seeds[seeds["goals"] == GROUPS[2]]["greedy_success"].mean() - ref.loc[GROUPS[2], "greedy_success"]
                    if len(seeds) else float("nan"))  # NaN for a pi_ref measured alone
        rows.append({"run": run, "seeds": seeds["policy"].nunique(), "unseen goals": n_all,
                     "share whose samples disagree": n_disagree / n_all,
                     "π_ref greedy success there": ref.loc[GROUPS[1], "greedy_success"],
                     "most gain from them": fails / n_all, "measured gain (all unseen)": float(measured)})
    return pd.DataFrame(rows)
