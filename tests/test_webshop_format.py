"""``load_webshop_files`` on small fixtures in the real WebShop data format (items_shuffle, items_human_ins)."""

from __future__ import annotations

import copy
import json

import pytest

from apo_helpers.analysis.evaluate import run_episode
from apo_helpers.webshop import WebShopEnv, load_catalog, load_webshop_files, save_catalog
from apo_helpers.webshop.agents import make_agent
from apo_helpers.webshop.catalog import SPLITS, DataFileError

SKIN = "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers"
SERUM = "Beauty & Personal Care › Skin Care › Face › Serums"
RUNNING = "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running"
SANDALS = "Clothing, Shoes & Jewelry › Women › Shoes › Sandals"
KITCHEN = "Home & Kitchen › Kitchen & Dining › Coffee, Tea & Espresso › Coffee Makers"
KETTLES = "Home & Kitchen › Kitchen & Dining › Small Appliances › Electric Kettles"

PRODUCTS = [
    {   # price string, bullets as a list, options present, reviews, a title with brackets and a left-to-right mark
        "asin": "B0SKIN0001", "name": "CeraVe  Moisturizing Cream [2 Pack]\u200e", "pricing": "$12.99",
        "product_category": SKIN, "query": "Face Cream", "category": "beauty",
        "small_description": ["Fragrance free formula", "  With   ceramides  "],
        "full_description": "A daily cream for dry skin.",
        "customization_options": {"Size": [{"value": "16 Ounce", "image": None},
                                           {"value": "8 Ounce (Pack of 2)", "image": "https://example.com/a.jpg"}]},
        "Attributes": ["Fragrance Free"], "average_rating": "4.5 out of 5 stars",
        "Reviews": [{"score": 5, "body": "great"}, {"stars": "4.0 out of 5 stars", "review": "ok"}],
        "images": ["https://example.com/a.jpg"],
    },
    {   # price range, bullets as one string, options null, no query (product_type from the category), no brand
        "asin": "B0SKIN0002", "name": "Glow Vitamin C Serum for Face", "pricing": "$10.00 - $20.00",
        "product_category": SERUM, "category": "beauty", "small_description": "Brightens dull skin with vitamin C",
        "full_description": None, "customization_options": None,
    },
    {   # numeric price, two options, an option value with a slash
        "asin": "B0SHOE0001", "name": "Stride Men's Running Shoe", "pricing": 45.5, "brand": "Stride",
        "product_category": RUNNING, "query": "men's running shoes", "category": "fashion",
        "small_description": ["Rubber sole", "Breathable mesh upper"], "full_description": "Light and fast.",
        "customization_options": {"Color": [{"value": "Black/White", "image": None}, {"value": "Navy", "image": None}],
                                  "Size": [{"value": "9", "image": None}, {"value": "10", "image": None}]},
    },
    {   # list of prices, a value repeated across two options, a value equal to a page button
        "asin": "B0SHOE0002", "name": "Sunny Women's Flat Sandal", "pricing": [30, 25.5],
        "product_category": SANDALS, "query": "women's sandals", "category": "fashion",
        "small_description": ["Cushioned footbed"], "full_description": "Summer sandal.",
        "customization_options": {"Color": [{"value": "Natural", "image": None}, {"value": "One Size", "image": None},
                                            {"value": "Reviews", "image": None}],
                                  "Size": [{"value": "one  size", "image": None}, {"value": "7", "image": None}]},
    },
    {   # a price with a thousands separator, options {}
        "asin": "B0KTCH0001", "name": "BrewMaster Programmable Espresso Machine", "pricing": "$1,299.00",
        "product_category": KITCHEN, "query": "espresso machine", "category": "garden",
        "small_description": ["Programmable timer", "15 bar pump"], "full_description": "Cafe at home.",
        "customization_options": {},
    },
    {   # no pricing at all (WebShop's 100.0), an option whose list is null
        "asin": "B0KTCH0002", "name": "Quick Boil Electric Kettle", "product_category": KETTLES,
        "query": "electric kettle", "category": "garden", "small_description": ["Stainless steel body"],
        "full_description": "Boils in minutes.",
        "customization_options": {"Style": [{"value": "1.7 Liter", "image": None}], "Color": None},
    },
    # a repeated asin (skipped, the first record wins) and WebShop's "nan" asin (skipped)
    {"asin": "B0SKIN0001", "name": "Duplicate record", "pricing": "$1.00", "product_category": SKIN},
    {"asin": "nan", "name": "Broken record", "pricing": "$1.00", "product_category": SKIN},
]

