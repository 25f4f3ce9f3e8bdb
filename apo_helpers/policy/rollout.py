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
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import torch

from ..config import EnvConfig, PolicyConfig
from ..files import atomic_write_text
from ..webshop.catalog import Catalog, Goal, default_catalog
from ..webshop.agents import EXPLAINED_PAGES, explain, explorable_actions, instruction_search, product_clicks
from ..webshop.env import WebShopEnv
from ..webshop.pages import ITEM, RESULTS, SEARCH
from .models import STOP_TEXT, stop_token_ids
from .prompts import (Turn, build_messages, encode_chat, episode_chats, format_response, parse_response,
                      prompt_actions)
from .scoring import collate, sequence_logprob_sums


@dataclass(frozen=True)
class Sampling:
    """How replies are drawn."""

    temperature: float = 1.0
    """Softmax temperature (ignored when greedy)."""
    top_p: float = 1.0
    greedy: bool = False
    """Take the most likely token (evaluation)."""
    greedy_pages: tuple[str, ...] = ()
    """Pages (``search``, ``results``, ``item``) whose replies are taken greedily even when sampling: exploration
    then happens only at the other pages' decisions. ``("search",)`` keeps the search query the greedy policy types
    (sampled at temperature 1.0 the tiny pi_ref garbles it in about half of the episodes; notebook 04 section 5)."""
    explore: float = 0.0
    """When sampling: the chance that a results- or item-page turn is not answered by the model but by a click drawn
    uniformly from the page's ``explorable_actions``, written with the expert's think for it (``explain``); such a
    turn is marked ``explored``. A near-deterministic policy then also tries the clicks it would almost never
    sample (notebook 04 section 5)."""
    explore_search: float = 0.0
    """When sampling: the chance that a search-page turn is not answered by the model but by a search for the whole
    instruction (``agents.instruction_search``: the rule agent's query, in the demonstrations' format), marked
    ``explored``. The tiny pi_ref garbles its copy of the instruction in most of its samples on the goals its greedy
    query garbles, so its own samples rarely show it what an exact query earns (notebook 04 section 8)."""
    explore_options: float = 0.0
    """When sampling: the chance that an item-page turn on which some of the item's options have no value selected
    yet is not answered by the model but by a click drawn uniformly from those options' values
    (``WebShopEnv.unselected_option_actions``; the draw knows nothing of the goal), written with the expert's think
    for it and marked ``explored``. The imitated pi_ref and the policies trained from it buy with a requested value
    still unselected and almost never sample that value's click (notebook 04 section 8)."""
    option_draw: str = "uniform"
    """How ``explore_options`` picks the value it clicks among the unselected options' values: ``uniform`` (each
    alike; the draw knows nothing of the goal) or ``policy`` (each with the probability the policy gives that click's
    reply, renormalised over those replies at ``temperature``: ``policy_option_click``). The draw then decides only
    that an option is clicked, not buying, going back or clicking again; which value stays the policy's own reading
    of the instruction. A uniform draw hits the requested value of an option with five values one time in five, and
    its misses, not the policy, decide most drawn episodes (notebook 07 section 3)."""
    explore_results: float = 0.0
    """When sampling: the chance that a results-page turn is not answered by the model but by a click on one of the
    page's products drawn uniformly (``agents.product_clicks``; the draw knows nothing of the goal: not its budget,
    not its words), written with the expert's think for it and marked ``explored``. The imitated pi_ref's choice on
    the results page is nearly deterministic, and a fifth of its greedy test episodes buy above the budget while a
    product of the right type within it stands on the same page (notebook 04 section 8)."""
    explore_once: bool = False
    """Draw at most one turn per episode, a click or the search (``explore`` is then the chance at each results or
    item page until one is drawn): the episode's return then judges that one turn against what the policy makes of
    the rest, instead of several random clicks at once."""
    stop_repeats: bool = False
    """End an episode, unbought (WebShop's reward 0), at a turn that repeats the previous turn's action on the page
    that action left unchanged: an option value clicked again, an invalid click typed again. Played greedily, such a
    repeat seldom ends before the turn limit, since the reply sees the same page and nearly the same last turn;
    sampled, the loop ends by chance, so without the stop a sampled episode is paid for a purchase its greedy play
    would not make (``APOConfig.stop_repeats``)."""
    repeat_penalty: float = 0.0
    """When sampling: subtracted from the reward of each turn that repeats the previous turn's action on the page it
    left unchanged (the repeats ``stop_repeats`` stops at); the episode goes on. A milder price on the same loops:
    a repeat the sample leaves costs a little, where the stop costs the whole return."""

    def __post_init__(self):
        if self.option_draw not in OPTION_DRAWS:
            raise ValueError(f"option_draw must be one of {OPTION_DRAWS}, got {self.option_draw!r}")


