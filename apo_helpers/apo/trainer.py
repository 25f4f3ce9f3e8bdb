"""RAGEN's outer loop with a pluggable objective: A*PO stage 2 by default (notebook 04).

Each iteration:

1. Phase 1, rollouts: draw ``batch_goals`` train goals that have a V*, play ONE episode per goal with the current
   policy (one batched multi-turn rollout).
2. Phase 2, update: score every trajectory's trained tokens under the policy (with gradients) and the frozen pi_ref,
   build ``ObjectiveInputs``, take ONE optimizer step on the objective with gradient clipping (``update_epochs``
   steps on the same batch when set, as PPO-style loops reuse their rollouts; with ``replay`` the batch also
   carries earlier iterations' trajectories that beat V*, which A*PO's least squares may train on). With
   ``backward_per_micro_batch`` (pretrained models) the scoring runs without gradients, the loss is differentiated
   with respect to the token log-probs, and each micro-batch then backpropagates its share: same gradients, the
   memory of one micro-batch.

It records per iteration reward, success, loss, the KL estimate to pi_ref, entropy, invalid-action rate, tokens
and seconds (a pandas DataFrame), evaluates greedily on val every ``eval_every`` iterations with the evaluator it
is given (``analysis.evaluate.greedy_evaluation``; ``runs.train_run`` hands it in), and checkpoints (safetensors
weights, optimizer and RNG states) so that a resumed run continues exactly as if it had not stopped. With ``ema``
it also keeps a moving average of the policy's weights, which the evaluations play and ``train`` saves.

It runs through ``accelerate``: one process by default; under ``accelerate launch --num_processes K`` (or
``torchrun``) each of K processes rolls out its share of the iteration's goals, computes the gradient of its share's
loss, and the gradients are averaged across processes before the one optimizer step (data parallelism). With equal
shares the averaged gradient is the full batch's for A*PO (a mean over trajectories) and for the group objectives
(a group never spans two processes); StarPO-S's variance filter then ranks the goals of each share separately.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import torch
from accelerate import Accelerator
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm.auto import tqdm

from ..config import APOConfig, Profile, device as default_device, seed_everything
from ..files import atomic_write_text
from ..policy.prompts import encode_chat, episode_chats
from ..policy.rollout import Trajectory, load_trajectories, rollout, save_trajectories
from ..policy.scoring import collate, selected_log_distributions, selected_logprobs_and_hidden
from ..webshop.env import SEARCH_PLACEHOLDER
from .losses import OBJECTIVES, ObjectiveInputs, distribution_kl, kl_estimate
from .sft import lr_at
from .turn_credit import SplitValues, require_turn_chats, split_values
from .value_head import ValueHead, turn_positions
from .vstar import VStarTable, drawn_turns, greedy_pages, rollout_sampling, training_reward

CHECKPOINTS = "checkpoints"
AVERAGE_FILE = "average.safetensors"
"""The checkpoint's moving average of the policy's weights (``ema``)."""
REPLAY_FILE = "replay.jsonl"
"""The checkpoint's buffer of winning trajectories (``replay``)."""


# ------------------------------------------------------------------------------------------------ scoring

def trained_sequences(trajectories: list[Trajectory], tokenizer, window, part: str = "all",
                      sampled_only: bool = False, greedy_only: bool = False,
                      skip_turns: frozenset[tuple[int, int]] = frozenset()):
    """Token ids and masks of every chat of every trajectory, and the trajectory each chat belongs to.
    ``sampled_only`` leaves out the chats of turns replied greedily (``APOConfig.greedy_search`` or
    ``greedy_clicks``: one chat per turn); ``greedy_only`` keeps only those (``APOConfig.greedy_anchor``).
    ``skip_turns``: the ``(trajectory, turn)`` pairs whose chats are left out as well (``uncredited_turns``)."""
    if sampled_only and greedy_only:
        raise ValueError("sampled_only and greedy_only exclude each other")
    if sampled_only or greedy_only:
        require_turn_chats(window, "greedy_search")
    if skip_turns:
        require_turn_chats(window, "credit_repeats=False")
    sequences, masks, owner = [], [], []
    for row, t in enumerate(trajectories):
        if part == "all" and t.input_ids:
            pairs = zip(t.input_ids, t.assistant_mask)
        else:
            pairs = (encode_chat(tokenizer, chat, part) for chat in episode_chats(t.turns, window))
        for k, (ids, mask) in enumerate(pairs):
            if not _trains(t, row, k, sampled_only, greedy_only, skip_turns):
                continue
            sequences.append(ids)
            masks.append(mask)
            owner.append(row)
    return sequences, masks, owner


def _trains(trajectory: Trajectory, row: int, k: int, sampled_only: bool, greedy_only: bool,
            skip_turns: frozenset) -> bool:
    """Whether ``trained_sequences`` keeps chat ``k`` of trajectory ``row``; the filters read turn ``k`` (they need
    one chat per turn, and are read only when set)."""
    return not ((sampled_only and trajectory.turns[k].greedy) or (greedy_only and not trajectory.turns[k].greedy)
                or (row, k) in skip_turns)


def search_weights(trajectories: list[Trajectory], vstar: VStarTable, profile: Profile) -> list[float] | None:
    """For each chat of ``training_sequences``: ``APOConfig.search_grad_weight`` for a search-page turn (the query),
    1 for the others; None when the weight is 1 (nothing to scale)."""
    config = profile.apo
    if config.search_grad_weight == 1:
        return None
    require_turn_chats(profile.policy.window, "search_grad_weight")
    sampled_only, skip = bool(greedy_pages(config)), uncredited_turns(trajectories, vstar, config)
    return [config.search_grad_weight if SEARCH_PLACEHOLDER in u.actions else 1.0
            for row, t in enumerate(trajectories) for k, u in enumerate(t.turns)
            if _trains(t, row, k, sampled_only, False, skip)]


