"""What the last results page offered a purchase (``analysis.purchases``): hand-built pages and a fake catalog, and
the per-run summary's counts."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from apo_helpers.analysis.evaluate import Episode
from apo_helpers.analysis.purchases import (PURCHASE_COLUMNS, copy_summary, purchase_rows, purchase_summary,
                                           results_offer)
from apo_helpers.policy.prompts import Turn, format_response
from apo_helpers.policy.rollout import Trajectory
from apo_helpers.webshop.catalog import Goal
from apo_helpers.webshop.reward import RewardBreakdown

SEP = " [SEP] "
INSTRUCTION = "i need a zip up hoodie, in black, and price lower than 50.00 dollars"
SEARCH_PAGE = SEP.join(["WebShop", "Instruction:", INSTRUCTION, "Search"])
ITEM_PAGE = SEP.join(["Instruction:", INSTRUCTION, "Back to Search", "< Prev", "color", "black", "gray",
                      "Acme Hoodie - fleece", "Price: $60.00", "Buy Now"])
GOAL = Goal(instruction=INSTRUCTION, asin="B0CCCCCCCC", product_type="hoodie", category=["clothing"],
            attributes=["zip up"], options={"color": "black"}, price_upper=50.0,
            target_title="Solace Hoodie - zip up", split="test", index=7)
CATALOG = SimpleNamespace(by_asin={
    "B0AAAAAAAA": SimpleNamespace(product_type="hoodie", price=45.0),
    "B0BBBBBBBB": SimpleNamespace(product_type="hoodie", price=60.0),
    "B0CCCCCCCC": SimpleNamespace(product_type="hoodie", price=40.0),
    "B0DDDDDDDD": SimpleNamespace(product_type="scarf", price=10.0)})


def results_page(*asins: str) -> str:
    listed = [x for a in asins for x in (a, f"{a} title", f"${CATALOG.by_asin[a].price:.2f}")]
    return SEP.join(["Instruction:", INSTRUCTION, "Back to Search", "Page 1 (Total results: 9)", "Next >", *listed])


def over_budget(*pages: str) -> Trajectory:
    """A purchase of B0BBBBBBBB (over the budget) after the given results pages."""
    observations = [SEARCH_PAGE, *pages, ITEM_PAGE, ITEM_PAGE]
    actions = ["search[hoodie]", *["click[b0bbbbbbbb]"] * len(pages), "click[black]", "click[buy now]"]
    turns = [Turn(observation=o, actions=[], turns_left=10 - k, response=format_response("think", a), think="think",
                  action=a, format_ok=True, valid=True) for k, (o, a) in enumerate(zip(observations, actions))]
    bd = RewardBreakdown(reward=0.67, r_type=1.0, query_match=True, category_match=True, title_score=1.0,
                         attributes_matched=["zip up"], attributes_missing=[], options_matched=["black"],
                         options_missing=[], price_ok=False).to_dict()
    return Trajectory(goal=GOAL, turns=turns, reward=0.67, env_reward=0.67, success=False, breakdown=bd)


def test_an_affordable_product_of_the_goals_type_on_the_last_results_page():
    assert results_offer(over_budget(results_page("B0AAAAAAAA", "B0BBBBBBBB")), CATALOG) == {
        "target_listed": False, "in_budget_listed": True}
    # the last page counts: an earlier page that offered one does not
    assert results_offer(over_budget(results_page("B0AAAAAAAA"), results_page("B0BBBBBBBB")), CATALOG) == {
        "target_listed": False, "in_budget_listed": False}
    # cheap, but of another type: not a product the goal could have bought
    assert results_offer(over_budget(results_page("B0DDDDDDDD", "B0BBBBBBBB")), CATALOG)["in_budget_listed"] is False
    assert results_offer(over_budget(results_page("B0BBBBBBBB", "B0CCCCCCCC")), CATALOG) == {
        "target_listed": True, "in_budget_listed": True}


def test_an_episode_without_a_results_page_offered_nothing():
    assert results_offer(over_budget(), CATALOG) == {"target_listed": False, "in_budget_listed": False}


def test_results_offer_needs_the_goal():
    scripted = Episode(goal_index=7, instruction=INSTRUCTION, category="clothing", observations=[SEARCH_PAGE],
                       actions=["search[hoodie]"], valid=[True], reward=0.0, success=False, bought=False,
                       breakdown=None)
    with pytest.raises(ValueError, match="needs the episode's goal"):
        results_offer(scripted, CATALOG)


def test_purchase_summary_counts_pi_ref_and_averages_the_seeds():
    mendable = over_budget(results_page("B0AAAAAAAA", "B0BBBBBBBB"))
    not_mendable = over_budget(results_page("B0BBBBBBBB"))
    rows = (purchase_rows([mendable, mendable], "run", "pi_ref", CATALOG)
            + purchase_rows([mendable, not_mendable], "run", "seed 0", CATALOG)
            + purchase_rows([not_mendable, not_mendable], "run", "seed 1", CATALOG))
    table = pd.DataFrame(rows, columns=PURCHASE_COLUMNS)
    assert set(table["class"]) == {"over_budget"}
    summary = purchase_summary(table)
    assert summary.loc[("run", "pi_ref"), "over_budget"] == 2
    assert summary.loc[("run", "pi_ref"), "over budget, one in budget listed"] == 2
    assert summary.loc[("run", "seeds (mean)"), "over_budget"] == 2
    assert summary.loc[("run", "seeds (mean)"), "over budget, one in budget listed"] == 0.5


def copied(trajectory: Trajectory, success: bool = False, text: str = INSTRUCTION) -> Trajectory:
    """``trajectory`` with its first search typed as ``text`` (the whole instruction); optionally a success."""
    first = trajectory.turns[0]
    query = f"search[{text}]"
    turns = [Turn(observation=first.observation, actions=[], turns_left=first.turns_left,
                  response=format_response("think", query), think="think", action=query, format_ok=True, valid=True),
             *trajectory.turns[1:]]
    return Trajectory(goal=trajectory.goal, turns=turns, reward=trajectory.reward, env_reward=trajectory.env_reward,
                      success=success, breakdown=trajectory.breakdown)


def lacking_an_attribute(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` bought within the budget, without its attribute."""
    bd = {**trajectory.breakdown, "price_ok": True, "attributes_matched": [], "attributes_missing": ["zip up"]}
    return Trajectory(goal=trajectory.goal, turns=trajectory.turns, reward=0.5, env_reward=0.5, success=False,
                      breakdown=bd)