OPTION_DRAWS = ("uniform", "policy")
"""The ways ``Sampling.explore_options`` picks a value (``Sampling.option_draw``)."""
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
    reply_ids: list[list[int]] = field(default_factory=list)
    """Per turn, the token ids the model generated (empty for replayed and explored turns)."""
    stopped_repeat: bool = False
    """The episode was ended at a repeated action (``Sampling.stop_repeats``)."""
    token_mismatches: int | None = None
    """Generated replies whose tokens in ``input_ids`` differ from ``reply_ids`` (their decoded text did not
    re-encode to them): 0 when the algorithms train on exactly the sampled tokens. Counted with one chat per turn
    (``window=1``), else None."""

    @property
    def repeats(self) -> int:
        """Turns that repeated the previous turn's action on the page it left unchanged (``Turn.repeated``)."""
        return sum(u.repeated for u in self.turns)

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
        record.pop("repeats", None)  # files saved before it was counted from ``Turn.repeated``
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
        except (ValueError, TypeError, KeyError) as e:  # ValueError includes json.JSONDecodeError
            raise ValueError(f"{path}: line {number} is not a trajectory ({e})") from None
    return out


def _decode_reply(tokenizer, ids: list[int], stops: set[int]) -> tuple[str, int]:
    """Text of a generated reply cut after the first stop, and how many generated tokens it used."""
    used = len(ids)
    for k, t in enumerate(ids):
        if t in stops:
            used = k + 1
            break

    def decode(prefix):
        return tokenizer.decode([t for t in prefix if t != tokenizer.pad_token_id and t != tokenizer.eos_token_id],
                                skip_special_tokens=True)

    text = decode(ids[:used])
    cut = text.find(STOP_TEXT)
    if cut >= 0:  # the reply ends at the stop text: later tokens (padding after a stop string) are not generated by it
        lo, hi = 1, used
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if STOP_TEXT in decode(ids[:mid]) else (mid + 1, hi)
        used = lo
    return (text[: cut + len(STOP_TEXT)] if cut >= 0 else text).strip(), used


def encode_prompts(tokenizer, chats: list[list[dict]], config: PolicyConfig, device) -> dict:
    """The chats rendered with the generation prompt, left-padded into one batch (cut to ``max_prompt_tokens``)."""
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    return tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=config.max_prompt_tokens,
                     add_special_tokens=False).to(device)


@torch.no_grad()
def generate_replies(model, tokenizer, chats: list[list[dict]], sampling: Sampling, config: PolicyConfig):
    """One batched ``generate`` for a list of chats -> (reply texts, per-reply token log-probs, per-reply token
    ids), the last two up to the stop."""
    batch = encode_prompts(tokenizer, chats, config, model.device)
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
    replies, logprobs, ids = [], [], []
    for row, row_lp in zip(new.tolist(), chosen.tolist()):
        text, used = _decode_reply(tokenizer, row, set(stops))
        replies.append(text)
        logprobs.append([round(x, 5) for x in row_lp[:used]])
        ids.append(row[:used])
    return replies, logprobs, ids


def rollout(model, tokenizer, goals: list[Goal], sampling: Sampling = Sampling(), config: PolicyConfig = PolicyConfig(),
            env_config: EnvConfig | None = None, catalog: Catalog | None = None, max_turns: int | None = None,
            progress=None, prefixes: list[list[Turn]] | None = None) -> list[Trajectory]:
    """Play one episode per goal, ``config.batch_size`` episodes in lockstep; returns them in goal order.

    ``prefixes``, when given, holds per goal the turns already played: their actions are replayed in the
    environment (deterministic), the turns open the trajectory, and the model continues from there (the
    continuations from an intermediate state that ``apo.turn_credit`` samples). A prefix must not end the episode."""
    if prefixes is not None and len(prefixes) != len(goals):
        raise ValueError(f"got {len(prefixes)} prefixes for {len(goals)} goals: one per goal (possibly empty)")
    catalog = catalog or default_catalog()
    env_config = env_config or EnvConfig(results_per_page=config.results_per_page,
                                         show_item_positions=config.show_item_positions,
                                         show_selected_options=config.show_selected_options)
    was_training = model.training
    model.eval()
    trajectories: list[Trajectory] = []
    for start in range(0, len(goals), config.batch_size):
        chunk = goals[start: start + config.batch_size]
        chunk_prefixes = prefixes[start: start + config.batch_size] if prefixes is not None else [[]] * len(chunk)
        trajectories += _rollout_batch(model, tokenizer, chunk, sampling, config, env_config, catalog, max_turns,
                                       chunk_prefixes)
        if progress is not None:
            progress.update(len(chunk))
    model.train(was_training)
    return trajectories


