"""WebShopEnv: page transitions, action matching, invalid actions, episode ends, reset, gymnasium API."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from apo_helpers.config import EnvConfig
from apo_helpers.webshop import ENV_ID
from apo_helpers.webshop.env import SEARCH_PLACEHOLDER, Action, InvalidAction, WebShopEnv, parse_action
from apo_helpers.webshop.pages import PageState
from apo_helpers.webshop.reward import webshop_reward

from conftest import PAGE_KINDS, open_page, step_ok


# ---------------------------------------------------------------------------------------------- parse_action

@pytest.mark.parametrize("text,expected", [
    ("search[red shirt]", Action("search", "red shirt")),
    ("click[Buy Now]", Action("click", "buy now")),
    ("CLICK[  Buy   Now ]", Action("click", "buy now")),
    ("  Click [< PREV]  ", Action("click", "< prev")),
    ("SeArCh[ Organic   Cotton  T-SHIRT ]", Action("search", "organic cotton t-shirt")),
])
def test_parse_action_normalizes(text, expected):
    assert parse_action(text) == expected


@pytest.mark.parametrize("text", ["ſearch[x]", "clıck[x]", "cli\u0130ck[x]", "clic\u212a[x]"])
def test_parse_action_rejects_unicode_look_alike_kinds(text):
    """re.IGNORECASE lets 'ſ' match 's' and 'ı'/'İ' match 'i'; such kinds must not be read as a click."""
    with pytest.raises(InvalidAction):
        parse_action(text)


def test_parse_action_length_limit():
    assert parse_action("search[" + "a" * 492 + "]").arg == "a" * 492  # exactly 500 characters
    with pytest.raises(InvalidAction, match="501 characters"):
        parse_action("search[" + "a" * 493 + "]")
    with pytest.raises(InvalidAction, match="at most 20"):
        parse_action("search[aaaaaaaaaaaaaaaaaaaa]", max_chars=20)


# ---------------------------------------------------------------------------------------------- transitions

def test_reset_opens_the_search_page(env, small_catalog):
    obs, info = env.reset(options={"goal_index": 3})
    goal = small_catalog.split("test")[3]
    assert env.state == PageState()
    assert obs == f"WebShop [SEP] Instruction: [SEP] {goal.instruction} [SEP] Search"
    assert info == {"valid": True, "available_actions": [SEARCH_PLACEHOLDER], "page": "search", "turn": 0,
                    "turns_left": 10, "goal": goal}


def test_search_opens_results(env, paged_query, small_catalog):
    obs, info = step_ok(env, f"search[  {paged_query.upper()} ]")
    expected = tuple(env.search_engine.search(paged_query))
    assert env.state == PageState(kind="results", query=paged_query, results=expected, page=1)
    assert info["page"] == "results" and info["turn"] == 1 and info["turns_left"] == 9
    assert f"Page 1 (Total results: {len(expected)})" in obs
    for asin in expected[:10]:
        product = small_catalog.by_asin[asin]
        assert f"{asin} [SEP] {product.title} [SEP] ${product.price:.2f}" in obs
    assert expected[10] not in obs
    assert "No results" not in obs


def test_search_without_results(env):
    obs, info = step_ok(env, "search[qqqq zzzz]")
    assert env.state.kind == "results" and env.state.results == ()
    assert "No results" in obs and "Total results: 0" in obs
    assert info["available_actions"] == ["click[back to search]"]


def test_next_and_prev_page(env, paged_query):
    step_ok(env, f"search[{paged_query}]")
    results = env.state.results
    obs, _ = step_ok(env, "click[next >]")
    assert env.state == PageState(kind="results", query=paged_query, results=results, page=2)
    assert "Page 2 (" in obs and results[10] in obs and results[0] not in obs
    step_ok(env, "click[next >]")
    assert env.state.page == 3
    step_ok(env, "click[< prev]")
    step_ok(env, "click[< prev]")
    assert env.state == PageState(kind="results", query=paged_query, results=results, page=1)


def test_no_prev_on_first_page_and_no_next_on_last(env, paged_query):
    step_ok(env, f"search[{paged_query}]")
    assert "click[< prev]" not in env.available_actions
    pages = -(-len(env.state.results) // 10)
    for _ in range(pages - 1):
        step_ok(env, "click[next >]")
    assert env.state.page == pages
    assert "click[next >]" not in env.available_actions and "click[< prev]" in env.available_actions
    before = env.state
    _, reward, _, _, info = env.step("click[next >]")
    assert not info["valid"] and env.state == before and reward == 0.0


def test_result_click_opens_the_item(goto, option_product):
    env = goto("results")
    obs, info = step_ok(env, f"click[{option_product.asin.lower()}]")
    assert env.state.kind == "item" and env.state.asin == option_product.asin
    assert env.state.selected == () and env.state.detail is None
    assert env.state.page == 1 and env.state.query == option_product.title.lower()
    assert option_product.title in obs and f"Price: ${option_product.price:.2f}" in obs
    for name, values in option_product.options.items():
        assert " [SEP] ".join([name, *values]) in obs


def test_option_select_and_reselect_replaces(goto, option_product):
    env = goto("item")
    (first, values_1), (second, values_2) = list(option_product.options.items())[:2]
    step_ok(env, f"click[{values_1[0]}]")
    assert env.state.selected == ((first, values_1[0]),)
    step_ok(env, f"click[{values_1[1].upper()}]")
    assert env.state.selected == ((first, values_1[1]),)
    step_ok(env, f"click[{values_2[0]}]")
    assert env.state.selected == tuple(sorted([(first, values_1[1]), (second, values_2[0])]))
    assert env.state.selected_options == {first: values_1[1], second: values_2[0]}
    assert env.state.kind == "item" and env.state.asin == option_product.asin


def test_unselected_option_actions_shrink_as_options_are_selected(goto, option_product):
    """The clicks ``Sampling.explore_options`` draws from: every value of the options still unselected on the open
    item (all options on arrival, none once each has a value), and nothing on other pages."""
    assert goto("results").unselected_option_actions == []
    env = goto("item")
    every = [f"click[{v.lower()}]" for values in option_product.options.values() for v in values]
    assert env.unselected_option_actions == every and set(every) <= set(env.available_actions)
    (first, values_1), *rest = list(option_product.options.items())
    step_ok(env, f"click[{values_1[1]}]")
    left = [f"click[{v.lower()}]" for _, values in rest for v in values]
    assert env.unselected_option_actions == left
    for _, values in rest:
        step_ok(env, f"click[{values[0]}]")
    assert env.unselected_option_actions == []
    step_ok(env, f"click[{values_1[0]}]")  # re-selecting a value leaves nothing unselected
    assert env.unselected_option_actions == []


def test_item_page_says_what_is_selected_only_when_asked(small_catalog, option_product):
    (first, values_1), (second, _) = list(option_product.options.items())[:2]
    plain = WebShopEnv(catalog=small_catalog)
    marked = WebShopEnv(catalog=small_catalog, config=EnvConfig(show_selected_options=True))
    for env in (plain, marked):
        env.reset(options={"goal_index": 0})
        step_ok(env, f"search[{option_product.title}]")
        step_ok(env, f"click[{option_product.asin}]")
    before = marked.observation
    assert f"{first} (not selected)" in before and f"{second} (not selected)" in before
    buttons = marked.available_actions
    assert buttons == plain.available_actions  # the same buttons: only the text beside the option names changes
    obs_plain, _ = step_ok(plain, f"click[{values_1[1]}]")
    obs, _ = step_ok(marked, f"click[{values_1[1].upper()}]")
    assert f"{first} (selected: {values_1[1]})" in obs and f"{second} (not selected)" in obs
    assert marked.available_actions == buttons
    assert "selected" not in obs_plain and obs_plain == plain.observation  # WebShop's page: unchanged by a click
    assert obs.replace(f" (selected: {values_1[1]})", "").replace(" (not selected)", "") == obs_plain


@pytest.mark.parametrize("detail", ["description", "features", "reviews"])
def test_detail_pages_and_back_keep_selected_options(goto, option_product, detail):
    env = goto("item")
    name, values = next(iter(option_product.options.items()))
    step_ok(env, f"click[{values[-1]}]")
    item_state = env.state
    obs, info = step_ok(env, f"click[{detail.capitalize()}]")
    assert env.state.kind == "detail" and env.state.detail == detail
    assert env.state.selected == ((name, values[-1]),)
    assert info["available_actions"] == ["click[back to search]", "click[< prev]"]
    body = {"description": [option_product.description], "features": option_product.bullets,
            "reviews": [f"{r['rating']} stars: {r['text']}" for r in option_product.reviews] or ["No reviews yet"]}[detail]
    assert obs.endswith(" [SEP] ".join(["Back to Search", "< Prev", *body]))
    step_ok(env, "click[< prev]")
    assert env.state == item_state


def test_reviews_page_lists_reviews(env, small_catalog):
    product = next(p for p in small_catalog.products if p.reviews)
    open_page(env, "item", product.title, product.asin)
    obs, _ = step_ok(env, "click[reviews]")
    for review in product.reviews:
        assert f"{review['rating']} stars: {review['text']}" in obs
    assert "No reviews yet" not in obs


def test_item_prev_returns_to_the_same_results_page(env, paged_query):
    step_ok(env, f"search[{paged_query}]")
    step_ok(env, "click[next >]")
    results_page = env.state
    asin = env.state.results[12]
    step_ok(env, f"click[{asin}]")
    assert env.state.kind == "item" and env.state.page == 2
    obs, _ = step_ok(env, "click[< prev]")
    assert env.state == results_page
    assert "Page 2 (" in obs


@pytest.mark.parametrize("kind", ["results", "item", "detail"])
def test_back_to_search_from_every_page(goto, option_product, kind):
    env = goto("results" if kind == "results" else "item")
    if kind != "results":
        step_ok(env, f"click[{next(iter(option_product.options.values()))[0]}]")  # an option is selected
        if kind == "detail":
            step_ok(env, "click[features]")
    assert env.state.kind == kind and env.state != PageState()
    obs, info = step_ok(env, "click[Back to Search]")
    assert env.state == PageState()
    assert obs.endswith(" [SEP] Search") and info["available_actions"] == [SEARCH_PLACEHOLDER]


def test_buy_now_ends_with_the_reward(goto, option_product, small_catalog):
    env = goto("item")
    name, values = next(iter(option_product.options.items()))
    step_ok(env, f"click[{values[0]}]")
    state = env.state
    obs, reward, terminated, truncated, info = env.step("click[buy now]")
    expected = webshop_reward(option_product, {name: values[0]}, env.goal)
    assert terminated and not truncated and env.done
    assert info["valid"] and reward == expected.reward
    assert info["reward_breakdown"] == expected.to_dict()
    assert info["success"] == (reward == 1.0)
    assert env.state == state


def test_buying_the_target_with_its_options_is_a_success(env, small_catalog):
    goal = small_catalog.split("test")[0]
    open_page(env, "item", goal.target_title, goal.asin)
    for value in goal.options.values():
        step_ok(env, f"click[{value}]")
    _, reward, terminated, _, info = env.step("click[buy now]")
    assert reward == 1.0 and terminated and info["success"] is True
    assert info["reward_breakdown"]["attributes_missing"] == []


def test_non_buying_steps_have_no_breakdown(env):
    _, _, _, _, info = env.step("search[shirt]")
    assert "reward_breakdown" not in info and info["success"] is False


# ---------------------------------------------------------------------------------------------- item positions

def test_item_alias_opens_the_kth_result_of_the_current_page(small_catalog, paged_query):
    env = WebShopEnv(split="test", catalog=small_catalog, config=EnvConfig(show_item_positions=True))
    env.reset(options={"goal_index": 0})
    obs, info = step_ok(env, f"search[{paged_query}]")
    results = env.state.results
    assert f"item 1 [SEP] {results[0]}" in obs and f"item 10 [SEP] {results[9]}" in obs
    assert "click[item 10]" in info["available_actions"] and "click[item 11]" not in info["available_actions"]
    step_ok(env, "click[next >]")
    step_ok(env, "click[ITEM  3]")
    assert env.state.kind == "item" and env.state.asin == results[12]


def test_item_alias_is_off_by_default(env, paged_query):
    step_ok(env, f"search[{paged_query}]")
    before = env.state
    assert not any(a.startswith("click[item ") for a in env.available_actions)
    _, reward, _, _, info = env.step("click[item 1]")
    assert not info["valid"] and env.state == before and reward == 0.0
    assert "item 1 [SEP]" not in env.observation


# ---------------------------------------------------------------------------------------------- matching

@pytest.mark.parametrize("action", ["CLICK[  Buy   Now ]", "click[buy now]", " Click [BUY NOW] ", "cLiCk[\u00a0buy\u3000now ]"])
def test_click_matching_is_case_and_whitespace_insensitive(goto, action):
    env = goto("item")
    _, _, terminated, _, info = env.step(action)
    assert info["valid"] and terminated


def test_search_query_is_normalized(env):
    step_ok(env, "SEARCH [  Machine   WASHABLE ]")
    assert env.state.query == "machine washable"
    assert env.state.results == tuple(env.search_engine.search("machine washable"))


# ---------------------------------------------------------------------------------------------- invalid actions

MALFORMED = [
    "click[no such button]", "click[buy]", "click[]", "search[]", "search[   ]", "", " ", "\t \n", "x" * 10_000,
    "click[" + "a" * 10_000 + "]", "search[abc", "click[a]]", "click[[buy now]]", "search[a[b]c]", "click[buy [now]]",
    "search]abc[", "search[a\x00b]", "\x00", "click[buy\x07now]", "click[buy\nnow]", "search[a\nb]", "click[buy\u200bnow]",
    "日本語の買い物", "🛒[buy now]", "kaufen[jetzt]", "buy now", "click buy now", "click(buy now)", "click{buy now}",
    "click[buy now] click[buy now]", "search[x]extra", "tap[buy now]", "ſearch[back to search]",
    "clıck[back to search]", None, 3, 3.5, b"click[buy now]", ["click[buy now]"],
]
PAGE_SPECIFIC = {
    "search": ["click[back to search]", "click[buy now]", "click[next >]", "click[< prev]"],
    "results": ["search[shirt]", "click[< prev]", "click[buy now]", "click[description]", "click[item 1]"],
    "item": ["search[shirt]", "click[next >]", "click[item 1]", "click[brown-ish]"],
    "detail": ["search[shirt]", "click[description]", "click[buy now]", "click[black]"],
}


def _ids(value):
    text = repr(value)
    return text if len(text) < 40 else text[:37] + "..."


@pytest.mark.parametrize("kind", PAGE_KINDS)
@pytest.mark.parametrize("action", MALFORMED, ids=_ids)
def test_malformed_action_changes_nothing(goto, kind, action):
    env = goto(kind)
    _assert_invalid(env, action)


@pytest.mark.parametrize("kind,action", [(k, a) for k, actions in PAGE_SPECIFIC.items() for a in actions])
def test_action_not_available_on_this_page_changes_nothing(goto, kind, action):
    env = goto(kind)
    _assert_invalid(env, action)


def _assert_invalid(env, action):
    before, turn, obs_before = env.state, env.turn, env.observation
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["valid"] is False
    assert isinstance(info["error"], str) and info["error"]
    assert reward == 0.0 and not terminated and not truncated
    assert env.state == before and obs == obs_before
    assert env.turn == turn + 1 and info["turn"] == turn + 1
    assert "reward_breakdown" not in info and info["success"] is False
    assert info["available_actions"] == env.available_actions


def test_invalid_action_errors_say_why(goto):
    env = goto("results")
    assert "search page" in env.step("search[shirt]")[4]["error"]
    assert "no button" in env.step("click[nothing]")[4]["error"]
    assert "control character" in env.step("click[a\x00]")[4]["error"]
    assert "string" in env.step(None)[4]["error"]


# ---------------------------------------------------------------------------------------------- episode ends

def test_truncation_after_max_turns(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog, max_turns=3)
    env.reset(options={"goal_index": 0})
    assert env.step("search[shirt]")[2:4] == (False, False)
    assert env.step("nonsense")[2:4] == (False, False)
    obs, reward, terminated, truncated, info = env.step("click[back to search]")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["turns_left"] == 0 and env.done
    with pytest.raises(RuntimeError, match="reset"):
        env.step("search[shirt]")


def test_truncation_on_an_invalid_last_action(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog, max_turns=1)
    env.reset(options={"goal_index": 0})
    _, reward, terminated, truncated, info = env.step("???")
    assert (reward, terminated, truncated, info["valid"]) == (0.0, False, True, False)


def test_buying_on_the_last_turn_terminates(small_catalog, option_product):
    env = WebShopEnv(split="test", catalog=small_catalog, max_turns=3)
    env.reset(options={"goal_index": 0})
    open_page(env, "item", option_product.title, option_product.asin)
    _, reward, terminated, truncated, _ = env.step("click[buy now]")
    assert terminated and not truncated


def test_max_turns_argument_overrides_config(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog, config=EnvConfig(max_turns=7), max_turns=2)
    assert env.config.max_turns == 2
    assert env.reset()[1]["turns_left"] == 2


def test_step_after_buying_raises(goto):
    env = goto("item")
    env.step("click[buy now]")
    with pytest.raises(RuntimeError):
        env.step("click[buy now]")
    env.reset()
    assert env.step("search[shirt]")[4]["valid"]


# ---------------------------------------------------------------------------------------------- reset

def test_goal_index_picks_that_goal(env, small_catalog):
    for i, goal in enumerate(small_catalog.split("test")):
        obs, info = env.reset(options={"goal_index": i})
        assert env.goal is goal and info["goal"] is goal and goal.instruction in obs


@pytest.mark.parametrize("bad", [-1, 10, 100, "1", 1.0, None])
def test_bad_goal_index_raises(env, bad):
    with pytest.raises(ValueError, match="goal_index"):
        env.reset(options={"goal_index": bad})


def test_goal_option_sets_any_goal(env, small_catalog):
    goal = small_catalog.split("val")[2]
    env.reset(options={"goal": goal})
    assert env.goal is goal


def test_seeded_reset_is_reproducible(small_catalog):
    a, b = WebShopEnv(split="train", catalog=small_catalog), WebShopEnv(split="train", catalog=small_catalog)
    goals_a = [a.reset(seed=5)[1]["goal"]] + [a.reset()[1]["goal"] for _ in range(5)]
    goals_b = [b.reset(seed=5)[1]["goal"]] + [b.reset()[1]["goal"] for _ in range(5)]
    assert goals_a == goals_b
    assert len({g.index for g in goals_a}) > 1  # it does draw different goals
    by_seed = {a.reset(seed=s)[1]["goal"].index for s in range(20)}
    assert len(by_seed) > 3
    c = WebShopEnv(split="train", catalog=small_catalog, seed=5)
    assert c.goal == goals_a[0]


def test_constructor_rejects_bad_arguments(small_catalog):
    with pytest.raises(ValueError, match="max_turns"):
        WebShopEnv(split="test", catalog=small_catalog, max_turns=0)
    with pytest.raises(ValueError, match="unknown split"):
        WebShopEnv(split="dev", catalog=small_catalog)
    with pytest.raises(ValueError, match="render_mode"):
        WebShopEnv(split="test", catalog=small_catalog, render_mode="rgb_array")


def test_render_modes(small_catalog, capsys):
    ansi = WebShopEnv(split="test", catalog=small_catalog, render_mode="ansi")
    ansi.reset(options={"goal_index": 0})
    assert ansi.render() == ansi.observation
    human = WebShopEnv(split="test", catalog=small_catalog, render_mode="human")
    human.reset(options={"goal_index": 0})
    capsys.readouterr()
    obs = human.step("search[shirt]")[0]
    assert human.render() is None
    assert capsys.readouterr().out == obs + "\n" + obs + "\n"


# ---------------------------------------------------------------------------------------------- available actions

def test_available_actions_per_page(goto, option_product):
    env = goto("search")
    assert env.available_actions == [SEARCH_PLACEHOLDER]
    env = goto("results")
    first_page = env.state.results[:10]
    expected = ["click[back to search]"] + (["click[next >]"] if len(env.state.results) > 10 else [])
    assert env.available_actions == expected + [f"click[{a.lower()}]" for a in first_page]
    env = goto("item")
    values = [v for vs in option_product.options.values() for v in vs]
    assert env.available_actions == (["click[back to search]", "click[< prev]"] + [f"click[{v}]" for v in values]
                                     + ["click[description]", "click[features]", "click[reviews]", "click[buy now]"])
    env = goto("detail")
    assert env.available_actions == ["click[back to search]", "click[< prev]"]


def test_available_actions_on_a_middle_results_page(env, paged_query):
    step_ok(env, f"search[{paged_query}]")
    _, info = step_ok(env, "click[next >]")
    assert info["available_actions"][:3] == ["click[back to search]", "click[< prev]", "click[next >]"]
    assert info["available_actions"][3:] == [f"click[{a.lower()}]" for a in env.state.results[10:20]]


@pytest.mark.parametrize("kind", ["results", "item", "detail"])
def test_every_available_action_is_valid(goto, kind):
    for action in goto(kind).available_actions:
        env = goto(kind)
        _, _, _, _, info = env.step(action)
        assert info["valid"], (action, info.get("error"))


# ---------------------------------------------------------------------------------------------- gymnasium

def test_gymnasium_env_checker_passes(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)


def test_observations_and_actions_are_in_their_spaces(goto, option_product):
    for kind in PAGE_KINDS:
        env = goto(kind)
        assert env.observation_space.contains(env.observation)
        for action in env.available_actions:
            assert env.action_space.contains(action)


def test_gymnasium_make(small_catalog):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(ENV_ID, split="test", catalog=small_catalog)
        obs, info = env.reset(seed=0)
        assert isinstance(env.unwrapped, WebShopEnv) and env.unwrapped.split == "test"
        assert info["page"] == "search" and obs.startswith("WebShop [SEP] Instruction:")
        obs, reward, terminated, truncated, info = env.step("search[shirt]")
        assert info["valid"] and info["page"] == "results" and reward == 0.0


def test_gymnasium_make_with_the_default_catalog():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gymnasium.make(ENV_ID, split="test")
        _, info = env.reset(seed=0)
    assert len(env.unwrapped.goals) == 200
    assert info["goal"] in env.unwrapped.goals
