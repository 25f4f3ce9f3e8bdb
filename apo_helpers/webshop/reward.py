"""WebShop's reward, returned with its breakdown (notebook 01).

    R = r_type * (N_attr + N_opt + 1[price <= price_upper]) / (|goal attributes| + |goal options| + 1)

- An attribute matches when a product attribute has rapidfuzz token-set ratio > 85 with it, or else when it is a
  substring of the product's title, bullet points or description (as in WebShop).
- An option matches when a *selected* option value has token-set ratio > 85 with it.
- r_type follows WebShop's rule: 1.0, dropping to 0.5 when neither the product type (WebShop's ``query``), nor two
  category levels, nor 20% of the goal's type words match; to 0.1 when under 10% of the type words appear in the
  bought title; to 0 when none do.

Departures from WebShop, on purpose: WebShop compares the nouns of the two titles found by spaCy; here the "nouns" of
the goal are the words of its product type (``t-shirt`` -> t, shirt) and they are looked for in the bought title plus
its type, which needs no language model and means the same on synthetic and real data. WebShop also maps color names
to base colors before comparing options; the synthetic option pools need no such mapping and none is done.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rapidfuzz import fuzz

from .catalog import Goal, Product
from .text import content_words

FUZZY_THRESHOLD = 85


@dataclass
class RewardBreakdown:
    """The reward of one purchase and every term that went into it."""

    reward: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attributes_matched: list[str]
    attributes_missing: list[str]
    options_matched: list[str]
    options_missing: list[str]
    price_ok: bool

    def to_dict(self) -> dict:
        return asdict(self)


def type_reward(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """WebShop's r_type with its inputs: (r_type, query_match, category_match, title_score)."""
    query_match = product.product_type == goal.product_type
    category_match = len(set(product.category) & set(goal.category)) >= 2
    desired = set(content_words(goal.product_type))
    bought = set(content_words(product.title + " " + product.product_type))
    title_score = len(desired & bought) / len(desired) if desired else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(product: Product, goal_attributes: list[str]) -> list[bool]:
    """For each goal attribute: is it among the product's attributes (fuzzy) or in its texts (substring)?"""
    texts = [product.title.lower(), " ".join(product.bullets).lower(), product.description.lower()]
    return [any(fuzz.token_set_ratio(a, attr) > FUZZY_THRESHOLD for a in product.attributes)
            or any(attr in t for t in texts) for attr in goal_attributes]


def option_matches(selected: dict[str, str], goal_options: dict[str, str]) -> list[bool]:
    """For each goal option value: was a fuzzy-matching value selected?"""
    chosen = list(selected.values())
    return [any(fuzz.token_set_ratio(v, want) > FUZZY_THRESHOLD for v in chosen) for want in goal_options.values()]


def webshop_reward(product: Product, selected: dict[str, str], goal: Goal) -> RewardBreakdown:
    """The reward for buying ``product`` with the option values ``selected`` (name -> value) under ``goal``."""
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    attr_ok = attribute_matches(product, goal.attributes)
    opt_ok = option_matches(selected, goal.options)
    price_ok = product.price <= goal.price_upper
    total = (sum(attr_ok) + sum(opt_ok) + price_ok) / (len(goal.attributes) + len(goal.options) + 1)
    goal_values = list(goal.options.values())
    return RewardBreakdown(
        reward=round(r_type * total, 6), r_type=r_type, query_match=query_match, category_match=category_match,
        title_score=round(title_score, 4),
        attributes_matched=[a for a, ok in zip(goal.attributes, attr_ok) if ok],
        attributes_missing=[a for a, ok in zip(goal.attributes, attr_ok) if not ok],
        options_matched=[v for v, ok in zip(goal_values, opt_ok) if ok],
        options_missing=[v for v, ok in zip(goal_values, opt_ok) if not ok],
        price_ok=price_ok)
