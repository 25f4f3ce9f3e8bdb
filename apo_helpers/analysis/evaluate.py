"""Running agents on a split and summarizing how they did (introduced in notebook 01).

``evaluate(agent, split)`` plays one episode per goal (the first ``episodes`` goals of the split, so every agent sees
the same goals) and returns an ``Evaluation``: a per-episode table and ``summary()`` with the success rate and its
95% Wilson interval, the mean score (WebShop's reward in [0, 1]), mean steps and the invalid-action rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd
from tqdm.auto import tqdm

from ..webshop.agents import Agent, expert_search, instruction_of
from ..webshop.env import WebShopEnv


@dataclass
class Episode:
    """One played episode: what was seen and done each turn, and how it ended."""

    goal_index: int
    instruction: str
    category: str
    observations: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    bought: bool = False
    breakdown: dict | None = None

    @property
    def steps(self) -> int:
        return len(self.actions)


def run_episode(env: WebShopEnv, agent: Agent, goal_index: int) -> Episode:
    """Play one episode of ``agent`` on goal ``goal_index`` of ``env``'s split."""
    observation, info = env.reset(options={"goal_index": goal_index})
    agent.reset()
    episode = Episode(goal_index, env.goal.instruction, env.goal.category[0])
    done = False
    while not done:
        action = agent.act(observation, info)
        episode.observations.append(observation)
        observation, reward, terminated, truncated, info = env.step(action)
        episode.actions.append(action)
        episode.valid.append(info["valid"])
        done = terminated or truncated
    episode.reward, episode.success, episode.bought = reward, info["success"], terminated
    episode.breakdown = info.get("reward_breakdown")
    return episode


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sensible at 0% and 100%, unlike the normal one)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, center - half), min(1.0, center + half))


@dataclass
class Evaluation:
    """The episodes of one agent on one split."""

    name: str
    split: str
    episodes: list[Episode]

    def table(self) -> pd.DataFrame:
        """One row per episode."""
        return pd.DataFrame([{"goal_index": e.goal_index, "category": e.category, "reward": e.reward,
                              "success": e.success, "steps": e.steps, "invalid": len(e.valid) - sum(e.valid),
                              "bought": e.bought} for e in self.episodes])

    def summary(self) -> dict:
        """success_rate, success_ci95 [low, high], mean_score, mean_steps, invalid_rate, episodes."""
        n = len(self.episodes)
        wins = sum(e.success for e in self.episodes)
        actions = sum(e.steps for e in self.episodes)
        low, high = wilson_interval(wins, n)
        return {"success_rate": wins / n if n else 0.0, "success_ci95": [round(low, 4), round(high, 4)],
                "mean_score": sum(e.reward for e in self.episodes) / n if n else 0.0,
                "mean_steps": actions / n if n else 0.0,
                "invalid_rate": sum(len(e.valid) - sum(e.valid) for e in self.episodes) / actions if actions else 0.0,
                "episodes": n}


def evaluate(agent: Agent, split: str = "test", episodes: int | None = None, env: WebShopEnv | None = None,
             name: str | None = None, progress: bool = True) -> Evaluation:
    """Play ``agent`` on the first ``episodes`` goals of ``split`` (all of them by default)."""
    env = env or WebShopEnv(split=split)
    count = len(env.goals) if episodes is None else min(episodes, len(env.goals))
    played = [run_episode(env, agent, i) for i in tqdm(range(count), desc=f"{name or agent.name} on {split}",
                                                        disable=not progress, leave=False)]
    return Evaluation(name or agent.name, env.split, played)


def summary_table(evaluations: list[Evaluation]) -> pd.DataFrame:
    """One row per evaluation: the summary numbers, success interval as two columns."""
    rows = []
    for ev in evaluations:
        s = ev.summary()
        rows.append({"agent": ev.name, "split": ev.split, "success_rate": s["success_rate"],
                     "ci95_low": s["success_ci95"][0], "ci95_high": s["success_ci95"][1],
                     "mean_score": s["mean_score"], "mean_steps": s["mean_steps"],
                     "invalid_rate": s["invalid_rate"], "episodes": s["episodes"]})
    return pd.DataFrame(rows).set_index("agent")


# ---------------------------------------------------------------------------------------------- LM policies

