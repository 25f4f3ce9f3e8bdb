"""Credit at the item page: V* of the state where the agent decides what to buy (notebook 04, section 6).

A*PO regresses beta2 * log pi/pi_ref of a WHOLE trajectory onto r - V*(x). The log-ratio is a sum over turns, and
so is the target once the value of an intermediate state s_k is known:

    r - V*(x) = [ r_<k + V*(s_k) - V*(x) ]  +  [ r_>=k - V*(s_k) ]

(r_<k: the rewards of the turns before k, the format penalties; r_>=k: the rest). The ``apo_split`` objective
regresses each part on the log-ratio of its own turns, so the turns played on the item page are judged against
what pi_ref could still make of that item page, not against the whole goal: a purchase that skips the requested
options scores below V*(s_k) wherever the search went before it.

s_k is the first item page of a trajectory (the first turn that can ``click[buy now]``), where the choice between
selecting options and buying is made. V*(s_k) comes from N continuations of the frozen pi_ref from that state,
with stage 1's soft maximum (``vstar.optimal_value``, beta1); the environment is deterministic, so replaying the
trajectory's actions restores the state. Trajectories that never reach an item page keep A*PO's single term.
With the query sampled and mostly drawn as the whole instruction (``explore_search=0.75``), the split's credit of
the query alone did not teach the greedy query to copy the instruction, and without ``hold_failed_draws`` it copied
less often than pi_ref's (docs/experiments.md, "Crediting the query apart from the clicks after it").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Profile
from ..policy.rollout import Trajectory, rollout
from .vstar import optimal_value, rollout_sampling

BUY_ACTION = "click[buy now]"


def require_turn_chats(window, who: str = "apo_split") -> None:
    """Marking tokens by turn (``apo_split``'s split, ``greedy_search``'s sampled turns) needs one chat per turn
    (``policy.window=1``)."""
    if window != 1:
        raise ValueError(f"{who} needs one chat per turn (policy.window=1), got window={window}")


def decision_turn(trajectory: Trajectory) -> int | None:
    """Index of the trajectory's first item-page turn (a turn offering ``click[buy now]``), or None when it never
    reaches one or reaches it on its very first turn (nothing to split)."""
    for k, turn in enumerate(trajectory.turns):
        if BUY_ACTION in turn.actions:
            return k if k > 0 else None
    return None


@dataclass
class SplitValues:
    """Where each trajectory of a batch is split and the value of that state."""

    turn: list[int]
    """Per trajectory, the first turn of the second part (the number of turns when it is not split)."""
    value: np.ndarray
    """(B,) V*(s_k) from pi_ref's continuations (0 when not split)."""
    reward_before: np.ndarray
    """(B,) the rewards of the turns before the split (the whole reward when not split)."""
    continuations: int = 0
    """pi_ref episodes sampled for the batch."""


def split_values(ref_model, tokenizer, trajectories: list[Trajectory], profile: Profile, samples: int | None = None,
                 beta1: float | None = None, temperature: float | None = None) -> SplitValues:
    """V*(s_k) at the first item page of each trajectory from ``samples`` pi_ref continuations (one batched rollout
    for the whole batch). Defaults: ``apo.split_samples``, ``apo.beta1``, ``apo.vstar_temperature``."""
    config = profile.apo
    samples = config.split_samples if samples is None else samples
    beta1 = config.beta1 if beta1 is None else beta1
    temperature = config.vstar_temperature if temperature is None else temperature
    if samples < 1:
        raise ValueError(f"split_samples must be at least 1, got {samples}")
    turns = [decision_turn(t) for t in trajectories]
    split = [i for i, k in enumerate(turns) if k is not None]
    goals = [trajectories[i].goal for i in split for _ in range(samples)]
    prefixes = [trajectories[i].turns[: turns[i]] for i in split for _ in range(samples)]
    continued = rollout(ref_model, tokenizer, goals, rollout_sampling(config, temperature), profile.policy,
                        profile.policy_env(), prefixes=prefixes) if goals else []
    value = np.zeros(len(trajectories))
    reward_before = np.array([t.reward for t in trajectories], dtype=np.float64)
    for j, i in enumerate(split):
        k = turns[i]
        returns = [sum(u.reward for u in c.turns[k:]) for c in continued[j * samples: (j + 1) * samples]]
        value[i] = optimal_value(returns, beta1)
        reward_before[i] = sum(u.reward for u in trajectories[i].turns[:k])
    return SplitValues([k if k is not None else t.num_turns for k, t in zip(turns, trajectories)], value,
                       reward_before, len(goals))
