"""One changed click (notebook 04 section 5): the alternatives of each greedy decision, their returns, and the choices
of A*PO's target policy pi* ~ pi_ref exp(Q / beta2)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from apo_helpers.analysis import headroom
from apo_helpers.analysis.headroom import HEADROOM_COLUMNS, headroom_summary, one_step_alternatives, target_choices
from apo_helpers.apo.sft import expert_demonstration
from apo_helpers.config import get_profile
from apo_helpers.policy.models import load_policy
from apo_helpers.policy.prompts import Turn, format_response, prompt_actions
from apo_helpers.policy.rollout import Trajectory
from apo_helpers.webshop.agents import ExpertAgent, explorable_actions
from apo_helpers.webshop.catalog import default_catalog
from apo_helpers.webshop.env import WebShopEnv

P = get_profile("ci")
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def expert_rollout(model, tokenizer, goals, sampling, config, env_config, prefixes=None, progress=None, **_):
    """A stand-in for ``rollout``: the expert plays each goal, from its prefix's state when given (the prefix's
    turns open the trajectory, as ``rollout`` does)."""
    out = []
    for k, goal in enumerate(goals):
        env = WebShopEnv(split=goal.split, catalog=default_catalog(), config=env_config)
        agent = ExpertAgent()
        if not prefixes or not prefixes[k]:
            out.append(expert_demonstration(env, agent, goal))
            continue
        observation, info = env.reset(options={"goal": goal})
        agent.reset()
        for turn in prefixes[k]:
            observation, _, _, _, info = env.step(turn.action)
        rest = Trajectory(goal=goal, turns=list(prefixes[k]))
        done = False
        while not done:
            action = agent.act(observation, info)
            turn = Turn(observation, prompt_actions(info["available_actions"]), info["turns_left"],
                        response=format_response(agent.reason, action), action=action, format_ok=True)
            observation, reward, terminated, truncated, info = env.step(action)
            turn.valid, turn.reward = info["valid"], reward
            rest.turns.append(turn)
            done = terminated or truncated
        rest.reward, rest.success = sum(u.reward for u in rest.turns), info["success"]
        out.append(rest)
        if progress is not None:
            progress.update(1)
    return out


@pytest.fixture(scope="module")
def table(ci_ref_dir):
    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    goals = [g for g in default_catalog().split("train") if g.options][:3]
    monkey = pytest.MonkeyPatch()
    monkey.setattr(headroom, "rollout", expert_rollout)
    try:
        yield one_step_alternatives(model, tokenizer, goals, P, progress=False), goals
    finally:
        monkey.undo()


def test_every_other_click_of_every_decision_is_tried(table):
    rows, goals = table
    assert list(rows.columns) == HEADROOM_COLUMNS
    env = WebShopEnv(split="train", catalog=default_catalog(), config=P.policy_env())
    for goal in goals:
        played = expert_demonstration(env, ExpertAgent(), goal)
        mine = rows[rows["goal_index"] == goal.index]
        decisions = [k for k, u in enumerate(played.turns) if k > 0]  # after the search: results and item pages
        assert sorted(mine["turn"].unique()) == decisions
        for k in decisions:
            tried = mine[mine["turn"] == k]
            want = [a for a in explorable_actions(played.turns[k].actions) if a != played.turns[k].action]
            assert sorted(tried["action"]) == sorted(want)
            assert (tried["greedy_action"] == played.turns[k].action).all()
        assert (mine["greedy_success"] == played.success).all() and (mine["greedy_return"] == played.reward).all()


def test_returns_are_those_of_the_changed_episode(table):
    rows, _ = table
    bought = rows[rows["action"] == "click[buy now]"]
    assert len(bought) and (bought["return"] <= 1).all() and not bought["success"].all()
    assert ((rows["return"] >= 1) == rows["success"]).all()
    assert rows["logp"].map(math.isfinite).all() and (rows["logp"] <= 0).all() and (rows["logp_greedy"] <= 0).all()


def _state(greedy_logp, greedy_return, alternatives, greedy_success=False):
    return pd.DataFrame([{"split": "train", "goal_index": 0, "greedy_success": greedy_success,
                          "greedy_return": greedy_return, "turn": 1, "page": "item", "greedy_action": "click[a]",
                          "action": action, "return": value, "success": value >= 1, "logp_greedy": greedy_logp,
                          "logp": logp} for action, value, logp in alternatives])


def test_a_confident_reference_keeps_its_choice_unless_beta2_is_small():
    # pi_ref: log-odds 5 nats for its reply (return 0.5) over the fix (return 1.0): pi* flips once 0.5 / beta2 > 5
    state = _state(-0.01, 0.5, [("click[b]", 1.0, -5.01), ("click[c]", 0.0, -3.0)])
    choices = target_choices(state, betas=(1.0, 0.2, 0.05)).set_index("beta2")
    assert not choices.loc[1.0, "changed"] and not choices.loc[0.2, "changed"]
    assert choices.loc[0.05, "changed"] and choices.loc[0.05, "success"]
    assert choices["fixable"].all() and not choices["greedy_success"].any()


def test_the_first_decision_that_changes_decides():
    early = _state(-0.01, 0.5, [("click[b]", 0.75, -0.5)]).assign(turn=1)
    late = _state(-0.01, 0.5, [("click[fix]", 1.0, -0.5)]).assign(turn=2)
    choices = target_choices(pd.concat([late, early]), betas=(0.1,))
    assert choices["changed"].all() and not choices["success"].any()  # turn 1 moved first, to a partial fix
    summary = headroom_summary(choices)
    assert summary.loc[0.1, "one-step ceiling"] == 1.0 and summary.loc[0.1, "pi* success"] == 0.0


def test_search_deviations_compare_each_sample_with_the_greedy_episode(ci_ref_dir, monkeypatch):
    from apo_helpers.analysis.headroom import search_deviations

    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    goals = list(default_catalog().split("train"))[:2]
    monkeypatch.setattr(headroom, "rollout", expert_rollout)  # the expert plays greedy and sampled alike
    rows = search_deviations(model, tokenizer, goals, P, samples=3)
    assert len(rows) == 6 and list(rows["goal_index"]) == [g.index for g in goals for _ in range(3)]
    assert rows["same_query"].all() and rows["same_actions"].all()
    assert (rows["success"] == rows["greedy_success"]).all()


def test_a_goal_without_decisions_counts_and_keeps_its_outcome():
    stuck = pd.DataFrame([{"split": "train", "goal_index": 1, "greedy_success": False, "greedy_return": -0.3,
                           "turn": -1, "page": "", "greedy_action": "", "action": "", "return": float("nan"),
                           "success": False, "logp_greedy": float("nan"), "logp": float("nan")}])
    solved = _state(-0.01, 1.0, [("click[b]", 0.5, -2.0)], greedy_success=True)
    summary = headroom_summary(target_choices(pd.concat([stuck, solved]), betas=(0.1,)))
    assert summary.loc[0.1, "goals"] == 2 and summary.loc[0.1, "greedy success"] == 0.5
    assert summary.loc[0.1, "pi* changes a decision"] == 0.0 and summary.loc[0.1, "pi* success"] == 0.5


def test_query_copies_compare_the_queries_with_the_instruction(ci_ref_dir, monkeypatch):
    from apo_helpers.analysis.headroom import CLICKS, query_copies, query_summary

    def demonstrators(model, tokenizer, goals, sampling, config, env_config, **_):
        """Greedy: the expert searching the whole instruction; sampled (clicks greedy): every other sample searches
        its key words instead."""
        assert sampling.greedy or sampling.greedy_pages == CLICKS
        out = []
        for k, goal in enumerate(goals):
            env = WebShopEnv(split=goal.split, catalog=default_catalog(), config=env_config)
            query = "instruction" if sampling.greedy or k % 2 == 0 else "keywords"
            out.append(expert_demonstration(env, ExpertAgent(query=query), goal))
        return out

    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    goals = list(default_catalog().split("train"))[:3]
    monkeypatch.setattr(headroom, "rollout", demonstrators)
    table = query_copies(model, tokenizer, goals, P, samples=4)
    assert list(table["goal_index"]) == [g.index for g in goals]
    assert table["greedy_copied"].all() and (table["sampled_copied"] == 0.5).all()
    assert (table["success_copied"] == table["greedy_success"]).all()  # the same episode as the greedy one
    summary = query_summary(table)
    assert summary.loc["all goals", "goals"] == 3 and summary.loc["greedy query garbled", "goals"] == 0
    assert summary.loc["all goals", "sampled queries exact"] == 0.5