def scale_gradient(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``values`` unchanged, with the gradient that flows back through them multiplied by ``weight``."""
    detached = values.detach()
    return detached + weight * (values - detached)


def chat_first_turns(trajectories: list[Trajectory], window) -> list[int]:
    """For each chat of ``trained_sequences``, the global index (over all turns of all trajectories) of the turn its
    first assistant reply answers: one chat per turn with ``window=1``, one chat of every turn with ``window=None``."""
    if window not in (1, None):
        raise ValueError(f"per-turn values need window=1 or None (a chat per turn or one chat), got {window}")
    firsts, offset = [], 0
    for t in trajectories:
        firsts += list(range(offset, offset + t.num_turns)) if window == 1 else [offset]
        offset += t.num_turns
    return firsts


@dataclass
class TurnValues:
    """A critic's output for PPO: one value per turn, and the turn of each scored token."""

    values: torch.Tensor
    """(T,) V(s_t) at the last prompt token of each turn (differentiable)."""
    token_turn: torch.Tensor
    """(N,) the global turn index of each scored token, in ``score_tokens``' order."""


def _micro_batches(sequences, masks, pad_id: int, micro_batch: int, dev):
    """Chats sorted by length (less padding), ``micro_batch`` at a time, always in the same order: yields each
    chunk's indices into ``sequences`` and its collated ``(input_ids, attention_mask, loss_mask)``."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    for start in range(0, len(order), micro_batch):
        chunk = order[start: start + micro_batch]
        yield (chunk, *collate([sequences[i] for i in chunk], [masks[i] for i in chunk], pad_id, dev))


def score_chunks(model, sequences, masks, owner, pad_id: int, micro_batch: int, with_entropy: bool = False,
                 value_head=None, first_turns: list[int] | None = None, total_turns: int = 0):
    """``score_tokens`` one micro-batch at a time: yields ``(logp, trajectory of each token, entropy or None,
    values or None, turn of each token)`` per micro-batch, chats sorted by length, always in the same order. With a
    critic, ``values`` is a (total_turns,) tensor holding the values of the turns this micro-batch answers (zero
    elsewhere) and the last item the global turn of each scored token (else empty)."""
    dev = next(model.parameters()).device
    for chunk, ids, attn, mask in _micro_batches(sequences, masks, pad_id, micro_batch, dev):
        with _autocast(dev):
            logp, chat_rows, entropy, hidden = selected_logprobs_and_hidden(model, ids, attn, mask, with_entropy)
        rows = torch.tensor([owner[i] for i in chunk], device=dev)[chat_rows]
        values, token_turns = None, []
        if value_head is not None:
            values = _turn_values(value_head, hidden, chunk, masks, first_turns, total_turns, token_turns)
        yield logp.float(), rows, (entropy.float() if with_entropy else None), values, token_turns


def score_tokens(model, sequences, masks, owner, pad_id: int, micro_batch: int, with_entropy: bool = False,
                 value_head=None, first_turns: list[int] | None = None, total_turns: int = 0):
    """Log-probs of the masked tokens of ``sequences`` -> flat ``(logp, trajectory of each token, entropy, values)``.

    Chats are sorted by length and scored ``micro_batch`` at a time (less padding, bounded memory); the result is
    in a fixed order, so the same batch always gives the same tensors. Gradients flow when enabled by the caller.
    With a ``value_head`` (PPO), the same forward pass also gives one value per turn (``TurnValues``); ``first_turns``
    (from ``chat_first_turns``) places each chat's replies among the ``total_turns`` turns.
    """
    dev = next(model.parameters()).device
    # empty starts: a batch may have no trained token (every turn greedy under ``greedy_search``)
    logps, rows, entropies, token_turns = [torch.zeros(0, device=dev)], [torch.zeros(0, dtype=torch.long, device=dev)], \
        [torch.zeros(0, device=dev)], []
    values = torch.zeros(total_turns, device=dev) if value_head is not None else None
    for logp, chunk_rows, entropy, chunk_values, chunk_turns in score_chunks(
            model, sequences, masks, owner, pad_id, micro_batch, with_entropy, value_head, first_turns, total_turns):
        logps.append(logp)
        rows.append(chunk_rows)
        if with_entropy:
            entropies.append(entropy)
        if value_head is not None:
            values = values + chunk_values
            token_turns += chunk_turns
    token_turn = torch.tensor(token_turns, device=dev, dtype=torch.long) if value_head is not None else None
    return (torch.cat(logps), torch.cat(rows), (torch.cat(entropies) if with_entropy else None),
            TurnValues(values, token_turn) if value_head is not None else None)


def _turn_values(value_head, hidden, chunk, masks, first_turns, total_turns, token_turns):
    """Values of the turns answered in one micro-batch, scattered into a (total_turns,) tensor; extends
    ``token_turns`` with the global turn of each masked token (row by row, as ``selected_logprobs`` orders them)."""
    batch_rows, positions, turns = [], [], []
    for row, i in enumerate(chunk):
        spans, token_span = turn_positions(masks[i])
        batch_rows += [row] * len(spans)
        positions += spans
        turns += [first_turns[i] + k for k in range(len(spans))]
        token_turns += [first_turns[i] + k for k in token_span]
    dev = hidden.device
    predicted = value_head(hidden, torch.tensor(batch_rows, device=dev), torch.tensor(positions, device=dev))
    return torch.zeros(total_turns, device=dev, dtype=predicted.dtype).index_add(
        0, torch.tensor(turns, device=dev), predicted)


def _autocast(dev):
    """bf16 autocast on CUDA; nothing on CPU (same code on both)."""
    if dev.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def anchored(config) -> bool:
    """Whether the greedy turns are scored for ``APOConfig.greedy_anchor``'s term."""
    return bool(greedy_pages(config)) and config.greedy_anchor > 0


def anchor_sequences(trajectories: list[Trajectory], tokenizer, profile: Profile):
    """The chats of the greedy turns (``trained_sequences`` with ``greedy_only``), or None when neither
    ``greedy_anchor`` nor ``greedy_kl`` reads them."""
    if not (anchored(profile.apo) or (greedy_pages(profile.apo) and profile.apo.greedy_kl > 0)):
        return None
    return trained_sequences(trajectories, tokenizer, profile.policy.window, profile.apo.logprob_tokens,
                             greedy_only=True)


def scored_tokens(chats: tuple, anchor_chats: tuple | None = None) -> int:
    """Tokens an update scores with gradients: every position of every trained chat (``trained_sequences``' result),
    and of the greedy turns' chats when ``greedy_anchor`` scores them too. The memory of one backward through the
    whole batch grows with this number (``python -m apo_helpers bench update-memory``)."""
    return sum(len(ids) for ids in chats[0]) + (sum(len(ids) for ids in anchor_chats[0]) if anchor_chats else 0)


def lean_update(config: APOConfig, tokens: int) -> bool:
    """Whether an update of a batch of ``tokens`` scored tokens backpropagates one micro-batch at a time: always under
    ``backward_per_micro_batch``, and past ``max_graph_tokens`` otherwise."""
    return config.backward_per_micro_batch or 0 < config.max_graph_tokens < tokens


def regression_value(trajectory: Trajectory, vstar: VStarTable, config: APOConfig) -> float:
    """The value the objective subtracts from a trajectory's return: V*(x), or, under
    ``APOConfig.hold_failed_draws``, the return itself for a trajectory with a drawn turn that scored below V*(x)
    (an advantage of 0: the regression holds it at pi_ref instead of pushing it down)."""
    value = vstar.value(trajectory.goal)
    reward = training_reward(trajectory.reward, config.success_bonus)
    if config.hold_failed_draws and reward < value and any(u.explored for u in trajectory.turns):
        return reward
    return value


def beats_value(trajectory: Trajectory, vstar: VStarTable, config: APOConfig) -> bool:
    """Whether the trajectory's training return is above the value it is regressed on (a positive advantage): the
    winners ``credit_repeats=False`` leaves the repeats out of and ``replay`` keeps."""
    return training_reward(trajectory.reward, config.success_bonus) > regression_value(trajectory, vstar, config)


def uncredited_turns(trajectories: list[Trajectory], vstar: VStarTable, config: APOConfig) -> frozenset:
    """``(trajectory, turn)`` of the repeated turns (``Turn.repeated``) of the trajectories whose return beats the
    value they are regressed on, when ``APOConfig.credit_repeats`` is False (else none): a loop a sample left by
    chance earns the winning trajectory's credit for its other turns, not for the repeats."""
    if config.credit_repeats:
        return frozenset()
    return frozenset((row, k) for row, t in enumerate(trajectories) if beats_value(t, vstar, config)
                     for k, u in enumerate(t.turns) if u.repeated)


def training_sequences(trajectories: list[Trajectory], tokenizer, vstar: VStarTable, profile: Profile):
    """The chats an update trains on (``trained_sequences``): the sampled turns under ``greedy_search`` or
    ``greedy_clicks``, less the repeats ``credit_repeats=False`` leaves out."""
    config = profile.apo
    return trained_sequences(trajectories, tokenizer, profile.policy.window, config.logprob_tokens,
                             bool(greedy_pages(config)), skip_turns=uncredited_turns(trajectories, vstar, config))


def objective_inputs(model, ref_model, trajectories, tokenizer, vstar: VStarTable, profile: Profile,
                     with_entropy: bool = True, timings: dict | None = None, value_head=None,
                     chats: tuple | None = None, split: SplitValues | None = None,
                     earlier: ObjectiveInputs | None = None, anchor_chats: tuple | None = None) -> ObjectiveInputs:
    """Score a batch under the policy (differentiable) and pi_ref (no gradients) -> ``ObjectiveInputs``.

    ``timings``, when given, receives the seconds of the policy's and pi_ref's forward passes. With a
    ``value_head`` (PPO) the inputs also carry per-turn values, rewards and the turn of each token. ``chats`` is
    ``trained_sequences``' result when the caller already has it. ``split`` (``apo_split``) marks the tokens of the
    turns from each trajectory's split on; it needs one chat per turn (``window=1``). ``earlier``: the same batch's
    inputs from its first scoring (a later update epoch): pi_ref is not scored again, and the old policy's log-probs
    stay the first scoring's. Under ``greedy_anchor`` the greedy turns' tokens are scored too, apart from the trained
    ones (``anchor_chats``: ``anchor_sequences``' result when the caller already has it)."""
    config = profile.apo
    start = time.perf_counter()
    sequences, masks, owner = chats or training_sequences(trajectories, tokenizer, vstar, profile)
    first_turns = chat_first_turns(trajectories, profile.policy.window) if value_head is not None else None
    total_turns = sum(t.num_turns for t in trajectories)
    chat_ids = list(range(len(sequences)))  # score by chat, then map chats to trajectories
    token_logp, token_chat, entropy, critic = score_tokens(model, sequences, masks, chat_ids, tokenizer.pad_token_id,
                                                           config.micro_batch, with_entropy, value_head, first_turns,
                                                           total_turns)
    rows = torch.tensor(owner, device=token_chat.device, dtype=torch.long)[token_chat]
    weights = search_weights(trajectories, vstar, profile)
    token_weight = None
    if weights is not None:
        if len(weights) != len(sequences):
            raise ValueError(f"search_grad_weight: {len(weights)} weights for {len(sequences)} trained chats")
        token_weight = torch.tensor(weights, device=token_chat.device, dtype=token_logp.dtype)[token_chat]
        token_logp = scale_gradient(token_logp, token_weight)
    middle = time.perf_counter()
    if earlier is not None:  # the same chats in the same order: pi_ref's scores do not change
        token_logp_ref = earlier.token_logp_ref
    else:
        with torch.no_grad():
            token_logp_ref, _, _, _ = score_tokens(ref_model, sequences, masks, chat_ids, tokenizer.pad_token_id,
                                                   config.micro_batch)
    if timings is not None:
        timings.update(policy_forward_seconds=middle - start, ref_seconds=time.perf_counter() - middle)
    batch, dev = len(trajectories), token_logp.device

    def per_trajectory(values):
        return torch.zeros(batch, device=dev, dtype=values.dtype).index_add(0, rows, values)

    goal_ids = {}
    extra = {}  # the fields only some objectives read
    if split is not None:
        extra.update(_split_inputs(split, trajectories, owner, bool(greedy_pages(config)), token_chat,
                                   profile.policy.window, dev))
    if anchored(config):
        extra.update(_anchor_inputs(model, ref_model, anchor_chats or anchor_sequences(trajectories, tokenizer, profile),
                                    tokenizer.pad_token_id, config.micro_batch, earlier))
    if critic is not None:
        extra.update(values=critic.values, token_turn=critic.token_turn,
                     turn_row=torch.tensor([row for row, t in enumerate(trajectories) for _ in t.turns], device=dev),
                     turn_rewards=torch.tensor([u.reward for t in trajectories for u in t.turns], device=dev))
    return ObjectiveInputs(
        logp=per_trajectory(token_logp), logp_ref=per_trajectory(token_logp_ref),
        reward=torch.tensor([training_reward(t.reward, config.success_bonus) for t in trajectories], device=dev,
                            dtype=torch.float32),
        vstar=torch.tensor([regression_value(t, vstar, config) for t in trajectories], device=dev,
                           dtype=torch.float32),
        tokens=per_trajectory(torch.ones_like(token_logp)),
        group=torch.tensor([goal_ids.setdefault((t.goal.split, t.goal.index), len(goal_ids)) for t in trajectories],
                           device=dev),
        token_logp=token_logp, token_logp_ref=token_logp_ref,
        token_logp_old=earlier.token_logp_old if earlier is not None else token_logp.detach(),
        token_row=rows, entropy=entropy, token_grad_weight=token_weight, **extra)


def _split_inputs(split: SplitValues, trajectories: list[Trajectory], owner: list[int], sampled_only: bool,
                  token_chat, window, dev) -> dict:
    """``ObjectiveInputs``' split fields: which tokens come from the turns at or after each trajectory's split (one
    chat per turn, in turn order within a trajectory), V*(s_k) and the reward before the split."""
    require_turn_chats(window)
    chat_turn = [k for t in trajectories for k, u in enumerate(t.turns) if not (sampled_only and u.greedy)]
    first_after = torch.tensor(split.turn, device=dev)[torch.tensor(owner, device=dev)]  # per chat
    return dict(token_after_split=(torch.tensor(chat_turn, device=dev) >= first_after)[token_chat],
                split_value=torch.tensor(split.value, device=dev, dtype=torch.float32),
                reward_before_split=torch.tensor(split.reward_before, device=dev, dtype=torch.float32))


def greedy_turn_kl(model, ref_model, greedy_chats, pad_id: int, micro_batch: int,
                   backward: Callable | None = None) -> float:
    """Sum over the greedy turns' token positions of KL(pi || pi_ref) between the whole next-token distributions
    (``APOConfig.greedy_kl``), one micro-batch at a time; ``backward``, when given, is called on each micro-batch's
    (differentiable) sum, so memory holds one micro-batch's graph."""
    sequences, masks, _ = greedy_chats
    dev = next(model.parameters()).device
    total = 0.0
    for _, ids, attn, mask in _micro_batches(sequences, masks, pad_id, micro_batch, dev):
        with _autocast(dev):
            logp, _ = selected_log_distributions(model, ids, attn, mask)
            with torch.no_grad():
                logp_ref, _ = selected_log_distributions(ref_model, ids, attn, mask)
        kl = distribution_kl(logp.float(), logp_ref.float()).sum()
        if backward is not None and kl.requires_grad:
            backward(kl)
        total += kl.item()
    return total


def _anchor_inputs(model, ref_model, anchor_chats, pad_id: int, micro_batch: int,
                   earlier: ObjectiveInputs | None) -> dict:
    """``ObjectiveInputs``' anchor fields: the greedy turns' token log-probs under the policy (differentiable when
    the caller enables gradients) and pi_ref, and the trajectory of each token."""
    sequences, masks, owner = anchor_chats
    logp, rows, _, _ = score_tokens(model, sequences, masks, owner, pad_id, micro_batch)
    if earlier is not None:
        logp_ref = earlier.anchor_token_logp_ref
    else:
        with torch.no_grad():
            logp_ref, _, _, _ = score_tokens(ref_model, sequences, masks, owner, pad_id, micro_batch)
    return dict(anchor_token_logp=logp, anchor_token_logp_ref=logp_ref, anchor_token_row=rows)


def _as_leaves(inputs: ObjectiveInputs):
    """``inputs`` whose token log-probs (trained and anchored), entropies and values are fresh leaf tensors (the
    per-trajectory sums rebuilt from them), and those leaves: an objective's gradient then stops at the model's
    outputs."""
    token_logp = inputs.token_logp.detach().requires_grad_()
    entropy = inputs.entropy.detach().requires_grad_() if inputs.entropy is not None else None
    values = inputs.values.detach().requires_grad_() if inputs.values is not None else None
    anchor = inputs.anchor_token_logp.detach().requires_grad_() if inputs.anchor_token_logp is not None else None
    logp = torch.zeros_like(inputs.logp).index_add(0, inputs.token_row, token_logp)
    leaves = (token_logp, entropy, values, anchor)
    return dataclasses.replace(inputs, logp=logp, token_logp=token_logp, entropy=entropy, values=values,
                               anchor_token_logp=anchor), leaves


# ------------------------------------------------------------------------------------------------ the loop

def learning_rate(config, iteration: int, total: int) -> float:
    """The update's learning rate at ``iteration`` of a run of ``total``: linear warm-up over ``config.warmup``
    iterations, then ``config.lr`` held, or with ``config.lr_decay`` a cosine decay to 10% of it at ``total``."""
    if config.lr_decay:
        return lr_at(iteration, total, config.lr, max(1, config.warmup))
    return config.lr * min(1.0, (iteration + 1) / max(1, config.warmup))


def make_accelerator() -> Accelerator:
    """The run's ``Accelerator``: its device (CUDA when present, else CPU), bf16 mixed precision on CUDA, and the
    process group when launched with ``accelerate launch`` or ``torchrun`` (gloo on CPU, NCCL on GPUs)."""
    cuda = torch.cuda.is_available()
    return Accelerator(cpu=not cuda, mixed_precision="bf16" if cuda else "no")


Evaluator = Callable[..., dict]
"""``evaluator(model, tokenizer, split, episodes, profile) -> dict`` of greedy results (success, score, steps,
invalid_rate, ...): what the Trainer records on val every ``eval_every`` iterations. The package's is
``analysis.evaluate.greedy_evaluation``, handed in by the caller so that this module imports nothing above it."""


@dataclass
class TrainState:
    """What a checkpoint holds besides the weights: enough to continue exactly."""

    iteration: int
    history: pd.DataFrame
    evals: pd.DataFrame


class Trainer:
    """RAGEN's loop: ``run()`` alternates batched rollouts and one update of ``objective`` (default A*PO)."""

    def __init__(self, model, ref_model, tokenizer, vstar: VStarTable, profile: Profile, objective: str = "apo",
                 seed: int = 0, out_dir=None, iterations: int | None = None, accelerator: Accelerator | None = None,
                 evaluator: Evaluator | None = None):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose one of {sorted(OBJECTIVES)}")
        if len(vstar.table) == 0:
            raise ValueError("the V* table has no goals: nothing to train on (was every goal dropped as unsolved?)")
        self.model, self.ref_model, self.tokenizer = model, ref_model, tokenizer
        self.vstar, self.profile, self.config = vstar, profile, profile.apo
        self.objective_name, self.objective = objective, OBJECTIVES[objective]
        self.seed, self.iterations = seed, iterations or profile.apo.iterations
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.evaluator = evaluator
        self.goals = vstar.goals()
        self.accelerator = accelerator or make_accelerator()
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        if self.world > 1 and (self.config.batch_goals // max(1, self.config.group_size)) % self.world:
            raise ValueError(f"batch_goals / group_size = {self.config.batch_goals // max(1, self.config.group_size)} "
                             f"goals per iteration cannot be shared equally by {self.world} processes")
        if objective == "apo_split":
            require_turn_chats(profile.policy.window)
        if greedy_pages(self.config):  # raises when the two modes are mixed
            mode = "greedy_search" if self.config.greedy_search else "greedy_clicks"
            require_turn_chats(profile.policy.window, mode)
            if objective == "ppo":  # its critic gives every turn a value from that turn's chat
                raise ValueError(f"{mode} leaves the greedy turns out of training; ppo's critic needs every turn: "
                                 f"use another objective or {mode}=false")
        if self.config.greedy_anchor < 0:
            raise ValueError(f"greedy_anchor must be 0 (off) or positive, got {self.config.greedy_anchor}")
        if self.config.hold_failed_draws and not drawn_turns(self.config):
            raise ValueError("hold_failed_draws holds the trajectories with a drawn turn, but no turn is drawn: set "
                             "explore, explore_options, explore_results or explore_search above 0")
        if self.config.success_bonus and objective in ("ppo", "apo_split"):
            raise ValueError(f"success_bonus reshapes the trajectory's return; {objective} also reads per-turn rewards, "
                             "which it leaves unchanged: use success_bonus=0 with it")
        training_reward(0.0, self.config.success_bonus)  # raises on a negative bonus
        if self.config.greedy_kl < 0:
            raise ValueError(f"greedy_kl must be 0 (off) or positive, got {self.config.greedy_kl}")
        if not 0.0 <= self.config.ema < 1.0:
            raise ValueError(f"ema is the decay of the weights' moving average: 0 (off) or in (0, 1), got "
                             f"{self.config.ema}")
        if self.config.greedy_kl > 0 and not greedy_pages(self.config):
            raise ValueError("greedy_kl holds the turns that greedy_search or greedy_clicks answers greedily to pi_ref: "
                             "it needs one of them (both are false)")
        if self.config.greedy_anchor > 0 and (not greedy_pages(self.config) or objective != "apo"):
            raise ValueError("greedy_anchor is a term of A*PO's regression on the turns greedy_search or greedy_clicks "
                             f"answers greedily: it needs one of them and the apo objective (got greedy_search="
                             f"{self.config.greedy_search}, greedy_clicks={self.config.greedy_clicks}, objective "
                             f"{objective!r})")
        if self.config.search_grad_weight != 1:
            if self.config.search_grad_weight <= 0:
                raise ValueError(f"search_grad_weight multiplies the query's gradient: positive (1: off), got "
                                 f"{self.config.search_grad_weight}")
            require_turn_chats(profile.policy.window, "search_grad_weight")
        if not self.config.credit_repeats:
            if objective != "apo":  # the others' per-turn inputs (critic values, the split's turns) count every chat
                raise ValueError(f"credit_repeats=False leaves turns out of A*PO's log-ratio; it needs the apo "
                                 f"objective, got {objective!r}")
            require_turn_chats(profile.policy.window, "credit_repeats=False")
        if self.config.replay < 0 or self.config.replay_capacity < 1:
            raise ValueError(f"replay is a count of trajectories per update (0: off) and replay_capacity at least 1, "
                             f"got replay={self.config.replay}, replay_capacity={self.config.replay_capacity}")
        if self.config.replay and objective != "apo":  # the others' ratios need the policy that sampled y
            raise ValueError(f"replay reuses earlier iterations' samples, which A*PO's least squares allows; the "
                             f"{objective!r} objective reads the sampling policy's probabilities: use replay=0")
        if self.config.replay and self.world > 1:
            raise ValueError(f"replay keeps one buffer of winning trajectories; with {self.world} processes each "
                             f"would keep its own and its checkpoint only one of them: use one process or replay=0")
        self.ref_model.eval().requires_grad_(False)
        # PPO's critic: a value head on the policy's last hidden state, trained with it
        self.value_head = ValueHead(model.config.hidden_size).to(_device_of(model)) if objective == "ppo" else None
        parameters = list(model.parameters()) + (list(self.value_head.parameters()) if self.value_head else [])
        self.optimizer = torch.optim.AdamW(parameters, lr=self.config.lr, weight_decay=0.0, betas=(0.9, 0.95))
        # the moving average of the policy's weights (``ema``), from the initial ones
        self.average = ({name: p.detach().clone() for name, p in model.named_parameters()}
                        if self.config.ema > 0 else None)
        self.rng = random.Random(seed)  # the same goals on every process: each then takes its share
        # ``replay``: the latest winning trajectories, and a generator of its own so the goals drawn stay the same
        self.replay_buffer: list[Trajectory] = []
        self.replay_rng = random.Random(f"replay {seed}")
        self.state = TrainState(0, pd.DataFrame(), pd.DataFrame())
        self.earlier_peak_memory_mb = 0.0  # the peak of the calls before a resume (a process only knows its own)
        seed_everything(seed + self.rank)  # each process samples its own rollouts

    # one iteration ------------------------------------------------------------------------------------------
    def draw_goals(self):
        """``batch_goals`` rollouts: ``batch_goals / group_size`` distinct goals, each ``group_size`` times."""
        group = max(1, self.config.group_size)
        distinct = self.rng.sample(self.goals, min(max(1, self.config.batch_goals // group), len(self.goals)))
        return [g for g in distinct for _ in range(group)]

    def share(self, items: list) -> list:
        """This process's contiguous share of the iteration's rollouts (all of them with one process); whole goal
        groups stay together since the group size divides each share."""
        size = len(items) // self.world
        return items[self.rank * size: (self.rank + 1) * size] if self.world > 1 else items

    def draw_replay(self) -> list[Trajectory]:
        """``replay`` trajectories of the buffer, drawn uniformly without replacement (fewer while it holds fewer)."""
        if not self.config.replay:
            return []
        return self.replay_rng.sample(self.replay_buffer, min(self.config.replay, len(self.replay_buffer)))

    def remember(self, trajectories: list[Trajectory]) -> None:
        """Keep the trajectories whose return beat the value they were regressed on, the last ``replay_capacity``."""
        if not self.config.replay:
            return
        self.replay_buffer += [t for t in trajectories if beats_value(t, self.vstar, self.config)]
        del self.replay_buffer[:-self.config.replay_capacity]

    def update(self, trajectories: list[Trajectory], timings: dict | None = None, split: SplitValues | None = None):
        """Phase 2 on this process's trajectories: score them, ``update_epochs`` optimizer steps on the objective
        (one by default), gradients averaged over processes and clipped. Returns the first step's ``(inputs, loss
        averaged over processes, stats, grad norm)``: the batch as sampled; with several epochs ``stats`` also holds
        the last step's loss (``loss_last_epoch``), how far the steps fitted the batch.
        ``split``: ``apo_split``'s V* at each trajectory's first item page (computed here when missing)."""
        config = self.config
        self.model.train()
        if self.objective_name == "apo_split" and split is None:
            split = split_values(self.ref_model, self.tokenizer, trajectories, self.profile)
        chats = training_sequences(trajectories, self.tokenizer, self.vstar, self.profile)
        anchor_chats = anchor_sequences(trajectories, self.tokenizer, self.profile)
        lr = learning_rate(config, self.state.iteration, self.iterations)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        tokens = scored_tokens(chats, anchor_chats if anchored(config) else None)
        lean = lean_update(config, tokens)
        first = None
        for epoch in range(max(1, config.update_epochs)):
            with torch.no_grad() if lean else contextlib.nullcontext():
                inputs = objective_inputs(self.model, self.ref_model, trajectories, self.tokenizer, self.vstar,
                                          self.profile, timings=timings if epoch == 0 else None,
                                          value_head=self.value_head, chats=chats, split=split, earlier=first,
                                          anchor_chats=anchor_chats)
            if epoch == 0:
                update_start = time.perf_counter()
            loss, stats, grad_norm = self._step(inputs, trajectories, chats, anchor_chats, lean)
            if first is None:
                first, first_loss, first_stats, first_grad_norm = inputs, loss, stats, grad_norm
        first_stats = {**first_stats, "scored_tokens": tokens, "lean_update": float(lean)}
        if config.update_epochs > 1:
            first_stats = {**first_stats, "loss_last_epoch": float(loss)}
        self.model.eval()
        if timings is not None:
            timings["update_seconds"] = time.perf_counter() - update_start
        return first, first_loss, first_stats, first_grad_norm

    def _step(self, inputs, trajectories, chats, anchor_chats=None, lean: bool = False):
        """One optimizer step on the objective at ``inputs``: ``(loss averaged over processes, stats, grad norm)``.
        ``lean``: backpropagate one micro-batch at a time (``lean_update``); ``inputs`` were then scored without
        gradients."""
        config = self.config
        self.optimizer.zero_grad(set_to_none=True)
        if lean:
            inputs, leaves = _as_leaves(inputs)
            loss, stats = self.objective(inputs, config)
            loss.backward()  # d loss / d (token log-probs, entropies, values): cheap, no model graph
            grads = [leaf.grad if leaf is not None else None for leaf in leaves]
            if inputs.token_grad_weight is not None and grads[0] is not None:  # what scale_gradient does unscored
                grads[0] = grads[0] * inputs.token_grad_weight
            self._backward_by_micro_batch(trajectories, chats, anchor_chats, *grads)
        else:
            loss, stats = self.objective(inputs, config)
            if loss.requires_grad:  # not when the batch has no trained token: nothing to learn from it
                self.accelerator.backward(loss)
        if config.greedy_kl > 0 and anchor_chats is not None:  # its gradient adds to the objective's
            loss, stats = self._greedy_kl_backward(loss, stats, len(trajectories), anchor_chats)
        parameters = [p for g in self.optimizer.param_groups for p in g["params"]]
        self._average_gradients(parameters)
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip)
        self.optimizer.step()
        self._update_average()
        return self._mean_over_processes(loss.detach()), stats, grad_norm

    def _greedy_kl_backward(self, loss, stats, batch: int, greedy_chats):
        """Backpropagate ``greedy_kl`` times the greedy turns' KL to pi_ref per trajectory, one micro-batch at a
        time; returns the loss with the term added and the stats with ``greedy_kl`` (the KL per trajectory)."""
        scale = self.config.greedy_kl / batch
        total = greedy_turn_kl(self.model, self.ref_model, greedy_chats, self.tokenizer.pad_token_id,
                               self.config.micro_batch, lambda kl: self.accelerator.backward(scale * kl))
        return loss.detach() + scale * total, {**stats, "greedy_kl": total / batch}

    def _backward_by_micro_batch(self, trajectories, chats, anchor_chats, grad_logp, grad_entropy, grad_values,
                                 grad_anchor) -> None:
        """The chain rule one micro-batch at a time: re-run each micro-batch's forward pass with gradients and
        backpropagate sum(d loss / d output * output) over its token log-probs (entropies, turn values). The
        parameter gradients equal those of one backward through the whole batch (a test checks it), while memory
        holds one micro-batch's graph: what a pretrained model's long chats need."""
        profile, config = self.profile, self.config
        sequences, masks, owner = chats  # ``trained_sequences``' result, as scored in the first pass
        critic = self.value_head if grad_values is not None else None
        first_turns = chat_first_turns(trajectories, profile.policy.window) if critic is not None else None
        total_turns = sum(t.num_turns for t in trajectories)
        offset = 0
        for logp, _, entropy, values, _ in score_chunks(self.model, sequences, masks, owner,
                                                         self.tokenizer.pad_token_id, config.micro_batch,
                                                         grad_entropy is not None, critic, first_turns, total_turns):
            part = slice(offset, offset + len(logp))
            offset += len(logp)
            surrogate = (logp * grad_logp[part]).sum() if grad_logp is not None else logp.sum() * 0
            if grad_entropy is not None:
                surrogate = surrogate + (entropy * grad_entropy[part]).sum()
            if critic is not None:
                surrogate = surrogate + (values * grad_values).sum()
            self.accelerator.backward(surrogate)
        if grad_anchor is not None:  # the greedy turns' chats (``greedy_anchor``), in their own scoring order
            sequences, masks, owner = anchor_chats
            offset = 0
            for logp, *_ in score_chunks(self.model, sequences, masks, owner, self.tokenizer.pad_token_id,
                                         config.micro_batch):
                self.accelerator.backward((logp * grad_anchor[offset: offset + len(logp)]).sum())
                offset += len(logp)

    def _average_gradients(self, parameters) -> None:
        """Data parallelism by hand (one all-reduce per parameter): every process then steps with the same
        gradient, so the replicas stay identical. DDP's wrapper is not used because a batch is scored in several
        micro-batch forward passes before its one backward pass."""
        if self.world == 1:
            return
        for p in parameters:
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            p.grad = self.accelerator.reduce(grad, reduction="mean")

    def _mean_over_processes(self, value: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(value, reduction="mean") if self.world > 1 else value

    def _gather(self, rows: list[list[float]]) -> np.ndarray:
        """Per-trajectory numbers of every process's share, stacked (what the history is computed from)."""
        local = torch.tensor(rows, dtype=torch.float64, device=self.accelerator.device)
        return (self.accelerator.gather(local) if self.world > 1 else local).cpu().numpy()

    def iteration(self) -> dict:
        """Phase 1 (rollouts) then phase 2 (one update); returns the iteration's row of the history."""
        config, start = self.config, time.perf_counter()
        goals = self.share(self.draw_goals())
        trajectories = rollout(self.model, self.tokenizer, goals, rollout_sampling(config, config.temperature),
                               self.profile.policy, self.profile.policy_env())
        timings = {"rollout_seconds": time.perf_counter() - start}
        split = None
        if self.objective_name == "apo_split":  # pi_ref's continuations from each first item page
            split_start = time.perf_counter()
            split = split_values(self.ref_model, self.tokenizer, trajectories, self.profile)
            timings["split_seconds"] = time.perf_counter() - split_start
        replayed = self.draw_replay()  # earlier winners join the update after this batch (``replay``)
        inputs, loss, stats, grad_norm = self.update(trajectories + replayed, timings, split)
        self.remember(trajectories)
        # the history describes this iteration's rollouts: the first rows of the inputs
        kl = kl_estimate(inputs.token_logp, inputs.token_logp_ref, inputs.token_row, len(trajectories) + len(replayed))
        entropy = inputs.entropy.mean() if inputs.entropy is not None else torch.tensor(float("nan"))
        # per trajectory: reward, success, invalid actions, turns, generated and trained tokens, log-ratio, entropy,
        # generated replies and those trained on other tokens than were sampled (token_mismatches; NaN: not counted),
        # turns answered by a drawn click (``explore``), turns repeating the last action on an unchanged page, and
        # episodes ended at such a repeat (``stop_repeats``), and the repeats left out of training (``credit_repeats``)
        uncredited = [row for row, _ in uncredited_turns(trajectories, self.vstar, config)]
        rows = [[t.reward, float(t.success), t.invalid_actions, t.num_turns, t.generated_tokens, n, k, entropy.item(),
                 sum(map(bool, t.reply_ids)), np.nan if t.token_mismatches is None else t.token_mismatches,
                 sum(u.explored for u in t.turns), t.repeats, float(t.stopped_repeat), uncredited.count(row)]
                for row, (t, n, k) in enumerate(zip(trajectories, inputs.tokens.tolist(), kl.tolist()))]
        (reward, success, invalid, turns, generated, trained, log_ratio, entropies, replies,
         mismatches, explored, repeats, stopped, skipped) = self._gather(rows).T
        if self.world > 1:
            stats = {name: self._mean_over_processes(torch.tensor(float(value), device=self.accelerator.device)).item()
                     for name, value in stats.items()}
        return {"iteration": self.state.iteration + 1, "reward": float(reward.mean()),
                "success": float(success.mean()), "loss": loss.item(),
                "kl": float(log_ratio.mean()), "log_ratio_abs": float(np.abs(log_ratio).mean()),
                "entropy": float(entropies.mean()),
                "invalid_rate": float(invalid.sum() / max(1, turns.sum())),
                "turns": float(turns.mean()), "generated_tokens": int(generated.sum()),
                "trained_tokens": int(trained.sum()), "grad_norm": float(grad_norm),
                "token_mismatch_rate": float(mismatches.sum() / max(1, replies.sum())),
                "explored_rate": float(explored.sum() / max(1, turns.sum())),
                "repeat_rate": float(repeats.sum() / max(1, turns.sum())), "stopped_rate": float(stopped.mean()),
                **({} if config.credit_repeats else {"uncredited_rate": float(skipped.sum() / max(1, turns.sum()))}),
                **({"replayed": len(replayed), "replay_buffer": len(self.replay_buffer)} if config.replay else {}),
                "lr": self.optimizer.param_groups[0]["lr"], **timings, "seconds": time.perf_counter() - start,
                **stats}

    def evaluate(self, split: str = "val", episodes: int | None = None) -> dict:
        """The evaluator's greedy results on the first ``episodes`` goals of ``split`` (``eval_episodes`` by
        default), with the iteration and the split; with ``ema`` the averaged weights play."""
        if self.evaluator is None:
            raise ValueError("this Trainer has no evaluator: pass evaluator=greedy_evaluation "
                             "(apo_helpers.analysis.evaluate) to evaluate it")
        with self.averaged_weights():
            row = self.evaluator(self.model, self.tokenizer, split, episodes or self.config.eval_episodes,
                                 self.profile)
        return {"iteration": self.state.iteration, "split": split, **row}

    # the weights' moving average (``ema``) --------------------------------------------------------------------
    @torch.no_grad()
    def _update_average(self) -> None:
        if self.average is None:
            return
        decay = self.config.ema
        for name, p in self.model.named_parameters():
            self.average[name].mul_(decay).add_(p.detach(), alpha=1.0 - decay)

    @torch.no_grad()
    def _copy_into_model(self, weights: dict) -> None:
        for name, p in self.model.named_parameters():
            p.copy_(weights[name])

    @contextlib.contextmanager
    def averaged_weights(self):
        """Inside, the policy holds the averaged weights (``ema``; unchanged without it); the trained weights come
        back on leaving, so training continues from them."""
        if self.average is None:
            yield self.model
            return
        trained = {name: p.detach().clone() for name, p in self.model.named_parameters()}
        self._copy_into_model(self.average)
        try:
            yield self.model
        finally:
            self._copy_into_model(trained)

    def keep_average(self) -> None:
        """Make the averaged weights the policy's for good (the end of a run with ``ema``: what ``train`` tests and
        saves); no-op without ``ema``."""
        if self.average is not None:
            self._copy_into_model(self.average)

    # the loop -----------------------------------------------------------------------------------------------
    def run(self, progress: bool = True) -> TrainState:
        """Iterate up to ``iterations`` (continuing from a resumed state), evaluating (when the Trainer has an
        evaluator) and checkpointing on schedule."""
        config, state = self.config, self.state
        if state.evals.empty and self.evaluator is not None:
            self._log_eval()
        bar = tqdm(total=self.iterations, initial=state.iteration, desc=f"{self.objective_name} seed {self.seed}",
                   disable=not (progress and self.accelerator.is_main_process))
        start = time.perf_counter()
        while state.iteration < self.iterations:
            row = self.iteration()
            state.iteration += 1
            state.history = pd.concat([state.history, pd.DataFrame([row])], ignore_index=True)
            last = state.iteration == self.iterations or self._out_of_time(start)
            if self.evaluator is not None and (state.iteration % config.eval_every == 0 or last):
                self._log_eval()
            if self.out_dir is not None and (state.iteration % config.checkpoint_every == 0 or last):
                if self.accelerator.is_main_process:  # the replicas are identical: one writes
                    self.save_checkpoint()
                self.accelerator.wait_for_everyone()
            bar.update(1)
            val = {"val": f"{state.evals['success'].iloc[-1]:.2f}"} if not state.evals.empty else {}
            bar.set_postfix(reward=f"{row['reward']:.2f}", success=f"{row['success']:.2f}", kl=f"{row['kl']:.2f}", **val)
            if last:
                break
        bar.close()
        return state

    def _out_of_time(self, start: float) -> bool:
        """Past ``max_minutes`` since this call of ``run`` began on any process's clock (the vote is averaged over the
        processes, so that every one stops after the same iteration)."""
        if self.config.max_minutes <= 0:
            return False
        late = float(time.perf_counter() - start > 60 * self.config.max_minutes)
        return bool(self._mean_over_processes(torch.tensor(late, device=self.accelerator.device)) > 0)

    def _log_eval(self):
        row = self.evaluate()
        self.state.evals = pd.concat([self.state.evals, pd.DataFrame([row])], ignore_index=True)

    # checkpoints --------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/iter_NNNNNN`` through a temporary folder and a rename, then point ``latest`` at it:
        a run killed mid-save leaves the previous checkpoint as the latest."""
        root = self.out_dir / CHECKPOINTS
        final = root / f"iter_{self.state.iteration:06d}"
        tmp = root / f".tmp_{final.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_model(self.model, str(tmp / "model.safetensors"))  # handles the tied input/output embeddings
        if self.value_head is not None:
            save_model(self.value_head, str(tmp / "value_head.safetensors"))
        if self.average is not None:
            save_file({name: t.contiguous() for name, t in self.average.items()}, str(tmp / AVERAGE_FILE))
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save({"optimizer": self.optimizer.state_dict(), "rng": rng}, tmp / "trainer_state.pt")
        atomic_write_text(tmp / "state.json", json.dumps({
            "iteration": self.state.iteration, "objective": self.objective_name, "seed": self.seed,
            "goal_rng": _rng_state(self.rng), "python_rng": _rng_state(random),
            "numpy_rng": _numpy_rng_state(), "vstar_key": self.vstar.key, "replay_rng": _rng_state(self.replay_rng),
            "peak_memory_mb": self.peak_memory_mb()}))
        if self.config.replay:
            save_trajectories(self.replay_buffer, tmp / REPLAY_FILE)
        self.state.history.to_csv(tmp / "history.csv", index=False)
        self.state.evals.to_csv(tmp / "evals.csv", index=False)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        atomic_write_text(root / "latest", final.name + "\n")
        for old in sorted(root.glob("iter_*"))[:-2]:  # keep the last two
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load_checkpoint(self, path=None) -> int:
        """Restore weights, optimizer, RNG states and history from ``path`` (default: the latest checkpoint)."""
        root = self.out_dir / CHECKPOINTS
        if path is None:
            latest = root / "latest"
            if not latest.exists():
                raise FileNotFoundError(f"no checkpoint under {root}")
            path = root / latest.read_text().strip()
        path = Path(path)
        state = json.loads((path / "state.json").read_text())
        if state["vstar_key"] != self.vstar.key or state["objective"] != self.objective_name:
            raise ValueError(f"{path} was saved by a run with another V* table or objective "
                             f"({state['objective']}, {state['vstar_key']})")
        load_model(self.model, str(path / "model.safetensors"), device=str(_device_of(self.model)))
        if self.value_head is not None:
            load_model(self.value_head, str(path / "value_head.safetensors"), device=str(_device_of(self.model)))
        if self.average is not None:
            if not (path / AVERAGE_FILE).exists():
                raise ValueError(f"{path} holds no {AVERAGE_FILE}: it was saved by a run without ema; resume it "
                                 f"with ema=0 or start a new run")
            saved_average = load_file(str(path / AVERAGE_FILE), device=str(_device_of(self.model)))
            if set(saved_average) != set(self.average):
                raise ValueError(f"{path / AVERAGE_FILE} holds other weights than this policy's")
            self.average = saved_average
        if self.config.replay:
            if not (path / REPLAY_FILE).exists() or "replay_rng" not in state:
                raise ValueError(f"{path} holds no {REPLAY_FILE}: it was saved by a run without replay; resume it "
                                 f"with replay=0 or start a new run")
            self.replay_buffer = load_trajectories(path / REPLAY_FILE)
            _set_rng_state(self.replay_rng, state["replay_rng"])
        saved = torch.load(path / "trainer_state.pt", weights_only=True, map_location="cpu")
        self.optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"]["torch"])
        if "cuda" in saved["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["rng"]["cuda"])
        _set_rng_state(self.rng, state["goal_rng"])
        _set_rng_state(random, state["python_rng"])
        name, keys, pos, has_gauss, cached = state["numpy_rng"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
        self.state = TrainState(state["iteration"], pd.read_csv(path / "history.csv"), pd.read_csv(path / "evals.csv"))
        self.earlier_peak_memory_mb = state.get("peak_memory_mb", 0.0)
        return self.state.iteration

    def peak_memory_mb(self) -> float:
        """The run's peak memory over every call that trained it: a resumed run keeps the peak of its first part."""
        return max(self.earlier_peak_memory_mb, peak_memory_mb())


def peak_memory_mb() -> float:
    """Peak GPU memory allocated by torch on CUDA, else the peak resident memory of this process (MiB)."""
    if torch.cuda.is_available():
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux reports KiB


def _device_of(model):
    return next(model.parameters()).device


def _rng_state(rng) -> list:
    """A ``random.Random`` (or the ``random`` module) state as JSON-ready lists."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng, state: list) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def _numpy_rng_state():
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def latest_checkpoint(out_dir) -> Path | None:
    """The folder ``latest`` points at, or None."""
    latest = Path(out_dir) / CHECKPOINTS / "latest"
    return Path(out_dir) / CHECKPOINTS / latest.read_text().strip() if latest.exists() else None


def load_models(ref_dir, dev: str | None = None):
    """``(policy, pi_ref, tokenizer)``: the policy starts as a copy of pi_ref."""
    from ..policy.models import load_policy

    dev = dev or default_device()
    model, tokenizer = load_policy(ref_dir, dev)
    ref_model, _ = load_policy(ref_dir, dev)
    return model, ref_model, tokenizer


def fit_one_batch(ref_dir, vstar: VStarTable, profile: Profile, lrs=(3e-4, 1e-4, 3e-5), steps: int = 8,
                  seed: int = 0) -> pd.DataFrame:
    """Can the update fit one batch? (notebook 04) One batch of ``batch_goals`` pi_ref episodes, then, for each
    learning rate, a fresh copy of pi_ref takes ``steps`` optimizer steps on that same batch (no warm-up). One row
    per learning rate and step: the objective's loss on the batch and the mean |log pi/pi_ref| per trajectory
    before that step (step 0: pi = pi_ref) and after the last. A learning rate whose loss rises has overshot:
    the step moved the trajectories' summed log-probs further than the targets (r - V*) / beta2 ask."""
    from ..policy.models import load_policy

    ref_model, tokenizer = load_policy(ref_dir, default_device())
    ref_model.eval().requires_grad_(False)
    seed_everything(seed)
    goals = random.Random(seed).sample(vstar.goals(), min(profile.apo.batch_goals, len(vstar.table)))
    trajectories = rollout(ref_model, tokenizer, goals, rollout_sampling(profile.apo, profile.apo.temperature), profile.policy,
                           profile.policy_env())
    rows = []
    for lr in lrs:
        config = dataclasses.replace(profile.apo, lr=lr, warmup=1, update_epochs=1)
        model, _ = load_policy(ref_dir, str(_device_of(ref_model)))
        trainer = Trainer(model, ref_model, tokenizer, vstar, dataclasses.replace(profile, apo=config), seed=seed)
        for step in range(steps + 1):
            if step < steps:
                inputs, loss, _, _ = trainer.update(trajectories)
            else:  # after the last step: score only
                with torch.no_grad():
                    inputs = objective_inputs(model, ref_model, trajectories, tokenizer, vstar, trainer.profile)
                    loss, _ = trainer.objective(inputs, config)
            rows.append({"lr": lr, "step": step, "loss": float(loss),
                         "log_ratio_abs": float((inputs.logp - inputs.logp_ref).detach().abs().mean())})
    return pd.DataFrame(rows)
