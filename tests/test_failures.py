"""The failure taxonomy: one hand-built episode per class (both episode kinds), the priority order at its boundaries,
exactly one class for real scripted episodes and for random breakdowns, the tables, ``explain`` and the figure."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from apo_helpers.analysis import failures
from apo_helpers.analysis.evaluate import Episode, episode_from_trajectory, evaluate
from apo_helpers.analysis.failures import (CLASSES, FAILURE_CLASSES, SUCCESS, bought_product, class_shares, classify,
                                           examples, explain, failure_table, per_category, option_click, plot_failure_classes,
                                           view)
from apo_helpers.policy.prompts import Turn, format_response
from apo_helpers.policy.rollout import Trajectory
from apo_helpers.webshop.agents import Agent, make_agent
from apo_helpers.webshop.catalog import Goal
from apo_helpers.webshop.reward import RewardBreakdown

SEP = " [SEP] "
INSTRUCTION = "i need a zip up and machine washable hoodie, in black, and price lower than 50.00 dollars"
SEARCH_PAGE = SEP.join(["WebShop", "Instruction:", INSTRUCTION, "Search"])
RESULTS_PAGE = SEP.join(["Instruction:", INSTRUCTION, "Back to Search", "Page 1 (Total results: 2)", "Next >",
                         "B0AAAAAAAA", "Kestrel Hoodie - zip up", "$45.00",
                         "B0BBBBBBBB", "Acme Hoodie - fleece", "$60.00"])
ITEM_PAGE = SEP.join(["Instruction:", INSTRUCTION, "Back to Search", "< Prev", "color", "black", "gray",
                      "Kestrel Hoodie - zip up", "Price: $45.00", "Rating: N.A.", "Description", "Features", "Reviews",
                      "Buy Now"])
BUY = ["search[hoodie]", "click[B0AAAAAAAA]", "click[gray]", "click[buy now]"]
BUY_PAGES = [SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE, ITEM_PAGE]
GOAL = Goal(instruction=INSTRUCTION, asin="B0CCCCCCCC", product_type="hoodie", category=["clothing", "men", "hoodies"],
            attributes=["zip up", "machine washable"], options={"color": "black"}, price_upper=50.0,
            target_title="Solace Hoodie - zip up, machine washable", split="val", index=3)


def breakdown(**changes) -> dict:
    """A reward breakdown with the keys of ``RewardBreakdown.to_dict()``: a perfect purchase unless changed."""
    fields = dict(reward=1.0, r_type=1.0, query_match=True, category_match=True, title_score=1.0,
                  attributes_matched=["zip up", "machine washable"], attributes_missing=[], options_matched=["black"],
                  options_missing=[], price_ok=True)
    return RewardBreakdown(**(fields | changes)).to_dict()


PURCHASES = {  # class -> the breakdown of a purchase in that class
    SUCCESS: breakdown(),
    "wrong_type": breakdown(reward=0.0, r_type=0.0, query_match=False, category_match=False, title_score=0.0),
    "over_budget": breakdown(reward=0.75, price_ok=False),
    "missing_attributes": breakdown(reward=0.75, attributes_matched=["zip up"],
                                    attributes_missing=["machine washable"]),
    "wrong_options": breakdown(reward=0.75, options_matched=[], options_missing=["black"]),
}


def episode(actions, observations=None, valid=None, bought=False, bd=None) -> Episode:
    """A scripted agent's episode (observations default to the search page, valid to all True)."""
    return Episode(goal_index=3, instruction=INSTRUCTION, category="clothing",
                   observations=observations or [SEARCH_PAGE] * len(actions), actions=list(actions),
                   valid=valid or [True] * len(actions), reward=bd["reward"] if bd else 0.0,
                   success=bool(bd) and bd["reward"] == 1.0, bought=bought, breakdown=bd)


def purchase(cls: str) -> Episode:
    return episode(BUY, BUY_PAGES, bought=True, bd=PURCHASES[cls])


