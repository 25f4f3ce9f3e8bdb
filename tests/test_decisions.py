"""The item-page decision probe (notebook 04 section 5): the same chats answered by several policies."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from apo_helpers.__main__ import main
from apo_helpers.analysis import decisions
from apo_helpers.analysis.decisions import (DECISION_COLUMNS, ItemPage, clicks_requested_value, decision_summary,
                                           item_page_states, option_click_rates)
from apo_helpers.analysis.failures import option_click
from apo_helpers.apo.sft import expert_demonstrations
from apo_helpers.apo.turn_credit import decision_turn
from apo_helpers.config import get_profile
from apo_helpers.policy.models import load_policy
from apo_helpers.policy.prompts import build_messages

P = get_profile("ci")
pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def item_pages():
    """The expert's first item page of a few goals that ask for options."""
    demos = [d for d in expert_demonstrations(P, 12) if d.goal.options][:3]
    return [ItemPage(d.goal, build_messages(d.turns[: decision_turn(d) + 1], P.policy.window),
                     d.turns[decision_turn(d)].actions) for d in demos]


def test_option_click_tells_options_from_other_buttons():
    assert option_click("click[red]") and option_click("click[xl]")
    assert not any(map(option_click, ["click[buy now]", "click[back to search]", "click[< prev]",
                                      "click[description]", "search[red]", ""]))


def test_requested_values_are_matched_like_the_reward():
    goal = expert_demonstrations(P, 12)[0].goal
    goal = dataclasses.replace(goal, options={"size": "Small", "pack": "4-pack"})
    assert clicks_requested_value("click[small]", goal) and clicks_requested_value("click[4-pack]", goal)
    assert not clicks_requested_value("click[xx-large]", goal)
    assert not clicks_requested_value("click[buy now]", goal) and not clicks_requested_value("search[small]", goal)
    page = ItemPage(goal, [], ["click[< prev]", "click[medium]", "click[buy now]"])
    assert not page.offers_requested
    assert dataclasses.replace(page, actions=["click[small]", "click[buy now]"]).offers_requested


def test_rates_per_page_are_shares_of_the_samples(ci_ref_dir, item_pages):
    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    table = option_click_rates(model, tokenizer, item_pages, P, "pi_ref", samples=4)
    assert list(table.columns) == DECISION_COLUMNS and len(table) == len(item_pages)
    assert table["goal_index"].tolist() == [p.goal.index for p in item_pages]
    assert table["offers_requested"].tolist() == [p.offers_requested for p in item_pages]
    assert table["p_option"].between(0, 1).all() and (table["p_option"] + table["p_buy"] <= 1).all()
    assert (table["p_requested_value"] <= table["p_option"]).all()
    assert ((table["p_option"] * 4) % 1 == 0).all()            # a share of 4 samples
    assert (table["greedy_requested_value"] <= table["greedy_option"]).all()
    again = option_click_rates(model, tokenizer, item_pages, P, "pi_ref", samples=4)
    pd.testing.assert_frame_equal(table, again)                 # seeded
    with pytest.raises(ValueError, match="samples"):
        option_click_rates(model, tokenizer, item_pages, P, "pi_ref", samples=0)


def test_item_page_states_keep_goals_with_options_that_reach_an_item_page(monkeypatch):
    """Episodes stand in for the greedy rollout: the expert's, one cut before its item page."""
    demos = expert_demonstrations(P, 12)
    with_options = [d for d in demos if d.goal.options]
    without = next(d for d in demos if not d.goal.options)
    cut = with_options[1].__class__(goal=with_options[1].goal, turns=with_options[1].turns[:2])
    played = [with_options[0], cut, with_options[2]]
    monkeypatch.setattr(decisions, "policy_goals", lambda split, n: [d.goal for d in [*played[:2], without, *played[2:]]])
    monkeypatch.setattr(decisions, "rollout", lambda model, tok, goals, *a, **k: played)
    pages = item_page_states(None, None, "train", 4, P)
    assert [p.goal for p in pages] == [with_options[0].goal, with_options[2].goal]  # no item page, no options: dropped
    for page, demo in zip(pages, [with_options[0], with_options[2]]):
        k = decision_turn(demo)
        assert page.chat == build_messages(demo.turns[: k + 1], P.policy.window)
        assert page.actions == demo.turns[k].actions and "click[buy now]" in page.actions


