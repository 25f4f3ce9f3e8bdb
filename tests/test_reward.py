"""WebShop's reward worked by hand on hand-built products and goals.

R = r_type * (N_attr + N_opt + 1[price <= budget]) / (|attributes| + |options| + 1)
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from rapidfuzz import fuzz

from apo_helpers.webshop.catalog import Goal, Product
from apo_helpers.webshop.reward import FUZZY_THRESHOLD, RewardBreakdown, type_reward, webshop_reward

SHIRT = Product(
    asin="B0SHIRT001", title="Acme T-Shirt - slim fit, organic cotton", category=["clothing", "men", "shirts"],
    product_type="t-shirt", brand="acme", price=20.0, attributes=["slim fit", "organic cotton"],
    options={"color": ["black", "navy"], "size": ["small", "large"]},
    bullets=["Slim fit for everyday comfort", "Organic cotton, checked by our quality team"],
    description="Acme makes this t-shirt for people who care about the details.")

# 2 attributes + 1 option + price: 4 terms, each worth 0.25
GOAL = Goal(
    instruction="i need a t-shirt that is slim fit and organic cotton, in navy, and price lower than 25.00 dollars",
    asin="B0SHIRT001", product_type="t-shirt", category=["clothing", "men", "shirts"],
    attributes=["slim fit", "organic cotton"], options={"color": "navy"}, price_upper=25.0, target_title=SHIRT.title)

NAVY = {"color": "navy"}


def _without(product: Product, attribute: str) -> Product:
    """The product with ``attribute`` gone from its attributes and texts."""
    return replace(product, attributes=[a for a in product.attributes if a != attribute] + ["v neck"],
                   title="Acme T-Shirt - slim fit, v neck", bullets=["Slim fit for everyday comfort"])


def test_full_match_is_one():
    b = webshop_reward(SHIRT, NAVY, GOAL)
    assert isinstance(b, RewardBreakdown)
    assert b.reward == 1.0
    assert (b.r_type, b.query_match, b.category_match, b.title_score) == (1.0, True, True, 1.0)
    assert b.attributes_matched == ["slim fit", "organic cotton"] and b.attributes_missing == []
    assert b.options_matched == ["navy"] and b.options_missing == []
    assert b.price_ok is True


def test_one_attribute_missing_is_three_quarters():
    b = webshop_reward(_without(SHIRT, "organic cotton"), NAVY, GOAL)
    assert b.reward == 0.75
    assert b.attributes_matched == ["slim fit"]
    assert b.attributes_missing == ["organic cotton"]
    assert b.options_matched == ["navy"] and b.price_ok


def test_option_not_selected_is_three_quarters():
    b = webshop_reward(SHIRT, {}, GOAL)
    assert b.reward == 0.75
    assert b.options_matched == [] and b.options_missing == ["navy"]
    assert b.attributes_missing == []


def test_wrong_option_selected_is_three_quarters():
    assert webshop_reward(SHIRT, {"color": "black", "size": "large"}, GOAL).reward == 0.75


def test_goal_option_the_product_does_not_offer_is_missing():
    goal = replace(GOAL, options={"color": "navy", "size": "x-large"})  # 5 terms
    b = webshop_reward(SHIRT, {"color": "navy", "size": "large"}, goal)
    assert b.reward == 0.8
    assert b.options_missing == ["x-large"]  # "large" scores 83 against "x-large": not a match
    assert fuzz.token_set_ratio("large", "x-large") <= FUZZY_THRESHOLD


def test_price_over_budget_is_three_quarters():
    b = webshop_reward(replace(SHIRT, price=25.01), NAVY, GOAL)
    assert b.reward == 0.75 and b.price_ok is False


def test_price_equal_to_budget_is_fine():
    b = webshop_reward(replace(SHIRT, price=25.0), NAVY, GOAL)
    assert b.reward == 1.0 and b.price_ok is True


def test_missing_terms_add_up():
    cheap_miss = _without(replace(SHIRT, price=99.0), "organic cotton")
    assert webshop_reward(cheap_miss, NAVY, GOAL).reward == 0.5
    assert webshop_reward(cheap_miss, {}, GOAL).reward == 0.25
    nothing = replace(cheap_miss, attributes=["crew neck"], title="Acme T-Shirt", bullets=[], description="")
    b = webshop_reward(nothing, {}, GOAL)
    assert b.reward == 0.0 and b.r_type == 1.0
    assert b.attributes_missing == ["slim fit", "organic cotton"]


def test_goal_without_options():
    goal = replace(GOAL, attributes=["slim fit"], options={})  # 1 attribute + price
    assert webshop_reward(SHIRT, {}, goal).reward == 1.0
    assert webshop_reward(replace(SHIRT, price=30.0), {}, goal).reward == 0.5


# ---------------------------------------------------------------------------------------------- r_type

CHAIR = Product(
    asin="B0CHAIR001", title="Acme Office Chair - slim fit, organic cotton", category=["furniture", "office", "chairs"],
    product_type="office chair", brand="acme", price=20.0, attributes=["slim fit", "organic cotton"],
    options={"color": ["navy"]}, bullets=[], description="")


def test_different_type_and_category_without_shared_words_is_zero():
    b = webshop_reward(CHAIR, NAVY, GOAL)  # attributes, option and price all match: r_type alone zeroes it
    assert (b.r_type, b.query_match, b.category_match, b.title_score) == (0.0, False, False, 0.0)
    assert b.reward == 0.0
    assert b.attributes_matched == ["slim fit", "organic cotton"] and b.options_matched == ["navy"]


def _goal_of_type(product_type: str, category=("clothing", "socks", "wool")) -> Goal:
    return replace(GOAL, product_type=product_type, category=list(category))


BACKPACK = replace(CHAIR, title="Acme Hiking Backpack - slim fit, organic cotton", product_type="backpack",
                   category=["sports", "outdoor", "bags"])


def test_weak_title_overlap_without_type_or_category_match_is_half():
    goal = _goal_of_type("wool winter hiking socks pack")  # 1 of 5 type words in the title: 0.2, not > 0.2
    b = webshop_reward(BACKPACK, NAVY, goal)
    assert (b.r_type, b.query_match, b.category_match, b.title_score) == (0.5, False, False, 0.2)
    assert b.reward == 0.5
    assert webshop_reward(BACKPACK, {}, goal).reward == 0.375  # 0.5 * 3/4


def test_title_overlap_above_a_fifth_is_full_type_reward():
    goal = _goal_of_type("wool hiking socks pack")  # 1 of 4: 0.25 > 0.2
    assert type_reward(BACKPACK, goal) == (1.0, False, False, 0.25)


def test_two_shared_category_levels_give_full_type_reward():
    goal = _goal_of_type("wool winter hiking socks pack", category=("sports", "outdoor", "socks"))
    assert type_reward(BACKPACK, goal) == (1.0, False, True, 0.2)
    one_level = _goal_of_type("wool winter hiking socks pack", category=("sports", "running", "socks"))
    assert type_reward(BACKPACK, one_level)[0] == 0.5


def test_same_product_type_gives_full_type_reward():
    goal = replace(_goal_of_type("backpack", category=("luggage", "travel", "packs")))
    assert type_reward(replace(BACKPACK, title="Acme Rucksack"), goal) == (1.0, True, False, 1.0)


def test_under_a_tenth_of_type_words_is_a_tenth():
    eleven = "hiking alpha bravo charlie delta echo foxtrot golf hotel india juliet"
    b = webshop_reward(BACKPACK, NAVY, _goal_of_type(eleven))  # 1 of 11 words
    assert b.r_type == 0.1
    assert b.title_score == pytest.approx(1 / 11, abs=1e-4)
    assert b.reward == pytest.approx(0.1)


def test_type_words_are_looked_for_in_title_and_product_type():
    goal = _goal_of_type("trail backpack")
    assert type_reward(replace(BACKPACK, title="Acme Rucksack"), goal)[3] == 0.5  # "backpack" from its type


# ---------------------------------------------------------------------------------------------- attributes

PLAIN = replace(SHIRT, attributes=["crew neck"], title="Acme T-Shirt", bullets=["Soft"], description="A shirt.")


@pytest.mark.parametrize("where", ["title", "bullets", "description"])
def test_attribute_matches_by_substring_of_the_texts(where):
    texts = {"title": "Acme T-Shirt Quick Dry Edition", "bullets": ["Soft", "Quick dry after every wash"],
             "description": "This shirt is QUICK DRY and soft."}
    product = replace(PLAIN, **{where: texts[where]})
    goal = replace(GOAL, attributes=["quick dry"], options={})
    b = webshop_reward(product, {}, goal)
    assert b.attributes_matched == ["quick dry"] and b.reward == 1.0
    assert webshop_reward(PLAIN, {}, goal).attributes_missing == ["quick dry"]


def test_attribute_matches_fuzzily_against_product_attributes():
    goal = replace(GOAL, attributes=["slim fit"], options={})
    assert webshop_reward(replace(PLAIN, attributes=["fit slim"]), {}, goal).attributes_matched == ["slim fit"]
    # "crew neck" vs "v neck" scores 80: below the threshold, and "v neck" is in none of the texts
    assert fuzz.token_set_ratio("v neck", "crew neck") <= FUZZY_THRESHOLD
    assert webshop_reward(PLAIN, {}, replace(goal, attributes=["v neck"])).attributes_missing == ["v neck"]


def test_breakdown_to_dict_has_every_term():
    d = webshop_reward(_without(SHIRT, "organic cotton"), {}, GOAL).to_dict()
    assert d == {"reward": 0.5, "r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0,
                 "attributes_matched": ["slim fit"], "attributes_missing": ["organic cotton"],
                 "options_matched": [], "options_missing": ["navy"], "price_ok": True}


def test_every_default_test_goal_is_fully_met_by_its_target(full_catalog):
    for goal in full_catalog.split("test"):
        assert webshop_reward(full_catalog.by_asin[goal.asin], dict(goal.options), goal).reward == 1.0