def trajectory(actions, observations=None, parsed=None, valid=None, bd=None) -> Trajectory:
    """A language model's episode; an unparsed reply is free text and sends the empty action."""
    parsed = parsed or [True] * len(actions)
    turns = [Turn(observation=o, actions=[], turns_left=10 - k,
                  response=format_response("think", a) if ok else f"I will {a}", think="think" if ok else "",
                  action=a if ok else "", format_ok=ok, valid=v)
             for k, (o, a, ok, v) in enumerate(zip(observations or [SEARCH_PAGE] * len(actions), actions, parsed,
                                                    valid or parsed))]
    reward = bd["reward"] if bd else 0.0
    return Trajectory(goal=GOAL, turns=turns, reward=reward, env_reward=reward, success=reward == 1.0, breakdown=bd)


# ---------------------------------------------------------------------------------------------- one episode per class

def test_the_classes_are_named_and_described():
    assert CLASSES == (SUCCESS, *FAILURE_CLASSES) and list(FAILURE_CLASSES)[-1] == "other"
    assert SUCCESS not in FAILURE_CLASSES
    for name, description in FAILURE_CLASSES.items():
        assert name.isidentifier() and name.islower() and description and "\n" not in description


@pytest.mark.parametrize("cls", list(PURCHASES))
def test_purchases_of_each_class(cls):
    assert classify(purchase(cls)) == cls
    assert classify(trajectory(BUY, BUY_PAGES, bd=PURCHASES[cls])) == cls


def test_invalid_format_needs_a_majority_of_unparsed_replies():
    actions = ["search[hoodie]", "click[b0aaaaaaaa]", "click[< prev]", "click[b0bbbbbbbb]"]
    pages = [SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE, RESULTS_PAGE]
    assert classify(trajectory(actions, pages, parsed=[False, False, False, True])) == "invalid_format"
    half = [False, False, True, True]  # exactly half did not parse: not "mostly"
    assert classify(trajectory(actions, pages, parsed=half, valid=[False, False, False, True])) == "invalid_actions"
    assert classify(trajectory(actions, pages, parsed=half)) == "out_of_turns"
    # the flags come from the replies: an Episode made from the same trajectory no longer knows them
    assert classify(episode_from_trajectory(trajectory(actions, pages, parsed=[False] * 4), 3)) != "invalid_format"


def test_invalid_actions():
    actions = ["click[buy now]", "click[item 9]", "search[hoodie]", "click[nothing]", "click[b0aaaaaaaa]"]
    pages = [SEARCH_PAGE, SEARCH_PAGE, SEARCH_PAGE, RESULTS_PAGE, RESULTS_PAGE]
    assert classify(episode(actions, pages, valid=[False, False, True, False, True])) == "invalid_actions"
    assert classify(episode(actions, pages, valid=[False, False, True, True, True])) == "out_of_turns"


def test_search_loop_rules():
    # the same action on the same page twice: a cycle results -> item -> < prev -> the same item
    cycle = ["search[hoodie]", "click[b0aaaaaaaa]", "click[< prev]", "click[b0aaaaaaaa]", "click[< prev]"]
    pages = [SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE, RESULTS_PAGE, ITEM_PAGE]
    assert classify(episode(cycle, pages)) == "search_loop"
    # RAGEN's echo trap: one action over and over (here invalid, so the page stays), in a mostly valid episode
    echo = ["search[hoodie]", "click[b0aaaaaaaa]", "click[< prev]", "click[next >]", *["click[buy now]"] * 3]
    echo_pages = [SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE, RESULTS_PAGE, *[RESULTS_PAGE + " 2"] * 3]
    assert classify(trajectory(echo, echo_pages, valid=[True] * 4 + [False] * 3)) == "search_loop"
    # three different searches: back-to-search dithering
    dither = ["search[hoodie]", "click[back to search]", "search[zip hoodie]", "click[back to search]", "search[top]"]
    dither_pages = [SEARCH_PAGE, RESULTS_PAGE, SEARCH_PAGE, RESULTS_PAGE, SEARCH_PAGE]
    assert classify(episode(dither, dither_pages)) == "search_loop"
    # the same action on different pages is progress, not a loop; two searches are not dithering
    paging = ["search[hoodie]", "click[next >]", "click[next >]", "click[next >]"]
    assert classify(episode(paging, [SEARCH_PAGE] + [RESULTS_PAGE + f" {k}" for k in range(3)])) == "out_of_turns"
    assert classify(episode(dither[:3], [SEARCH_PAGE, RESULTS_PAGE, SEARCH_PAGE])) == "out_of_turns"
    assert classify(episode(["search[hoodie]", "search[hoodie]"], [SEARCH_PAGE] * 2)) == "search_loop"


