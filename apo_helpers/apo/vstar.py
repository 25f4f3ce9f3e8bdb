"""A*PO stage 1: the optimal value V*(x) of each train instruction from samples of pi_ref (notebooks 00 and 03).

    V*(x) = beta1 * log( (1/N) * sum_i exp(r(x, y_i) / beta1) )

a soft maximum of the N sampled rewards: beta1 -> 0 gives the max, large beta1 the mean. Computed with the
log-sum-exp trick so small beta1 does not overflow.

``stage1`` samples N episodes of the frozen pi_ref per goal (one batched rollout over all of them), and caches the
table on disk under a key made of pi_ref's weights hash, N, the temperature and the goals: a second call with the
same key loads instead of sampling. The cache holds every goal's sampled rewards; V* for the config's beta1, the
optional filters (``drop_unsolved``, ``keep_disagreeing``, ``keep_varying``) and the reward's ``success_bonus`` are
computed after it, so changing them never needs new samples.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..config import APOConfig, Profile, seed_everything
from ..files import atomic_write_text
from ..policy.rollout import Sampling, rollout
from ..webshop.catalog import PRACTICE, PRACTICE_GOALS, Catalog, DataFileError, Goal, default_catalog
from ..webshop.pages import DETAIL, ITEM, RESULTS, SEARCH

VSTAR_COLUMNS = ["split", "goal_index", "rewards", "vstar", "mean", "max", "successes"]


def optimal_value(rewards, beta1: float = 0.5) -> float:
    """V* of one instruction from the rewards of its N samples (paper defaults: N = 8, beta1 = 0.5)."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"rewards must be a non-empty 1-d sequence, got shape {r.shape}")
    if not beta1 > 0:
        raise ValueError(f"beta1 must be positive, got {beta1}")
    z = r / beta1
    top = z.max()
    return float(beta1 * (top + np.log(np.mean(np.exp(z - top)))))


def training_reward(reward: float, success_bonus: float = 0.0) -> float:
    """The return stage 1 and stage 2 train on (``APOConfig.success_bonus``): (r + b * [r = 1]) / (1 + b), so a
    perfect return stays 1 and every other is scaled by 1 / (1 + b); b = 0 gives r."""
    if not success_bonus >= 0:
        raise ValueError(f"success_bonus must be 0 (off) or positive, got {success_bonus}")
    return (reward + success_bonus * float(reward >= 1.0)) / (1.0 + success_bonus)


def rescored(result: "VStarTable", config: APOConfig) -> "VStarTable":
    """The table with its rewards read through ``training_reward`` and V*, mean and max recomputed from them with
    ``config.beta1`` (unchanged when there is no ``success_bonus`` and the table's V* already used that beta1): the
    cache keeps the sampled rewards, which depend on neither, so any bonus and any beta1 reuse it."""
    if not config.success_bonus and result.beta1 == config.beta1:
        return result
    rewards = [[training_reward(r, config.success_bonus) for r in row] for row in result.table["rewards"]]
    table = vstar_table(result.goals(), rewards, config.beta1)
    return dataclasses.replace(result, table=table, beta1=config.beta1)