def test_summary_per_policy_in_order():
    table = pd.DataFrame({"policy": ["b", "b", "a", "a"], "goal_index": [1, 2, 1, 2], "offers_requested": True,
                          "samples": 4, "p_option": [0.75, 0.25, 0.0, 1.0], "p_requested_value": [0.5, 0.0, 0.0, 0.25],
                          "p_buy": [0.25, 0.5, 1.0, 0.0], "greedy_option": [True, False, False, True],
                          "greedy_requested_value": [True, False, False, False]})
    summary = decision_summary(table)
    assert summary.index.tolist() == ["b", "a"]
    assert summary.loc["b", "p(option)"] == pytest.approx(0.5)
    assert summary.loc["b", "p(requested value)"] == pytest.approx(0.25)
    assert summary.loc["a", "greedy: option"] == pytest.approx(0.5)
    assert summary.loc["a", "greedy: requested value"] == pytest.approx(0.0)


def test_cli_names_a_bad_model_pair(ci_ref_dir, capsys):
    for bad in [str(ci_ref_dir), "x=/nonexistent"]:
        assert main(["decisions", "--profile", "ci", "--states-from", str(ci_ref_dir), "--models", bad]) != 0
        assert f"NAME=FOLDER pairs with a model.safetensors in FOLDER, got {bad!r}" in capsys.readouterr().err


def test_cli_refuses_policies_of_another_rendering(ci_ref_dir, tmp_path, capsys):
    import shutil

    from apo_helpers.config import PolicyConfig
    from apo_helpers.policy.models import rendering_files

    marked = shutil.copytree(ci_ref_dir, tmp_path / "marked")
    for name, text in rendering_files(PolicyConfig(show_selected_options=True)).items():
        (marked / name).write_text(text)
    assert main(["decisions", "--profile", "ci", "--states-from", str(ci_ref_dir), "--models", f"m={marked}"]) != 0
    assert "trained on pages rendered unlike those of" in capsys.readouterr().err


def test_cli_probes_each_policy(ci_ref_dir, tmp_path, monkeypatch, capsys):
    import apo_helpers.__main__ as cli
    import pandas as pd

    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path)
    assert main(["decisions", "--profile", "ci", "--states-from", str(ci_ref_dir), "--models", f"a={ci_ref_dir}",
                 f"b={ci_ref_dir}", "--split", "val", "--episodes", "8", "--samples", "2", "--save",
                 "--name", "x"]) == 0
    out = capsys.readouterr().out
    assert "p(requested value)" in out and "a value clicked again" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decisions_x_ci.csv", "option_progress_x_ci.csv"]
    progress = pd.read_csv(tmp_path / "option_progress_x_ci.csv")
    assert progress["method"].tolist() == ["a"] * 8 + ["b"] * 8  # every goal's greedy episode, per policy


def test_plot_puts_each_policy_against_the_reference():
    import matplotlib

    matplotlib.use("Agg")
    from apo_helpers.analysis.decisions import plot_option_probabilities

    table = pd.DataFrame({"policy": ["ref", "ref", "rl", "rl"], "goal_index": [1, 2, 2, 1], "p_option": [0.25, 0.5, 1.0, 0.75]})
    (ax,) = plot_option_probabilities(table, "ref", {"RL": ["rl"]}, column="p_option")
    points = ax.collections[0].get_offsets()
    assert points.tolist() == [[0.25, 0.75], [0.5, 1.0]]       # matched by goal, not by row order
    assert "rl (mean 0.88)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_xlabel() == "p(option) under ref"


# ------------------------------------------------------------------------------------- early purchases

def _forgetful_demos():
    """A demonstrator that picks an item offering the options but buys without selecting them."""
    forgetful = dataclasses.replace(P, reference=dataclasses.replace(P.reference, demo_forget_options=1.0))
    return expert_demonstrations(forgetful, 16)


def test_early_purchases_are_the_purchases_a_click_could_have_completed(monkeypatch):
    """Episodes stand in for the greedy rollout: the forgetful demonstrator's (early purchases) and the full
    expert's (complete purchases) on goals that ask for options."""
    from apo_helpers.analysis.decisions import early_purchases

    forgot = [d for d in _forgetful_demos() if d.goal.options][:2]
    complete = next(d for d in expert_demonstrations(P, 16) if d.goal.options and d.success)
    played = [forgot[0], complete, forgot[1]]
    monkeypatch.setattr(decisions, "policy_goals", lambda split, n: [d.goal for d in played])
    monkeypatch.setattr(decisions, "rollout", lambda model, tok, goals, *a, **k: played)
    states = early_purchases(None, None, "train", 3, P)
    assert [s.goal for s in states] == [forgot[0].goal, forgot[1].goal]        # the complete purchase is no state
    for state, demo in zip(states, forgot):
        assert demo.turns[-1].action == "click[buy now]" and state.prefix == demo.turns[:-1]
        assert sorted(state.missing) == sorted(demo.goal.options.values()) and state.selected_before == 0