def test_priority_among_purchases():
    everything_wrong = breakdown(reward=0.0, r_type=0.0, price_ok=False, attributes_missing=["zip up"],
                                 options_missing=["black"])
    assert classify(episode(BUY, BUY_PAGES, bought=True, bd=everything_wrong)) == "wrong_type"
    right_type = everything_wrong | {"r_type": 1.0, "reward": 0.25}
    assert classify(episode(BUY, BUY_PAGES, bought=True, bd=right_type)) == "over_budget"
    assert classify(episode(BUY, BUY_PAGES, bought=True, bd=right_type | {"price_ok": True})) == "missing_attributes"
    half_type = PURCHASES["wrong_options"] | {"r_type": 0.5}
    assert classify(episode(BUY, BUY_PAGES, bought=True, bd=half_type)) == "wrong_type"


def test_other_catches_what_no_rule_describes():
    assert classify(episode(BUY, BUY_PAGES, bought=True, bd=None)) == "other"  # a purchase without a breakdown
    perfect_but_failed = episode(BUY, BUY_PAGES, bought=True, bd=breakdown())
    perfect_but_failed.success = False
    assert classify(perfect_but_failed) == "other"


def test_view_reads_both_kinds_alike():
    t = trajectory(BUY, BUY_PAGES, bd=PURCHASES["wrong_options"])
    a, b = view(t), view(episode_from_trajectory(t, 3))
    assert a.actions == b.actions == ("search[hoodie]", "click[b0aaaaaaaa]", "click[gray]", "click[buy now]")
    assert (a.bought, a.reward, a.breakdown, a.steps) == (b.bought, b.reward, b.breakdown, b.steps)
    assert a.parsed == (True,) * 4 and b.parsed is None
    assert (a.goal, a.split, b.goal, b.split) == (GOAL, "val", None, None)
    assert view(a) is a
    with pytest.raises(TypeError, match="Episode, a Trajectory"):
        view("click[buy now]")


# ---------------------------------------------------------------------------------------------- exactly one class

@pytest.fixture(scope="module")
def scripted():
    """The random and rule agents on the first 60 val goals of the committed catalog."""
    return {name: evaluate(make_agent(name), "val", 60, progress=False) for name in ("random", "rule")}


def symptoms(item) -> list[str]:
    """The classes whose own rule holds, read from the raw fields without ``view`` and ignoring priority."""
    if hasattr(item, "turns"):
        turns = item.turns
        actions = [(t.action if t.format_ok else t.response).lower() for t in turns]
        pages, valid, parsed = [t.observation for t in turns], [t.valid for t in turns], [t.format_ok for t in turns]
        success, bought, bd = item.success, item.breakdown is not None, item.breakdown
    else:
        actions, pages, valid, parsed = [a.lower() for a in item.actions], item.observations, item.valid, None
        success, bought, bd = item.success, item.bought, item.breakdown
    n = len(actions)
    steps = list(zip(pages, actions))
    held = {SUCCESS: success, "other": True,
            "invalid_format": not bought and parsed is not None and 2 * parsed.count(False) > n,
            "invalid_actions": not bought and 2 * valid.count(False) > n,
            "search_loop": not bought and (len(set(steps)) < n or sum(a.startswith("search[") for a in actions) >= 3),
            "out_of_turns": not bought,
            "wrong_type": bd is not None and bd["r_type"] < 1, "over_budget": bd is not None and not bd["price_ok"],
            "missing_attributes": bd is not None and bool(bd["attributes_missing"]),
            "wrong_options": bd is not None and bool(bd["options_missing"])}
    return [c for c in CLASSES if held[c]]


