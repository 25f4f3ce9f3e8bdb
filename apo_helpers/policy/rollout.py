"""Batched multi-turn rollouts: B episodes in lockstep, one ``generate`` call per turn (notebook 02).

Each turn, the episodes still running are rendered into chats (``prompts.build_messages``), left-padded into one
batch and continued by ONE ``model.generate`` call (KV cache, temperature / top-p, stop at ``</answer>``). Each
reply is parsed; a reply that does not parse costs the format penalty and is sent to the environment as an empty
(invalid) action, so the episode goes on. Finished episodes drop out of the batch.

The result is a list of ``Trajectory``: the turns, the reward and its breakdown, the token ids of the chats the
episode is trained on with their assistant masks, and the sampling log-probs of every generated token.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..config import EnvConfig, PolicyConfig
from ..files import atomic_write_text
from ..webshop.catalog import Catalog, Goal, default_catalog
from ..webshop.env import WebShopEnv
from .models import STOP_TEXT, stop_token_ids
from .prompts import Turn, build_messages, encode_chat, episode_chats, parse_response, prompt_actions


@dataclass(frozen=True)
class Sampling:
    """How replies are drawn."""

    temperature: float = 1.0
    """Softmax temperature (ignored when greedy)."""
    top_p: float = 1.0
    greedy: bool = False
    """Take the most likely token (evaluation)."""


GREEDY = Sampling(greedy=True)


@dataclass
class Trajectory:
    """One episode played by a language model."""

    goal: Goal
    turns: list[Turn]
    reward: float = 0.0
    """Environment reward at the end plus the format penalties: the r(x, y) the algorithms optimise."""
    env_reward: float = 0.0
    """WebShop's reward alone (0 when nothing was bought)."""
    success: bool = False
    breakdown: dict | None = None
    input_ids: list[list[int]] = field(default_factory=list)
    """Token ids of the chats this episode is trained on (one chat, or one per turn with a window)."""
    assistant_mask: list[list[int]] = field(default_factory=list)
    """1 on the assistant tokens of ``input_ids``."""
    sample_logprobs: list[list[float]] = field(default_factory=list)
    """Per turn, the log-probability of each generated token under the sampling distribution."""

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def invalid_actions(self) -> int:
        return sum(not t.valid for t in self.turns)

    @property
    def generated_tokens(self) -> int:
        return sum(len(lp) for lp in self.sample_logprobs)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, record: dict) -> "Trajectory":
        record = dict(record)
        record["goal"] = Goal(**record["goal"])
        record["turns"] = [Turn(**t) for t in record["turns"]]
        return cls(**record)


def save_trajectories(trajectories: list[Trajectory], path) -> Path:
    """Write one JSON object per line (atomically)."""
    atomic_write_text(Path(path), "".join(t.to_json() + "\n" for t in trajectories))
    return Path(path)