def test_copy_summary_splits_success_by_the_first_query():
    page = results_page("B0AAAAAAAA", "B0BBBBBBBB")
    garbled, exact = over_budget(page), copied(over_budget(page))
    won = copied(over_budget(page), success=True)
    rows = (purchase_rows([exact, won, lacking_an_attribute(garbled), garbled], "run", "pi_ref", CATALOG)
            + purchase_rows([won, won, garbled, garbled], "run", "seed 0", CATALOG)
            + purchase_rows([exact, exact, exact, lacking_an_attribute(garbled)], "run", "seed 1", CATALOG))
    table = pd.DataFrame(rows, columns=PURCHASE_COLUMNS)
    assert table["query_copied"].tolist() == [True, True, False, False] * 2 + [True, True, True, False]
    assert table["query_as_taught"].tolist() == table["query_copied"].tolist()  # the instruction was demonstrated
    description = copied(over_budget(page), text="i need a zip up hoodie")
    described = purchase_rows([exact, garbled, description], "run", "pi_ref", CATALOG, query="description")
    assert [row["query_as_taught"] for row in described] == [False, False, True]  # a copy is not the description
    assert [row["query_copied"] for row in described] == [True, False, False]
    table["query_logprob"] = [-0.1, -0.2, -4.0, -6.0] + [-0.1, -0.1, -2.0, -3.0] + [-0.1, -0.1, -0.1, -8.0]
    summary = copy_summary(table)
    ref, seeds = summary.loc[("run", "pi_ref")], summary.loc[("run", "seeds (mean)")]
    assert ref["exact query"] == 0.5 and ref["success, exact query"] == 0.5 and ref["success, garbled query"] == 0
    assert ref["missing attributes after a garbled query"] == 1 and ref["missing attributes"] == 1
    assert seeds["exact query"] == pytest.approx(0.625)  # 2 of 4 and 3 of 4
    assert seeds["success, exact query"] == pytest.approx(0.5)  # 2 of 2 and 0 of 3
    assert seeds["missing attributes after a garbled query"] == 0.5
    assert ref["log π of the exact query, garbled"] == pytest.approx(-5.0)  # the two garbled rows
    assert ref["log π of the exact query, copied"] == pytest.approx(-0.15)
    assert seeds["log π of the exact query, garbled"] == pytest.approx(-5.25)  # -2.5 and -8 averaged
    assert copy_summary(table.drop(columns="query_logprob"))["log π of the exact query, garbled"].isna().all()
    # read back from a CSV, the booleans are text; rows saved before the column existed are left out
    text = table.astype({"query_copied": str})
    older = pd.DataFrame([{**rows[0], "query_copied": float("nan"), "policy": "seed 2"}])
    assert copy_summary(pd.concat([text, older], ignore_index=True)).equals(summary)
    with pytest.raises(ValueError, match="query_copied"):
        copy_summary(table.drop(columns="query_copied"))