def test_real_episodes_get_exactly_one_class(scripted):
    for evaluation in scripted.values():
        for e in evaluation.episodes:
            cls = classify(e)
            assert cls == symptoms(e)[0] and cls != "other"  # one label: the first rule that holds
            assert (cls == SUCCESS) == e.success
            assert (cls in ("wrong_type", "over_budget", "missing_attributes", "wrong_options", SUCCESS)) == e.bought
    rule = failure_table(scripted["rule"])
    assert set(rule["class"]) <= {SUCCESS, "over_budget", "missing_attributes", "wrong_options"}  # rule always buys
    assert set(failure_table(scripted["random"])["class"]) >= {"search_loop", "out_of_turns", "wrong_options"}


PHRASES = st.lists(st.sampled_from(["zip up", "fleece", "black", "large", "machine washable"]), max_size=3, unique=True)
BREAKDOWNS = st.builds(
    lambda r_type, price_ok, matched, missing, opts_ok, opts_missing: breakdown(
        r_type=r_type, price_ok=price_ok, attributes_matched=matched, attributes_missing=missing,
        options_matched=opts_ok, options_missing=opts_missing,
        reward=round(r_type * (len(matched) + len(opts_ok) + price_ok)
                     / (len(matched) + len(missing) + len(opts_ok) + len(opts_missing) + 1), 6)),
    st.sampled_from([0.0, 0.1, 0.5, 1.0]), st.booleans(), PHRASES, PHRASES, PHRASES, PHRASES)
ACTIONS = st.lists(st.sampled_from(["search[hoodie]", "search[top]", "click[b0aaaaaaaa]", "click[< prev]",
                                    "click[next >]", "click[back to search]", "click[black]", "xyz"]),
                   min_size=1, max_size=10)


@settings(max_examples=150, deadline=None)
@given(bd=BREAKDOWNS, bought=st.booleans(), actions=ACTIONS, data=st.data())
def test_any_episode_gets_exactly_one_class(bd, bought, actions, data):
    n = len(actions)
    observations = data.draw(st.lists(st.sampled_from([SEARCH_PAGE, RESULTS_PAGE, ITEM_PAGE]), min_size=n, max_size=n))
    flags = st.lists(st.booleans(), min_size=n, max_size=n)
    valid, parsed = data.draw(flags), data.draw(flags)
    for item in (episode(actions, observations, valid=valid, bought=bought, bd=bd if bought else None),
                 trajectory(actions, observations, parsed=parsed, valid=valid, bd=bd if bought else None)):
        cls = classify(item)
        assert cls == symptoms(item)[0]
        assert cls != "other"  # a consistent breakdown that is not a success always shows a missing term
        assert (cls == SUCCESS) == item.success


# ---------------------------------------------------------------------------------------------- tables and text

def test_failure_table_and_shares(scripted):
    tables = [failure_table(ev) for ev in scripted.values()]
    t = tables[0]
    assert list(t.columns) == ["method", "split", "goal_index", "category", "class", "reward", "steps", "instruction"]
    assert len(t) == 60 and set(t["method"]) == {"random"} and set(t["split"]) == {"val"}
    shares = class_shares(tables)
    assert list(shares.index) == ["random", "rule"] and list(shares.columns) == [*CLASSES, "episodes"]
    assert shares[list(CLASSES)].sum(axis=1).tolist() == pytest.approx([1.0, 1.0])
    assert shares.loc["rule", SUCCESS] == pytest.approx(scripted["rule"].summary()["success_rate"])
    assert shares["episodes"].tolist() == [60, 60]
    assert class_shares(tables[1]).loc["rule"].equals(shares.loc["rule"])
    by_category = per_category(pd.concat(tables, ignore_index=True))
    assert by_category[list(CLASSES)].sum(axis=1).tolist() == pytest.approx([1.0] * len(by_category))
    assert by_category.loc["rule", "episodes"].sum() == 60


