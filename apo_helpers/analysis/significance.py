"""How sure is a gain? Paired bootstrap intervals over the test goals and the seeds (notebook 07 section 3).

A run's test success is the mean over 200 goals of each seed's greedy episode, and two draws of chance move it: which
seeds were trained (the spread over seeds that the README tables report) and which goals the test split happens to
hold. The goals are shared: pi_ref and every policy play the same 200, so a comparison is paired. ``gain_interval``
resamples both at once, B times: the goals with replacement (one draw for both policies, which keeps the pairing)
and, independently for each policy, its seeds with replacement; the gain of a draw is the mean over the drawn goals
of the policy's mean success over its drawn seeds minus the baseline's. The 2.5th and 97.5th percentiles of the B
gains bound a 95% interval. It answers "could another 200 goals, or three other seeds, have told a different
story?", which the spread over seeds alone does not.

The per-goal outcomes come from ``run_outcomes`` (every seed's final policy of a ``train`` run, and the run's first
pi_ref, greedy on a split), saved with ``python -m apo_helpers outcomes --run runs/NAME_class ... --save`` to
``data/results/goal_outcomes_<profile>.csv``, one row per policy, seed and goal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..config import RESULTS_DIR, RUNS_DIR, TARGET_GAIN, Profile, device, get_profile, with_overrides
from ..policy.models import load_policy, with_rendering
from .evaluate import policy_goals
from .generalization import greedy_results, run_seeds

OUTCOME_COLUMNS = ["policy", "seed", "split", "goal_index", "success", "score"]
"""``policy``: a run's table name (its folder without the profile suffix) or a policy folder's name (a pi_ref, a
soup); ``seed``: the seed of a run's policy, ``SINGLE_POLICY`` for a policy folder on its own."""
SINGLE_POLICY = -1


