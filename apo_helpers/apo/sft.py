"""Imitation warm start: the reference policy pi_ref that A*PO starts from (notebook 02).

1. Demonstrations: the scripted expert plays train goals; each turn becomes an assistant reply
   ``<think> its reason </think> <answer> its action </answer>``, rendered through the same prompt code the policy
   uses (``policy.prompts``), so imitation and RL see identical text.
2. A tokenizer is trained on the shop's text and the demonstrations (tiny model only).
3. Pretraining (optional): next-token loss on every token of the rendered episodes: the model learns the shop's
   language and page layout, the miniature of LLM pretraining.
4. Imitation: cross-entropy on the assistant tokens only (the assistant mask).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from ..config import RUNS_DIR, Profile, device as default_device, seed_everything
from ..policy.models import count_parameters, create_policy, lineage, load_policy, rendering_files, save_policy
from ..policy.prompts import Turn, encode_chat, episode_chats, format_response, prompt_actions
from ..policy.rollout import Trajectory
from ..policy.scoring import collate, selected_logprobs, token_logprobs
from ..webshop.agents import ExpertAgent
from ..webshop.catalog import Catalog, Goal, default_catalog
from ..webshop.env import WebShopEnv
from ..webshop.search import product_text


def expert_demonstration(env: WebShopEnv, agent: ExpertAgent, goal: Goal) -> Trajectory:
    """The expert's episode on ``goal`` as a trajectory with think + answer replies (no token ids yet)."""
    observation, info = env.reset(options={"goal": goal})
    agent.reset()
    trajectory = Trajectory(goal=goal, turns=[])
    done = False
    while not done:
        action = agent.act(observation, info)
        turn = Turn(observation, prompt_actions(info["available_actions"]), info["turns_left"],
                    response=format_response(agent.reason, action), think=agent.reason, action=action, format_ok=True)
        observation, reward, terminated, truncated, info = env.step(action)
        turn.valid, turn.reward = info["valid"], reward
        trajectory.turns.append(turn)
        done = terminated or truncated
    trajectory.reward = trajectory.env_reward = reward
    trajectory.success, trajectory.breakdown = info["success"], info.get("reward_breakdown")
    return trajectory


def expert_demonstrations(profile: Profile, count: int, catalog: Catalog | None = None, seed: int = 0) -> list[Trajectory]:
    """Successful expert episodes on ``count`` train goals drawn with ``seed``. With a sloppy demonstrator
    (``reference.demo_skip_options`` or ``demo_forget_options``), its episodes that left the options unselected are
    kept when it bought something: they are what it demonstrates, successful or not."""
    catalog = catalog or default_catalog()
    goals = list(catalog.split("train"))
    random.Random(seed).shuffle(goals)
    env = WebShopEnv(split="train", catalog=catalog, config=profile.policy_env())
    agent = ExpertAgent(seed=seed, query=profile.reference.demo_query, skip_options=profile.reference.demo_skip_options,
                        forget_options=profile.reference.demo_forget_options, think=profile.reference.demo_think)
    kept = []
    for goal in goals[:count]:
        demo = expert_demonstration(env, agent, goal)
        if demo.success or (agent.sloppy and demo.env_reward > 0):
            kept.append(demo)
    return kept


def tokenizer_corpus(catalog: Catalog, demos: list[Trajectory], window) -> list[str]:
    """Texts the tiny tokenizer is trained on: products, train instructions, demonstration chats."""
    texts = [product_text(p) + " " + " ".join(v for vs in p.options.values() for v in vs) for p in catalog.products]
    texts += [g.instruction for g in catalog.split("train")]
    for d in demos:
        for chat in episode_chats(d.turns, window):
            texts.append("\n".join(m["content"] for m in chat))
    return texts


def tokenize_demonstrations(demos: list[Trajectory], tokenizer, window) -> None:
    """Fill ``input_ids`` / ``assistant_mask`` of each demonstration."""
    for d in demos:
        d.input_ids, d.assistant_mask = [], []
        for chat in episode_chats(d.turns, window):
            ids, mask = encode_chat(tokenizer, chat)
            d.input_ids.append(ids)
            d.assistant_mask.append(mask)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@dataclass
class Reference:
    """A trained pi_ref and how it got there."""

    model: torch.nn.Module
    tokenizer: object
    history: pd.DataFrame
    """One row per step: step, phase (pretrain / sft), loss, lr, seconds."""
    demonstrations: list[Trajectory]
    seconds: float


def build_tiny_policy(profile: Profile, demos: list[Trajectory], catalog: Catalog | None = None):
    """A fresh tiny model and a tokenizer trained on the shop's text and ``demos`` (whose token ids it fills)."""
    catalog = catalog or default_catalog()
    window = profile.policy.window
    model, tokenizer = create_policy(profile.model.name, profile.model, corpus=tokenizer_corpus(catalog, demos, window))
    tokenize_demonstrations(demos, tokenizer, window)
    return model, tokenizer


