"""Scripted agents with WebShop's interface, ``act(observation, info) -> action`` (notebook 01).

- ``random``: uniform over the available actions (a search uses 1-4 random words of the instruction).
- ``rule``: WebShop's rule baseline: search the instruction, click the first result, buy.
- ``expert``: sees only the instruction and the pages, never the target. It searches the instruction's key words,
  reads the result titles and prices, opens the best candidate (by position when positions are shown), checks that
  the options the instruction asks for are offered (else goes back to the next candidate), selects them and buys.
  ``expert.reason`` says in a few words why it took its last action (the think of the demonstrations).
  ``ExpertAgent(query="instruction")`` searches the whole instruction instead of its key words: as good here, and
  far easier for a small language model to imitate (copying a span instead of picking words).
  ``ExpertAgent(query="description")`` searches the instruction's first part, the product it describes, without
  the option phrases and the budget: the same results for a span 40% shorter to copy.
  ``ExpertAgent(query="request")`` searches the instruction without its budget: the same results again (the search
  does not index option values), with the option phrases kept in the agent's own reply.
  ``ExpertAgent(skip_options=p)`` is a sloppy demonstrator: in a share p of its episodes (drawn at ``reset``) it
  ignores the options the instruction asks for and buys as soon as the price fits; the reward still pays for them,
  so a policy that imitates it has something left that only RL can learn (notebook 04).
  ``ExpertAgent(forget_options=p)`` is sloppy in a narrower way: in a share p of its episodes it chooses the item
  as carefully as the full expert (one that offers the asked options, else back to the next candidate) but buys
  without selecting them. Only the option clicks are missing from its demonstrations, not the item choice.
  ``ExpertAgent(think="progress")`` gives the same actions with a think that says where in the instruction it is
  after each option click: ``after navy: size large`` (the instruction's words that follow the value just selected)
  before the next click, ``after large: and price lower than 40.00 dollars, buy it`` before buying. Whether another
  option is asked for is then a lookup a small transformer can copy (find the value just clicked in the instruction,
  read on), where the ``short`` think leaves it to count the values clicked against those asked (notebook 04).
- ``oracle``: knows the target product (``info["goal"]``): searches its title, pages to it, selects the goal's
  options and buys. It shows the environment is solvable (100% success).

Call ``reset()`` at the start of every episode; ``analysis.evaluate.run_episode`` does.
"""

from __future__ import annotations

import random
import re

from .pages import SEP
from .text import content_words, normalize

ASIN_RE = re.compile(r"^B0[A-Z0-9]{8}$")
_PRICE_RE = re.compile(r"(\d+(?:\.\d+)?) dollars")
_OPTION_RE = re.compile(r", (?:in (?P<color>[^,;]+)|size (?P<size>[^,;]+)|(?P<name>[a-z ]+): (?P<value>[^,;]+))")
QUERIES = ("keywords", "instruction", "description", "request")
"""What the expert types into the search box: the instruction's key words, the whole instruction, the part of it
that describes the product (``search_description``), or the instruction without its budget (``search_request``)."""
THINKS = ("short", "progress")
"""The expert's ways of writing its think: ``short`` (a few words) or ``progress`` (where it is in the instruction)."""


def instruction_of(observation: str) -> str:
    """The instruction shown at the top of every page."""
    parts = observation.split(SEP)
    return parts[parts.index("Instruction:") + 1]


def parse_results(observation: str) -> list[tuple[str, str, float]]:
    """(asin, title, price) of each result on a results page."""
    parts = observation.split(SEP)
    return [(p, parts[i + 1], float(parts[i + 2].lstrip("$"))) for i, p in enumerate(parts[:-2]) if ASIN_RE.match(p)]


def parse_budget(instruction: str) -> float:
    match = _PRICE_RE.search(instruction)
    return float(match.group(1)) if match else float("inf")


def parse_wanted_options(instruction: str) -> list[str]:
    """Option values the instruction asks for (``in navy``, ``size large``, ``flavor: vanilla``)."""
    return [_option_value(m) for m in _OPTION_RE.finditer(instruction)]


def _option_value(match: re.Match) -> str:
    """The value of one ``_OPTION_RE`` match, normalized as buttons are."""
    return normalize(match.group("color") or match.group("size") or match.group("value"))


def words_after(instruction: str, value: str) -> str:
    """The instruction's words after the option phrase of ``value``, up to the next comma or semicolon: the next
    option's phrase (``size large``) or the budget's (``and price lower than 40.00 dollars``)."""
    for match in _OPTION_RE.finditer(instruction):
        if _option_value(match) == value:
            return re.split(r"[,;]", instruction[match.end():].lstrip(",; "), maxsplit=1)[0].strip()
    raise ValueError(f"the instruction does not ask for {value!r}: {instruction!r}")


def search_description(instruction: str) -> str:
    """The instruction up to its first option phrase, or up to its budget when it asks for no option: the product
    it describes (``please get me a machine washable hoodie``). BM25 ranks the targets as the whole instruction
    does, and the span to copy is 11 words on average instead of 18 (README, "A query the tiny model can copy")."""
    option = _OPTION_RE.search(instruction)
    return instruction[:option.start()] if option else search_request(instruction)