INSTRUCTIONS = {
    "B0SKIN0001": [
        {"instruction": "i need a fragrance free face cream in 16 ounce.", "instruction_attributes": ["fragrance free"],
         "instruction_options": ["16 ounce"]},
        {"instruction": "I want a moisturizing   cream, 8 ounce pack of 2", "attributes": ["Moisturizing"],
         "goal_options": {"Size": "8 Ounce (Pack of 2)"}, "price_upper": 30.0},
    ],
    "B0SKIN0002": [
        {"instruction": "i want a vitamin c serum for less than 25 dollars", "instruction_attributes": ["vitamin c"],
         "instruction_options": []},
        {"instruction": "a serum please", "instruction_attributes": [], "instruction_options": []},
    ],
    "B0SHOE0001": [
        {"instruction": "men's running shoes with a rubber sole, black/white, size 10", "attributes": ["rubber sole"],
         "options": {"color": "Black/White", "size": "10"}},
    ],
    "B0SHOE0002": [
        {"instruction": "a cushioned women's sandal in natural, size 7", "instruction_attributes": ["cushioned"],
         "instruction_options": ["natural", "7"]},
    ],
    "B0KTCH0001": [
        {"instruction": "a programmable espresso machine", "instruction_attributes": ["programmable"],
         "instruction_options": None},
    ],
    "B0KTCH0002": [
        {"instruction": "an electric kettle with a stainless steel body, 1.7 liter",
         "instruction_attributes": ["stainless steel"], "instruction_options": ["1.7 liter"]},
    ],
    "B0NOTHERE1": [
        {"instruction": "something not in this shop", "instruction_attributes": ["nothing"],
         "instruction_options": []},
    ],
}