def test_a_missing_value_is_matched_like_the_reward():
    from apo_helpers.analysis.decisions import EarlyPurchase, clicks_missing_value

    goal = dataclasses.replace(expert_demonstrations(P, 4)[0].goal, options={"size": "Small", "color": "red"})
    state = EarlyPurchase(goal, [], ["Small"])
    assert state.selected_before == 1
    assert clicks_missing_value("click[small]", state)
    assert not any(clicks_missing_value(a, state) for a in ["click[red]", "click[xx-large]", "click[buy now]", ""])


def test_early_purchase_rates_are_shares_of_the_continuations(ci_ref_dir):
    from apo_helpers.analysis.decisions import EARLY_PURCHASE_COLUMNS, EarlyPurchase, early_purchase_rates

    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    forgot = [d for d in _forgetful_demos() if d.goal.options][:3]
    states = [EarlyPurchase(d.goal, d.turns[:-1], list(d.goal.options.values())) for d in forgot]
    table = early_purchase_rates(model, tokenizer, states, P, "pi_ref", samples=4, temperature=1.5)
    assert list(table.columns) == EARLY_PURCHASE_COLUMNS and len(table) == len(states)
    assert table["goal_index"].tolist() == [s.goal.index for s in states]
    assert (table["temperature"] == 1.5).all() and (table["selected_before"] == 0).all()
    shares = table[["p_buy", "p_missing_value", "p_other"]]
    assert ((shares * 4) % 1 == 0).all().all() and shares.sum(axis=1).eq(1.0).all()  # shares of 4 continuations
    assert table["success"].between(0, 1).all()
    pd.testing.assert_frame_equal(table, early_purchase_rates(model, tokenizer, states, P, "pi_ref", samples=4,
                                                              temperature=1.5))  # seeded
    assert early_purchase_rates(model, tokenizer, [], P, "pi_ref").empty
    for bad, match in [({"samples": 0}, "samples"), ({"temperature": 0.0}, "temperature must be positive")]:
        with pytest.raises(ValueError, match=match):
            early_purchase_rates(model, tokenizer, states, P, "pi_ref", **bad)


def test_early_purchase_summary_splits_by_what_was_selected():
    from apo_helpers.analysis.decisions import early_purchase_summary

    table = pd.DataFrame({"policy": ["b", "b", "a"], "goal_index": [1, 2, 1], "options_asked": [2, 1, 2],
                          "selected_before": [1, 0, 1], "samples": 4, "temperature": 1.0,
                          "p_buy": [0.5, 1.0, 0.25], "p_missing_value": [0.25, 0.0, 0.75],
                          "p_other": [0.25, 0.0, 0.0], "success": [0.25, 0.0, 0.5]})
    summary = early_purchase_summary(table)
    assert summary.index.tolist() == [("b", 1.0, "some selected"), ("b", 1.0, "none selected"),
                                      ("a", 1.0, "some selected")]
    assert summary.loc[("a", 1.0, "some selected"), "p(missing value)"] == pytest.approx(0.75)
    assert summary["states"].tolist() == [1, 1, 1]


def test_cli_continues_the_early_purchases(ci_ref_dir, tmp_path, monkeypatch, capsys):
    """The ci pi_ref makes no early purchase on a few goals: the forgetful demonstrator's stand in for its states."""
    import apo_helpers.__main__ as cli
    from apo_helpers.analysis.decisions import EarlyPurchase

    forgot = [d for d in _forgetful_demos() if d.goal.options][:2]
    states = [EarlyPurchase(d.goal, d.turns[:-1], list(d.goal.options.values())) for d in forgot]
    monkeypatch.setattr(decisions, "early_purchases", lambda model, tok, split, episodes, profile: states)
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path)
    assert main(["decisions", "--profile", "ci", "--states-from", str(ci_ref_dir), "--models", f"a={ci_ref_dir}",
                 "--split", "val", "--episodes", "12", "--samples", "2", "--early-purchases", "--temperatures", "1.0",
                 "1.6", "--save", "--name", "x"]) == 0
    out = capsys.readouterr().out
    assert "2 greedy purchases of" in out and "p(missing value)" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["early_purchases_x_ci.csv"]
    table = pd.read_csv(tmp_path / "early_purchases_x_ci.csv")
    assert table["temperature"].tolist() == [1.0, 1.0, 1.6, 1.6]  # every state at each temperature