def weights_hash(model) -> str:
    """SHA-256 of a model's parameters and buffers (names, shapes, values): the identity of pi_ref in cache keys."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def stage1_goals(profile: Profile, seed: int = 0, catalog: Catalog | None = None) -> list[Goal]:
    """The ``apo.vstar_goals`` train goals of stage 1: the train goals the demonstrations did NOT use.

    ``expert_demonstrations`` takes the first goals of the train split shuffled with the seed; stage 1 takes the
    next ones. pi_ref has memorised its demonstration goals (measured: 58% sampled success on them, 17% on val), so
    RL on them would teach it little that carries over to goals it has never seen. ``apo.practice_goals`` > 0 adds
    the first that many goals of the ``practice`` split after them."""
    catalog = catalog or default_catalog()
    goals = list(catalog.split("train"))
    random.Random(seed).shuffle(goals)
    skip = profile.reference.demonstrations
    if skip + profile.apo.vstar_goals > len(goals):
        raise ValueError(f"the train split has {len(goals)} goals: too few for {skip} demonstrations and "
                         f"{profile.apo.vstar_goals} stage-1 goals")
    extra = profile.apo.practice_goals
    if not 0 <= extra <= PRACTICE_GOALS:
        raise ValueError(f"practice_goals must be between 0 and the {PRACTICE_GOALS} goals of the practice split, "
                         f"got {extra}")
    practice = catalog.split(PRACTICE)[:extra] if extra else []  # written only when asked for
    return goals[skip: skip + profile.apo.vstar_goals] + practice


CACHED_BETA1 = 0.5
"""The beta1 written into every cache key (the paper's, which every key held before V* was recomputed on load)."""


def cache_key(ref_hash: str, goals: list[Goal], config: APOConfig, seed: int,
              show_selected_options: bool = False) -> str:
    """What the sampled rewards depend on: pi_ref's weights, the goals, N, the temperature, the seed, the pages'
    rendering, which pages are answered greedily, the exploration rates, how option values are drawn and the stop at or
    price of repeats (the last five only when they differ from the default, so earlier keys stay valid). Not beta1: V*
    is recomputed from the rewards for any beta1 (``rescored``); the key keeps ``CACHED_BETA1`` in its place, so the
    keys of tables cached before stay valid."""
    spec = {"ref": ref_hash, "goals": [[g.split, g.index] for g in goals], "N": config.vstar_samples,
            "beta1": CACHED_BETA1, "temperature": config.vstar_temperature, "seed": seed}
    if show_selected_options:
        spec["show_selected_options"] = True
    if config.greedy_search:
        spec["greedy_search"] = True
    if config.greedy_clicks:
        spec["greedy_clicks"] = True
    if config.explore:
        spec["explore"] = config.explore
    if config.explore_search:
        spec["explore_search"] = config.explore_search
    if config.explore_options:
        spec["explore_options"] = config.explore_options
        if config.option_draw != "uniform":
            spec["option_draw"] = config.option_draw
    if config.explore_results:
        spec["explore_results"] = config.explore_results
    if drawn_turns(config) and config.explore_once:
        spec["explore_once"] = True
    if config.stop_repeats:
        spec["stop_repeats"] = True
    if config.repeat_penalty:
        spec["repeat_penalty"] = config.repeat_penalty
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class VStarTable:
    """Stage 1's result: one row per goal (split, goal_index, rewards, vstar, mean, max, successes)."""

    table: pd.DataFrame
    key: str
    dropped: int = 0
    """Goals removed by the filters ``drop_unsolved``, ``keep_disagreeing``, ``keep_varying`` and ``min_options``
    (``filter_goals``, judged on ``filter_samples`` of the N samples when set)."""
    loaded: bool = False
    """True when the table came from the cache."""
    seconds: float | None = None
    """Seconds stage 1 spent sampling (read back from the cache's meta.json; None when unknown)."""
    beta1: float = CACHED_BETA1
    """The beta1 the ``vstar`` column was computed with (the cache's meta.json says which)."""

    def goals(self, catalog: Catalog | None = None) -> list[Goal]:
        catalog = catalog or default_catalog()
        return [catalog.split(s)[i] for s, i in zip(self.table["split"], self.table["goal_index"])]

    def value(self, goal: Goal) -> float:
        return float(self._lookup[(goal.split, goal.index)])

    @cached_property
    def _lookup(self) -> dict:
        return {(s, int(i)): v for s, i, v in zip(self.table["split"], self.table["goal_index"], self.table["vstar"])}


def vstar_table(goals: list[Goal], rewards: list[list[float]], beta1: float) -> pd.DataFrame:
    """The per-goal table from the sampled rewards."""
    return pd.DataFrame([{"split": g.split, "goal_index": g.index, "rewards": [round(float(x), 6) for x in r],
                          "vstar": optimal_value(r, beta1), "mean": float(np.mean(r)), "max": float(np.max(r)),
                          "successes": count_successes(r)} for g, r in zip(goals, rewards)])


def count_successes(rewards) -> int:
    """How many of a goal's sampled rewards are successes (a full reward of 1)."""
    return int(sum(x >= 1.0 for x in rewards))


def greedy_pages(config: APOConfig) -> tuple[str, ...]:
    """The pages whose turns stage 1 and the rollouts answer greedily and the update leaves out of log pi:
    the search page under ``config.greedy_search`` (only the clicks explore), every other page under
    ``config.greedy_clicks`` (only the query explores), none by default."""
    if config.greedy_search and config.greedy_clicks:
        raise ValueError("greedy_search (sample only the clicks) and greedy_clicks (sample only the search query) "
                         "exclude each other: set one")
    if config.greedy_search and config.explore_search:
        raise ValueError(f"explore_search={config.explore_search} draws queries, which greedy_search types greedily: "
                         "set explore_search=0 or greedy_search=false")
    clicks = [(name, getattr(config, name)) for name in ("explore", "explore_options", "explore_results")
              if getattr(config, name)]
    if config.greedy_clicks and clicks:
        name, rate = clicks[0]
        raise ValueError(f"{name}={rate} draws clicks, which greedy_clicks answers greedily: "
                         f"set {name}=0 or greedy_clicks=false")
    if config.greedy_search:
        return (SEARCH,)
    return (RESULTS, ITEM, DETAIL) if config.greedy_clicks else ()


def rollout_sampling(config: APOConfig, temperature: float) -> Sampling:
    """How stage 1 and stage 2 draw episodes: at ``temperature``, with the ``greedy_pages`` answered greedily,
    clicks drawn at random at rate ``config.explore``, values of the item's unselected options at rate
    ``config.explore_options``, products of the results page at rate ``config.explore_results`` and searches for
    the instruction at rate ``config.explore_search`` (at most one drawn turn per episode with
    ``config.explore_once``), option values picked as ``config.option_draw`` says."""
    if config.option_draw == "policy" and not config.explore_options:
        raise ValueError(f"option_draw={config.option_draw!r} picks the values explore_options draws, and none is "
                         "drawn: set explore_options above 0")
    return Sampling(temperature=temperature, greedy_pages=greedy_pages(config), explore=config.explore,
                    explore_search=config.explore_search, explore_options=config.explore_options,
                    explore_results=config.explore_results, explore_once=config.explore_once,
                    option_draw=config.option_draw,
                    stop_repeats=config.stop_repeats, repeat_penalty=config.repeat_penalty)


def drawn_turns(config: APOConfig) -> bool:
    """Whether stage 1 and the rollouts answer some turns with drawn clicks or searches instead of the model's."""
    return bool(config.explore or config.explore_search or config.explore_options or config.explore_results)


def sample_rewards(model, tokenizer, goals: list[Goal], samples: int, profile: Profile, temperature: float = 1.0,
                   progress: bool = True) -> tuple[list[list[float]], list]:
    """``samples`` episodes of ``model`` per goal (one batched rollout over all) -> per-goal rewards, trajectories."""
    repeated = [g for g in goals for _ in range(samples)]
    bar = tqdm(total=len(repeated), desc=f"stage 1: {samples} samples x {len(goals)} goals", disable=not progress)
    trajectories = rollout(model, tokenizer, repeated, rollout_sampling(profile.apo, temperature), profile.policy,
                           profile.policy_env(), progress=bar)
    bar.close()
    rewards = [[t.reward for t in trajectories[i * samples:(i + 1) * samples]] for i in range(len(goals))]
    return rewards, trajectories


def save_vstar(result: VStarTable, directory, meta: dict) -> Path:
    """``vstar.csv`` (rewards as JSON lists) and ``meta.json`` under ``directory``, each written atomically."""
    directory = Path(directory)
    table = result.table.assign(rewards=result.table["rewards"].map(json.dumps))
    atomic_write_text(directory / "vstar.csv", table.to_csv(index=False))
    atomic_write_text(directory / "meta.json", json.dumps({"key": result.key, "dropped": result.dropped, **meta},
                                                          indent=1) + "\n")
    return directory


def load_vstar(directory) -> VStarTable:
    """Read a table written by ``save_vstar``; a malformed file is reported with what is wrong."""
    directory = Path(directory)
    path = directory / "vstar.csv"
    try:
        meta = json.loads((directory / "meta.json").read_text())
        table = pd.read_csv(path)
        missing = [c for c in VSTAR_COLUMNS if c not in table.columns]
        if missing:
            raise DataFileError(f"{path}: missing columns {missing}")
        table["rewards"] = table["rewards"].map(json.loads)
    except (OSError, ValueError) as e:  # JSONDecodeError and pandas' parser errors are ValueErrors
        raise DataFileError(f"{directory}: not a V* table ({e})") from None
    if table["vstar"].isna().any():
        raise DataFileError(f"{path}: empty V* values")
    return VStarTable(table, meta["key"], meta.get("dropped", 0), loaded=True, seconds=meta.get("seconds"),
                      beta1=meta.get("beta1", CACHED_BETA1))


def stage1_profile(profile: Profile) -> Profile:
    """The profile stage 1 samples with: the profile itself, or under ``APOConfig.vstar_greedy_search`` the greedy
    query typed and no query drawn (``greedy_search`` instead of ``explore_search``)."""
    config = profile.apo
    if not config.vstar_greedy_search:
        return profile
    if not config.explore_search:
        raise ValueError("vstar_greedy_search keeps the drawn queries (explore_search) out of stage 1, and none is "
                         "drawn: set explore_search above 0")
    return dataclasses.replace(profile, apo=dataclasses.replace(config, greedy_search=True, explore_search=0.0,
                                                                vstar_greedy_search=False))


def stage1(model, tokenizer, profile: Profile, cache_dir=None, goals: list[Goal] | None = None, seed: int | None = None,
           progress: bool = True) -> VStarTable:
    """V* for the profile's stage-1 goals from N samples of the frozen pi_ref, cached under ``cache_dir/<key>``."""
    config = profile.apo
    seed = profile.seed if seed is None else seed
    goals = goals if goals is not None else stage1_goals(profile, seed)
    profile = stage1_profile(profile)  # how the samples are drawn; the filters and beta1 stay ``config``'s
    key = cache_key(weights_hash(model), goals, profile.apo, seed, profile.policy.show_selected_options)
    folder = Path(cache_dir) / key if cache_dir is not None else None
    if folder is not None and (folder / "vstar.csv").exists():
        return filter_goals(rescored(load_vstar(folder), config), config)
    seed_everything(seed)
    start = time.perf_counter()
    rewards, _ = sample_rewards(model, tokenizer, goals, config.vstar_samples, profile, config.vstar_temperature,
                                progress)
    result = VStarTable(vstar_table(goals, rewards, config.beta1), key, seconds=round(time.perf_counter() - start, 1),
                        beta1=config.beta1)
    if folder is not None:  # the cache holds the sampled rewards: beta1, the bonus and the filters apply after it
        save_vstar(result, folder, {"seconds": result.seconds, "N": config.vstar_samples, "beta1": result.beta1,
                                    "goals": len(goals),
                                    "temperature": config.vstar_temperature, "seed": seed, "profile": profile.name})
    return filter_goals(rescored(result, config), config)


def filter_goals(result: VStarTable, config: APOConfig) -> VStarTable:
    """Drop the goals the config's filters exclude: ``drop_unsolved`` (no sample scored above 0),
    ``keep_disagreeing`` (not both a success and a failure among the N samples), ``keep_varying`` (all N rewards
    equal), except the share ``keep_solved`` of the goals every sample solved, and ``min_options`` (fewer options
    asked); ``dropped`` counts them. With ``filter_samples`` = k the first four look at the first k samples only."""
    table = result.table
    judged = _judged_rewards(table, config.filter_samples)
    successes = judged.map(count_successes) if config.filter_samples else table["successes"]
    keep = pd.Series(True, index=table.index)
    if config.drop_unsolved:
        keep &= judged.map(max) > 0
    if config.keep_disagreeing:
        keep &= (successes > 0) & (successes < judged.map(len))
    if config.keep_varying:
        keep &= judged.map(lambda r: max(r) > min(r))
    if config.keep_solved:
        keep |= _share_of_solved(successes == judged.map(len), config.keep_solved)
    if config.min_options:
        options = [len(goal.options) for goal in result.goals()]
        keep &= pd.Series(options, index=table.index) >= config.min_options
    return dataclasses.replace(result, table=table[keep].reset_index(drop=True), dropped=int((~keep).sum()))


def _judged_rewards(table: pd.DataFrame, samples: int) -> pd.Series:
    """Each goal's rewards the filters look at: all N, or the first ``samples`` (``APOConfig.filter_samples``)."""
    if not samples:
        return table["rewards"]
    drawn = int(table["rewards"].map(len).min()) if len(table) else samples
    if not 2 <= samples <= drawn:
        raise ValueError(f"filter_samples must be 0 (all) or between 2 and the N = {drawn} samples stage 1 drew per "
                         f"goal; got {samples}")
    return table["rewards"].map(lambda r: r[:samples])


def _share_of_solved(solved: pd.Series, share: float) -> pd.Series:
    """A fixed draw of ``share`` of the goals whose samples all succeeded, marked in ``solved``
    (``APOConfig.keep_solved``)."""
    if not 0 <= share <= 1:
        raise ValueError(f"keep_solved is a share of the always-solved goals, between 0 and 1; got {share}")
    indices = solved.index[solved]
    chosen = np.random.default_rng(0).permutation(len(indices))[: round(share * len(indices))]
    return pd.Series(solved.index.isin(indices[chosen]), index=solved.index)