def write(tmp_path, products=PRODUCTS, instructions=INSTRUCTIONS):
    products_path, instructions_path = tmp_path / "items_shuffle_1000.json", tmp_path / "items_human_ins.json"
    for path, data in ((products_path, products), (instructions_path, instructions)):
        path.write_text(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return products_path, instructions_path


def load(tmp_path, **kwargs):
    return load_webshop_files(*write(tmp_path), **kwargs)


@pytest.fixture
def catalog(tmp_path):
    return load(tmp_path)


def all_goals(catalog):
    return [g for split in SPLITS for g in catalog.goals[split]]


# ---------------------------------------------------------------------------------------------- products

def test_products_are_parsed(catalog):
    assert [p.asin for p in catalog.products] == ["B0SKIN0001", "B0SKIN0002", "B0SHOE0001", "B0SHOE0002",
                                                  "B0KTCH0001", "B0KTCH0002"]
    cream = catalog.by_asin["B0SKIN0001"]
    assert cream.title == "CeraVe Moisturizing Cream (2 Pack)"
    assert cream.price == 12.99
    assert cream.category == ["Beauty & Personal Care", "Skin Care", "Face", "Creams & Moisturizers"]
    assert cream.product_type == "face cream"
    assert cream.brand == "cerave"
    assert cream.options == {"size": ["16 ounce", "8 ounce (pack of 2)"]}
    assert cream.bullets == ["Fragrance free formula", "With ceramides"]
    assert cream.description == "A daily cream for dry skin."
    assert cream.attributes == ["fragrance free"]
    assert cream.reviews == [{"rating": 5, "text": "great"}, {"rating": 4, "text": "ok"}]
    assert cream.rating == 4.5


def test_price_variants_bullets_and_missing_fields(catalog):
    serum, shoe, sandal, espresso, kettle = (catalog.by_asin[a] for a in
                                             ("B0SKIN0002", "B0SHOE0001", "B0SHOE0002", "B0KTCH0001", "B0KTCH0002"))
    assert serum.price == 10.0  # low end of "$10.00 - $20.00"
    assert shoe.price == 45.5  # a number
    assert sandal.price == 25.5  # the smallest of a list
    assert espresso.price == 1299.0  # "$1,299.00"
    assert kettle.price == 100.0  # no pricing: WebShop's default
    assert serum.bullets == ["Brightens dull skin with vitamin C"]  # one string -> one bullet
    assert serum.options == {} and espresso.options == {}
    assert serum.product_type == "serums"  # no query: the last category level
    assert serum.description == "" and serum.attributes == [] and serum.reviews == []
    assert serum.brand == "glow"
    assert shoe.brand == "stride"
    assert shoe.options == {"color": ["black | white", "navy"], "size": ["9", "10"]}
    assert kettle.options == {"style": ["1.7 liter"]}  # the null option is left out
    assert [p.category[0] for p in catalog.products] == ["Beauty & Personal Care"] * 2 + \
        ["Clothing, Shoes & Jewelry"] * 2 + ["Home & Kitchen"] * 2
    assert catalog.categories == ["Beauty & Personal Care", "Clothing, Shoes & Jewelry", "Home & Kitchen"]


def test_option_values_are_unique_per_product(catalog):
    sandal = catalog.by_asin["B0SHOE0002"]
    # "one size" is kept in the first option that has it; "reviews" would shadow the Reviews button
    assert sandal.options == {"color": ["natural", "one size"], "size": ["7"]}
    values = [v for vs in sandal.options.values() for v in vs]
    assert len(values) == len(set(values))
    assert catalog.load_report.dropped_option_values == 2


def test_report_counts(catalog):
    report = catalog.load_report
    assert catalog.skipped_instructions == report.skipped_instructions == 1
    assert report.skipped_no_attributes == 1
    assert report.duplicate_products == 1 and report.skipped_products == 1
    assert report.products == 6
    assert sum(report.goals.values()) == 7
    assert report.derived_price_upper == 5  # all but the record with price_upper and the one stating 25 dollars
    assert report.products_path.endswith("items_shuffle_1000.json")


# ---------------------------------------------------------------------------------------------- goals

def test_goals(catalog):
    goals = {(g.asin, g.instruction): g for g in all_goals(catalog)}
    assert len(goals) == 7
    by_asin = {}
    for g in all_goals(catalog):
        by_asin.setdefault(g.asin, []).append(g)
    first, second = by_asin["B0SKIN0001"]
    assert first.instruction == "i need a fragrance free face cream in 16 ounce, and price lower than 20.00 dollars"
    assert first.price_upper == 20.0  # ceil(12.99 * 1.5)
    assert first.attributes == ["fragrance free"]
    assert first.options == {"option 1": "16 ounce"}
    assert first.target_title == "CeraVe Moisturizing Cream (2 Pack)"
    assert first.product_type == "face cream"
    assert first.category == ["Beauty & Personal Care", "Skin Care", "Face", "Creams & Moisturizers"]
    assert second.instruction == "I want a moisturizing cream, 8 ounce pack of 2, and price lower than 30.00 dollars"
    assert second.price_upper == 30.0 and second.attributes == ["moisturizing"]
    assert second.options == {"size": "8 ounce (pack of 2)"}
    (serum,) = by_asin["B0SKIN0002"]  # the record without attributes is skipped
    assert serum.instruction == "i want a vitamin c serum for less than 25 dollars"  # already states its budget
    assert serum.price_upper == 25.0 and serum.options == {} and serum.product_type == "serums"
    (shoe,) = by_asin["B0SHOE0001"]
    assert shoe.options == {"color": "black | white", "size": "10"} and shoe.price_upper == 69.0  # ceil(68.25)
    (sandal,) = by_asin["B0SHOE0002"]
    assert sandal.options == {"option 1": "natural", "option 2": "7"}
    (espresso,) = by_asin["B0KTCH0001"]
    assert espresso.options == {} and espresso.price_upper == 1949.0
    assert "B0NOTHERE1" not in by_asin


def test_splits_are_disjoint_by_target_and_indexed(catalog):
    targets = {split: {g.asin for g in catalog.goals[split]} for split in SPLITS}
    assert all(targets[split] for split in SPLITS)
    assert not targets["train"] & targets["val"] and not targets["train"] & targets["test"]
    assert not targets["val"] & targets["test"]
    assert set().union(*targets.values()) == {p.asin for p in catalog.products}
    assert {split: len(t) for split, t in targets.items()} == {"train": 4, "val": 1, "test": 1}
    for split in SPLITS:
        assert [g.index for g in catalog.goals[split]] == list(range(len(catalog.goals[split])))
        assert all(g.split == split for g in catalog.goals[split])
    assert catalog.load_report.targets == {"train": 4, "val": 1, "test": 1}


def split_targets(catalog):
    return {split: [g.asin for g in catalog.goals[split]] for split in SPLITS}


def test_splits_are_deterministic_for_a_seed(tmp_path):
    paths = write(tmp_path)
    a = load_webshop_files(*paths, seed=3, val_fraction=1 / 3, test_fraction=1 / 3)
    b = load_webshop_files(*paths, seed=3, val_fraction=1 / 3, test_fraction=1 / 3)
    assert split_targets(a) == split_targets(b)
    assert [g.instruction for g in all_goals(a)] == [g.instruction for g in all_goals(b)]
    assert {split: len(set(t)) for split, t in split_targets(a).items()} == {"train": 2, "val": 2, "test": 2}
    others = {json.dumps(split_targets(load_webshop_files(*paths, seed=s, val_fraction=1 / 3, test_fraction=1 / 3)))
              for s in range(6)}
    assert len(others) > 1  # the seed matters


def test_max_products_and_bad_arguments(tmp_path):
    paths = write(tmp_path)
    small = load_webshop_files(*paths, max_products=2, val_fraction=0.0, test_fraction=0.0)
    assert [p.asin for p in small.products] == ["B0SKIN0001", "B0SKIN0002"]
    assert small.skipped_instructions == 5  # shoe, sandal, espresso, kettle and the unknown asin
    assert small.goals["val"] == [] and small.goals["test"] == [] and len(small.goals["train"]) == 3
    for kwargs in ({"val_fraction": 1.0}, {"test_fraction": -0.1}, {"val_fraction": 0.5, "test_fraction": 0.5},
                   {"max_products": 0}):
        with pytest.raises(ValueError):
            load_webshop_files(*paths, **kwargs)


def test_reexport_and_save_round_trip(catalog, tmp_path):
    import apo_helpers.webshop as webshop

    assert "load_webshop_files" in webshop.__all__
    save_catalog(catalog, tmp_path / "saved")
    again = load_catalog(tmp_path / "saved")
    assert again.products == catalog.products and again.goals == catalog.goals


# ---------------------------------------------------------------------------------------------- the environment

@pytest.mark.parametrize("split", SPLITS)
def test_oracle_solves_every_goal(catalog, split):
    env = WebShopEnv(split=split, catalog=catalog)
    agent = make_agent("oracle")
    for i, goal in enumerate(catalog.goals[split]):
        episode = run_episode(env, agent, i)
        assert episode.reward == 1.0, (goal.instruction, episode.actions, episode.breakdown)
        assert episode.success and all(episode.valid)
        assert episode.actions[0] == f"search[{goal.target_title}]"


def test_oracle_selects_options_on_the_item_page(catalog):
    split, index = next((s, g.index) for s in SPLITS for g in catalog.goals[s] if g.asin == "B0SHOE0001")
    episode = run_episode(WebShopEnv(split=split, catalog=catalog), make_agent("oracle"), index)
    assert episode.actions[2:] == ["click[black | white]", "click[10]", "click[buy now]"]
    assert episode.breakdown["options_matched"] == ["black | white", "10"]


# ---------------------------------------------------------------------------------------------- malformed files

def products_with(index, **changes):
    products = copy.deepcopy(PRODUCTS)
    for key, value in changes.items():
        if value is ...:
            products[index].pop(key)
        else:
            products[index][key] = value
    return products


def instructions_with(asin, k, **changes):
    instructions = copy.deepcopy(INSTRUCTIONS)
    for key, value in changes.items():
        if value is ...:
            instructions[asin][k].pop(key)
        else:
            instructions[asin][k][key] = value
    return instructions


PRODUCTS_FILE, INSTRUCTIONS_FILE = "items_shuffle_1000.json", "items_human_ins.json"
MALFORMED = {
    # name: (products, instructions, file name, pieces the message must contain)
    "products not json": ("[{\"asin\": ", INSTRUCTIONS, PRODUCTS_FILE, ["not valid JSON"]),
    "products not a list": ({"B0SKIN0001": {}}, INSTRUCTIONS, PRODUCTS_FILE, ["top level", "list"]),
    "product without asin": (products_with(1, asin=...), INSTRUCTIONS, PRODUCTS_FILE, ["product #1", "'asin'"]),
    "product with a bad asin": (products_with(1, asin="B0 [x]"), INSTRUCTIONS, PRODUCTS_FILE,
                                ["product #1", "'asin'"]),
    "product without name": (products_with(2, name=...), INSTRUCTIONS, PRODUCTS_FILE,
                             ["product #2", "'B0SHOE0001'", "'name'"]),
    "unparseable pricing": (products_with(3, pricing="call for price"), INSTRUCTIONS, PRODUCTS_FILE,
                            ["product #3", "'B0SHOE0002'", "'pricing'", "call for price"]),
    "pricing of the wrong type": (products_with(3, pricing={"low": 1}), INSTRUCTIONS, PRODUCTS_FILE,
                                  ["product #3", "'B0SHOE0002'", "'pricing'"]),
    "options not an object": (products_with(0, customization_options=["red"]), INSTRUCTIONS, PRODUCTS_FILE,
                              ["product #0", "'B0SKIN0001'", "'customization_options'"]),
    "option values not a list": (products_with(0, customization_options={"Size": "large"}), INSTRUCTIONS,
                                 PRODUCTS_FILE, ["product #0", "'B0SKIN0001'", "'customization_options.Size'"]),
    "option value without value": (products_with(0, customization_options={"Size": [{"image": None}]}),
                                   INSTRUCTIONS, PRODUCTS_FILE,
                                   ["product #0", "'B0SKIN0001'", "'customization_options.Size[0].value'"]),
    "bullets of the wrong type": (products_with(4, small_description=7), INSTRUCTIONS, PRODUCTS_FILE,
                                  ["product #4", "'B0KTCH0001'", "'small_description'"]),
    "product attributes not a list": (products_with(4, Attributes="programmable"), INSTRUCTIONS, PRODUCTS_FILE,
                                      ["product #4", "'B0KTCH0001'", "'Attributes'"]),
    "no category at all": (products_with(5, product_category=..., category=..., query=...), INSTRUCTIONS,
                           PRODUCTS_FILE, ["product #5", "'B0KTCH0002'", "'product_category'"]),
    "instructions not json": (PRODUCTS, "{oops", INSTRUCTIONS_FILE, ["not valid JSON"]),
    "instructions not an object": (PRODUCTS, [{"instruction": "x"}], INSTRUCTIONS_FILE, ["top level", "object"]),
    "instructions of an asin not a list": (PRODUCTS, {**INSTRUCTIONS, "B0SKIN0002": {"instruction": "x"}},
                                           INSTRUCTIONS_FILE, ["'B0SKIN0002'"]),
    "instruction without text": (PRODUCTS, instructions_with("B0SKIN0001", 1, instruction=...), INSTRUCTIONS_FILE,
                                 ["instruction 'B0SKIN0001'#1", "'instruction'"]),
    "instruction text empty": (PRODUCTS, instructions_with("B0SHOE0001", 0, instruction="   "), INSTRUCTIONS_FILE,
                               ["instruction 'B0SHOE0001'#0", "'instruction'"]),
    "attributes not a list": (PRODUCTS, instructions_with("B0KTCH0002", 0, instruction_attributes="stainless steel"),
                              INSTRUCTIONS_FILE, ["instruction 'B0KTCH0002'#0", "'instruction_attributes'"]),
    "attributes missing": (PRODUCTS, instructions_with("B0KTCH0002", 0, instruction_attributes=...),
                           INSTRUCTIONS_FILE, ["instruction 'B0KTCH0002'#0", "'instruction_attributes'"]),
    "options of the wrong type": (PRODUCTS, instructions_with("B0SHOE0002", 0, instruction_options="natural"),
                                  INSTRUCTIONS_FILE, ["instruction 'B0SHOE0002'#0", "'instruction_options'"]),
    "price_upper not a number": (PRODUCTS, instructions_with("B0SKIN0001", 1, price_upper="cheap"),
                                 INSTRUCTIONS_FILE, ["instruction 'B0SKIN0001'#1", "'price_upper'"]),
    "malformed record of an unknown asin": (PRODUCTS, instructions_with("B0NOTHERE1", 0, instruction_attributes=5),
                                            INSTRUCTIONS_FILE, ["instruction 'B0NOTHERE1'#0",
                                                                "'instruction_attributes'"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_name_file_record_and_field(tmp_path, case):
    products, instructions, file_name, pieces = MALFORMED[case]
    with pytest.raises(DataFileError) as error:
        load_webshop_files(*write(tmp_path, products, instructions))
    message = str(error.value)
    assert file_name in message
    for piece in pieces:
        assert piece in message, (piece, message)


def test_missing_file(tmp_path):
    products_path, instructions_path = write(tmp_path)
    with pytest.raises(DataFileError, match="missing.json"):
        load_webshop_files(tmp_path / "missing.json", instructions_path)
    with pytest.raises(DataFileError, match="nope.json"):
        load_webshop_files(products_path, tmp_path / "nope.json")


def test_no_matching_instructions_is_an_error(tmp_path):
    paths = write(tmp_path, PRODUCTS, {"B0NOTHERE1": INSTRUCTIONS["B0NOTHERE1"]})
    with pytest.raises(DataFileError, match="items_human_ins.json"):
        load_webshop_files(*paths)