def _replay(env: WebShopEnv, goal: Goal, prefix: list[Turn]):
    """Reset ``env`` to ``goal`` and step through the actions of ``prefix``: ``(observation, info)`` after them."""
    obs, info = env.reset(options={"goal": goal})
    for k, turn in enumerate(prefix):
        obs, _, terminated, truncated, info = env.step(turn.action)
        if terminated or truncated:
            raise ValueError(f"prefix of goal {goal.split}/{goal.index} ends the episode at its turn {k + 1}: "
                             "nothing is left to continue")
    return obs, info


def _next_turn(observation: str, info: dict, sampling: Sampling, explored_before: bool = False,
               option_clicks: list[str] | None = None, choose_option=None) -> Turn:
    """The turn the page opens: greedy or sampled (``greedy_pages``), or explored, its reply already written.
    ``explored_before``: the episode already has an explored turn (none more with ``Sampling.explore_once``).
    ``option_clicks``: the values of the open item's unselected options (``Sampling.explore_options`` draws one).
    ``choose_option(clicks, turn)``: picks that click (``Sampling.option_draw="policy"``); uniform when None."""
    page = info["page"]
    turn = Turn(observation, prompt_actions(info["available_actions"]), info["turns_left"],
                greedy=sampling.greedy or page in sampling.greedy_pages)
    if turn.greedy or (sampling.explore_once and explored_before):
        return turn
    # torch's generator draws, so that seeding and checkpoints cover exploration; none is drawn at a rate of 0
    if option_clicks and sampling.explore_options and torch.rand(()).item() < sampling.explore_options:
        clicks = option_clicks  # only item pages have unselected options
    elif page in EXPLAINED_PAGES and sampling.explore and torch.rand(()).item() < sampling.explore:
        clicks = explorable_actions(turn.actions)
    elif (page == RESULTS and sampling.explore_results and (products := product_clicks(turn.actions))
          and torch.rand(()).item() < sampling.explore_results):
        clicks = products
    else:
        if page == SEARCH and sampling.explore_search and torch.rand(()).item() < sampling.explore_search:
            turn.response, turn.explored = format_response(*instruction_search(observation)), True
        return turn
    if choose_option is not None and clicks is option_clicks:
        action = choose_option(clicks, turn)
    else:
        action = clicks[int(torch.randint(len(clicks), ()))]
    turn.response, turn.explored = format_response(explain(action, page), action), True
    return turn


@torch.no_grad()
def reply_logprobs(model, tokenizer, turns: list[Turn], replies: list[str], config: PolicyConfig) -> torch.Tensor:
    """``(len(replies),)`` log-probability the model gives each reply as the answer to the last of ``turns``, summed
    over the reply's tokens (earlier replies in the chat add the same amount to every one of them)."""
    encoded = [encode_chat(tokenizer, build_messages(turns[:-1] + [replace(turns[-1], response=reply)], config.window,
                                                     include_last_response=True)) for reply in replies]
    ids, attention, mask = collate([e[0] for e in encoded], [e[1] for e in encoded], tokenizer.pad_token_id,
                                   model.device)
    return sequence_logprob_sums(model, ids, attention, mask).float()


def policy_option_click(model, tokenizer, turns: list[Turn], clicks: list[str], temperature: float,
                        config: PolicyConfig) -> str:
    """One of ``clicks`` (item-page option values) drawn with the probability the model gives its reply, written
    as the expert writes it, renormalised over ``clicks`` at ``temperature`` (``Sampling.option_draw="policy"``);
    the last of ``turns`` is the item page being answered."""
    replies = [format_response(explain(click, ITEM), click) for click in clicks]
    logp = reply_logprobs(model, tokenizer, turns, replies, config)
    weights = torch.softmax(logp / max(temperature, 1e-6), dim=0).cpu()
    return clicks[int(torch.multinomial(weights, 1))]