def test_product_clicks_are_named_as_the_page_lists_them():
    from apo_helpers.analysis.purchases import _product_click

    assert _product_click("B0AAAAAAAA", 2, ["click[item 1]", "click[item 2]"]) == "click[item 2]"
    assert _product_click("B0AAAAAAAA", 2, ["click[b0aaaaaaaa]"]) == "click[b0aaaaaaaa]"


def test_choice_summary_sets_each_policy_beside_a_uniform_draw():
    from apo_helpers.analysis.purchases import CHOICE_COLUMNS, choice_summary

    rows = [["pi_ref", 1, 10, 2, 16, 0.0, False], ["pi_ref", 2, 10, 4, 16, 0.25, True],
            ["seed 0", 1, 10, 2, 16, 0.5, True], ["seed 0", 2, 10, 4, 16, 0.5, True]]
    table = pd.DataFrame(rows, columns=CHOICE_COLUMNS).assign(run="run")
    summary = choice_summary(table)
    assert summary.loc[("run", "pi_ref"), "p(affordable)"] == pytest.approx(0.125)
    assert summary.loc[("run", "pi_ref"), "greedy: affordable"] == pytest.approx(0.5)
    assert summary.loc[("run", "seed 0"), "greedy: affordable"] == pytest.approx(1.0)
    assert summary.loc[("run", "pi_ref"), "uniform draw"] == pytest.approx(0.3)
    assert list(summary["states"]) == [2, 2]


def test_over_budget_pages_keep_the_last_results_page_with_an_affordable_product(monkeypatch):
    """Hand-built episodes stand in for the greedy rollout: only the purchase above the budget whose last results
    page listed an affordable product of the goal's type becomes a state, with that page's chat."""
    from apo_helpers.analysis import purchases
    from apo_helpers.config import get_profile
    from apo_helpers.policy.prompts import build_messages

    profile = get_profile("ci")
    mendable = over_budget(results_page("B0BBBBBBBB", "B0AAAAAAAA"))
    played = [mendable, over_budget(results_page("B0BBBBBBBB", "B0DDDDDDDD")), over_budget()]
    monkeypatch.setattr(purchases, "policy_goals", lambda split, n: [t.goal for t in played])
    monkeypatch.setattr(purchases, "rollout", lambda model, tok, goals, *a, **k: played)
    states = purchases.over_budget_pages(None, None, "test", 3, profile, catalog=CATALOG)
    assert len(states) == 1
    assert states[0].affordable == ["click[b0aaaaaaaa]"] and states[0].products == 2
    assert states[0].chat == build_messages(mendable.turns[:2], profile.policy.window)