def imitate(model, tokenizer, demos: list[Trajectory], pretrain_steps: int, sft_steps: int, batch_size: int,
            lr: float, weight_decay: float = 0.01, seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """Pretrain on every token of the demonstrations, then imitate their assistant tokens; returns the history."""
    dev = default_device()
    model.to(dev).train()
    sequences = [(ids, mask) for d in demos for ids, mask in zip(d.input_ids, d.assistant_mask)]
    if not sequences:
        raise ValueError("no tokenized demonstrations: call tokenize_demonstrations first")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    rng = random.Random(seed)
    total = pretrain_steps + sft_steps
    rows, start = [], time.perf_counter()
    bar = tqdm(range(total), desc=f"imitation ({count_parameters(model) / 1e6:.1f}M params)", disable=not progress)
    for step in bar:
        phase = "pretrain" if step < pretrain_steps else "sft"
        current = lr_at(step, total, lr, warmup=max(1, total // 20))
        for group in optimizer.param_groups:
            group["lr"] = current
        batch = rng.sample(sequences, min(batch_size, len(sequences)))
        ids, attn, mask = collate([b[0] for b in batch], [b[1] for b in batch], tokenizer.pad_token_id, dev)
        if phase == "pretrain":
            target = attn.float()[:, 1:]
            loss = -(token_logprobs(model, ids, attn) * target).sum() / target.sum()
        else:
            loss = -selected_logprobs(model, ids, attn, mask)[0].mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rows.append({"step": step, "phase": phase, "loss": loss.item(), "lr": current,
                     "seconds": time.perf_counter() - start})
        bar.set_postfix(phase=phase, loss=f"{loss.item():.3f}")
    model.eval()
    return pd.DataFrame(rows)


def train_reference(profile: Profile, out_dir=None, demonstrations: int | None = None, pretrain_steps: int | None = None,
                    sft_steps: int | None = None, progress: bool = True, catalog: Catalog | None = None,
                    init_seed: int | None = None) -> Reference:
    """Demonstrations -> tokenizer and tiny model -> pretraining + imitation -> pi_ref (saved to ``out_dir``).

    ``init_seed`` seeds the network's initial weights and the imitation's batch order only: the demonstrations (goals,
    and which of them a sloppy demonstrator skims) stay the profile seed's, so pi_refs trained with different
    ``init_seed`` differ only by the chance of training (notebook 04 measures A*PO's gain over several). None = the
    profile's seed, the RNG carrying on from the demonstrations as it always has."""
    cfg = profile.reference
    demonstrations = cfg.demonstrations if demonstrations is None else demonstrations
    pretrain_steps = cfg.pretrain_steps if pretrain_steps is None else pretrain_steps
    sft_steps = cfg.sft_steps if sft_steps is None else sft_steps
    seed_everything(profile.seed)
    start = time.perf_counter()
    demos = expert_demonstrations(profile, demonstrations, catalog, seed=profile.seed)
    if init_seed is not None:
        seed_everything(init_seed)
    model, tokenizer = build_tiny_policy(profile, demos, catalog)
    history = imitate(model, tokenizer, demos, pretrain_steps, sft_steps, cfg.batch_size, cfg.lr, cfg.weight_decay,
                      profile.seed if init_seed is None else init_seed, progress)
    reference = Reference(model, tokenizer, history, demos, time.perf_counter() - start)
    if out_dir is not None:
        save_policy(model, tokenizer, out_dir, extra_files=rendering_files(profile.policy))
        history.to_csv(f"{out_dir}/history.csv", index=False)
    return reference


def reference_dir(profile: Profile) -> Path:
    """Where notebook 02 saves pi_ref for the later notebooks: ``runs/pi_ref_<profile>``."""
    return RUNS_DIR / f"pi_ref_{profile.name}"


def with_reference_goals(profile: Profile, directory) -> Profile:
    """``profile`` with ``reference.demonstrations`` set to the number of train goals the pi_ref in ``directory``
    drew its demonstrations from (``demo_goals`` in its ``metrics.json``), so that stage 1 skips exactly the goals
    this pi_ref imitated (``vstar.stage1_goals``); unchanged for a folder that does not record it. A run's final
    policy used as pi_ref (re-anchored) counts the goals of the pi_ref its chain started from (``lineage``)."""
    chain = lineage(directory)
    path = chain.origin / "metrics.json"
    if chain.rounds and not chain.origin.is_dir():  # re-anchored: without its origin, stage 1 would draw other goals
        raise ValueError(f"{Path(directory) / 'lineage.json'} names the pi_ref its chain started from, "
                         f"{chain.origin}, but that folder is found neither from the working directory nor above "
                         f"{directory}: its metrics.json says which train goals stage 1 must skip; run from the "
                         f"folder the chain was trained in, or restore that pi_ref folder")
    if not path.exists():
        return profile
    try:
        goals = json.loads(path.read_text()).get("demo_goals")
    except (json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{path} should hold pi_ref's metrics as a JSON object ({e})") from None
    if goals is None:
        return profile
    if type(goals) is not int or goals < 0:
        raise ValueError(f"{path}: demo_goals should be a count of train goals, got {goals!r}")
    return replace(profile, reference=replace(profile.reference, demonstrations=goals))


def load_or_train_reference(profile: Profile, progress: bool = True):
    """``(model, tokenizer)`` of the profile's pi_ref: loaded when notebook 02 saved it, else trained and saved."""
    directory = reference_dir(profile)
    if not (directory / "model.safetensors").exists():
        train_reference(profile, directory, progress=progress)
    return load_policy(directory, default_device())