def policy_outcomes(directory, label: str, seed: int, profile: Profile, split: str = "test",
                    episodes: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Greedy success and score of the policy in ``directory`` on the first ``episodes`` goals of ``split`` (all by
    default), one row per goal (``OUTCOME_COLUMNS``)."""
    goals = policy_goals(split, episodes)
    model, tokenizer = load_policy(directory, device())
    name = label if seed == SINGLE_POLICY else f"{label} seed {seed}"
    with tqdm(total=len(goals), desc=f"greedy: {name}", disable=not progress) as bar:
        results = greedy_results(model, tokenizer, goals, with_rendering(profile, directory), progress=bar)
    return pd.DataFrame([{"policy": label, "seed": seed, "split": split, "goal_index": g.index,
                          "success": results[(g.split, g.index)][0], "score": results[(g.split, g.index)][1]}
                         for g in goals], columns=OUTCOME_COLUMNS)


def run_outcomes(run_dir, profile: Profile, split: str = "test", episodes: int | None = None,
                 runs_dir=RUNS_DIR, with_reference: bool = True, progress: bool = True) -> pd.DataFrame:
    """Per-goal greedy outcomes of every seed's final policy of a ``train`` run and (``with_reference``) of the pi_ref
    its chain started from (the seeds' ``ref``, under ``runs_dir``), which is what the README's gains are over."""
    run_dir = Path(run_dir)
    seeds = run_seeds(run_dir)
    label = run_label(run_dir, profile)
    tables = [policy_outcomes(s["folder"] / "policy", label, int(s["seed"]), profile, split, episodes, progress)
              for s in seeds]
    if with_reference:
        ref = seeds[0]["ref"]
        tables.insert(0, policy_outcomes(Path(runs_dir) / ref, ref, SINGLE_POLICY, profile, split, episodes, progress))
    return pd.concat(tables, ignore_index=True)


def run_label(run_dir, profile: Profile) -> str:
    """The name a run's rows carry: its folder's name without ``_<profile>`` (the name of its seeds table)."""
    name = Path(run_dir).name
    suffix = f"_{profile.name}"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def success_matrix(outcomes: pd.DataFrame, policy: str, split: str = "test") -> pd.DataFrame:
    """Goals x seeds table of 0/1 successes of ``policy`` on ``split``; a clear error when it has no rows or when its
    seeds did not all play the same goals."""
    rows = outcomes[(outcomes["policy"] == policy) & (outcomes["split"] == split)]
    if rows.empty:
        known = sorted(outcomes.loc[outcomes["split"] == split, "policy"].unique())
        raise KeyError(f"no {split} outcomes for policy {policy!r}; known: {known}")
    if rows.duplicated(["seed", "goal_index"]).any():
        raise ValueError(f"{policy!r} has more than one {split} outcome for some seed and goal")
    matrix = rows.pivot(index="goal_index", columns="seed", values="success").sort_index()
    if matrix.isna().any().any():
        raise ValueError(f"the seeds of {policy!r} did not all play the same {split} goals")
    return matrix.astype(float)


def gain_interval(outcomes: pd.DataFrame, policy: str, baseline: str, split: str = "test", samples: int = 10_000,
                  level: float = 0.95, seed: int = 0, target: float | None = None) -> dict:
    """``policy``'s success minus ``baseline``'s on the goals both played, with a paired bootstrap interval over the
    goals and each side's seeds (module docstring).

    Returns ``gain`` (the difference of the means over all goals and seeds), ``low`` and ``high`` (the interval at
    ``level``), ``draws_above_zero`` (the share of bootstrap gains above 0) and, with ``target``, the share at or
    above it; ``goals`` and each side's seed count."""
    if samples < 100:
        raise ValueError(f"samples must be at least 100 for a percentile interval, got {samples}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    a, b = success_matrix(outcomes, policy, split), success_matrix(outcomes, baseline, split)
    goals = a.index.intersection(b.index)
    if len(goals) < len(a.index.union(b.index)):
        raise ValueError(f"{policy!r} and {baseline!r} played different {split} goals "
                         f"({len(a)} and {len(b)}, {len(goals)} shared): a paired interval needs the same goals")
    a, b = a.loc[goals].to_numpy(), b.loc[goals].to_numpy()
    rng = np.random.default_rng(seed)
    goal_draws = rng.integers(0, len(goals), size=(samples, len(goals)))
    gains = _resampled_mean(a, goal_draws, rng) - _resampled_mean(b, goal_draws, rng)
    tail = (1 - level) / 2
    result = {"policy": policy, "baseline": baseline, "split": split, "goals": len(goals),
              "policy_seeds": a.shape[1], "baseline_seeds": b.shape[1],
              "gain": float(a.mean() - b.mean()),
              "low": _clean(np.quantile(gains, tail)), "high": _clean(np.quantile(gains, 1 - tail)),
              "draws_above_zero": float((gains > 0).mean())}
    if target is not None:
        result["draws_at_target"] = float((gains >= target - 1e-12).mean())
    return result


def gained_and_lost(outcomes: pd.DataFrame, policy: str, baseline: str, split: str = "test") -> dict:
    """Where a gain comes from, goal by goal: ``gained``, the goals the baseline fails and a seed of ``policy`` solves,
    and ``lost``, the goals the baseline solves and a seed fails, both averaged over the seeds (and over the
    baseline's seeds when it has several); gained minus lost over the goals is the gain."""
    a, b = success_matrix(outcomes, policy, split), success_matrix(outcomes, baseline, split)
    goals = a.index.intersection(b.index)
    a, b = a.loc[goals].mean(axis=1), b.loc[goals].mean(axis=1)
    return {"gained": float((a * (1 - b)).sum()), "lost": float(((1 - a) * b).sum())}


def seed_agreement(outcomes: pd.DataFrame, policy: str, baseline: str, split: str = "test") -> pd.DataFrame:
    """How many of ``policy``'s seeds solve each goal, counted apart for the goals a single-policy ``baseline`` fails
    and solves: one row each (``baseline fails``, ``baseline solves``), one column per number of seeds (0 to all).
    Goals gained or lost by only some seeds are borderline: whether a run solves them depends on its seed
    (notebook 04 section 8)."""
    a, b = success_matrix(outcomes, policy, split), success_matrix(outcomes, baseline, split)
    if b.shape[1] != 1:
        raise ValueError(f"the baseline {baseline!r} has {b.shape[1]} seeds: seed_agreement splits the goals by one "
                         f"policy's outcome")
    goals = a.index.intersection(b.index)
    solving = a.loc[goals].sum(axis=1).astype(int)
    solved = b.loc[goals].iloc[:, 0].astype(bool).map({False: "baseline fails", True: "baseline solves"})
    counts = pd.crosstab(solved, solving).reindex(index=["baseline fails", "baseline solves"],
                                                  columns=range(a.shape[1] + 1), fill_value=0)
    counts.index.name, counts.columns.name = None, "seeds solving"
    return counts


def _clean(value) -> float:
    """A bootstrap quantile without the float noise of the weighted sums (-1e-17 would print as -0.0%)."""
    return float(np.round(value, 12)) + 0.0


def _resampled_mean(matrix: np.ndarray, goal_draws: np.ndarray, rng) -> np.ndarray:
    """Per bootstrap draw: the mean over the drawn goals of the mean over seeds drawn with replacement."""
    samples, seeds = len(goal_draws), matrix.shape[1]
    seed_draws = rng.integers(0, seeds, size=(samples, seeds))
    # per draw, how often each seed was drawn, as weights: the mean over drawn seeds is a weighted mean of columns
    weights = (seed_draws[:, :, None] == np.arange(seeds)).sum(axis=1) / seeds
    per_goal = matrix[goal_draws]  # (samples, goals, seeds)
    return np.einsum("dgs,ds->d", per_goal, weights) / goal_draws.shape[1]


def gain_table(outcomes: pd.DataFrame, pairs, split: str = "test", samples: int = 10_000, level: float = 0.95,
               seed: int = 0, target: float | None = None) -> pd.DataFrame:
    """``gain_interval`` for each ``(policy, baseline)`` in ``pairs``, one row each."""
    return pd.DataFrame([gain_interval(outcomes, p, b, split, samples, level, seed, target) for p, b in pairs])


def first_reference(label: str, results=RESULTS_DIR, profile_name: str = "class") -> str | None:
    """The pi_ref a run's chain started from (its seeds table's ``ref``), also for a soup of a run's seeds
    (``<run>_soup``, ``average``); None when no seeds table names the run."""
    run = label[: -len("_soup")] if label.endswith("_soup") else label
    path = Path(results) / f"{run}_{profile_name}_seeds.csv"
    if not path.exists():
        return None
    refs = pd.read_csv(path)["ref"].dropna().unique()
    return str(refs[0]) if len(refs) == 1 else None


def check_against_seeds(outcomes: pd.DataFrame, results=RESULTS_DIR, profile_name: str = "class",
                        split: str = "test") -> pd.DataFrame:
    """Each run's per-seed success on ``split`` from ``outcomes`` beside its committed seeds table's, and on test its
    first pi_ref's beside the table's pi_ref row; a ValueError when any differ, which means the outcomes were played
    by other weights or settings than the run's own evaluation. A run's val success is over the first
    ``eval_episodes`` val goals (its own final evaluation), so the outcomes are compared on those."""
    played = outcomes[outcomes["split"] == split]
    rows = []
    for policy in sorted(played.loc[played["seed"] != SINGLE_POLICY, "policy"].unique()):
        path = Path(results) / f"{policy}_{profile_name}_seeds.csv"
        if not path.exists():
            continue
        table = pd.read_csv(path)
        for r in table.itertuples():
            if r.objective == "pi_ref" and split != "test":
                continue  # the pi_ref row has no val success
            key = (r.ref, SINGLE_POLICY) if r.objective == "pi_ref" else (policy, int(r.seed))
            first = _evaluated_goals(r, profile_name) if split == "val" else None
            part = played[(played["policy"] == key[0]) & (played["seed"] == key[1])].sort_values("goal_index")
            if r.objective == "pi_ref" and part.empty:
                continue  # a pi_ref is checked when it was played
            part = part.head(first) if first else part
            rows.append({"policy": key[0], "seed": key[1], "seeds table": getattr(r, f"{split}_success"),
                         "outcomes": part["success"].mean() if len(part) else float("nan"), "goals": len(part)})
    check = pd.DataFrame(rows, columns=["policy", "seed", "outcomes", "seeds table", "goals"])
    bad = check[~(check["outcomes"] - check["seeds table"]).abs().le(1e-9)]
    if not bad.empty:
        raise ValueError(f"per-goal {split} outcomes disagree with the committed seeds tables (run `outcomes` again "
                         "for them):\n" + bad.to_string(index=False))
    return check.drop_duplicates(["policy", "seed"]).reset_index(drop=True)


def _evaluated_goals(row, profile_name: str) -> int:
    """How many val goals a run's final evaluation played: its profile's ``eval_episodes`` with its overrides."""
    overrides = row.apo_overrides if isinstance(getattr(row, "apo_overrides", None), str) else ""
    return with_overrides(get_profile(profile_name), overrides.split()).apo.eval_episodes


def gains_over_first_reference(outcomes: pd.DataFrame, results=RESULTS_DIR, profile_name: str = "class",
                               samples: int = 10_000, target: float | None = TARGET_GAIN, seed: int = 0,
                               split: str = "test") -> pd.DataFrame:
    """``gain_interval`` on ``split`` of every policy in ``outcomes`` whose chain's first pi_ref (``first_reference``)
    was played too, against that pi_ref, with both success rates and the goals gained and lost (``gained_and_lost``);
    largest gain first. The runs' outcomes are checked against their seeds tables first (``check_against_seeds``)."""
    check_against_seeds(outcomes, results, profile_name, split)
    played = outcomes[outcomes["split"] == split]
    names = set(played["policy"])
    pairs = [(p, r) for p in sorted(names) if (r := first_reference(p, results, profile_name)) in names and r != p]
    if not pairs:
        return pd.DataFrame()
    table = gain_table(played, pairs, split, samples, seed=seed, target=target)
    means = played.groupby("policy")["success"].mean()
    table.insert(2, "success", table["policy"].map(means))
    table.insert(3, "baseline_success", table["baseline"].map(means))
    moved = pd.DataFrame([gained_and_lost(played, p, b, split) for p, b in zip(table["policy"], table["baseline"])])
    table = pd.concat([table, moved], axis=1)
    return table.sort_values("gain", ascending=False, kind="stable").reset_index(drop=True)
