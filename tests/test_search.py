"""BM25 search: asins, at most max_results, best first, ties in catalog order, exact titles found, caching."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest

from apo_helpers.webshop.catalog import Product, generate_catalog
from apo_helpers.webshop.env import WebShopEnv
from apo_helpers.webshop.search import SearchEngine, product_text, search_engine

from conftest import SMALL_CONFIG


def _product(i: int, title: str, attributes=(), bullets=()) -> Product:
    return Product(f"B0{i:08d}", title, ["home", "decor", "misc"], "widget", "acme", 10.0, list(attributes), {},
                   list(bullets), "not indexed: zebra")


def test_product_text_is_title_attributes_and_bullets():
    p = _product(1, "Acme Widget", ["red", "tall"], ["Made of oak"])
    assert product_text(p) == "Acme Widget red tall Made of oak"


def test_results_are_asins_at_most_max_results_best_first(small_catalog, paged_query):
    engine = SearchEngine(small_catalog.products, max_results=12)
    found = engine.search(paged_query)
    assert len(found) == 12
    assert len(set(found)) == len(found)
    assert all(a in small_catalog.by_asin for a in found)
    scores = engine.scores(paged_query)
    position = {a: i for i, a in enumerate(engine.asins)}
    got = [scores[position[a]] for a in found]
    assert all(s > 0 for s in got)
    assert got == sorted(got, reverse=True)
    # nothing left out scores better than the last one kept
    left_out = [scores[i] for i, a in enumerate(engine.asins) if a not in found]
    assert max(left_out) <= got[-1]


def test_k_overrides_max_results(small_catalog, paged_query):
    engine = search_engine(small_catalog)
    assert engine.max_results == 50
    assert engine.search(paged_query, k=3) == engine.search(paged_query)[:3]
    assert len(engine.search(paged_query)) <= 50


def test_only_positive_scores_are_returned():
    products = [_product(0, "Blue Widget"), _product(1, "Green Gadget"), _product(2, "Red Widget")]
    assert SearchEngine(products).search("widget") == ["B000000000", "B000000002"]
    assert SearchEngine(products).search("gadget") == ["B000000001"]


def test_best_match_comes_first():
    products = [_product(0, "Widget"), _product(1, "Blue Widget Gadget"), _product(2, "Blue Gadget")]
    assert SearchEngine(products).search("blue widget")[0] == "B000000001"


def test_equal_scores_keep_catalog_order():
    products = [_product(i, "Blue Widget") for i in range(30)] + [_product(30, "Green Gadget")]
    engine = SearchEngine(products, max_results=10)
    assert engine.search("widget") == [f"B0{i:08d}" for i in range(10)]
    assert engine.search("widget") == engine.search("WIDGET  widget")


@pytest.mark.parametrize("seed", range(40))
def test_ties_at_the_cutoff_are_broken_by_catalog_order(seed):
    """Against a reference stable sort: score descending, then catalog position, cut at k."""
    rng = random.Random(seed)
    titles = [rng.choice(["widget", "widget widget", "widget gadget", "gadget", "thing"]) for _ in range(rng.randint(20, 120))]
    products = [_product(i, t) for i, t in enumerate(titles)]
    k = rng.randint(1, 15)
    engine = SearchEngine(products, max_results=k)
    scores = engine.scores("widget")
    expected = [products[i].asin for i in sorted(range(len(products)), key=lambda i: (-scores[i], i)) if scores[i] > 0][:k]
    assert engine.search("widget") == expected


def test_search_is_deterministic(small_catalog, paged_query):
    fresh = generate_catalog(SMALL_CONFIG)
    assert SearchEngine(fresh.products).search(paged_query) == search_engine(small_catalog).search(paged_query)


def test_exact_title_finds_the_product(small_catalog):
    engine = search_engine(small_catalog)
    for product in small_catalog.products:
        assert product.asin in engine.search(product.title), product.title


def test_exact_title_finds_the_product_in_the_default_catalog(full_catalog):
    engine = search_engine(full_catalog)
    for product in full_catalog.products[::7]:
        assert product.asin in engine.search(product.title), product.title


@pytest.mark.parametrize("query", ["", "   ", "qqqq zzzz", "the and of for", "日本語 ☃", "zebra"])
def test_query_without_indexed_words_returns_nothing(small_catalog, query):
    engine = search_engine(small_catalog)
    assert engine.search(query) == []
    assert not np.any(engine.scores(query))
    assert engine.scores(query).shape == (len(small_catalog.products),)


def test_description_is_not_indexed():
    assert SearchEngine([_product(0, "Blue Widget")]).search("zebra") == []


def test_search_engine_is_cached_per_catalog_and_limit(small_catalog, full_catalog):
    engine = search_engine(small_catalog)
    assert search_engine(small_catalog) is engine
    assert search_engine(small_catalog, 50) is engine
    other_limit = search_engine(small_catalog, 5)
    assert other_limit is not engine and other_limit.max_results == 5
    assert search_engine(full_catalog) is not engine
    assert WebShopEnv(split="test", catalog=small_catalog).search_engine is engine


@pytest.mark.parametrize("chosen", [None, "cuda"])
def test_importing_search_keeps_jax_off_the_gpu_unless_chosen(chosen):
    """bm25s runs a JAX operation at import where JAX is installed: JAX must not claim the GPU's memory (measured on
    an H200: six training processes, each importing bm25s, ran the card out of memory until JAX_PLATFORMS=cpu)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    if chosen:
        env["JAX_PLATFORMS"] = chosen
    code = "import os, apo_helpers.webshop.search; print(os.environ['JAX_PLATFORMS'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == (chosen or "cpu")
