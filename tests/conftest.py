"""Shared fixtures: small generated catalogs and environments opened on each page kind (environment tests), and a
ci-sized pi_ref trained once per session (the A*PO and decision-probe tests)."""

from __future__ import annotations

import os

import pytest

from apo_helpers.config import CatalogConfig, EnvConfig
from apo_helpers.webshop.catalog import Catalog, generate_catalog
from apo_helpers.webshop.env import WebShopEnv

SLOW_ENV_VAR = "APO_SLOW_TESTS"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` (minutes on a 2-core CPU, e.g. SmolLM2's real weights end to end) run only under
    ``APO_SLOW_TESTS=1`` (``make test-slow``), so ``make test`` stays well inside CI's time."""
    if os.environ.get(SLOW_ENV_VAR) == "1":
        return
    skip = pytest.mark.skip(reason=f"slow: set {SLOW_ENV_VAR}=1 to run it (`make test-slow`)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


SMALL_CONFIG = CatalogConfig(num_products=60, test_targets=10, val_targets=10)
PAGE_KINDS = ("search", "results", "item", "detail")


@pytest.fixture(scope="session")
def small_catalog() -> Catalog:
    """60 products, 10 test / 10 val goals (generated in milliseconds). Shared: tests must not mutate it."""
    return generate_catalog(SMALL_CONFIG)


@pytest.fixture(scope="session")
def full_catalog() -> Catalog:
    """The default-config catalog (1,000 products, 200 test goals), generated rather than read from data/."""
    return generate_catalog()


@pytest.fixture(scope="session")
def paged_query(small_catalog) -> str:
    """A query with more than two pages of results (10 per page) in the small catalog."""
    query = " ".join(sorted({p.product_type for p in small_catalog.products}))
    env = WebShopEnv(split="test", catalog=small_catalog)
    assert len(env.search_engine.search(query)) > 2 * EnvConfig().results_per_page
    return query


@pytest.fixture(scope="session")
def option_product(small_catalog):
    """A product with at least two option names (to select, re-select and combine options)."""
    return next(p for p in small_catalog.products if len(p.options) >= 2 and all(len(v) >= 2 for v in p.options.values()))


@pytest.fixture
def env(small_catalog) -> WebShopEnv:
    env = WebShopEnv(split="test", catalog=small_catalog)
    env.reset(options={"goal_index": 0})
    return env


def step_ok(env: WebShopEnv, action: str):
    """Step with an action that must be valid and must not end the episode; returns (obs, info)."""
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["valid"], (action, info.get("error"))
    assert "error" not in info
    assert reward == 0.0 and not terminated and not truncated
    return obs, info


def open_page(env: WebShopEnv, kind: str, query: str, asin: str) -> None:
    """Drive ``env`` (already reset) with real actions to a page of ``kind`` (item/detail: product ``asin``)."""
    if kind == "search":
        return
    step_ok(env, f"search[{query}]")
    if kind == "results":
        return
    assert asin in env.state.results[: env.config.results_per_page], "the product must be on the first results page"
    step_ok(env, f"click[{asin}]")
    if kind == "detail":
        step_ok(env, "click[description]")
    assert env.state.kind == kind


@pytest.fixture
def goto(env, option_product):
    """``goto(kind)``: the fixture ``env``, reset and moved to a page of that kind (the option product's item)."""

    def _goto(kind: str) -> WebShopEnv:
        env.reset(options={"goal_index": 0})
        open_page(env, kind, option_product.title, option_product.asin)
        return env

    return _goto


@pytest.fixture(scope="module")
def torch_one_thread():
    """Run a module's tiny-model tests on one thread (faster for models this small, and kind to a shared CPU)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def ci_ref_dir(tmp_path_factory):
    """A ci-profile pi_ref trained in a temporary folder (seconds), so the tests run on a fresh clone. Read only."""
    from apo_helpers.apo.sft import train_reference
    from apo_helpers.config import get_profile

    out = tmp_path_factory.mktemp("ci_pi_ref") / "pi_ref"
    train_reference(get_profile("ci"), out_dir=out, progress=False)
    return out