def search_request(instruction: str) -> str:
    """The instruction without its budget: the product and the options it asks for (``i need a hoodie, in navy,
    size large``). The search index holds no option values, so the results are the description's; the option
    phrases stay in the agent's own reply, a span about 5 words shorter than the whole instruction (README, "A
    shorter query that keeps the options")."""
    price = _PRICE_RE.search(instruction)
    if price is None:
        return instruction
    cut = max(instruction.rfind(",", 0, price.start()), instruction.rfind(";", 0, price.start()))
    return instruction[:cut] if cut >= 0 else instruction  # a budget with no separator before it: nothing to cut


def search_keywords(instruction: str) -> str:
    """The instruction without filler, option phrases and the budget: what a person types into the search box."""
    text = _PRICE_RE.sub("", instruction)
    text = _OPTION_RE.sub(",", text)
    return " ".join(content_words(text))


class Agent:
    """Base class: ``reset()`` at each episode start, ``act(observation, info)`` each turn."""

    name = "agent"

    def reset(self) -> None:
        pass

    def act(self, observation: str, info: dict) -> str:
        raise NotImplementedError


class RandomAgent(Agent):
    name = "random"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def act(self, observation, info):
        action = self.rng.choice(info["available_actions"])
        if action.startswith("search["):
            words = content_words(instruction_of(observation)) or ["item"]
            action = f"search[{' '.join(self.rng.sample(words, min(len(words), self.rng.randint(1, 4))))}]"
        return action


class RuleAgent(Agent):
    name = "rule"

    def act(self, observation, info):
        page = info["page"]
        if page == "search":
            return instruction_search(observation)[1]
        if page == "results":
            results = parse_results(observation)
            return f"click[{results[0][0]}]" if results else "click[back to search]"
        if page == "item":
            return "click[buy now]"
        return "click[< prev]"


class ExpertAgent(Agent):
    name = "expert"

    def __init__(self, seed: int = 0, max_pages: int = 3, query: str = "keywords", skip_options: float = 0.0,
                 forget_options: float = 0.0, think: str = "short"):
        if query not in QUERIES:
            raise ValueError(f"query must be one of {QUERIES}, got {query!r}")
        if think not in THINKS:
            raise ValueError(f"think must be one of {THINKS}, got {think!r}")
        if not 0.0 <= skip_options <= 1.0:
            raise ValueError(f"skip_options is the share of episodes that ignore options, in [0, 1], got {skip_options}")
        if not 0.0 <= forget_options <= 1.0:
            raise ValueError(f"forget_options is the share of episodes that do not select the options, in [0, 1], "
                             f"got {forget_options}")
        self.max_pages, self.query, self.think = max_pages, query, think
        self.skip_options, self.forget_options = skip_options, forget_options
        self._rng = random.Random(seed)
        self.skipping = False
        """Whether this episode ignores the instruction's options (drawn at ``reset`` with ``skip_options``)."""
        self.forgetting = False
        """Whether this episode checks the options but buys without selecting them (``forget_options``)."""

    @property
    def sloppy(self) -> bool:
        """Whether this episode leaves the options unselected, by either habit."""
        return self.skipping or self.forgetting

    def reset(self):
        self.skipping = self.skip_options > 0 and self._rng.random() < self.skip_options
        # drawn only when asked for, so the skip_options demonstrations of a seed stay what they were
        self.forgetting = self.forget_options > 0 and not self.skipping and self._rng.random() < self.forget_options
        self.rejected: set[str] = set()
        self.selected: set[str] = set()
        self.opened = ""
        self.reason = ""
        """A short, true account of the last action (the ``<think>`` of demonstrations)."""

    def act(self, observation, info):
        instruction = instruction_of(observation)
        page = info["page"]
        if page == "search":
            self.reason, action = expert_search(instruction, self.query)
            return action
        if page == "results":
            return self._choose(observation, instruction, info)
        if page == "item":
            return self._on_item(observation, instruction, info)
        self.reason = "back to the item"
        return "click[< prev]"

    def _choose(self, observation, instruction, info):
        keywords = set(search_keywords(instruction).split())
        budget = parse_budget(instruction)
        candidates = [(len(keywords & set(content_words(title))), price <= budget, -rank, asin)
                      for rank, (asin, title, price) in enumerate(parse_results(observation)) if asin not in self.rejected]
        affordable = [c for c in candidates if c[1]]
        has_next = "click[next >]" in info["available_actions"]
        if not affordable and has_next and self._page(observation) < self.max_pages:
            self.reason = "nothing here fits the budget, try the next page"
            return "click[next >]"
        if not candidates:
            self.reason = "no result left to try"
            return "click[next >]" if has_next else "click[back to search]"
        _, _, rank, self.opened = max(affordable or candidates)
        self.selected = set()
        position = f"item {1 - rank}"
        if f"click[{position}]" in info["available_actions"]:
            self.reason = f"{position} matches the instruction best"
            return f"click[{position}]"
        self.reason = f"{self.opened.lower()} matches the instruction best"
        return f"click[{self.opened}]"

    @staticmethod
    def _page(observation: str) -> int:
        match = re.search(r"Page (\d+) \(Total results", observation)
        return int(match.group(1)) if match else 1

    def _on_item(self, observation, instruction, info):
        offered = {a[len("click["):-1] for a in info["available_actions"]}
        wanted = [] if self.skipping else parse_wanted_options(instruction)
        price = float(re.search(r"Price: \$(\d+(?:\.\d+)?)", observation).group(1))
        missing = [v for v in wanted if v not in offered]
        if missing or price > parse_budget(instruction):
            self.rejected.add(self.opened)
            self.reason = f"{missing[0]} is not offered, go back" if missing else "too expensive, go back"
            return "click[< prev]"
        to_select = [] if self.forgetting else wanted
        done = [v for v in to_select if v in self.selected]
        read_on = f"after {done[-1]}: {words_after(instruction, done[-1])}" if self.think == "progress" and done else ""
        for value in to_select:
            if value not in self.selected:
                self.selected.add(value)
                self.reason = read_on or f"the instruction asks for {value}"
                return f"click[{value}]"
        if read_on:
            self.reason = f"{read_on}, buy it"
        else:
            self.reason = "price ok, buy it" if self.sloppy else "options set and price ok, buy it"
        return "click[buy now]"