def test_failure_table_of_trajectories_knows_their_split():
    table = failure_table([trajectory(BUY, BUY_PAGES, bd=PURCHASES[c]) for c in PURCHASES], name="lm")
    assert table["class"].tolist() == list(PURCHASES) and set(table["split"]) == {"val"}
    assert set(table["method"]) == {"lm"} and table["steps"].tolist() == [4] * 5


def test_examples(scripted):
    rule = scripted["rule"]
    found = examples(rule, "wrong_options", k=3)
    assert len(found) == 3 and all(classify(e) == "wrong_options" for e in found)
    assert found == [e for e in rule.episodes if classify(e) == "wrong_options"][:3]
    assert examples(rule.episodes, "search_loop") == []
    with pytest.raises(ValueError, match="unknown class"):
        examples(rule, "bad_luck")


def test_bought_product(scripted):
    for e in scripted["rule"].episodes[:10]:  # the rule agent always buys
        product = bought_product(e)
        assert product is not None and product.title in e.observations[-1]
        assert f"Price: ${product.price:.2f}" in e.observations[-1]
    assert bought_product(examples(scripted["random"], "search_loop", 1)[0]) is None  # nothing bought
    assert bought_product(episode(["search[hoodie]"])) is None
    assert bought_product(purchase("wrong_options")) is None  # a made-up product the catalog does not hold


def test_a_trajectory_without_a_category_still_gets_a_row():
    t = trajectory(BUY, BUY_PAGES, bd=PURCHASES["wrong_options"])
    t.goal = Goal(**(vars(GOAL) | {"category": []}))
    assert view(t).category == "?" and failure_table([t])["category"].tolist() == ["?"]


def test_explain_a_purchase_that_misses_an_attribute(small_catalog):
    text = explain(purchase("missing_attributes"), catalog=small_catalog)  # a goal the catalog does not hold
    assert '"machine washable"' in text and "missing_attributes" in text
    assert '"Kestrel Hoodie - zip up" for $45.00, within the budget of $50.00' in text
    assert 'selected "gray"' in text and 'searched once ("hoodie")' in text
    text = explain(trajectory(BUY, BUY_PAGES, bd=PURCHASES["wrong_options"]))  # the goal comes with it
    assert 'target: "Solace Hoodie - zip up, machine washable"' in text and "wrong_options" in text
    assert 'option value "black" was not selected' in text
    assert "\n" not in text


def test_explain_an_episode_that_never_left_the_search_page():
    text = explain(trajectory(["<think>"] * 4, parsed=[False] * 4))
    assert "(4 invalid, 4 unparsed) the agent never searched" in text
    assert "It opened no item and never bought anything." in text and "Class: invalid_format" in text


def test_explain_real_episodes(scripted):
    for e in examples(scripted["rule"], "wrong_options", k=2) + examples(scripted["rule"], "over_budget", k=2):
        text = explain(e)
        assert e.instruction in text and FAILURE_CLASSES[classify(e)] in text
        for value in e.breakdown["options_missing"] + e.breakdown["attributes_missing"]:
            assert f'"{value}"' in text
    for loop in examples(scripted["random"], "search_loop", k=5):
        text = explain(loop)
        action, count = failures.repetition(view(loop))
        assert "never bought" in text
        assert f'took "{action}"' in text if count > 1 else f"searched {len(view(loop).searches)} times" in text