def episode_from_trajectory(trajectory, index: int) -> Episode:
    """A language-model trajectory in the shape of a scripted agent's episode (for the same tables)."""
    t = trajectory
    return Episode(goal_index=index, instruction=t.goal.instruction,
                   category=t.goal.category[0], observations=[u.observation for u in t.turns],
                   actions=[u.action or u.response for u in t.turns], valid=[u.valid for u in t.turns],
                   reward=t.env_reward, success=t.success, bought=t.breakdown is not None, breakdown=t.breakdown)


def policy_goals(split: str, episodes: int | None, catalog=None):
    """The first ``episodes`` goals of ``split``: the same goals the scripted agents are scored on."""
    from ..webshop.catalog import default_catalog

    goals = (catalog or default_catalog()).split(split)
    return goals if episodes is None else goals[:episodes]


def evaluate_policy(model, tokenizer, split: str = "test", episodes: int | None = None, profile=None,
                    sampling=None, name: str = "policy", progress: bool = True):
    """Greedy (by default) episodes of a language-model policy -> ``(Evaluation, trajectories)``."""
    from ..config import get_profile
    from ..policy.rollout import GREEDY, rollout

    profile = profile or get_profile()
    goals = policy_goals(split, episodes)
    bar = tqdm(total=len(goals), desc=f"{name} on {split}", disable=not progress, leave=False)
    trajectories = rollout(model, tokenizer, goals, sampling or GREEDY, profile.policy, profile.policy_env(),
                           progress=bar)
    bar.close()
    return Evaluation(name, split, [episode_from_trajectory(t, g.index) for t, g in zip(trajectories, goals)]), trajectories


def copied_query(trajectory) -> bool:
    """Whether an episode's first action searches for its whole instruction, exactly as shown (what the
    demonstrations type; notebook 04 section 5)."""
    return taught_query(trajectory, "instruction")


def taught_query(trajectory, query: str) -> bool:
    """Whether an episode's first action is the search the demonstrator types (``agents.expert_search`` with
    ``query``, e.g. ``ReferenceConfig.demo_query``; ``copied_query`` for ``instruction``; notebook 04)."""
    first = trajectory.turns[0] if trajectory.turns else None
    return first is not None and first.action == expert_search(instruction_of(first.observation), query)[1]


def taught_query_share(trajectories, query: str) -> float:
    """Share of episodes whose first action is ``taught_query``: how often a pi_ref types the query it was shown."""
    taught = [taught_query(t, query) for t in trajectories]
    return sum(taught) / max(1, len(taught))


def greedy_evaluation(model, tokenizer, split: str, episodes: int | None, profile) -> dict:
    """The Trainer's evaluator (notebook 04): greedy success, score, steps and invalid-action rate on the first
    ``episodes`` goals of ``split``, the item-page option rates (``analysis.failures.OPTION_RATES``) and the share
    of episodes whose query copies the instruction exactly (``copied_query``)."""
    from .failures import option_columns

    result, trajectories = evaluate_policy(model, tokenizer, split, episodes, profile, name="policy", progress=False)
    s = result.summary()
    return {"success": s["success_rate"], "score": s["mean_score"], "steps": s["mean_steps"],
            "invalid_rate": s["invalid_rate"], **option_columns(trajectories),
            "query_copied": sum(map(copied_query, trajectories)) / max(1, len(trajectories))}


def pass_at_k(model, tokenizer, split: str, goals: int, k: int, profile=None, temperature: float = 1.0,
              progress: bool = True) -> dict:
    """Share of goals solved by at least one of k sampled episodes (and the per-sample success rate)."""
    from ..config import get_profile
    from ..policy.rollout import Sampling, rollout

    profile = profile or get_profile()
    chosen = policy_goals(split, goals)
    repeated = [g for g in chosen for _ in range(k)]
    bar = tqdm(total=len(repeated), desc=f"pass@{k} on {split}", disable=not progress, leave=False)
    trajectories = rollout(model, tokenizer, repeated, Sampling(temperature=temperature), profile.policy,
                           profile.policy_env(), progress=bar)
    bar.close()
    solved = [any(t.success for t in trajectories[i * k:(i + 1) * k]) for i in range(len(chosen))]
    return {"split": split, "k": k, "goals": len(chosen), "pass_at_k": sum(solved) / len(chosen),
            "sample_success": sum(t.success for t in trajectories) / len(trajectories)}