def test_affordable_click_rates_are_seeded_shares_of_the_samples(ci_ref_dir):
    from apo_helpers.analysis.purchases import CHOICE_COLUMNS, ResultsPage, affordable_click_rates
    from apo_helpers.apo.sft import expert_demonstrations
    from apo_helpers.config import get_profile
    from apo_helpers.policy.models import load_policy
    from apo_helpers.policy.prompts import build_messages
    from apo_helpers.webshop.agents import product_clicks

    profile = get_profile("ci")
    states = []
    for demo in expert_demonstrations(profile, 6)[:3]:
        k = next(i for i, u in enumerate(demo.turns) if product_clicks(u.actions))
        clicks = product_clicks(demo.turns[k].actions)
        states.append(ResultsPage(demo.goal, build_messages(demo.turns[: k + 1], profile.policy.window), len(clicks),
                                  [demo.turns[k].action]))  # the expert's own click stands for the affordable one
    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    table = affordable_click_rates(model, tokenizer, states, profile, "pi_ref", samples=4)
    assert list(table.columns) == CHOICE_COLUMNS and len(table) == 3
    assert table["p_affordable"].between(0, 1).all() and ((table["p_affordable"] * 4) % 1 == 0).all()
    pd.testing.assert_frame_equal(table, affordable_click_rates(model, tokenizer, states, profile, "pi_ref", samples=4))
    with pytest.raises(ValueError, match="samples"):
        affordable_click_rates(model, tokenizer, states, profile, "pi_ref", samples=0)


def test_exact_query_logprobs_score_the_whole_instruction_search_on_the_first_page(ci_ref_dir, torch_one_thread):
    """Per goal, the masked log-prob sum of the chat whose first reply searches for the whole instruction (the reply
    ``explore_search`` draws), built here one goal at a time from the environment's first page."""
    import torch

    from apo_helpers.analysis.purchases import exact_query_logprobs
    from apo_helpers.config import get_profile
    from apo_helpers.policy.models import load_policy
    from apo_helpers.policy.prompts import build_messages, encode_chat, parse_response, prompt_actions
    from apo_helpers.policy.scoring import collate, token_logprobs
    from apo_helpers.webshop.agents import instruction_search
    from apo_helpers.webshop.catalog import default_catalog
    from apo_helpers.webshop.env import WebShopEnv

    profile = get_profile("ci")
    model, tokenizer = load_policy(ci_ref_dir)
    goals = default_catalog().split("test")[:3]
    values = exact_query_logprobs(model, tokenizer, goals, profile)
    assert len(values) == 3 and all(v < 0 for v in values)
    env = WebShopEnv(catalog=default_catalog(), config=profile.policy_env())
    for goal, value in zip(goals, values):
        observation, info = env.reset(options={"goal": goal})
        reply = format_response(*instruction_search(observation))
        assert parse_response(reply)[1].lower() == f"search[{goal.instruction}]".lower()
        turn = Turn(observation, prompt_actions(info["available_actions"]), info["turns_left"], response=reply)
        ids, mask = encode_chat(tokenizer, build_messages([turn], profile.policy.window, True))
        ids_t, attention, loss = collate([ids], [mask], tokenizer.pad_token_id)
        with torch.no_grad():
            expected = (token_logprobs(model, ids_t, attention) * loss[:, 1:]).sum()
        assert value == pytest.approx(float(expected), abs=1e-3)


def test_demonstrated_query_reads_pi_refs_metrics_and_defaults_to_the_instruction(tmp_path):
    from apo_helpers.analysis.purchases import demonstrated_query

    assert demonstrated_query(tmp_path) == "instruction"  # no metrics.json: a policy saved by hand
    (tmp_path / "metrics.json").write_text(json.dumps({"demo_think": "short"}))
    assert demonstrated_query(tmp_path) == "instruction"  # written before demo_query was recorded
    (tmp_path / "metrics.json").write_text(json.dumps({"demo_query": "description"}))
    assert demonstrated_query(tmp_path) == "description"