def load_trajectories(path) -> list[Trajectory]:
    """Read a JSONL file written by ``save_trajectories``; a bad line is reported with its number."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(Trajectory.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError, KeyError) as e:
            raise ValueError(f"{path}: line {number} is not a trajectory ({e})") from None
    return out


def _decode_reply(tokenizer, ids: list[int], stops: set[int]) -> tuple[str, int]:
    """Text of a generated reply cut after the first stop, and how many generated tokens it used."""
    used = len(ids)
    for k, t in enumerate(ids):
        if t in stops:
            used = k + 1
            break
    kept = [t for t in ids[:used] if t != tokenizer.pad_token_id and t != tokenizer.eos_token_id]
    text = tokenizer.decode(kept, skip_special_tokens=True)
    cut = text.find(STOP_TEXT)
    return (text[: cut + len(STOP_TEXT)] if cut >= 0 else text).strip(), used


@torch.no_grad()
def generate_replies(model, tokenizer, chats: list[list[dict]], sampling: Sampling, config: PolicyConfig):
    """One batched ``generate`` for a list of chats -> (reply texts, per-reply token log-probs)."""
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=config.max_prompt_tokens,
                      add_special_tokens=False).to(model.device)
    stops = stop_token_ids(tokenizer)
    kwargs = dict(do_sample=not sampling.greedy, max_new_tokens=config.max_new_tokens, eos_token_id=stops,
                  pad_token_id=tokenizer.pad_token_id, return_dict_in_generate=True, output_scores=True)
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
    if len(stops) == 1:  # </answer> is several tokens for this tokenizer: stop on the text
        kwargs.update(stop_strings=[STOP_TEXT], tokenizer=tokenizer)
    out = model.generate(**batch, **kwargs)
    new = out.sequences[:, batch["input_ids"].shape[1]:]
    scores = torch.stack(out.scores, dim=1).float().log_softmax(-1)  # the (tempered) sampling distribution
    chosen = scores.gather(-1, new.unsqueeze(-1)).squeeze(-1)
    replies, logprobs = [], []
    for row, row_lp in zip(new.tolist(), chosen.tolist()):
        text, used = _decode_reply(tokenizer, row, set(stops))
        replies.append(text)
        logprobs.append([round(x, 5) for x in row_lp[:used]])
    return replies, logprobs


def rollout(model, tokenizer, goals: list[Goal], sampling: Sampling = Sampling(), config: PolicyConfig = PolicyConfig(),
            env_config: EnvConfig | None = None, catalog: Catalog | None = None, max_turns: int | None = None,
            progress=None) -> list[Trajectory]:
    """Play one episode per goal, ``config.batch_size`` episodes in lockstep; returns them in goal order."""
    catalog = catalog or default_catalog()
    env_config = env_config or EnvConfig(results_per_page=config.results_per_page,
                                         show_item_positions=config.show_item_positions)
    was_training = model.training
    model.eval()
    trajectories: list[Trajectory] = []
    for start in range(0, len(goals), config.batch_size):
        chunk = goals[start: start + config.batch_size]
        trajectories += _rollout_batch(model, tokenizer, chunk, sampling, config, env_config, catalog, max_turns)
        if progress is not None:
            progress.update(len(chunk))
    model.train(was_training)
    return trajectories


def _rollout_batch(model, tokenizer, goals, sampling, config, env_config, catalog, max_turns):
    envs = [WebShopEnv(split=g.split, catalog=catalog, config=env_config, max_turns=max_turns) for g in goals]
    trajs, observations, infos = [], [], []
    for env, goal in zip(envs, goals):
        obs, info = env.reset(options={"goal": goal})
        trajs.append(Trajectory(goal=goal, turns=[]))
        observations.append(obs)
        infos.append(info)
    active = list(range(len(goals)))
    while active:
        for i in active:
            trajs[i].turns.append(Turn(observations[i], prompt_actions(infos[i]["available_actions"]),
                                       infos[i]["turns_left"]))
        chats = [build_messages(trajs[i].turns, config.window) for i in active]
        replies, logprobs = generate_replies(model, tokenizer, chats, sampling, config)
        still = []
        for i, reply, lp in zip(active, replies, logprobs):
            turn = trajs[i].turns[-1]
            turn.think, action, turn.format_ok = parse_response(reply)
            turn.response, turn.action = reply, action if turn.format_ok else ""
            trajs[i].sample_logprobs.append(lp)
            observations[i], reward, terminated, truncated, infos[i] = envs[i].step(turn.action)
            turn.valid = infos[i]["valid"]
            turn.reward = reward + (0.0 if turn.format_ok else config.format_penalty)
            if terminated or truncated:
                t = trajs[i]
                t.env_reward, t.success = reward, infos[i]["success"]
                t.breakdown = infos[i].get("reward_breakdown")
                t.reward = sum(u.reward for u in t.turns)
            else:
                still.append(i)
        active = still
    for t in trajs:
        for chat in episode_chats(t.turns, config.window):
            ids, mask = encode_chat(tokenizer, chat)
            t.input_ids.append(ids)
            t.assistant_mask.append(mask)
    return trajs
