"""The synthetic catalog: determinism, size, splits, goals, near-duplicates, fuzzy-distinct pools and the data files."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from itertools import combinations

import pytest
from rapidfuzz import fuzz

from apo_helpers.config import CatalogConfig
from apo_helpers.webshop import catalog as catalog_module
from apo_helpers.webshop.catalog import (CATALOG_FILE, GOALS_FILE, INSTRUCTION_TEMPLATES, OPTION_PHRASES, PRACTICE,
                                         PRACTICE_GOALS, SPLITS, DataFileError, catalog_to_json, generate_catalog,
                                         load_catalog, practice_goals, save_catalog)
from apo_helpers.webshop.product_types import PRODUCT_TYPES
from apo_helpers.webshop.reward import FUZZY_THRESHOLD

from conftest import SMALL_CONFIG

TYPES = {t.name: t for t in PRODUCT_TYPES}


# ---------------------------------------------------------------------------------------------- determinism

def test_same_seed_gives_identical_json_text():
    first, second = catalog_to_json(generate_catalog(SMALL_CONFIG)), catalog_to_json(generate_catalog(SMALL_CONFIG))
    assert first == second
    assert json.loads(first[0]) and json.loads(first[1])  # non-empty, valid JSON


def test_default_config_is_deterministic(full_catalog):
    assert catalog_to_json(generate_catalog()) == catalog_to_json(full_catalog)


def test_different_seed_gives_different_catalog_and_goals():
    products_0, goals_0 = catalog_to_json(generate_catalog(SMALL_CONFIG))
    products_1, goals_1 = catalog_to_json(generate_catalog(CatalogConfig(**{**SMALL_CONFIG.__dict__, "seed": 1})))
    assert products_0 != products_1
    assert goals_0 != goals_1


# ---------------------------------------------------------------------------------------------- size and splits

def test_default_catalog_has_1000_products_over_10_categories(full_catalog):
    assert len(full_catalog.products) >= 1000
    assert len(full_catalog.categories) >= 10
    assert len({p.category[0] for p in full_catalog.products}) == len(full_catalog.categories)
    asins = [p.asin for p in full_catalog.products]
    assert len(set(asins)) == len(asins)
    assert all(re.fullmatch(r"B0[A-Z0-9]{8}", a) for a in asins)
    assert set(full_catalog.by_asin) == set(asins)


def test_split_sizes(full_catalog):
    assert set(full_catalog.goals) == set(SPLITS)
    assert len(full_catalog.split("train")) >= 1500
    assert len(full_catalog.split("val")) >= 200
    assert len(full_catalog.split("test")) >= 200


def test_split_targets_are_pairwise_disjoint(full_catalog):
    targets = {s: {g.asin for g in full_catalog.split(s)} for s in SPLITS}
    for a, b in combinations(SPLITS, 2):
        assert not targets[a] & targets[b], (a, b)
    # one goal per val/test target
    assert len(targets["test"]) == len(full_catalog.split("test"))
    assert len(targets["val"]) == len(full_catalog.split("val"))


def test_goals_know_their_split_and_index(full_catalog):
    for split in SPLITS:
        for i, goal in enumerate(full_catalog.split(split)):
            assert (goal.split, goal.index) == (split, i)


def test_unknown_split_raises(small_catalog):
    with pytest.raises(ValueError, match="unknown split 'dev'.*'practice'"):
        small_catalog.split("dev")


# ---------------------------------------------------------------------------------------------- practice goals

def test_practice_goals_are_new_instructions_on_train_products_only(full_catalog):
    practice = full_catalog.split(PRACTICE)
    assert len(practice) == PRACTICE_GOALS
    assert [(g.split, g.index) for g in practice] == [(PRACTICE, i) for i in range(PRACTICE_GOALS)]
    train_products = {g.asin for g in full_catalog.split("train")}
    assert {g.asin for g in practice} == train_products  # every train product, no val or test product
    written = {g.instruction for split in SPLITS for g in full_catalog.split(split)}
    instructions = [g.instruction for g in practice]
    assert len(set(instructions)) == len(instructions) and not written & set(instructions)


def test_practice_goals_are_written_as_the_committed_goals_are(full_catalog):
    by_asin = full_catalog.by_asin
    for goal in full_catalog.split(PRACTICE)[:200]:
        product = by_asin[goal.asin]
        assert set(goal.attributes) <= set(product.attributes) and goal.price_upper >= product.price
        assert all(product.options[name] and value in product.options[name] for name, value in goal.options.items())


def test_practice_goals_are_the_same_on_every_call_and_stay_out_of_the_files(full_catalog, small_catalog):
    assert practice_goals(full_catalog, 50) == full_catalog.split(PRACTICE)[:50]
    assert full_catalog.split(PRACTICE) is full_catalog.split(PRACTICE)  # written once per catalog
    assert PRACTICE not in full_catalog.goals and PRACTICE not in json.loads(catalog_to_json(full_catalog)[1])
    assert practice_goals(small_catalog, 10, seed=1) != practice_goals(small_catalog, 10, seed=2)


def test_practice_goals_that_cannot_be_new_raise(small_catalog):
    with pytest.raises(ValueError, match="distinct practice goals"):
        practice_goals(small_catalog, 10**6)


def test_too_few_products_for_the_targets_raises():
    with pytest.raises(ValueError, match="too small"):
        generate_catalog(CatalogConfig(num_products=20, test_targets=10, val_targets=10))


# ---------------------------------------------------------------------------------------------- goals

def test_every_goal_is_written_from_its_target(full_catalog):
    for split in SPLITS:
        for goal in full_catalog.split(split):
            target = full_catalog.by_asin[goal.asin]
            assert 1 <= len(goal.attributes) <= 3
            assert len(set(goal.attributes)) == len(goal.attributes)
            assert 0 <= len(goal.options) <= 2
            assert goal.price_upper > target.price
            assert set(goal.attributes) <= set(target.attributes)
            for name, value in goal.options.items():
                assert value in target.options[name]
            assert goal.product_type == target.product_type
            assert goal.category == target.category
            assert goal.target_title == target.title


def _join(words):
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _renderings(goal):
    """The instruction each template would write for this goal."""
    opts = "".join(", " + OPTION_PHRASES.get(n, "{n}: {v}").format(n=n, v=v) for n, v in goal.options.items())
    fields = dict(a=TYPES[goal.product_type].article, attrs=_join(goal.attributes), type=goal.product_type,
                  opts=opts, price=f"{goal.price_upper:.2f}")
    return [template.format(**fields) for template in INSTRUCTION_TEMPLATES]


def test_instructions_use_at_least_six_phrasings(full_catalog):
    used = set()
    for goal in full_catalog.split("test") + full_catalog.split("val") + full_catalog.split("train"):
        renderings = _renderings(goal)
        assert goal.instruction in renderings, goal.instruction
        used.add(renderings.index(goal.instruction))
    assert len(INSTRUCTION_TEMPLATES) >= 6
    assert len(used) >= 6


def test_instruction_names_type_attributes_options_and_budget(full_catalog):
    for goal in full_catalog.split("test"):
        assert goal.product_type in goal.instruction
        assert f"{goal.price_upper:.2f} dollars" in goal.instruction
        for phrase in [*goal.attributes, *goal.options.values()]:
            assert phrase in goal.instruction


# ---------------------------------------------------------------------------------------------- near-duplicates

def _near_duplicates(product, others):
    return [q for q in others if q is not product and set(product.attributes) & set(q.attributes)
            and (set(product.attributes) != set(q.attributes) or product.price != q.price)]


def test_many_product_types_have_near_duplicates(full_catalog):
    by_type = defaultdict(list)
    for p in full_catalog.products:
        by_type[p.product_type].append(p)
    with_families = [t for t, ps in by_type.items() if any(len(_near_duplicates(p, ps)) >= 2 for p in ps)]
    assert len(with_families) >= 20, with_families
    # and most goal targets have at least one near-duplicate a careless agent could buy instead
    test_goals = full_catalog.split("test")
    confusable = [g for g in test_goals if _near_duplicates(full_catalog.by_asin[g.asin], by_type[g.product_type])]
    assert len(confusable) >= 0.5 * len(test_goals)


def test_products_come_in_families_of_two_to_five_near_duplicates(full_catalog):
    """``generate_products``: families of 2-5 of one type, in a row; each variant is the first product with at most
    one attribute swapped and its price moved by 10-60%."""
    families, run = [], [full_catalog.products[0]]
    for product in full_catalog.products[1:]:
        if product.product_type == run[0].product_type:
            run.append(product)
        else:
            families.append(run)
            run = [product]
    # (the last run is left out: num_products may cut it short)
    assert len(families) >= 200
    assert all(2 <= len(f) <= 5 for f in families), sorted({len(f) for f in families})
    for base, *variants in families:
        for v in variants:
            assert len(v.attributes) == len(base.attributes)
            assert len(set(v.attributes) - set(base.attributes)) <= 1
            assert 0.6 * base.price - 0.01 <= v.price <= 1.6 * base.price + 0.01 and v.price != base.price
            assert set(v.options) == set(base.options)


# ---------------------------------------------------------------------------------------------- fuzzy-distinct pools

def _pools():
    for ptype in PRODUCT_TYPES:
        yield f"{ptype.name}/attributes", ptype.attributes
        for name, values in ptype.options.items():
            yield f"{ptype.name}/{name}", values
        # the reward compares selected values with goal values whatever their option name
        yield f"{ptype.name}/all options", tuple(v for values in ptype.options.values() for v in values)


@pytest.mark.parametrize("label,pool", list(_pools()), ids=[label for label, _ in _pools()])
def test_no_two_pool_entries_fuzzy_match(label, pool):
    assert len(set(pool)) == len(pool), f"{label} has duplicates"
    close = [(a, b, fuzz.token_set_ratio(a, b)) for a, b in combinations(pool, 2)
             if fuzz.token_set_ratio(a, b) > FUZZY_THRESHOLD]
    assert not close, f"{label}: {close}"


def test_fuzzy_threshold_is_85():
    assert FUZZY_THRESHOLD == 85
    assert fuzz.token_set_ratio("slim", "slim fit") > FUZZY_THRESHOLD  # what the pool test guards against


def test_product_types_cover_the_promised_categories():
    assert len(PRODUCT_TYPES) == 29
    assert len({t.category[0] for t in PRODUCT_TYPES}) == 12
    assert len({t.name for t in PRODUCT_TYPES}) == len(PRODUCT_TYPES)


# ---------------------------------------------------------------------------------------------- files

def test_save_then_load_round_trips(small_catalog, tmp_path):
    paths = save_catalog(small_catalog, tmp_path)
    assert paths == [tmp_path / CATALOG_FILE, tmp_path / GOALS_FILE]
    assert tuple(p.read_text() for p in paths) == catalog_to_json(small_catalog)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CATALOG_FILE, GOALS_FILE])  # no temporary files left
    loaded = load_catalog(tmp_path)
    assert loaded.products == small_catalog.products
    assert loaded.goals == small_catalog.goals
    assert catalog_to_json(loaded) == catalog_to_json(small_catalog)


def test_save_overwrites_existing_files(small_catalog, tmp_path):
    (tmp_path / CATALOG_FILE).write_text("old")
    save_catalog(small_catalog, tmp_path)
    assert (tmp_path / CATALOG_FILE).read_text() == catalog_to_json(small_catalog)[0]


@pytest.fixture
def data_dir(small_catalog, tmp_path):
    save_catalog(small_catalog, tmp_path)
    return tmp_path


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _load_error(directory) -> str:
    with pytest.raises(DataFileError) as excinfo:
        load_catalog(directory)
    assert isinstance(excinfo.value, ValueError)
    return str(excinfo.value)


def test_missing_product_field_is_named(data_dir):
    _edit(data_dir / CATALOG_FILE, lambda products: products[3].pop("price"))
    message = _load_error(data_dir)
    assert str(data_dir / CATALOG_FILE) in message
    assert "product #3" in message and "'price'" in message


def test_missing_goal_field_is_named(data_dir):
    _edit(data_dir / GOALS_FILE, lambda goals: goals["val"][4].pop("price_upper"))
    message = _load_error(data_dir)
    assert str(data_dir / GOALS_FILE) in message
    assert "goal val#4" in message and "'price_upper'" in message


def test_optional_fields_may_be_missing(data_dir):
    _edit(data_dir / CATALOG_FILE, lambda products: products[0].pop("reviews"))
    assert load_catalog(data_dir).products[0].reviews == []


def test_unknown_field_is_named(data_dir):
    _edit(data_dir / GOALS_FILE, lambda goals: goals["test"][2].update(colour="navy"))
    message = _load_error(data_dir)
    assert str(data_dir / GOALS_FILE) in message
    assert "goal test#2" in message and "colour" in message


def test_unknown_product_field_is_named(data_dir):
    _edit(data_dir / CATALOG_FILE, lambda products: products[7].update(weight=3))
    message = _load_error(data_dir)
    assert str(data_dir / CATALOG_FILE) in message and "product #7" in message and "weight" in message


def test_not_json_is_reported(data_dir):
    (data_dir / GOALS_FILE).write_text('{"test": [')
    message = _load_error(data_dir)
    assert str(data_dir / GOALS_FILE) in message and "not valid JSON" in message


def test_missing_file_is_reported(data_dir):
    (data_dir / CATALOG_FILE).unlink()
    message = _load_error(data_dir)
    assert str(data_dir / CATALOG_FILE) in message and "not found" in message


def test_goal_with_unknown_asin_is_reported(data_dir):
    _edit(data_dir / GOALS_FILE, lambda goals: goals["val"][1].update(asin="B0ZZZZZZZZ"))
    message = _load_error(data_dir)
    assert str(data_dir / GOALS_FILE) in message and str(data_dir / CATALOG_FILE) in message
    assert "val#1" in message and "B0ZZZZZZZZ" in message


def test_record_that_is_not_an_object_is_reported(data_dir):
    _edit(data_dir / CATALOG_FILE, lambda products: products.__setitem__(5, "a string"))
    message = _load_error(data_dir)
    assert "product #5" in message and "str" in message


def test_wrong_top_level_shapes_are_reported(data_dir):
    (data_dir / CATALOG_FILE).write_text("{}")
    assert str(data_dir / CATALOG_FILE) in _load_error(data_dir)
    save_catalog(generate_catalog(SMALL_CONFIG), data_dir)
    (data_dir / GOALS_FILE).write_text("[]")
    assert str(data_dir / GOALS_FILE) in _load_error(data_dir)


def test_split_that_is_not_a_list_is_reported(data_dir):
    _edit(data_dir / GOALS_FILE, lambda goals: goals.__setitem__("test", 5))
    message = _load_error(data_dir)
    assert str(data_dir / GOALS_FILE) in message and "'test'" in message


def test_default_catalog_is_cached_and_has_the_default_size():
    catalog = catalog_module.default_catalog()
    assert catalog_module.default_catalog() is catalog
    assert len(catalog.products) == CatalogConfig().num_products
    assert len(catalog.split("test")) == CatalogConfig().test_targets