def test_plot_writes_a_png(scripted, tmp_path, monkeypatch):
    shares = class_shares([failure_table(ev) for ev in scripted.values()])
    fig = plot_failure_classes(shares, tmp_path / "classes.png")
    assert (tmp_path / "classes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bars = fig.axes[0].patches
    assert len(bars) == 2 * sum(shares[c].sum() > 0 for c in CLASSES)  # one bar per method and class present
    monkeypatch.setattr(failures, "figures_dir", lambda: tmp_path / "figures")
    plot_failure_classes(shares, "by_name")
    assert (tmp_path / "figures" / "by_name.png").exists()
    plt.close("all")


def test_option_decisions_tell_an_expert_from_one_that_ignores_options():
    from apo_helpers.analysis.failures import (OPTION_RATES, option_columns, option_decisions, option_rates,
                                               option_summary)
    from apo_helpers.webshop.agents import ExpertAgent

    full = evaluate(ExpertAgent(0), "val", 40, progress=False)
    sloppy = evaluate(ExpertAgent(0, skip_options=1.0), "val", 40, name="sloppy", progress=False)
    tables = [option_decisions(full), option_decisions(sloppy)]
    assert list(tables[1].columns) == ["method", "goal_index", "options", "clicked_option", "values_clicked",
                                       "clicked_again", "options_right", "success"]
    assert not tables[1]["clicked_option"].any()  # it never clicks an option
    with_options = tables[1][tables[1]["options"] > 0]
    assert len(with_options) > 5 and not with_options["success"].any()  # and so never succeeds where they count
    summary = option_summary(tables)
    assert list(summary.index) == ["expert", "sloppy"]
    assert summary["goals with options"].tolist() == [len(with_options)] * 2
    assert summary.loc["expert", "an option clicked"] > 0.8 and summary.loc["sloppy", "an option clicked"] == 0
    assert summary.loc["expert", "every option right"] > summary.loc["sloppy", "every option right"]
    assert summary.loc["expert", "success (all)"] == pytest.approx(full.summary()["success_rate"])
    rates = option_rates(tables[0])
    assert set(OPTION_RATES) <= set(rates) and rates["option_goals"] == len(with_options)
    assert rates["option_clicked"] == summary.loc["expert", OPTION_RATES["option_clicked"]]
    assert option_columns(full, "test_") == {f"test_{k}": rates[k] for k in OPTION_RATES}
    empty = option_rates(tables[0].iloc[0:0])
    assert empty["option_goals"] == 0 and all(empty[k] != empty[k] for k in OPTION_RATES)  # NaN, not an error


class _Stutter(Agent):
    """The expert, but every option click is sent twice (what a policy does on a page that hides the selection)."""

    def __init__(self):
        from apo_helpers.webshop.agents import ExpertAgent

        self.expert, self.again = ExpertAgent(0), None

    def reset(self):
        self.expert.reset()
        self.again = None

    def act(self, observation, info):
        if self.again is not None:
            action, self.again = self.again, None
            return action
        action = self.expert.act(observation, info)
        if info["page"] == "item" and option_click(action):
            self.again = action
        return action


def test_option_progress_counts_values_and_repeats_per_number_of_options():
    from apo_helpers.analysis.failures import option_decisions, option_progress
    from apo_helpers.webshop.agents import ExpertAgent

    expert = option_decisions(evaluate(ExpertAgent(0), "val", 60, progress=False))
    stutter = option_decisions(evaluate(_Stutter(), "val", 60, name="stutter", progress=False))
    bought_with_options = expert[(expert["options"] > 0) & expert["options_right"]]
    assert len(bought_with_options) > 5
    assert (bought_with_options["values_clicked"] >= bought_with_options["options"]).all()
    assert not expert["clicked_again"].any()
    same = stutter["values_clicked"] == expert["values_clicked"]  # the same values, twice each (unless out of turns)
    assert same.mean() > 0.9
    assert stutter.loc[same, "clicked_again"].tolist() == (expert.loc[same, "values_clicked"] > 0).tolist()
    table = option_progress(pd.concat([expert, stutter]))
    assert table.index.names == ["method", "options"]
    assert sorted({n for _, n in table.index}) == sorted(set(expert.loc[expert["options"] > 0, "options"]))
    two = table.loc[("expert", 2)]
    assert two["goals"] == int((expert["options"] == 2).sum())
    assert two["a value clicked again"] == 0 and table.loc[("stutter", 2), "a value clicked again"] > 0.5
    assert two["as many values as asked"] >= two["every option right"]
