"""The results-page choice taught directly (notebook 04 section 5): branches, labels, and the fine-tuning path."""

from __future__ import annotations

import pandas as pd
import pytest

from apo_helpers.analysis import corrections
from apo_helpers.analysis.corrections import (BRANCH_COLUMNS, branch_results, correction_experiment, imitate_choices,
                                              labelled_turns)
from apo_helpers.apo.sft import expert_demonstration
from apo_helpers.config import get_profile
from apo_helpers.policy.models import load_policy
from apo_helpers.webshop.agents import ExpertAgent, explorable_actions
from apo_helpers.webshop.catalog import default_catalog
from apo_helpers.webshop.env import WebShopEnv
from test_headroom import expert_rollout

P = get_profile("ci")
pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def branched(ci_ref_dir):
    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    goals = list(default_catalog().split("train"))[:4]
    monkey = pytest.MonkeyPatch()
    monkey.setattr(corrections, "rollout", expert_rollout)  # the expert plays "greedily"
    try:
        yield (*branch_results(model, tokenizer, goals, P, progress=False), goals)
    finally:
        monkey.undo()


def test_every_click_of_the_first_results_page_is_tried(branched):
    table, prefixes, goals = branched
    assert list(table.columns) == BRANCH_COLUMNS and len(prefixes) == len(table)
    env = WebShopEnv(split="train", catalog=default_catalog(), config=P.policy_env())
    for goal in goals:
        played = expert_demonstration(env, ExpertAgent(), goal)
        mine = table[table["goal_index"] == goal.index]
        results = played.turns[1]  # after the search
        assert sorted(mine["action"]) == sorted(explorable_actions(results.actions))
        own = mine[mine["own"]]
        assert len(own) == 1 and own["action"].iloc[0] == results.action
        assert own["success"].iloc[0] == played.success and own["return"].iloc[0] == played.reward
        for i in mine.index:  # each prefix ends in the click of its row, after the same turns
            assert prefixes[i][-1].action == table.loc[i, "action"] and len(prefixes[i]) == 2
    assert ((table["return"] >= 1) == table["success"]).all()


def _table(rows):
    return pd.DataFrame([dict(zip(["goal_index", "action", "own", "success"], r), split="train", turn=1,
                              greedy_success=False, **{"return": 1.0 if r[3] else 0.5}) for r in rows])


def test_labels_keep_the_own_click_when_it_succeeds_else_the_first_fix():
    table = _table([(0, "click[item 1]", True, True), (0, "click[item 2]", False, True),  # own click solves it
                    (1, "click[item 1]", True, False), (1, "click[item 2]", False, False),
                    (1, "click[item 3]", False, True), (1, "click[item 4]", False, True),  # corrected: item 3
                    (2, "click[item 1]", True, False), (2, "click[item 2]", False, False)])  # nothing solves it
    prefixes = [[name] for name in table["action"]]
    labelled, corrected = labelled_turns(table, prefixes)
    assert labelled == [["click[item 1]"], ["click[item 3]"]] and corrected == 1
    labelled, corrected = labelled_turns(table, prefixes, corrections=False)
    assert labelled == [["click[item 1]"]] and corrected == 0


def test_fine_tuning_on_the_labels_lowers_their_loss(branched, ci_ref_dir, monkeypatch):
    table, prefixes, _ = branched
    labelled, _ = labelled_turns(table, prefixes)
    assert labelled
    _, _, history = imitate_choices(ci_ref_dir, labelled, P, steps=12, lr=1e-3, batch_size=4, progress=False)
    assert len(history) == 12 and history["loss"].tail(3).mean() < history["loss"].head(3).mean()
    seen = []  # replay draws from the labelled turns and pi_ref's own demonstrations, every chat tokenized
    monkeypatch.setattr(corrections, "imitate", lambda model, tokenizer, examples, *a, **k: seen.append(examples))
    imitate_choices(ci_ref_dir, labelled, P, replay=True, progress=False)
    assert len(seen[0]) == len(labelled) + P.reference.demonstrations
    assert all(example.input_ids and len(example.input_ids) == len(example.assistant_mask) for example in seen[0])
    with pytest.raises(ValueError, match="no labelled turns"):
        imitate_choices(ci_ref_dir, [], P, progress=False)


def test_the_experiment_reports_pi_ref_and_both_fine_tunings(ci_ref_dir, monkeypatch):
    monkeypatch.setattr(corrections, "rollout", expert_rollout)
    monkeypatch.setattr(corrections, "evaluate_policy", lambda *a, **k: (_Summary(), None))
    goals = list(default_catalog().split("train"))[:3]
    result = correction_experiment(ci_ref_dir, goals, P, settings=[(2, 1e-4, False), (3, 1e-3, True)], val_goals=2,
                                   fit_goals=2, progress=False)
    assert result["goals"] == 3 and result["greedy_success"] == 1.0  # the expert solves them with its own click
    assert result["corrected_goals"] == 0 and result["fit_goals"] == 2
    assert result["pi_ref"] == {"val_success": 0.5, "val_score": 0.75, "branched_goals_success": 1.0}
    runs = pd.DataFrame(result["runs"])
    assert list(zip(runs["steps"], runs["labels"])) == [(2, "with corrections"), (2, "own clicks only"),
                                                        (3, "with corrections"), (3, "own clicks only")]
    assert list(runs["replay"]) == [False, False, True, True]
    assert (runs["labelled_turns"] == 3).all() and (runs["corrections"] == 0).all()
    assert (runs["val_success"] == 0.5).all() and (runs["branched_goals_success"] == 1.0).all()


class _Summary:
    def summary(self):
        return {"success_rate": 0.5, "mean_score": 0.75}


def test_cli_pairs_every_setting(ci_ref_dir, capsys):
    from apo_helpers.__main__ import main

    assert main(["corrections", "--profile", "ci", "--ref", str(ci_ref_dir), "--steps", "10", "--lr", "1e-4", "1e-3",
                 "--replay", "0"]) == 2
    assert "one value each per setting: got 1 steps, 2 learning rates and 1 replay flags" in capsys.readouterr().err
