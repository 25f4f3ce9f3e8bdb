"""``WebShopEnv``: the WebShop-style text environment as a ``gymnasium.Env`` (notebook 01).

Actions are text: ``search[query]`` on the search page, ``click[button]`` for any button on the page (see
``pages.buttons``). Matching is case- and whitespace-insensitive. Anything else -- an unknown button, a search off
the search page, an empty or huge action, unbalanced brackets, control characters -- is invalid: the page does not
change, the reward is 0, ``info["valid"]`` is False and ``info["error"]`` says why. ``step`` never raises on a
string. ``click[buy now]`` ends the episode with WebShop's reward (``info["reward_breakdown"]``); running out of
turns truncates it with reward 0.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..config import EnvConfig
from . import pages
from .catalog import Catalog, Goal, default_catalog
from .pages import DETAIL, ITEM, RESULTS, SEARCH, PageState
from .reward import webshop_reward
from .search import search_engine
from .text import normalize

SEARCH_PLACEHOLDER = "search[<query>]"
_ACTION = re.compile(r"(search|click)\s*\[([^\[\]]*)\]", re.IGNORECASE)
MAX_OBSERVATION_CHARS = 100_000


class InvalidAction(ValueError):
    """An action that cannot be carried out; the message says why."""


@dataclass(frozen=True)
class Action:
    kind: str
    """``search`` or ``click``."""
    arg: str
    """The normalized text inside the brackets."""


def parse_action(text, max_chars: int = 500) -> Action:
    """Parse ``search[...]`` / ``click[...]``; raise ``InvalidAction`` naming the problem."""
    if not isinstance(text, str):
        raise InvalidAction(f"an action must be a string, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise InvalidAction("empty action")
    if len(text) > max_chars:
        raise InvalidAction(f"action is {len(text)} characters long; at most {max_chars} are accepted")
    bad = next((c for c in text if unicodedata.category(c).startswith("C")), None)
    if bad is not None:
        raise InvalidAction(f"action contains the control character U+{ord(bad):04X}")
    match = _ACTION.fullmatch(text)
    if match is None:
        raise InvalidAction(f"cannot parse {text[:60]!r}: write search[query] or click[button], one pair of brackets")
    kind, arg = match.group(1).lower(), normalize(match.group(2))
    if not match.group(1).isascii():  # re.IGNORECASE also lets 'ſ' match 's', 'ı' / 'İ' match 'i', 'K' (Kelvin) 'k'
        raise InvalidAction(f"unknown action {match.group(1)!r}: write search[query] or click[button]")
    if not arg:
        raise InvalidAction(f"{kind}[] is empty")
    return Action(kind, arg)


def _charset(catalog: Catalog) -> str:
    """Every character an observation of this catalog can contain (computed once per catalog)."""
    cache = catalog.__dict__
    if "_charset" not in cache:
        chars = set(string.printable)
        for p in catalog.products:
            chars.update(p.title + p.description + "".join(p.bullets) + "".join(str(r) for r in p.reviews))
            chars.update("".join(v for values in p.options.values() for v in values) + "".join(p.options))
        for goals in catalog.goals.values():
            for g in goals:
                chars.update(g.instruction)
        cache["_charset"] = "".join(sorted(chars))
    return cache["_charset"]


class WebShopEnv(gym.Env):
    """A WebShop-style shop: find and buy the product an instruction describes.

    Args:
        split: which goals ``reset`` draws from (``train``, ``val``, ``test``).
        max_turns: actions per episode before truncation.
        seed: seeds the goal sampler (``reset(seed=...)`` does too).
        catalog: the shop's data; default the committed ``data/`` catalog.
        config: rendering and limits; ``max_turns`` overrides ``config.max_turns``.
        render_mode: ``ansi`` (``render()`` returns the page) or ``human`` (prints it).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(self, split: str = "train", max_turns: int | None = None, seed: int | None = None,
                 catalog: Catalog | None = None, config: EnvConfig | None = None, render_mode: str | None = None):
        self.catalog = catalog or default_catalog()
        self.config = config or EnvConfig()
        if max_turns is not None:
            self.config = replace(self.config, max_turns=max_turns)
        if self.config.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.config.max_turns}")
        self.goals = self.catalog.split(split)
        if not self.goals:
            raise ValueError(f"split {split!r} has no goals")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.split, self.render_mode = split, render_mode
        self.search_engine = search_engine(self.catalog, self.config.max_results)
        self.observation_space = spaces.Text(MAX_OBSERVATION_CHARS, min_length=0, charset=_charset(self.catalog))
        self.action_space = spaces.Text(self.config.max_action_chars, min_length=1, charset=string.printable)
        self.goal: Goal = self.goals[0]
        self.state = PageState()
        self.turn = 0
        self.done = False
        if seed is not None:
            self.reset(seed=seed)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode on the search page. ``options``: ``goal_index`` (int) or ``goal`` (a ``Goal``)."""
        super().reset(seed=seed)
        options = options or {}
        if "goal" in options:
            self.goal = options["goal"]
        elif "goal_index" in options:
            index = options["goal_index"]
            if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(self.goals):
                raise ValueError(f"goal_index must be an int in [0, {len(self.goals)}) for split {self.split!r}, got {index!r}")
            self.goal = self.goals[int(index)]
        else:
            self.goal = self.goals[int(self.np_random.integers(len(self.goals)))]
        self.state, self.turn, self.done = PageState(), 0, False
        return self.observation, self._info(valid=True)

    def step(self, action: str):
        if self.done:
            raise RuntimeError("the episode is over: call reset() before step()")
        self.turn += 1
        reward, terminated, breakdown = 0.0, False, None
        try:
            new_state, bought = self._transition(parse_action(action, self.config.max_action_chars))
        except InvalidAction as e:
            info = self._info(valid=False, error=str(e))
        else:
            self.state = new_state
            if bought:
                breakdown = webshop_reward(self.catalog.by_asin[new_state.asin], new_state.selected_options, self.goal)
                reward, terminated = breakdown.reward, True
            info = self._info(valid=True)
        truncated = not terminated and self.turn >= self.config.max_turns
        self.done = terminated or truncated
        if breakdown is not None:
            info["reward_breakdown"] = breakdown.to_dict()
        info["success"] = terminated and reward == 1.0
        if self.render_mode == "human":
            self.render()
        return self.observation, reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "human":
            print(self.observation)
            return None
        return self.observation

    # ------------------------------------------------------------------ the rules
    @property
    def observation(self) -> str:
        return pages.render(self.state, self.goal, self.catalog, self.config)

    @property
    def buttons(self) -> list[str]:
        return pages.buttons(self.state, self.catalog, self.config)

    @property
    def available_actions(self) -> list[str]:
        """What can be done now, as action strings (the search box as ``search[<query>]``)."""
        if self.state.kind == SEARCH:
            return [SEARCH_PLACEHOLDER]
        return [f"click[{b.lower()}]" for b in self.buttons]

    @property
    def unselected_option_actions(self) -> list[str]:
        """On an item page, the clicks of every value of the item's options that have no value selected yet
        (``Sampling.explore_options`` draws from them; they say nothing about the goal); ``[]`` on other pages."""
        if self.state.kind != ITEM:
            return []
        chosen = self.state.selected_options
        product = self.catalog.by_asin[self.state.asin]
        return [f"click[{v.lower()}]" for name, values in product.options.items() if name not in chosen for v in values]

    def _transition(self, action: Action) -> tuple[PageState, bool]:
        """The next page for a valid action, and whether it bought; ``InvalidAction`` otherwise."""
        state = self.state
        if action.kind == "search":
            if state.kind != SEARCH:
                raise InvalidAction("search[...] only works on the search page: click[back to search] first")
            return PageState(kind=RESULTS, query=action.arg, results=tuple(self.search_engine.search(action.arg))), False
        button = {normalize(b): b for b in self.buttons}.get(action.arg)
        if button is None:
            raise InvalidAction(f"no button {action.arg!r} on this {state.kind} page")
        if button == pages.BACK:
            return PageState(), False
        if state.kind == RESULTS:
            if button == pages.NEXT:
                return replace(state, page=state.page + 1), False
            if button == pages.PREV:
                return replace(state, page=state.page - 1), False
            found = pages.page_results(state, self.config)
            asin = found[int(button.split()[1]) - 1] if button.startswith("item ") else button
            return replace(state, kind=ITEM, asin=asin, selected=(), detail=None), False
        if state.kind == ITEM:
            if button == pages.PREV:
                return replace(state, kind=RESULTS, asin=None, selected=()), False
            if button == pages.BUY:
                return state, True
            if button in pages.DETAIL_BUTTONS:
                return replace(state, kind=DETAIL, detail=button.lower()), False
            return state.select(pages.option_of(action.arg, state, self.catalog), button), False
        return replace(state, kind=ITEM, detail=None), False  # detail page: < Prev

    def _info(self, valid: bool, error: str | None = None) -> dict:
        info = {"valid": valid, "available_actions": self.available_actions, "page": self.state.kind,
                "turn": self.turn, "turns_left": self.config.max_turns - self.turn, "goal": self.goal}
        if error is not None:
            info["error"] = error
        return info