def _replies(model, tokenizer, histories: list[list[Turn]], sampling: Sampling, config: PolicyConfig):
    """The replies to the last turn of each history: one ``generate`` call, or two when some turns are greedy and
    others sampled (``Sampling.greedy_pages``), merged back into the histories' order."""
    chats = [build_messages(turns, config.window) for turns in histories]
    greedy = [turns[-1].greedy for turns in histories]
    if sampling.greedy or not any(greedy) or all(greedy):
        return generate_replies(model, tokenizer, chats, GREEDY if all(greedy) else sampling, config)
    out = ([None] * len(chats), [None] * len(chats), [None] * len(chats))
    for mode, wanted in ((GREEDY, True), (sampling, False)):
        rows = [k for k, g in enumerate(greedy) if g == wanted]
        for k, *generated in zip(rows, *generate_replies(model, tokenizer, [chats[k] for k in rows], mode, config)):
            for part, value in zip(out, generated):
                part[k] = value
    return out


def repeats_previous(turns: list[Turn], observation: str) -> bool:
    """Whether the last turn typed the previous turn's action again and left its page as it was (``observation``,
    the page after it): the start of a loop (``Sampling.stop_repeats``)."""
    return (len(turns) >= 2 and turns[-1].action == turns[-2].action and bool(turns[-1].action)
            and observation == turns[-1].observation)


def _choose_for(model, tokenizer, history: list[Turn], temperature: float, config: PolicyConfig, clicks: list[str],
                turn: Turn) -> str:
    """``policy_option_click`` for the page ``turn`` opens after the episode's ``history``."""
    return policy_option_click(model, tokenizer, history + [turn], clicks, temperature, config)


def _rollout_batch(model, tokenizer, goals, sampling, config, env_config, catalog, max_turns, prefixes):
    envs = [WebShopEnv(split=g.split, catalog=catalog, config=env_config, max_turns=max_turns) for g in goals]
    trajs, observations, infos = [], [], []
    for env, goal, prefix in zip(envs, goals, prefixes):
        obs, info = _replay(env, goal, prefix)
        trajs.append(Trajectory(goal=goal, turns=[replace(t) for t in prefix],
                                sample_logprobs=[[] for _ in prefix], reply_ids=[[] for _ in prefix]))
        observations.append(obs)
        infos.append(info)
    by_policy = bool(sampling.explore_options) and sampling.option_draw == "policy"
    active = list(range(len(goals)))
    while active:
        for i in active:
            explored_before = any(u.explored for u in trajs[i].turns)
            option_clicks = envs[i].unselected_option_actions if sampling.explore_options else None
            choose = (partial(_choose_for, model, tokenizer, trajs[i].turns, sampling.temperature, config)
                      if by_policy else None)
            trajs[i].turns.append(_next_turn(observations[i], infos[i], sampling, explored_before, option_clicks,
                                             choose))
        asking = [i for i in active if not trajs[i].turns[-1].explored]
        answers = dict(zip(asking, zip(*_replies(model, tokenizer, [trajs[i].turns for i in asking], sampling,
                                                 config)))) if asking else {}
        still = []
        for i in active:
            reply, lp, ids = answers.get(i, (trajs[i].turns[-1].response, [], []))  # explored: nothing generated
            turn = trajs[i].turns[-1]
            turn.think, action, turn.format_ok = parse_response(reply)
            turn.response, turn.action = reply, action if turn.format_ok else ""
            trajs[i].sample_logprobs.append(lp)
            trajs[i].reply_ids.append(ids)
            observations[i], reward, terminated, truncated, infos[i] = envs[i].step(turn.action)
            turn.valid = infos[i]["valid"]
            turn.reward = reward + (0.0 if turn.format_ok else config.format_penalty)
            repeated = not terminated and repeats_previous(trajs[i].turns, observations[i])
            if repeated:
                turn.repeated = True
                turn.reward -= sampling.repeat_penalty
            if repeated and sampling.stop_repeats:
                trajs[i].stopped_repeat = truncated = True
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
        t.token_mismatches = token_mismatches(t) if config.window == 1 else None
    return trajs


def token_mismatches(trajectory: Trajectory) -> int:
    """How many of the trajectory's generated replies are not, token for token, the assistant tokens of their chat
    (one chat per turn): a decoded reply that re-encodes differently would be trained on tokens never sampled."""
    return sum(bool(generated) and [i for i, m in zip(ids, mask) if m] != generated
               for ids, mask, generated in zip(trajectory.input_ids, trajectory.assistant_mask, trajectory.reply_ids))