class OracleAgent(Agent):
    name = "oracle"

    def reset(self):
        self.selected: set[str] = set()

    def act(self, observation, info):
        goal = info["goal"]
        page = info["page"]
        if page == "search":
            return f"search[{goal.target_title}]"
        if page == "results":
            if f"click[{goal.asin.lower()}]" in info["available_actions"]:
                return f"click[{goal.asin}]"
            return "click[next >]" if "click[next >]" in info["available_actions"] else "click[back to search]"
        if page == "item":
            for value in goal.options.values():
                if value not in self.selected:
                    self.selected.add(value)
                    return f"click[{value}]"
            return "click[buy now]"
        return "click[< prev]"


def expert_search(instruction: str, query: str) -> tuple[str, str]:
    """``(think, action)`` of ``ExpertAgent(query=query)``'s search for ``instruction`` (one of ``QUERIES``)."""
    if query == "instruction":
        return "search for the instruction", f"search[{instruction}]"
    if query == "description":
        return "search for the product described", f"search[{search_description(instruction)}]"
    if query == "request":
        return "search for the product and its options", f"search[{search_request(instruction)}]"
    if query == "keywords":
        return "search for the key words of the instruction", f"search[{search_keywords(instruction) or instruction}]"
    raise ValueError(f"query must be one of {QUERIES}, got {query!r}")


def instruction_search(observation: str) -> tuple[str, str]:
    """``(think, action)`` of a search for the whole instruction shown on ``observation``: what the rule agent and
    ``ExpertAgent(query="instruction")`` type, and what ``Sampling.explore_search`` answers a search page with."""
    return expert_search(instruction_of(observation), "instruction")


EXPLAINED_PAGES = ("results", "item")
"""Pages whose clicks ``explain`` words as the expert does (the info pages are never opened by the expert)."""
_INFO_BUTTONS = {"click[description]", "click[features]", "click[reviews]"}


def explorable_actions(available: list[str]) -> list[str]:
    """The actions of a results or item page the expert's demonstrations use: every click but the info pages."""
    return [a for a in available if a.startswith("click[") and a not in _INFO_BUTTONS]


_NAVIGATION = {"click[next >]", "click[back to search]", "click[< prev]"}


def product_clicks(available: list[str]) -> list[str]:
    """The clicks of a results page that open one of its products (by position or by ASIN, as the page lists
    them): ``explorable_actions`` without paging and going back. What ``Sampling.explore_results`` draws from."""
    return [a for a in explorable_actions(available) if a not in _NAVIGATION]


def explain(action: str, page: str) -> str:
    """The think the expert writes for ``action`` on a ``page`` (``ExpertAgent.reason``'s words), for any click of
    ``explorable_actions``: exploration writes replies in the demonstrations' format (notebook 04 section 5)."""
    if page not in EXPLAINED_PAGES or not action.startswith("click[") or action in _INFO_BUTTONS:
        raise ValueError(f"explain words the clicks of results and item pages, got {action!r} on a {page!r} page")
    button = action[len("click["):-1]
    if button == "next >":
        return "nothing here fits the budget, try the next page"
    if button == "back to search":
        return "no result left to try"
    if page == "results":
        return "back to the item" if button == "< prev" else f"{button} matches the instruction best"
    if button == "< prev":
        return "too expensive, go back"
    if button == "buy now":
        return "options set and price ok, buy it"
    return f"the instruction asks for {button}"


AGENTS = {cls.name: cls for cls in (RandomAgent, RuleAgent, ExpertAgent, OracleAgent)}


def make_agent(name: str, seed: int = 0) -> Agent:
    """A scripted agent by name: ``random``, ``rule``, ``expert`` or ``oracle``."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; choose one of {sorted(AGENTS)}")
    cls = AGENTS[name]
    return cls(seed) if cls in (RandomAgent, ExpertAgent) else cls()
