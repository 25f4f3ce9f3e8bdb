"""A*PO: V* (stage 1) and its cache, the least-squares loss (stage 2), and RAGEN's loop with checkpoints.

The loop tests train a real ci-sized pi_ref in a temporary folder (seconds), so they run on a fresh clone."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from apo_helpers.__main__ import main
from apo_helpers.analysis.evaluate import greedy_evaluation
from apo_helpers.apo import trainer as trainer_module
from apo_helpers.apo.losses import OBJECTIVES, ObjectiveInputs, apo_loss, apo_objective, kl_estimate
from apo_helpers.apo.sft import expert_demonstrations
from apo_helpers.apo.trainer import (Trainer, latest_checkpoint, lean_update, load_models, objective_inputs,
                                     search_weights, trained_sequences)
from apo_helpers.apo.turn_credit import decision_turn, split_values
from apo_helpers.apo.vstar import (VStarTable, cache_key, greedy_pages, load_vstar, optimal_value, rollout_sampling,
                                   sample_rewards, stage1, stage1_goals, stage1_profile, training_reward,
                                   vstar_table, weights_hash)
from apo_helpers.config import get_profile, seed_everything
from apo_helpers.policy.prompts import encode_chat
from apo_helpers.policy.rollout import Sampling
from apo_helpers.runs import train_run
from apo_helpers.webshop.catalog import DataFileError, default_catalog
from apo_helpers.webshop.pages import SEP

P = get_profile("ci")
pytestmark = pytest.mark.usefixtures("torch_one_thread")


# ---------------------------------------------------------------------------------------------- V*

def test_vstar_between_mean_and_max():
    rewards = [0.0, 0.2, 1.0, 0.5]
    v = optimal_value(rewards, 0.5)
    assert np.mean(rewards) < v < max(rewards)


def test_vstar_limits_of_beta1():
    rewards = [0.0, 0.3, 0.9]
    assert optimal_value(rewards, 1e4) == pytest.approx(np.mean(rewards), abs=1e-4)   # large beta1: the mean
    assert optimal_value(rewards, 1e-3) == pytest.approx(0.9 + 1e-3 * math.log(1 / 3), abs=1e-9)  # small: the max
    assert optimal_value([0.7] * 8, 0.5) == pytest.approx(0.7)


def test_vstar_is_stable_for_tiny_beta1():
    assert math.isfinite(optimal_value([1.0, 0.0], 1e-6))           # exp(1e6) would overflow without log-sum-exp
    assert optimal_value([1.0, 0.0], 1e-6) == pytest.approx(1.0, abs=1e-5)


def test_vstar_hand_computed():
    assert optimal_value([1.0, 0.0], 0.5) == pytest.approx(0.5 * math.log((math.exp(2) + 1) / 2))


@pytest.mark.parametrize("rewards,beta1", [([], 0.5), ([[1.0]], 0.5), ([1.0], 0.0), ([1.0], -1)])
def test_vstar_rejects_bad_input(rewards, beta1):
    with pytest.raises(ValueError):
        optimal_value(rewards, beta1)


def test_vstar_table_columns():
    goals = default_catalog().split("train")[:2]
    table = vstar_table(goals, [[0.0, 1.0], [0.5, 0.5]], 0.5)
    assert list(table.columns) == ["split", "goal_index", "rewards", "vstar", "mean", "max", "successes"]
    assert table["successes"].tolist() == [1, 0]
    assert table["mean"].tolist() == [0.5, 0.5]


# ---------------------------------------------------------------------------------------------- the loss

def test_apo_loss_hand_computed():
    logp, ref = torch.tensor([-10.0, -4.0]), torch.tensor([-12.0, -4.0])
    reward, vstar = torch.tensor([1.0, 0.0]), torch.tensor([0.6, 0.6])
    # (0.1 * 2 - 0.4)^2 = 0.04, (0.1 * 0 + 0.6)^2 = 0.36 -> mean 0.2
    assert apo_loss(logp, ref, reward, vstar, 0.1).item() == pytest.approx(0.2)


def test_apo_loss_gradient_matches_the_formula():
    torch.manual_seed(0)
    logp = torch.randn(5, dtype=torch.float64, requires_grad=True)
    ref, reward, vstar = torch.randn(5, dtype=torch.float64), torch.rand(5, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    beta2 = 0.3
    apo_loss(logp, ref, reward, vstar, beta2).backward()
    expected = 2 * beta2 * (beta2 * (logp.detach() - ref) - (reward - vstar)) / 5
    assert torch.allclose(logp.grad, expected)
    assert torch.autograd.gradcheck(lambda x: apo_loss(x, ref, reward, vstar, beta2), (logp.detach().requires_grad_(),))


def test_apo_loss_is_zero_at_the_optimal_policy():
    ref, reward, vstar = torch.tensor([-3.0, -7.0]), torch.tensor([1.0, 0.2]), torch.tensor([0.5, 0.5])
    beta2 = 0.05
    logp = ref + (reward - vstar) / beta2       # pi* = pi_ref * exp((r - V*) / beta2)
    assert apo_loss(logp, ref, reward, vstar, beta2).item() == pytest.approx(0.0, abs=1e-10)


def test_apo_loss_rejects_nonpositive_beta2():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="beta2"):
        apo_loss(x, x, x, x, 0.0)


def _toy_inputs(logits, actions, rewards, vstar):
    """Single-step trajectories: each is one token ``action`` drawn from softmax(logits) (pi_ref = the start)."""
    logp_all = torch.log_softmax(logits, -1)
    token = logp_all[actions]
    ref = token.detach()
    rows = torch.arange(len(actions))
    return ObjectiveInputs(logp=token, logp_ref=ref, reward=torch.tensor(rewards), vstar=torch.tensor(vstar),
                           tokens=torch.ones(len(actions)), group=torch.zeros(len(actions), dtype=torch.long),
                           token_logp=token, token_logp_ref=ref, token_logp_old=token.detach(), token_row=rows)


def test_apo_step_moves_toward_the_rewarded_action():
    logits = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([logits], lr=1.0)
    config = dataclasses.replace(P.apo, beta2=0.1)
    for _ in range(20):
        inputs = _toy_inputs(logits, torch.tensor([0, 1, 2]), [1.0, 0.0, 0.0], [0.4, 0.4, 0.4])
        loss, stats = apo_objective(inputs, config)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    probs = torch.softmax(logits.detach(), -1)
    assert probs[0] > 0.6 and probs[1] < 0.2 and probs[2] < 0.2
    assert set(stats) == {"apo_loss", "advantage"}


def test_entropy_bonus_lowers_the_loss():
    logits = torch.zeros(3, requires_grad=True)
    inputs = _toy_inputs(logits, torch.tensor([0, 1]), [1.0, 0.0], [0.5, 0.5])
    inputs.entropy = torch.tensor([1.0, 1.0])
    plain, _ = apo_objective(inputs, dataclasses.replace(P.apo, entropy_coef=0.0))
    bonus, _ = apo_objective(inputs, dataclasses.replace(P.apo, entropy_coef=0.1))
    assert bonus.item() == pytest.approx(plain.item() - 0.1)


def test_kl_estimate_sums_per_trajectory():
    kl = kl_estimate(torch.tensor([-1.0, -2.0, -1.0]), torch.tensor([-1.5, -2.0, -3.0]), torch.tensor([0, 0, 1]), 3)
    assert kl.tolist() == [0.5, 2.0, 0.0]


def test_objectives_registry_has_apo():
    assert OBJECTIVES["apo"] is apo_objective


# ---------------------------------------------------------------------------------------------- pi_ref, stage 1

@pytest.fixture(scope="module")
def ref_dir(ci_ref_dir):
    return ci_ref_dir


@pytest.fixture(scope="module")
def models(ref_dir):
    return load_models(ref_dir, "cpu")


def test_answer_mask_is_the_action_part(models):
    _, _, tokenizer = models
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "<think> pick it </think> <answer> click[buy now] </answer>"}]
    ids, every = encode_chat(tokenizer, chat)
    same, answer = encode_chat(tokenizer, chat, part="answer")
    assert same == ids
    assert all(a <= e for a, e in zip(answer, every)) and 0 < sum(answer) < sum(every)
    text = tokenizer.decode([t for t, m in zip(ids, answer) if m])
    assert "buy now" in text and "pick" not in text
    with pytest.raises(ValueError, match="part"):
        encode_chat(tokenizer, chat, part="think")


def test_stage1_table_and_cache(models, tmp_path, monkeypatch):
    _, ref_model, tokenizer = models
    first = stage1(ref_model, tokenizer, P, tmp_path, progress=False)
    table = first.table
    assert len(table) == P.apo.vstar_goals and not first.loaded
    assert table["rewards"].map(len).eq(P.apo.vstar_samples).all()
    assert (table["vstar"] >= table["mean"] - 1e-9).all() and (table["vstar"] <= table["max"] + 1e-9).all()
    assert [g.index for g in first.goals()] == [g.index for g in stage1_goals(P, P.seed)]
    assert (tmp_path / first.key / "vstar.csv").exists()
    # a second call with the same key loads, never samples
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: pytest.fail("sampled again"))
    second = stage1(ref_model, tokenizer, P, tmp_path, progress=False)
    assert second.loaded and second.key == first.key
    pd.testing.assert_frame_equal(second.table, table, check_dtype=False)


def test_vstar_greedy_search_samples_stage1_as_the_greedy_search_recipe(models, tmp_path, monkeypatch):
    """Under vstar_greedy_search stage 1 types pi_ref's greedy query and draws none, so it reads (and writes) the
    greedy-search recipe's cached table; the filters still apply, and it refuses to run without drawn queries."""
    _, ref_model, tokenizer = models
    drawn = dataclasses.replace(P, apo=dataclasses.replace(P.apo, explore_search=0.75, keep_varying=True,
                                                           vstar_greedy_search=True))
    sampled = stage1_profile(drawn).apo
    assert sampled.greedy_search and sampled.explore_search == 0 and sampled.keep_varying
    assert stage1_profile(P) is P
    greedy = dataclasses.replace(P, apo=dataclasses.replace(P.apo, greedy_search=True))
    first = stage1(ref_model, tokenizer, greedy, tmp_path, progress=False)
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: pytest.fail("sampled again"))
    reused = stage1(ref_model, tokenizer, drawn, tmp_path, progress=False)
    assert reused.loaded and reused.key == first.key
    assert reused.dropped == int(first.table["rewards"].map(lambda r: max(r) == min(r)).sum())  # keep_varying applied
    with pytest.raises(ValueError, match="explore_search"):
        stage1_profile(dataclasses.replace(P, apo=dataclasses.replace(P.apo, vstar_greedy_search=True)))


def test_stage1_goals_are_not_demonstration_goals():
    demos = {d.goal.index for d in expert_demonstrations(P, P.reference.demonstrations)}
    goals = stage1_goals(P)
    assert len(goals) == P.apo.vstar_goals and {g.split for g in goals} == {"train"}
    assert not demos & {g.index for g in goals}
    with pytest.raises(ValueError, match="too few"):
        stage1_goals(dataclasses.replace(P, apo=dataclasses.replace(P.apo, vstar_goals=10**6)))


def test_stage1_adds_the_practice_goals_after_the_train_goals():
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, practice_goals=5))
    goals = stage1_goals(profile)
    assert goals[:P.apo.vstar_goals] == stage1_goals(P)
    assert goals[P.apo.vstar_goals:] == default_catalog().split("practice")[:5]
    table = VStarTable(pd.DataFrame({"split": [g.split for g in goals], "goal_index": [g.index for g in goals],
                                     "vstar": 0.5}), "key")
    assert table.goals() == goals and table.value(goals[-1]) == 0.5  # a cached table finds its practice goals
    with pytest.raises(ValueError, match="practice_goals must be between 0 and the 3600"):
        stage1_goals(dataclasses.replace(P, apo=dataclasses.replace(P.apo, practice_goals=-1)))


def test_stage1_skips_the_goals_its_own_pi_ref_imitated(tmp_path):
    """A pi_ref imitated from more goals than the profile's records how many (``demo_goals``): stage 1 then starts
    after them, so it never samples a goal that pi_ref memorised."""
    from apo_helpers.apo.sft import with_reference_goals

    assert with_reference_goals(P, tmp_path) is P  # no metrics.json: the profile as it is
    (tmp_path / "metrics.json").write_text(json.dumps({"demonstrations": 58}))
    assert with_reference_goals(P, tmp_path) is P  # a pi_ref saved before demo_goals was recorded
    more = 3 * P.reference.demonstrations
    (tmp_path / "metrics.json").write_text(json.dumps({"demonstrations": more - 2, "demo_goals": more}))
    profile = with_reference_goals(P, tmp_path)
    assert profile.reference.demonstrations == more
    imitated = {d.goal.index for d in expert_demonstrations(P, more)}
    assert imitated & {g.index for g in stage1_goals(P)}  # the profile's count would overlap them
    assert not imitated & {g.index for g in stage1_goals(profile)}
    for text, message in [("{oops", "JSON object"), ("[1]", "JSON object"), ('{"demo_goals": "many"}', "count"),
                          ('{"demo_goals": -1}', "count")]:
        (tmp_path / "metrics.json").write_text(text)
        with pytest.raises(ValueError, match=message):
            with_reference_goals(P, tmp_path)


def test_cli_train_ref_records_the_goals_it_drew_demonstrations_from(tmp_path, capsys):
    assert main(["train-ref", "--profile", "ci", "--demonstrations", "12", "--out", str(tmp_path), "--json"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["demo_goals"] == 12 and metrics["demonstrations"] <= 12
    assert {"val", "test"} <= set(metrics)


def test_cli_train_ref_query_demonstrates_another_search_and_measures_how_often_pi_ref_types_it(tmp_path):
    """``--query description``: the demonstrations search the instruction's description, metrics.json records the
    query kind and, per split, the share of pi_ref's episodes whose first action is that search."""
    assert main(["train-ref", "--profile", "ci", "--demonstrations", "12", "--query", "description", "--out",
                 str(tmp_path), "--json"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["demo_query"] == "description"
    assert all(0.0 <= metrics[split]["query_as_taught"] <= 1.0 for split in ("val", "test"))
    assert all(0.0 <= metrics[split]["option_clicked"] <= 1.0 for split in ("val", "test"))


def test_committed_reference_mismatch_names_the_differing_split_and_the_processors(tmp_path):
    """A retrained pi_ref whose success differs from the committed file of the same name is called out (another
    CPU kind, another policy under a committed name); an equal one, or a name with no committed file, is not."""
    from apo_helpers.__main__ import committed_reference_mismatch

    committed = {"val": {"success_rate": 0.335}, "test": {"success_rate": 0.295},
                 "numerics": {"processor": "AMD EPYC"}}
    (tmp_path / "pi_ref_x.json").write_text(json.dumps(committed))
    same = {"val": {"success_rate": 0.335}, "test": {"success_rate": 0.295}, "numerics": {"processor": "Xeon"}}
    assert committed_reference_mismatch("pi_ref_x", same, tmp_path) is None
    assert committed_reference_mismatch("pi_ref_new", {**same, "test": {"success_rate": 0.5}}, tmp_path) is None
    other = {**same, "test": {"success_rate": 0.33}}
    message = committed_reference_mismatch("pi_ref_x", other, tmp_path)
    assert message and "test success 0.330 here, 0.295 committed" in message and "val" not in message.split("(")[1]
    assert "'Xeon'" in message and "'AMD EPYC'" in message and "runs/pi_ref_x_<machine>" in message
    unevaluated = {"numerics": {"processor": "Xeon"}}  # --no-eval: nothing to compare
    assert committed_reference_mismatch("pi_ref_x", unevaluated, tmp_path) is None


def test_outcomes_save_refuses_a_rebuilt_pi_ref_under_a_committed_name(tmp_path, monkeypatch, capsys):
    """``outcomes --save`` stops before playing anything when the run's pi_ref folder holds another policy than the
    one committed under its name (its rows would replace the committed pi_ref's); a matching folder, one with no
    committed file and one without metrics.json pass the check."""
    import apo_helpers.__main__ as cli
    from apo_helpers import config

    runs, results = tmp_path / "runs", tmp_path / "results"
    results.mkdir()
    (results / "pi_ref_x.json").write_text(json.dumps({"test": {"success_rate": 0.295}}))
    (runs / "pi_ref_x").mkdir(parents=True)
    (runs / "pi_ref_x" / "metrics.json").write_text(json.dumps({"test": {"success_rate": 0.35}}))
    (runs / "apo_x_ci" / "seed_0" / "policy").mkdir(parents=True)
    (runs / "apo_x_ci" / "seed_0" / "metrics.json").write_text(json.dumps({"seed": 0, "ref": "pi_ref_x"}))
    monkeypatch.setattr(config, "RUNS_DIR", runs)
    monkeypatch.setattr(cli, "RESULTS_DIR", results)
    assert cli.main(["outcomes", "--profile", "ci", "--run", str(runs / "apo_x_ci"), "--save", "--json"]) == 2
    error = capsys.readouterr().err
    assert "pi_ref_x: not saving rows under a committed name" in error and "0.350 here, 0.295 committed" in error
    assert list(results.iterdir()) == [results / "pi_ref_x.json"]

    (runs / "pi_ref_x" / "metrics.json").write_text(json.dumps({"test": {"success_rate": 0.295}}))
    cli.refuse_uncommitted_reference(runs / "pi_ref_x", results)
    cli.refuse_uncommitted_reference(runs / "apo_x_ci", results)  # no committed file of that name
    cli.refuse_uncommitted_reference(tmp_path / "nowhere" / "pi_ref_x", results)  # no metrics.json


def test_cli_train_ref_no_eval_saves_pi_ref_without_evaluating_it(tmp_path, monkeypatch):
    """``--no-eval`` (a pretrained pi_ref's evaluations cost minutes): the model and the training metrics are
    saved, and no evaluation runs."""
    from apo_helpers.analysis import evaluate

    def refuse(*args, **kwargs):
        raise AssertionError("train-ref --no-eval evaluated pi_ref")

    monkeypatch.setattr(evaluate, "evaluate_policy", refuse)
    monkeypatch.setattr(evaluate, "pass_at_k", refuse)
    assert main(["train-ref", "--profile", "ci", "--demonstrations", "12", "--out", str(tmp_path), "--no-eval",
                 "--json"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (tmp_path / "model.safetensors").exists() and metrics["demo_goals"] == 12
    assert not {"val", "test"} & set(metrics)
    assert metrics["model"] == "tiny" and set(metrics["model_size"]) == {"hidden_size", "intermediate_size",
                                                                       "num_layers", "num_heads"}


def test_cache_key_depends_on_what_changes_the_samples(models):
    _, ref_model, _ = models
    goals = stage1_goals(P)
    base = cache_key(weights_hash(ref_model), goals, P.apo, 0)
    assert base == cache_key(weights_hash(ref_model), goals, P.apo, 0)
    # beta1 shapes V*, not the samples: every beta1 reads the same cached rewards
    assert base == cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, beta1=1.0), 0)
    assert base != cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, vstar_samples=4), 0)
    assert base != cache_key(weights_hash(ref_model), goals[:-1], P.apo, 0)
    assert base != cache_key("another model", goals, P.apo, 0)
    assert base != cache_key(weights_hash(ref_model), goals, P.apo, 0, show_selected_options=True)
    greedy_search = cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, greedy_search=True), 0)
    explore = cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, greedy_search=True, explore=0.3), 0)
    once = cache_key(weights_hash(ref_model), goals,
                     dataclasses.replace(P.apo, greedy_search=True, explore=0.3, explore_once=True), 0)
    greedy_clicks = cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, greedy_clicks=True), 0)
    queries = cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, greedy_clicks=True,
                                                                             explore_search=0.5), 0)
    options = cache_key(weights_hash(ref_model), goals,
                        dataclasses.replace(P.apo, greedy_search=True, explore_options=0.3), 0)
    options_once = cache_key(weights_hash(ref_model), goals,
                             dataclasses.replace(P.apo, greedy_search=True, explore_options=0.3, explore_once=True), 0)
    products = cache_key(weights_hash(ref_model), goals,
                         dataclasses.replace(P.apo, greedy_search=True, explore_results=0.3), 0)
    products_once = cache_key(weights_hash(ref_model), goals,
                              dataclasses.replace(P.apo, greedy_search=True, explore_results=0.3, explore_once=True), 0)
    stop = cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, greedy_search=True, stop_repeats=True),
                     0)
    reading = dataclasses.replace(P.apo, greedy_search=True, explore_options=0.3, option_draw="policy")
    options_read = cache_key(weights_hash(ref_model), goals, reading, 0)
    assert len({base, greedy_search, explore, once, greedy_clicks, queries, options, options_once, products,
                products_once, stop, options_read}) == 12
    # the default draw leaves the keys of tables cached before it existed as they were
    assert options == cache_key(weights_hash(ref_model), goals, dataclasses.replace(
        P.apo, greedy_search=True, explore_options=0.3, option_draw="uniform"), 0)
    assert rollout_sampling(dataclasses.replace(P.apo, stop_repeats=True), 1.0).stop_repeats
    # explore_once without explore draws nothing: the same samples, the same key
    assert cache_key(weights_hash(ref_model), goals, dataclasses.replace(P.apo, explore_once=True), 0) == base


def test_weights_hash_sees_one_changed_weight(models):
    model, ref_model, _ = models
    assert weights_hash(model) == weights_hash(ref_model)
    other = copy.deepcopy(ref_model)  # the fixture's models stay untouched
    with torch.no_grad():
        next(other.parameters()).view(-1)[0] += 1e-3
    assert weights_hash(other) != weights_hash(ref_model)


def test_drop_unsolved_reports_the_count(models, monkeypatch):
    _, ref_model, tokenizer = models
    fake = [[0.0, 0.0], [1.0, 0.0]] + [[-0.1, 0.0]] * (P.apo.vstar_goals - 2)
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: (fake, []))
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, drop_unsolved=True))
    result = stage1(ref_model, tokenizer, profile, None, progress=False)
    assert result.dropped == P.apo.vstar_goals - 1 and len(result.table) == 1


def test_goal_filters_apply_to_cached_tables_too(models, monkeypatch, tmp_path):
    _, ref_model, tokenizer = models
    fake = [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]] + [[0.5, 0.2]] * (P.apo.vstar_goals - 3)
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: (fake, []))
    first = stage1(ref_model, tokenizer, P, tmp_path, progress=False)  # fills the cache, unfiltered
    assert len(first.table) == P.apo.vstar_goals and first.dropped == 0
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: pytest.fail("the cache was not used"))
    for flags, kept in [({"drop_unsolved": True}, P.apo.vstar_goals - 1), ({"keep_disagreeing": True}, 1),
                        ({"keep_varying": True}, P.apo.vstar_goals - 2), ({}, P.apo.vstar_goals)]:
        profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, **flags))
        result = stage1(ref_model, tokenizer, profile, tmp_path, progress=False)
        assert result.loaded and len(result.table) == kept and result.dropped == P.apo.vstar_goals - kept, flags
    disagreeing = stage1(ref_model, tokenizer, dataclasses.replace(P, apo=dataclasses.replace(P.apo, keep_disagreeing=True)),
                         tmp_path, progress=False)
    assert disagreeing.table["rewards"].tolist() == [[1.0, 0.0]]


def test_success_bonus_pays_a_perfect_return_more_and_keeps_it_at_one():
    assert training_reward(0.8, 0.0) == 0.8 and training_reward(1.0, 0.0) == 1.0
    assert training_reward(0.8, 1.0) == pytest.approx(0.4) and training_reward(1.0, 1.0) == 1.0
    assert training_reward(0.6, 3.0) == pytest.approx(0.15) and training_reward(-0.1, 1.0) == pytest.approx(-0.05)
    assert training_reward(1.0, 1.0) - training_reward(0.8, 1.0) > 1.0 - 0.8  # the gap to a near miss grows
    with pytest.raises(ValueError, match="success_bonus"):
        training_reward(0.5, -1.0)


def test_success_bonus_recomputes_vstar_from_the_cached_samples(models, monkeypatch, tmp_path):
    _, ref_model, tokenizer = models
    fake = [[1.0, 0.8], [0.8, 0.6]] + [[0.5, 0.2]] * (P.apo.vstar_goals - 2)
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: (fake, []))
    plain = stage1(ref_model, tokenizer, P, tmp_path, progress=False)
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: pytest.fail("the cache was not used"))
    bonus = dataclasses.replace(P, apo=dataclasses.replace(P.apo, success_bonus=1.0, keep_varying=True))
    shaped = stage1(ref_model, tokenizer, bonus, tmp_path, progress=False)
    assert shaped.loaded and shaped.key == plain.key and len(shaped.table) == P.apo.vstar_goals  # every goal varies
    assert shaped.table["rewards"][0] == pytest.approx([1.0, 0.4]) and shaped.table["successes"][0] == 1
    assert shaped.table["vstar"][0] == pytest.approx(optimal_value([1.0, 0.4], P.apo.beta1))
    assert shaped.table["vstar"][1] == pytest.approx(optimal_value([0.4, 0.3], P.apo.beta1))
    assert load_vstar(tmp_path / plain.key).table["rewards"][0] == [1.0, 0.8]  # the cache keeps the samples


def test_another_beta1_recomputes_vstar_from_the_cached_samples(models, monkeypatch, tmp_path):
    _, ref_model, tokenizer = models
    fake = [[1.0, 0.5], [0.8, 0.6]] + [[0.5, 0.2]] * (P.apo.vstar_goals - 2)
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: (fake, []))
    sharp = dataclasses.replace(P, apo=dataclasses.replace(P.apo, beta1=0.03))
    first = stage1(ref_model, tokenizer, sharp, tmp_path, progress=False)  # sampled for beta1 = 0.03
    assert first.beta1 == 0.03 and first.table["vstar"][0] == pytest.approx(optimal_value([1.0, 0.5], 0.03))
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: pytest.fail("the cache was not used"))
    for beta1 in (0.03, 0.5, 2.0):
        profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, beta1=beta1))
        result = stage1(ref_model, tokenizer, profile, tmp_path, progress=False)
        assert result.loaded and result.key == first.key and result.beta1 == beta1
        assert result.table["vstar"].tolist() == pytest.approx([optimal_value(r, beta1) for r in fake])
    # a small beta1 sits near the best sample, a large one near the mean
    assert first.table["vstar"][0] > 0.97 and result.table["vstar"][0] == pytest.approx(0.75, abs=0.02)
    assert load_vstar(tmp_path / first.key).beta1 == 0.03  # the file keeps the V* it was sampled for


def test_objective_inputs_train_on_the_bonus_reward_and_ppo_refuses_it(ref_dir, models, demos, vstar):
    model, ref_model, tokenizer = models
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    bonus = dataclasses.replace(P, apo=dataclasses.replace(P.apo, success_bonus=1.0))
    rescored = [dataclasses.replace(d, reward=r) for d, r in zip(demos, [1.0, 0.8, 0.6, 1.0])]  # a near miss, ...
    plain = objective_inputs(model, ref_model, rescored, tokenizer, table, P)
    shaped = objective_inputs(model, ref_model, rescored, tokenizer, table, bonus)
    assert plain.reward.tolist() == pytest.approx([1.0, 0.8, 0.6, 1.0])
    assert shaped.reward.tolist() == pytest.approx([1.0, 0.4, 0.3, 1.0])
    assert torch.equal(shaped.vstar, plain.vstar)  # V* comes from the table, reshaped by stage 1 itself
    for objective in ("ppo", "apo_split"):
        with pytest.raises(ValueError, match="success_bonus"):
            _trainer(ref_dir, vstar, objective=objective, profile=bonus)


def test_min_options_keeps_the_goals_that_ask_for_that_many(models, monkeypatch, tmp_path):
    _, ref_model, tokenizer = models
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards",
                        lambda model, tokenizer, goals, *a, **k: ([[1.0, 0.0]] * len(goals), []))
    everything = stage1(ref_model, tokenizer, P, tmp_path, progress=False)
    asked = [len(goal.options) for goal in everything.goals()]
    assert len(set(asked)) > 1, "the ci profile's stage-1 goals should mix option counts"
    for least in (1, 2):
        profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, min_options=least, keep_varying=True))
        result = stage1(ref_model, tokenizer, profile, tmp_path, progress=False)
        assert result.loaded and result.key == everything.key  # a filter: the cached samples serve it
        assert [len(g.options) for g in result.goals()] == [n for n in asked if n >= least]
        assert result.dropped == sum(n < least for n in asked)


def test_filter_samples_judges_the_filters_on_the_first_k_samples_and_keeps_vstar_from_all_n():
    from apo_helpers.apo.vstar import VStarTable, filter_goals, vstar_table
    from apo_helpers.webshop.catalog import default_catalog

    goals = default_catalog().split("train")[:5]
    rewards = [[1.0, 0.0, 1.0, 1.0],  # varies in the first two
               [0.5, 0.5, 0.2, 0.5],  # varies only in the last two
               [1.0, 1.0, 1.0, 0.0],  # solved by the first two, not by all four
               [0.0, 0.0, 0.0, 1.0],  # no success in the first two
               [0.3, 0.3, 0.3, 0.3]]  # flat
    table = VStarTable(vstar_table(goals, rewards, 0.5), "k")
    varying = dataclasses.replace(P.apo, keep_varying=True)
    assert filter_goals(table, varying).table["goal_index"].tolist() == [g.index for g in goals[:4]]
    first_two = filter_goals(table, dataclasses.replace(varying, filter_samples=2))
    assert first_two.table["goal_index"].tolist() == [goals[0].index]
    assert first_two.dropped == 4
    assert first_two.table["vstar"].tolist() == table.table["vstar"][:1].tolist()  # V* from all four samples
    assert first_two.table["rewards"].tolist() == [rewards[0]]
    disagreeing = dataclasses.replace(P.apo, keep_disagreeing=True, filter_samples=2)
    assert filter_goals(table, disagreeing).table["goal_index"].tolist() == [goals[0].index]
    unsolved = dataclasses.replace(P.apo, drop_unsolved=True, filter_samples=2)
    assert goals[3].index not in filter_goals(table, unsolved).table["goal_index"].tolist()
    solved = filter_goals(table, dataclasses.replace(varying, filter_samples=2, keep_solved=1.0))
    assert solved.table["goal_index"].tolist() == [goals[0].index, goals[2].index]  # goal 2 solved in its first two
    same = filter_goals(table, dataclasses.replace(varying, filter_samples=4))
    assert same.table.equals(filter_goals(table, varying).table)
    for wrong in (1, 5, -1):
        with pytest.raises(ValueError, match=f"filter_samples must be 0 .* N = 4 .*got {wrong}"):
            filter_goals(table, dataclasses.replace(varying, filter_samples=wrong))


def test_keep_solved_adds_back_a_fixed_share_of_the_always_solved_goals():
    from apo_helpers.apo.vstar import VStarTable, filter_goals, vstar_table
    from apo_helpers.webshop.catalog import default_catalog

    goals = default_catalog().split("train")[:12]
    rewards = [[1.0, 1.0]] * 8 + [[1.0, 0.0], [0.5, 0.2], [0.0, 0.0], [0.5, 0.5]]  # 8 solved, 2 varying, 2 flat
    table = VStarTable(vstar_table(goals, rewards, 0.5), "k")
    varying = dataclasses.replace(P.apo, keep_varying=True)
    assert len(filter_goals(table, varying).table) == 2
    for share, solved in ((0.25, 2), (0.5, 4), (1.0, 8)):
        kept = filter_goals(table, dataclasses.replace(varying, keep_solved=share))
        assert (kept.table["successes"] == 2).sum() == solved and len(kept.table) == 2 + solved
        assert kept.dropped == 12 - 2 - solved
        again = filter_goals(table, dataclasses.replace(varying, keep_solved=share))
        assert again.table["goal_index"].tolist() == kept.table["goal_index"].tolist()  # a fixed draw
    half = set(filter_goals(table, dataclasses.replace(varying, keep_solved=0.5)).table["goal_index"])
    assert half <= set(filter_goals(table, dataclasses.replace(varying, keep_solved=1.0)).table["goal_index"])
    disagreeing = dataclasses.replace(P.apo, keep_disagreeing=True, keep_solved=1.0)
    assert len(filter_goals(table, disagreeing).table) == 1 + 8  # [1, 0] and the solved ones
    with pytest.raises(ValueError, match="keep_solved is a share.*got 1.5"):
        filter_goals(table, dataclasses.replace(varying, keep_solved=1.5))


@pytest.mark.parametrize("damage", ["no_meta", "bad_json", "missing_column", "bad_rewards"])
def test_malformed_vstar_files_are_named(models, tmp_path, damage):
    _, ref_model, tokenizer = models
    folder = tmp_path / stage1(ref_model, tokenizer, P, tmp_path, progress=False).key
    csv = folder / "vstar.csv"
    if damage == "no_meta":
        (folder / "meta.json").unlink()
    elif damage == "bad_json":
        (folder / "meta.json").write_text("{")
    elif damage == "missing_column":
        pd.read_csv(csv).drop(columns="vstar").to_csv(csv, index=False)
    else:
        csv.write_text(csv.read_text().replace("[", "(", 1))
    with pytest.raises(DataFileError, match=str(folder.name)):
        load_vstar(folder)


# ---------------------------------------------------------------------------------------------- the loop

@pytest.fixture(scope="module")
def vstar(models, tmp_path_factory):
    _, ref_model, tokenizer = models
    return stage1(ref_model, tokenizer, P, tmp_path_factory.mktemp("vstar"), progress=False)


def _trainer(ref_dir, vstar, out_dir=None, iterations=None, objective="apo", profile=P):
    model, ref_model, tokenizer = load_models(ref_dir, "cpu")
    return Trainer(model, ref_model, tokenizer, vstar, profile, objective, seed=3, out_dir=out_dir,
                   iterations=iterations, evaluator=greedy_evaluation)


TIMING = ["rollout_seconds", "policy_forward_seconds", "ref_seconds", "update_seconds", "seconds"]


def test_run_records_history_and_evaluations(ref_dir, vstar):
    trainer = _trainer(ref_dir, vstar)
    state = trainer.run(progress=False)
    history = state.history
    assert history["iteration"].tolist() == list(range(1, P.apo.iterations + 1))
    expected = {"reward", "success", "loss", "kl", "entropy", "invalid_rate", "repeat_rate", "stopped_rate",
                "generated_tokens", "trained_tokens", "grad_norm", "lr", "apo_loss", "advantage", *TIMING}
    assert expected <= set(history.columns)
    assert history[["loss", "kl", "entropy"]].map(math.isfinite).all().all()
    assert (history["trained_tokens"] > 0).all()
    # evaluated before training, every eval_every iterations and at the end
    assert state.evals["iteration"].tolist() == [0, 2, 3]
    assert set(state.evals["split"]) == {"val"}


def test_max_minutes_ends_the_run_after_the_iteration_that_passes_it(ref_dir, vstar, tmp_path):
    """A wall-clock budget: the iteration that ends past it is the last one, evaluated and checkpointed as such."""
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, iterations=5, eval_every=100,
                                                                checkpoint_every=100, max_minutes=1e-6))
    state = _trainer(ref_dir, vstar, tmp_path, profile=profile).run(progress=False)
    assert state.iteration == 1 and len(state.history) == 1
    assert state.evals["iteration"].tolist() == [0, 1]
    assert latest_checkpoint(tmp_path).name == "iter_000001"


def test_a_trainer_without_an_evaluator_trains_and_says_why_it_cannot_evaluate(ref_dir, vstar):
    """The evaluator is handed in (the trainer imports nothing from analysis): without one, no val rows."""
    model, ref_model, tokenizer = load_models(ref_dir, "cpu")
    trainer = Trainer(model, ref_model, tokenizer, vstar, P, seed=3, iterations=1)
    state = trainer.run(progress=False)
    assert state.iteration == 1 and state.evals.empty
    with pytest.raises(ValueError, match="evaluator=greedy_evaluation"):
        trainer.evaluate()


def test_first_iteration_policy_equals_reference(ref_dir, vstar):
    trainer = _trainer(ref_dir, vstar)
    row = trainer.iteration()
    assert row["kl"] == pytest.approx(0.0, abs=1e-5)  # scored before the first step: pi == pi_ref
    assert row["apo_loss"] == pytest.approx(row["loss"])


def test_training_changes_the_policy_not_the_reference(ref_dir, vstar):
    shifted = VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] + 0.5), vstar.key)  # a non-zero advantage
    trainer = _trainer(ref_dir, shifted, iterations=2)
    before = weights_hash(trainer.ref_model)
    start = weights_hash(trainer.model)
    trainer.run(progress=False)
    assert weights_hash(trainer.ref_model) == before
    assert weights_hash(trainer.model) != start


def test_unknown_objective_and_empty_table(ref_dir, vstar):
    with pytest.raises(ValueError, match="unknown objective"):
        _trainer(ref_dir, vstar, objective="magic")
    empty = VStarTable(vstar.table.iloc[:0], vstar.key)
    with pytest.raises(ValueError, match="no goals"):
        _trainer(ref_dir, empty)


def _comparable(history):
    return history.drop(columns=TIMING).reset_index(drop=True)


def test_resume_continues_exactly(ref_dir, vstar, tmp_path):
    # two iterations, a checkpoint and a val evaluation after each: the run stopped after the first and resumed
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, iterations=2, eval_every=1, checkpoint_every=1))
    straight = _trainer(ref_dir, vstar, tmp_path / "straight", profile=profile)
    straight.run(progress=False)
    first = _trainer(ref_dir, vstar, tmp_path / "resumed", iterations=1, profile=profile)
    first.run(progress=False)
    assert latest_checkpoint(tmp_path / "resumed").name == "iter_000001"
    seed_everything(12345)  # a different global RNG state: the checkpoint must restore it
    second = _trainer(ref_dir, vstar, tmp_path / "resumed", profile=profile)
    assert second.load_checkpoint() == 1
    second.run(progress=False)
    pd.testing.assert_frame_equal(_comparable(second.state.history), _comparable(straight.state.history))
    pd.testing.assert_frame_equal(second.state.evals.reset_index(drop=True), straight.state.evals.reset_index(drop=True),
                                  check_dtype=False)
    for a, b in zip(second.model.state_dict().values(), straight.model.state_dict().values()):
        assert torch.equal(a, b)


def test_checkpoint_files_are_safe(ref_dir, vstar, tmp_path):
    trainer = _trainer(ref_dir, vstar, tmp_path, iterations=2)
    trainer.run(progress=False)
    folder = latest_checkpoint(tmp_path)
    assert {p.name for p in folder.iterdir()} == {"model.safetensors", "trainer_state.pt", "state.json", "history.csv",
                                                  "evals.csv"}
    saved = torch.load(folder / "trainer_state.pt", weights_only=True)  # tensors and plain types only
    assert set(saved) == {"optimizer", "rng"}
    assert json.loads((folder / "state.json").read_text())["iteration"] == 2


def test_a_crash_mid_save_keeps_the_last_checkpoint(ref_dir, vstar, tmp_path, monkeypatch):
    trainer = _trainer(ref_dir, vstar, tmp_path, iterations=2)
    trainer.run(progress=False)  # checkpoint at 2
    good = latest_checkpoint(tmp_path)

    def crash(model, path):
        open(path, "wb").write(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_module, "save_model", crash)
    trainer.state.iteration = 3
    with pytest.raises(KeyboardInterrupt):
        trainer.save_checkpoint()
    assert latest_checkpoint(tmp_path) == good
    monkeypatch.undo()
    resumed = _trainer(ref_dir, vstar, tmp_path)
    assert resumed.load_checkpoint() == 2
    resumed.state.iteration = 3
    assert resumed.save_checkpoint().name == "iter_000003"  # the half-written temporary folder is replaced
    assert not list((tmp_path / "checkpoints").glob(".tmp_*"))


def test_checkpoint_of_another_run_is_refused(ref_dir, vstar, tmp_path):
    _trainer(ref_dir, vstar, tmp_path, iterations=2).run(progress=False)
    other = VStarTable(vstar.table, "another-key")
    model, ref_model, tokenizer = load_models(ref_dir, "cpu")
    with pytest.raises(ValueError, match="another V"):
        Trainer(model, ref_model, tokenizer, other, P, out_dir=tmp_path).load_checkpoint()
    with pytest.raises(FileNotFoundError):
        _trainer(ref_dir, vstar, tmp_path / "empty").load_checkpoint()


def test_answer_only_logprobs_train_fewer_tokens(ref_dir, vstar):
    trainer = _trainer(ref_dir, vstar)
    trajectories = trainer_module.rollout(trainer.model, trainer.tokenizer, vstar.goals()[:2],
                                          Sampling(), P.policy, P.policy_env())
    _, every, _ = trained_sequences(trajectories, trainer.tokenizer, P.policy.window, "all")
    _, answer, _ = trained_sequences(trajectories, trainer.tokenizer, P.policy.window, "answer")
    assert sum(map(sum, answer)) <= sum(map(sum, every))


# ---------------------------------------------------------------------------------------------- apo_split

@pytest.fixture(scope="module")
def demos():
    """Expert episodes: search, click an item, then the item page (options, buy)."""
    return expert_demonstrations(P, 4)


def test_decision_turn_is_the_first_item_page(demos):
    for demo in demos:
        k = decision_turn(demo)
        assert "click[buy now]" in demo.turns[k].actions
        assert all("click[buy now]" not in u.actions for u in demo.turns[:k]) and k == 2  # search, results, item
    search_only = dataclasses.replace(demos[0], turns=demos[0].turns[:1])
    assert decision_turn(search_only) is None


def test_split_values_from_pi_ref_continuations(models, demos):
    _, ref_model, tokenizer = models
    seed_everything(0)
    split = split_values(ref_model, tokenizer, demos, P, samples=3)
    assert split.turn == [decision_turn(d) for d in demos] and split.continuations == 3 * len(demos)
    assert np.all(np.isfinite(split.value)) and np.all(split.value <= 1.0)
    assert split.reward_before.tolist() == [0.0] * len(demos)  # the expert's replies all parse: no penalty before
    seed_everything(0)
    again = split_values(ref_model, tokenizer, demos, P, samples=3)
    assert np.array_equal(split.value, again.value)           # seeded: the same continuations
    with pytest.raises(ValueError, match="split_samples"):
        split_values(ref_model, tokenizer, demos, P, samples=0)


def test_objective_inputs_mark_the_turns_after_the_split(models, demos):
    model, ref_model, tokenizer = models
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    seed_everything(0)
    split = split_values(ref_model, tokenizer, demos, P, samples=2)
    inputs = objective_inputs(model, ref_model, demos, tokenizer, table, P, split=split)
    sequences, masks, owner = trained_sequences(demos, tokenizer, P.policy.window)
    for row, demo in enumerate(demos):  # one chat per turn: count the assistant tokens of the turns from k on
        chats = [m for m, o in zip(masks, owner) if o == row]
        want = sum(sum(m) for m in chats[split.turn[row]:])
        assert int(inputs.token_after_split[inputs.token_row == row].sum()) == want > 0
    assert inputs.split_value.tolist() == pytest.approx(split.value.tolist())
    loss, stats = OBJECTIVES["apo_split"](inputs, P.apo)
    assert math.isfinite(loss.item()) and stats["split_fraction"] == 1.0


def test_apo_split_trains_and_records_its_cost(ref_dir, vstar):
    trainer = _trainer(ref_dir, vstar, objective="apo_split")
    row = trainer.iteration()
    assert {"split_seconds", "split_fraction", "split_value", "advantage_after_split"} <= set(row)
    assert row["kl"] == pytest.approx(0.0, abs=1e-5)
    whole = dataclasses.replace(P, policy=dataclasses.replace(P.policy, window=None))
    with pytest.raises(ValueError, match="window=1"):
        _trainer(ref_dir, vstar, objective="apo_split", profile=whole)


# ---------------------------------------------------------------------------------------------- command line

def test_cli_vstar_then_train(ref_dir, tmp_path, capsys):
    assert main(["vstar", "--profile", "ci", "--ref", str(ref_dir), "--out", str(tmp_path / "vs"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["goals"] == P.apo.vstar_goals and not summary["loaded_from_cache"]
    assert main(["train", "--profile", "ci", "--ref", str(ref_dir), "--vstar", str(tmp_path / "vs"), "--out",
                 str(tmp_path / "run"), "--seeds", "0", "--iterations", "1", "--json"]) == 0
    results = pd.read_csv(tmp_path / "run" / "results.csv")
    assert results["objective"].tolist() == ["apo", "pi_ref"]
    assert results["iterations"].tolist() == [1, 0]
    assert (tmp_path / "run" / "seed_0" / "policy" / "model.safetensors").exists()
    metrics = json.loads((tmp_path / "run" / "seed_0" / "metrics.json").read_text())
    assert metrics["vstar_key"] == summary["key"] and metrics["vstar_goals"] == summary["goals"]
    import torch
    assert metrics["numerics"]["torch"] == torch.__version__  # what a rerun elsewhere must match
    assert "numerics" not in results  # the seeds' table keeps scalars only
    # --set changes stage 1's goals (another cache key), as `train --set` would look it up
    capsys.readouterr()
    assert main(["vstar", "--profile", "ci", "--ref", str(ref_dir), "--out", str(tmp_path / "vs"), "--set",
                 "vstar_goals=6", "--json"]) == 0
    six = json.loads(capsys.readouterr().out)
    assert six["goals"] == 6 and six["key"] != summary["key"] and not six["loaded_from_cache"]
    assert metrics["ref"] == ref_dir.name and "test_option_clicked" in metrics and "test_options_right" in results
    assert metrics["ref_demonstrations"] is None  # this pi_ref folder has no metrics.json to say


def test_cli_vstar_reports_a_table_its_filters_emptied(ref_dir, tmp_path, capsys, monkeypatch):
    """Every goal filtered out (a weak pi_ref whose samples all score alike, with keep_varying): valid JSON with
    no means, and a warning naming how many goals were dropped."""
    from apo_helpers.apo import vstar as vstar_module

    empty = pd.DataFrame(columns=["split", "goal_index", "rewards", "vstar", "mean", "max", "successes"])
    monkeypatch.setattr(vstar_module, "stage1", lambda *a, **k: vstar_module.VStarTable(empty, "k", dropped=3))
    assert main(["vstar", "--profile", "ci", "--ref", str(ref_dir), "--out", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # json.loads accepts NaN; the check below is what refuses it
    assert summary["goals"] == 0 and summary["mean_vstar"] is None and summary["sample_success"] is None
    assert summary["dropped_by_filters"] == 3  # every filter's drops, not only the unsolved goals'
    assert "NaN" not in captured.out and "no goal of the 3" in captured.err


def test_a_run_plays_the_pages_its_reference_learned_on(ref_dir, tmp_path, capsys):
    import shutil

    from apo_helpers.policy.models import RENDERING_FILE, rendering_files

    marked = shutil.copytree(ref_dir, tmp_path / "marked_ref")
    for name, text in rendering_files(dataclasses.replace(P.policy, show_selected_options=True)).items():
        (marked / name).write_text(text)
    (marked / "metrics.json").write_text(json.dumps({"demonstrations": 7, "demo_skip_options": 0.25}))
    keys = []
    for ref in (ref_dir, marked):
        assert main(["vstar", "--profile", "ci", "--ref", str(ref), "--out", str(tmp_path / "vs"), "--json"]) == 0
        keys.append(json.loads(capsys.readouterr().out)["key"])
    assert keys[0] != keys[1]  # same weights, other pages: another V*
    assert main(["train", "--profile", "ci", "--ref", str(marked), "--vstar", str(tmp_path / "vs"), "--out",
                 str(tmp_path / "run"), "--seeds", "0", "--iterations", "1", "--skip-ref", "--json"]) == 0
    metrics = json.loads((tmp_path / "run" / "seed_0" / "metrics.json").read_text())
    assert metrics["show_selected_options"] and metrics["vstar_key"] == keys[1]
    assert metrics["ref_demonstrations"] == 7 and metrics["demo_skip_options"] == 0.25  # pi_ref's record, carried
    assert metrics["demo_forget_options"] == 0.0  # not recorded by that pi_ref: the full expert's 0
    recorded = json.loads((tmp_path / "run" / "seed_0" / "policy" / RENDERING_FILE).read_text())
    assert recorded == {"show_selected_options": True}


def test_cli_train_saves_under_a_name_of_its_own(ref_dir, tmp_path, monkeypatch, capsys):
    import apo_helpers.__main__ as cli

    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    (tmp_path / "results").mkdir()
    assert main(["train", "--profile", "ci", "--ref", str(ref_dir), "--vstar", str(tmp_path / "vs"), "--out",
                 str(tmp_path / "run"), "--seeds", "0", "--iterations", "1", "--skip-ref", "--save",
                 "--name", "apo_sloppy", "--json"]) == 0
    saved = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert saved == ["apo_sloppy_ci_evals.csv", "apo_sloppy_ci_history.csv", "apo_sloppy_ci_seeds.csv"]
    evals = pd.read_csv(tmp_path / "results" / "apo_sloppy_ci_evals.csv")
    assert {"option_clicked", "options_right", "success_with_options", "success_without_options"} <= set(evals)
    # --gather writes the same tables from the finished seed's files, training nothing
    monkeypatch.setattr("apo_helpers.runs.train_run", lambda *a, **k: pytest.fail("gather trained"))
    assert main(["train", "--profile", "ci", "--ref", str(ref_dir), "--out", str(tmp_path / "run"), "--seeds", "0",
                 "--skip-ref", "--save", "--name", "gathered", "--gather", "--json"]) == 0
    for part in ("seeds", "history", "evals"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "results" / f"gathered_ci_{part}.csv"),
                                      pd.read_csv(tmp_path / "results" / f"apo_sloppy_ci_{part}.csv"))
    capsys.readouterr()
    assert main(["train", "--profile", "ci", "--ref", str(ref_dir), "--out", str(tmp_path / "run"), "--seeds", "0",
                 "1", "--skip-ref", "--gather", "--json"]) == 2
    assert "seed_1 lacks metrics.json, history.csv, evals.csv" in capsys.readouterr().err


def test_cli_train_reanchors_each_seed_on_its_own_earlier_policy(ref_dir, tmp_path, capsys):
    """``--ref runs/<run>/seed_{seed}/policy``: each seed's stage 1 and regression start from its own earlier final
    policy; the rows stay named and measured by the first pi_ref, with the runs and iterations before them."""
    first = ["train", "--profile", "ci", "--vstar", str(tmp_path / "vs"), "--seeds", "1", "--iterations", "1", "--json"]
    assert main([*first, "--ref", str(ref_dir), "--out", str(tmp_path / "r1"), "--skip-ref"]) == 0
    capsys.readouterr()
    from apo_helpers.policy.models import load_policy

    learned = tmp_path / "r1" / "seed_1" / "policy"  # one ci iteration may leave the weights as they were: move them
    model, _ = load_policy(learned)
    with torch.no_grad():
        model.lm_head.weight.add_(0.01)
    model.save_pretrained(learned, safe_serialization=True)
    assert main([*first, "--ref", str(tmp_path / "r1" / "seed_{seed}" / "policy"), "--out", str(tmp_path / "r2")]) == 0
    results = pd.read_csv(tmp_path / "r2" / "results.csv")
    assert results["objective"].tolist() == ["apo", "pi_ref"]
    assert results["ref"].tolist() == [ref_dir.name, ref_dir.name]  # the first pi_ref, evaluated as the pi_ref row
    assert (results["ref_rounds"].iloc[0], results["ref_iterations"].iloc[0]) == (1, 1)
    before = json.loads((tmp_path / "r1" / "seed_1" / "metrics.json").read_text())
    after = json.loads((tmp_path / "r2" / "seed_1" / "metrics.json").read_text())
    assert (before["ref_rounds"], before["ref_iterations"]) == (0, 0)
    assert after["vstar_key"] != before["vstar_key"]  # V* of the re-anchored policy, not of the first pi_ref
    assert json.loads((tmp_path / "r2" / "seed_1" / "policy" / "lineage.json").read_text()) == {
        "origin": str(ref_dir), "rounds": 2, "iterations": 2}
    capsys.readouterr()
    assert main(["vstar", "--profile", "ci", "--ref", str(tmp_path / "r1" / "seed_{seed}" / "policy")]) == 2
    assert "only `train` fills it in" in capsys.readouterr().err


def test_lineage_follows_a_policy_to_the_pi_ref_its_runs_started_from(tmp_path):
    from apo_helpers.apo.sft import with_reference_goals
    from apo_helpers.policy.models import LINEAGE_FILE, Lineage, lineage, lineage_files

    origin, policy = tmp_path / "pi_ref", tmp_path / "policy"
    origin.mkdir(), policy.mkdir()
    assert lineage(origin) == Lineage(origin, 0, 0)  # a pi_ref is its own origin
    record = lineage_files(origin, 60)
    (policy / LINEAGE_FILE).write_text(record[LINEAGE_FILE])
    assert (lineage(policy).origin, lineage(policy).rounds, lineage(policy).iterations) == (origin, 1, 60)
    assert json.loads(lineage_files(policy, 40)[LINEAGE_FILE]) == {"origin": str(origin), "rounds": 2,
                                                                    "iterations": 100}
    more = 3 * P.reference.demonstrations  # stage 1 skips the goals the origin imitated, not the profile's count
    (origin / "metrics.json").write_text(json.dumps({"demo_goals": more}))
    assert with_reference_goals(P, policy).reference.demonstrations == more
    # recorded relative to the working directory of the run that wrote it: found from another one, above the policy
    run = tmp_path / "project" / "runs" / "r1" / "seed_0" / "policy"
    run.mkdir(parents=True)
    (tmp_path / "project" / "runs" / "pi_ref").mkdir()
    (tmp_path / "project" / "runs" / "pi_ref" / "metrics.json").write_text(json.dumps({"demo_goals": more}))
    (run / LINEAGE_FILE).write_text(json.dumps({"origin": "runs/pi_ref", "rounds": 1, "iterations": 60}))
    assert lineage(run).origin == tmp_path / "project" / "runs" / "pi_ref"
    assert with_reference_goals(P, run).reference.demonstrations == more
    shutil.rmtree(tmp_path / "project" / "runs" / "pi_ref")  # the origin gone: a clear error, not other goals
    assert lineage(run).origin == Path("runs/pi_ref")
    with pytest.raises(ValueError, match="lineage.json names the pi_ref its chain started from, runs/pi_ref"):
        with_reference_goals(P, run)
    for text in ["{oops", "[1]", '{"origin": "x", "rounds": 1}', '{"origin": "x", "rounds": -1, "iterations": 1}',
                 '{"origin": 3, "rounds": 1, "iterations": 1}']:
        (policy / LINEAGE_FILE).write_text(text)
        with pytest.raises(ValueError, match="lineage.json"):
            lineage(policy)


def test_average_policies_is_the_weights_mean_and_keeps_the_chain(ref_dir, tmp_path, capsys):
    """A soup of one run's seeds: each weight the mean of theirs, the seeds' lineage kept (so it can be every seed's
    next pi_ref), and a clear error for folders that cannot be averaged."""
    import shutil

    from apo_helpers.policy.models import (AVERAGED_FILE, LINEAGE_FILE, averaged_count, lineage, lineage_files,
                                           load_policy)

    seeds = []
    for k, shift in enumerate([0.0, 0.3, 0.9]):
        folder = tmp_path / f"seed_{k}"
        shutil.copytree(ref_dir, folder)
        (folder / LINEAGE_FILE).write_text(lineage_files(ref_dir, 60)[LINEAGE_FILE])
        model, _ = load_policy(folder)
        with torch.no_grad():
            model.model.norm.weight.add_(shift)
        model.save_pretrained(folder, safe_serialization=True)
        seeds.append(folder)
    assert main(["average", *map(str, seeds), "--out", str(tmp_path / "soup"), "--json"]) == 0
    capsys.readouterr()
    soup, _ = load_policy(tmp_path / "soup")
    ref, _ = load_policy(ref_dir)
    torch.testing.assert_close(soup.model.norm.weight, ref.model.norm.weight + 0.4)
    torch.testing.assert_close(soup.model.embed_tokens.weight, ref.model.embed_tokens.weight)
    assert lineage(tmp_path / "soup") == lineage(seeds[0])
    assert json.loads((tmp_path / "soup" / AVERAGED_FILE).read_text()) == list(map(str, seeds))
    assert (averaged_count(tmp_path / "soup"), averaged_count(seeds[0])) == (3, 0)  # train's metrics: ref_averaged
    (tmp_path / "broken").mkdir()
    for text in ["{oops", '["only one"]']:
        (tmp_path / "broken" / AVERAGED_FILE).write_text(text)
        with pytest.raises(ValueError, match=AVERAGED_FILE):
            averaged_count(tmp_path / "broken")
    (seeds[2] / LINEAGE_FILE).write_text(lineage_files(seeds[0], 60)[LINEAGE_FILE])  # a later round
    assert main(["average", *map(str, seeds), "--out", str(tmp_path / "bad")]) == 2
    assert "different chains" in capsys.readouterr().err
    assert main(["average", str(seeds[0]), "--out", str(tmp_path / "bad")]) == 2
    assert "at least two" in capsys.readouterr().err
    assert main(["average", str(seeds[0]), str(tmp_path / "nothing"), "--out", str(tmp_path / "bad")]) == 2
    assert "no policy at" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_cli_train_without_reference_says_how_to_get_one(tmp_path, capsys):
    assert main(["train", "--profile", "ci", "--ref", str(tmp_path / "nothing")]) == 2
    assert "train-ref" in capsys.readouterr().err


def test_train_run_resumes_a_finished_run_without_training(ref_dir, vstar, tmp_path, monkeypatch):
    monkeypatch.setattr("apo_helpers.apo.vstar.sample_rewards", lambda *a, **k: pytest.fail("stage 1 not cached"))
    cache = tmp_path / "vs"
    vstar_folder = cache / vstar.key
    from apo_helpers.apo.vstar import save_vstar

    save_vstar(vstar, vstar_folder, {})
    first = train_run(P, ref_dir, cache, tmp_path / "run", seed=0, iterations=2, progress=False)
    monkeypatch.setattr(Trainer, "iteration", lambda self: pytest.fail("trained again"))
    monkeypatch.setattr(trainer_module, "peak_memory_mb", lambda: 1.0)  # as if a fresh process only loaded it
    again = train_run(P, ref_dir, cache, tmp_path / "run", seed=0, iterations=2, resume=True, progress=False)
    assert again["iterations"] == first["iterations"] == 2
    assert again["test_success"] == first["test_success"]
    assert again["peak_memory_mb"] == first["peak_memory_mb"] > 1.0  # the training's peak, not the resume's


def test_set_overrides_apo_fields():
    from apo_helpers.__main__ import with_overrides
    from apo_helpers.config import apo_overrides

    changed = with_overrides(P, ["beta2=0.01", "temperature=0.7", "drop_unsolved=true", "logprob_tokens=answer",
                                 "iterations=7"])
    assert (changed.apo.beta2, changed.apo.temperature, changed.apo.drop_unsolved) == (0.01, 0.7, True)
    assert (changed.apo.logprob_tokens, changed.apo.iterations) == ("answer", 7)
    assert with_overrides(P, []) == P
    assert apo_overrides(P) == ""
    assert apo_overrides(with_overrides(P, ["greedy_search=true", "lr=0.0001"])) == "greedy_search=True lr=0.0001"
    for bad, message in [("beta3=1", "APOConfig"), ("beta2", "name=value"), ("iterations=many", "int"),
                         ("drop_unsolved=maybe", "true or false")]:
        with pytest.raises(ValueError, match=message):
            with_overrides(P, [bad])


def test_model_size_overrides_resize_the_tiny_llama_only():
    from apo_helpers.config import with_model_size

    wider = with_model_size(P, ["hidden_size=96", "intermediate_size=192", "num_layers=3"])
    assert (wider.model.hidden_size, wider.model.intermediate_size, wider.model.num_layers) == (96, 192, 3)
    assert wider.model.num_heads == P.model.num_heads and wider.apo == P.apo
    assert with_model_size(P, []) == P
    for bad, message in [("vocab_size=512", "hidden_size"), ("hidden_size", "hidden_size"),
                         ("num_layers=0", "positive integer"), ("hidden_size=2.5", "positive integer"),
                         ("hidden_size=65", "multiple of num_heads")]:
        with pytest.raises(ValueError, match=message):
            with_model_size(P, [bad])
    pretrained = dataclasses.replace(P, model=dataclasses.replace(P.model, name="smollm2-135m"))
    with pytest.raises(ValueError, match="tiny Llama only"):
        with_model_size(pretrained, ["hidden_size=256"])


def test_cli_train_ref_model_resizes_pi_ref_and_runs_record_it(tmp_path, monkeypatch, capsys):
    """``train-ref --model``: a pi_ref of its own size, in a folder named after it, its size in metrics.json; the
    runs from it record the size (``ref_model_size``), which labels their rows in the README's tables. Imitation
    steps other than the profile's name the folder too and are recorded the same way (``ref_sft_steps``)."""
    import apo_helpers.__main__ as cli
    from apo_helpers.apo import sft
    from apo_helpers.policy.models import load_policy
    from apo_helpers.runs import _ref_record

    monkeypatch.setattr(sft, "RUNS_DIR", tmp_path)  # the default folder, under tmp_path
    assert cli.main(["train-ref", "--profile", "ci", "--demonstrations", "6", "--sft-steps", "2", "--pretrain-steps",
                     "0", "--model", "hidden_size=48", "num_layers=1", "--no-eval", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    folders = [path for path in tmp_path.iterdir() if path.is_dir()]
    assert [path.name for path in folders] == [
        "pi_ref_ci_demos_6_hidden_size_48_num_layers_1_pretrain_steps_0_sft_steps_2"]
    model, _ = load_policy(folders[0])
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (48, 1)
    assert out["model_size"]["hidden_size"] == 48 and out["parameters"] == sum(p.numel() for p in model.parameters())
    record = _ref_record(folders[0])
    assert record["ref_model_size"] == f"hidden 48, 1 layers, {out['parameters'] / 1e6:.1f}M parameters"
    assert (out["pretrain_steps"], out["sft_steps"]) == (0, 2)
    assert (record["ref_pretrain_steps"], record["ref_sft_steps"]) == (0, 2)
    assert out["demo_think"] == record["demo_think"] == "short"
    assert out["demo_query"] == record["demo_query"] == "instruction"
    (folders[0] / "metrics.json").write_text(json.dumps({**out, "model_size": {
        name: getattr(P.model, name) for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads")}}))
    assert _ref_record(folders[0])["ref_model_size"] is None  # the profile's own size says nothing more
    (folders[0] / "metrics.json").write_text(json.dumps({**out, "sft_steps": P.reference.sft_steps}))
    assert _ref_record(folders[0])["ref_sft_steps"] is None  # nor do the profile's own steps


def test_groups_repeat_each_goal(ref_dir, vstar):
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, batch_goals=4, group_size=2))
    goals = _trainer(ref_dir, vstar, profile=profile).draw_goals()
    assert len(goals) == 4 and goals[0] == goals[1] and goals[2] == goals[3] and goals[0] != goals[2]
    single = _trainer(ref_dir, vstar).draw_goals()
    assert len(single) == P.apo.batch_goals and len({(g.split, g.index) for g in single}) == len(single)


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_every_objective_runs_in_the_loop(ref_dir, vstar, objective):
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, batch_goals=4, group_size=2))
    shifted = VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] + 0.5), vstar.key)
    trainer = _trainer(ref_dir, shifted, objective=objective, profile=profile)
    start = weights_hash(trainer.model)
    row = trainer.iteration()
    assert math.isfinite(row["loss"]) and row["trained_tokens"] > 0
    assert (weights_hash(trainer.model) != start) or objective in ("grpo", "starpo_s")  # equal rewards: no signal


def test_ppo_values_cover_every_turn(ref_dir, vstar):
    trainer = _trainer(ref_dir, vstar, objective="ppo")
    trajectories = trainer_module.rollout(trainer.model, trainer.tokenizer, vstar.goals()[:3],
                                          Sampling(), P.policy, P.policy_env())
    inputs = trainer_module.objective_inputs(trainer.model, trainer.ref_model, trajectories, trainer.tokenizer, vstar,
                                             P, value_head=trainer.value_head)
    turns = sum(t.num_turns for t in trajectories)
    assert inputs.values.shape == (turns,) and inputs.turn_rewards.shape == (turns,)
    assert inputs.token_turn.shape == inputs.token_logp.shape
    # every token's turn belongs to the token's trajectory
    assert torch.equal(inputs.turn_row[inputs.token_turn], inputs.token_row)
    assert inputs.turn_rewards.sum().item() == pytest.approx(sum(t.reward for t in trajectories), abs=1e-5)
    assert inputs.values.requires_grad


def test_ppo_checkpoint_keeps_the_value_head(ref_dir, vstar, tmp_path):
    trainer = _trainer(ref_dir, vstar, tmp_path, iterations=2, objective="ppo")
    with torch.no_grad():
        trainer.value_head.linear.bias.fill_(0.25)
    trainer.run(progress=False)
    assert (latest_checkpoint(tmp_path) / "value_head.safetensors").exists()
    resumed = _trainer(ref_dir, vstar, tmp_path, objective="ppo")
    resumed.load_checkpoint()
    assert torch.equal(resumed.value_head.linear.bias, trainer.value_head.linear.bias)


def test_compare_runs_each_objective_in_its_own_process(ref_dir, tmp_path):
    from apo_helpers.apo.compare import compare, dynamics, time_to_target

    summary, curves = compare(["apo", "grpo"], [0], "ci", tmp_path / "cmp", str(ref_dir), str(tmp_path / "vs"),
                              iterations=1, target=0.0, progress=lambda line: None, jobs=2)
    assert summary["objective"].tolist() == ["apo", "grpo"]
    assert (summary["peak_memory_mb"] > 0).all()
    assert summary.set_index("objective").loc["apo", "stage1_seconds"] > 0     # A*PO pays for V*
    assert summary.set_index("objective").loc["grpo", "stage1_seconds"] == 0
    assert set(curves.columns) >= {"objective", "seed", "iteration", "seconds", "episodes", "tokens", "success"}
    assert curves.groupby("objective")["iteration"].apply(list).to_dict() == {"apo": [0, 1], "grpo": [0, 1]}
    first = curves[curves["objective"] == "apo"]
    assert time_to_target(first, 0.0) == 0.0 and time_to_target(first, 1.01) is None
    history = dynamics(tmp_path / "cmp", ["apo", "grpo"], [0])
    assert history[["objective", "iteration"]].values.tolist() == [["apo", 1], ["grpo", 1]]
    assert history[["kl", "invalid_rate", "reward"]].notna().all().all()


def test_sweep_reports_kl_per_value(ref_dir, tmp_path, capsys):
    assert main(["sweep", "--name", "beta2", "--values", "0.5", "--profile", "ci", "--ref", str(ref_dir),
                 "--vstar", str(tmp_path / "vs"), "--iterations", "1", "--out", str(tmp_path / "sw"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["beta2"] for r in rows] == ["0.5"]
    assert {"test_success", "val_success", "kl_last_quarter", "log_ratio_abs_last_quarter"} <= set(rows[0])
    assert (tmp_path / "sw" / "beta2=0.5" / "seed_0" / "metrics.json").exists()


@pytest.mark.parametrize("objective", ["apo", "ppo", "grpo", "apo_split"])
def test_backward_per_micro_batch_gives_the_same_gradients(ref_dir, vstar, demos, objective):
    """The memory-lean update (gradients w.r.t. the log-probs first, then each micro-batch's own backward) must equal
    one backward through the whole batch: same loss, same gradient of every parameter (critic included). apo_split
    updates on the expert's episodes, which all reach an item page (the ci pi_ref's rarely do)."""
    shifted = VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] - 0.3), vstar.key)  # non-zero advantages
    if objective == "apo_split":
        shifted = VStarTable(vstar_table([d.goal for d in demos], [[0.9, 1.0]] * len(demos), P.apo.beta1), "demos")
    gradients = {}
    for lean in (False, True):
        apo = dataclasses.replace(P.apo, batch_goals=4, group_size=2 if objective == "grpo" else 1, micro_batch=3,
                                  entropy_coef=0.01, backward_per_micro_batch=lean)
        trainer = _trainer(ref_dir, shifted, objective=objective, profile=dataclasses.replace(P, apo=apo))
        seed_everything(11)
        trajectories = trainer_module.rollout(trainer.model, trainer.tokenizer, trainer.draw_goals(),
                                              Sampling(temperature=1.0), P.policy, P.policy_env())
        if objective == "apo_split":
            trajectories = demos
        trainer.optimizer.step = lambda: None  # keep the weights: compare the gradients of one batch
        _, loss, _, grad_norm = trainer.update(trajectories)
        named = list(trainer.model.named_parameters()) + (
            list(trainer.value_head.named_parameters(prefix="critic")) if trainer.value_head else [])
        gradients[lean] = (loss.item(), grad_norm.item(), {n: p.grad.clone() for n, p in named if p.grad is not None})
    (loss, norm, plain), (lean_loss, lean_norm, lean) = gradients[False], gradients[True]
    assert norm > 1e-4, "the batch must carry a gradient for the check to mean anything"
    assert lean_loss == pytest.approx(loss, rel=1e-5, abs=1e-7) and lean_norm == pytest.approx(norm, rel=1e-4)
    assert plain.keys() == lean.keys()
    for name in plain:
        torch.testing.assert_close(lean[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


def test_lean_update_past_max_graph_tokens_only():
    config = P.apo
    assert not lean_update(config, 10**9)  # no limit by default
    assert lean_update(dataclasses.replace(config, backward_per_micro_batch=True), 1)  # always, when asked
    limited = dataclasses.replace(config, max_graph_tokens=1000)
    assert not lean_update(limited, 1000) and lean_update(limited, 1001)


def test_max_graph_tokens_switches_a_large_batch_to_the_lean_update(ref_dir, vstar):
    """Under the limit an update is the plain one, bit for bit; past it, the lean one (backward_per_micro_batch's),
    bit for bit; the history says which and how many tokens were scored."""
    shifted = VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] - 0.3), vstar.key)  # non-zero advantages

    def update(**settings):
        apo = dataclasses.replace(P.apo, batch_goals=4, micro_batch=3, **settings)
        trainer = _trainer(ref_dir, shifted, profile=dataclasses.replace(P, apo=apo))
        trajectories = _fixed_batch(trainer)
        trainer.optimizer.step = lambda: None  # compare the gradients of one batch
        _, loss, stats, _ = trainer.update(trajectories)
        return loss.item(), stats, {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    plain_loss, plain_stats, plain = update()
    tokens = plain_stats["scored_tokens"]
    assert plain_stats["lean_update"] == 0.0 and tokens > 100
    at_limit_loss, at_limit_stats, at_limit = update(max_graph_tokens=tokens)
    lean_loss, _, lean = update(backward_per_micro_batch=True)
    past_loss, past_stats, past = update(max_graph_tokens=tokens - 1)
    assert at_limit_stats["lean_update"] == 0.0 and past_stats["lean_update"] == 1.0
    assert (at_limit_loss, past_loss) == (plain_loss, lean_loss)
    assert plain.keys() == at_limit.keys() == lean.keys() == past.keys()
    assert max(g.abs().max().item() for g in plain.values()) > 1e-6, "the batch must carry a gradient"
    for name in plain:
        assert torch.equal(at_limit[name], plain[name]) and torch.equal(past[name], lean[name]), name
        torch.testing.assert_close(past[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)  # the same gradient
    history = _trainer(ref_dir, vstar, iterations=1, profile=dataclasses.replace(
        P, apo=dataclasses.replace(P.apo, max_graph_tokens=1))).run(progress=False).history
    assert history["lean_update"].tolist() == [1.0] and history["scored_tokens"].iloc[0] > 100


def _fixed_batch(trainer, seed=11):
    seed_everything(seed)
    return trainer_module.rollout(trainer.model, trainer.tokenizer, trainer.draw_goals(),
                                  Sampling(temperature=1.0), P.policy, P.policy_env())


@pytest.mark.parametrize("objective", ["apo", "ppo"])
def test_update_epochs_fit_one_batch_and_score_pi_ref_once(ref_dir, vstar, objective, monkeypatch):
    """Several optimizer steps on one batch: pi_ref is scored once, the old policy's log-probs stay the first
    scoring's, the returned inputs are the batch as sampled, and the steps fit it (the last loss is lower)."""
    shifted = VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] - 0.3), vstar.key)  # non-zero advantages
    apo = dataclasses.replace(P.apo, batch_goals=4, lr=3e-5, warmup=1, update_epochs=4)
    trainer = _trainer(ref_dir, shifted, objective=objective, profile=dataclasses.replace(P, apo=apo))
    trajectories = _fixed_batch(trainer)
    scored, calls = trainer_module.score_tokens, []

    def counting(model, *args, **kwargs):
        calls.append(model is trainer.ref_model)
        return scored(model, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "score_tokens", counting)
    olds = []
    steps = trainer._step

    def recording(inputs, *args):
        olds.append(inputs.token_logp_old.clone())
        return steps(inputs, *args)

    trainer._step = recording
    inputs, loss, stats, _ = trainer.update(trajectories)
    assert calls.count(True) == 1 and calls.count(False) == 4  # pi_ref once, the policy before each step
    assert len(olds) == 4 and all(torch.equal(old, olds[0]) for old in olds)
    assert torch.allclose(inputs.token_logp.detach(), olds[0])  # the batch as sampled, not as fitted
    assert stats["loss_last_epoch"] < loss.item()


def test_one_update_epoch_is_the_default_loop(ref_dir, vstar):
    """update_epochs=1 is RAGEN's loop: one step, no last-epoch loss in the history."""
    trainer = _trainer(ref_dir, vstar)
    row = trainer.iteration()
    assert P.apo.update_epochs == 1 and "loss_last_epoch" not in row


def test_fit_one_batch_starts_at_pi_ref_and_fits_at_a_small_step(ref_dir, vstar):
    shifted = VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] - 0.3), vstar.key)  # non-zero advantages
    table = trainer_module.fit_one_batch(ref_dir, shifted, P, lrs=(3e-3, 3e-5), steps=4)
    assert table.groupby("lr").size().tolist() == [5, 5]
    start = table[table["step"] == 0]
    assert start["loss"].nunique() == 1 and (start["log_ratio_abs"] < 1e-5).all()  # one batch, pi = pi_ref
    small = table[table["lr"] == 3e-5].set_index("step")
    assert small.loc[4, "loss"] < small.loc[0, "loss"]
    assert (table[table["step"] > 0]["log_ratio_abs"] > 0).all()


# ---------------------------------------------------------------------------------------------- where to explore

EXPLORING = dataclasses.replace(P, apo=dataclasses.replace(P.apo, greedy_search=True, explore=0.5))


def test_sampled_only_leaves_the_greedy_turns_out(models, demos):
    _, _, tokenizer = models
    marked = [dataclasses.replace(d, turns=[dataclasses.replace(u, greedy=k == 0) for k, u in enumerate(d.turns)])
              for d in demos]
    every = trained_sequences(marked, tokenizer, P.policy.window)
    sampled = trained_sequences(marked, tokenizer, P.policy.window, sampled_only=True)
    firsts = {owner: k for k, owner in reversed(list(enumerate(every[2])))}  # each trajectory's first chat
    kept = [k for k in range(len(every[0])) if k not in firsts.values()]
    assert sampled == tuple([every[i][k] for k in kept] for i in range(3))
    with pytest.raises(ValueError, match="greedy_search needs one chat per turn"):
        trained_sequences(marked, tokenizer, None, sampled_only=True)


def test_uncredited_repeats_leave_only_the_winners_loops_out(models, demos):
    """``credit_repeats=False`` drops the repeated turns' chats of the trajectories above V*, and only those: the
    winners' first clicks and the losers' repeats still train."""
    _, _, tokenizer = models
    goals = [d.goal for d in demos]
    table = VStarTable(vstar_table(goals, [[0.5, 0.5]] * len(goals), P.apo.beta1), "demo-goals")  # V* = 0.5
    looped = [dataclasses.replace(d, reward=reward, turns=[dataclasses.replace(u, repeated=k == 2)
                                                           for k, u in enumerate(d.turns)])
              for d, reward in zip(demos, [1.0, 0.0, 1.0, 0.2])]
    assert all(d.num_turns > 2 for d in looped)
    off = dataclasses.replace(P.apo, credit_repeats=False)
    assert trainer_module.uncredited_turns(looped, table, P.apo) == frozenset()  # the default credits every turn
    assert trainer_module.uncredited_turns(looped, table, off) == {(0, 2), (2, 2)}
    every = trained_sequences(looped, tokenizer, P.policy.window)
    profile = dataclasses.replace(P, apo=off)
    kept = trainer_module.training_sequences(looped, tokenizer, table, profile)
    positions = {}  # (trajectory, turn) of each chat: one chat per turn
    for i, owner in enumerate(every[2]):
        positions[i] = (owner, sum(1 for o in every[2][:i] if o == owner))
    assert kept == tuple([every[j][i] for i in positions if positions[i] not in {(0, 2), (2, 2)}] for j in range(3))
    with pytest.raises(ValueError, match="credit_repeats=False needs one chat per turn"):
        trained_sequences(looped, tokenizer, None, skip_turns=frozenset({(0, 2)}))


def test_uncredited_repeats_need_the_apo_objective(models, vstar):
    model, ref_model, tokenizer = models
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, credit_repeats=False))
    with pytest.raises(ValueError, match="credit_repeats=False .* needs the apo objective, got 'grpo'"):
        Trainer(model, ref_model, tokenizer, vstar, profile, objective="grpo")
    assert not Trainer(model, ref_model, tokenizer, vstar, profile).config.credit_repeats


def test_the_split_counts_turns_when_the_search_is_left_out(models, demos):
    model, ref_model, tokenizer = models
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    marked = [dataclasses.replace(d, turns=[dataclasses.replace(u, greedy=k == 0) for k, u in enumerate(d.turns)])
              for d in demos]
    seed_everything(0)
    split = split_values(ref_model, tokenizer, marked, P, samples=2)
    every = objective_inputs(model, ref_model, marked, tokenizer, table, P, split=split)
    sampled = objective_inputs(model, ref_model, marked, tokenizer, table, EXPLORING, split=split)
    _, masks, owner = trained_sequences(marked, tokenizer, P.policy.window)
    for row in range(len(demos)):  # the search turn comes before the split: only the tokens before it change
        after = lambda inputs: int(inputs.token_after_split[inputs.token_row == row].sum())
        assert after(sampled) == after(every) > 0
        search_tokens = sum(next(m for m, o in zip(masks, owner) if o == row))
        assert sampled.tokens[row] == every.tokens[row] - search_tokens


def test_greedy_search_trains_on_the_sampled_turns(ref_dir, demos, tmp_path):
    model, ref_model, tokenizer = load_models(ref_dir, "cpu")
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    trainer = Trainer(model, ref_model, tokenizer, table, EXPLORING, seed=3)
    batch = [dataclasses.replace(d, turns=[dataclasses.replace(u, greedy=k == 0) for k, u in enumerate(d.turns)])
             for d in demos]  # the search typed greedily, the clicks sampled
    _, masks, owner = trained_sequences(batch, tokenizer, P.policy.window)
    inputs, loss, _, _ = trainer.update(batch)
    turns = [u for t in batch for u in t.turns]
    assert int(inputs.tokens.sum()) == sum(sum(m) for m, u in zip(masks, turns) if not u.greedy) > 0
    assert math.isfinite(loss.item())
    for t in batch:  # a batch whose every turn was greedy has nothing to train on: no step
        for u in t.turns:
            u.greedy = True
    before = [p.detach().clone() for p in model.parameters()]
    inputs, loss, _, grad_norm = trainer.update(batch)
    assert int(inputs.tokens.sum()) == 0 and float(grad_norm) == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    seed_everything(0)  # stage 1 and the rollouts explore the same way
    explored = stage1(ref_model, tokenizer, EXPLORING, tmp_path, goals=[d.goal for d in demos], progress=False)
    assert explored.key != stage1(ref_model, tokenizer, P, tmp_path, goals=[d.goal for d in demos],
                                  progress=False).key
    with pytest.raises(ValueError, match="ppo's critic needs every turn"):
        Trainer(model, ref_model, tokenizer, table, EXPLORING, "ppo")
    with pytest.raises(ValueError, match="greedy_search needs one chat per turn"):
        Trainer(model, ref_model, tokenizer, table,
                dataclasses.replace(EXPLORING, policy=dataclasses.replace(P.policy, window=None)))


ANCHORED = dataclasses.replace(P, apo=dataclasses.replace(EXPLORING.apo, greedy_anchor=1.0))


def _greedy_search_batch(demos):
    """The expert's episodes as ``greedy_search`` rollouts look: the search turn greedy, the clicks sampled."""
    return [dataclasses.replace(d, turns=[dataclasses.replace(u, greedy=k == 0) for k, u in enumerate(d.turns)])
            for d in demos]


def _drifted_trainer(ref_dir, table, profile, seed=5):
    """A Trainer whose policy has moved away from pi_ref (small seeded noise on every weight)."""
    model, ref_model, tokenizer = load_models(ref_dir, "cpu")
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.02 * torch.randn_like(parameter))
    return Trainer(model, ref_model, tokenizer, table, profile, seed=3)


def test_greedy_anchor_pulls_the_greedy_turns_back_to_pi_ref(ref_dir, demos):
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    batch = _greedy_search_batch(demos)
    trainer = _drifted_trainer(ref_dir, table, ANCHORED)
    inputs, _, stats, _ = trainer.update(batch)
    _, masks, _ = trained_sequences(batch, trainer.tokenizer, P.policy.window)
    turns = [u for t in batch for u in t.turns]
    assert len(inputs.anchor_token_logp) == sum(sum(m) for m, u in zip(masks, turns) if u.greedy) > 0
    assert int(inputs.tokens.sum()) == sum(sum(m) for m, u in zip(masks, turns) if not u.greedy)  # trained: unchanged
    assert stats["anchor_log_ratio_abs"] > 0.5  # the noise moved the search replies' log-probs
    # on the greedy turns alone the anchor is the whole loss: steps on it shrink their log-ratio to pi_ref
    only_search = [dataclasses.replace(t, turns=t.turns[:1]) for t in batch]
    first = trainer.update(only_search)[2]["anchor_log_ratio_abs"]
    for _ in range(5):
        last = trainer.update(only_search)[2]["anchor_log_ratio_abs"]
    assert last < 0.7 * first
    unanchored = _drifted_trainer(ref_dir, table, EXPLORING)  # the same drift without the anchor: no step at all
    before = [p.detach().clone() for p in unanchored.model.parameters()]
    _, _, stats, grad_norm = unanchored.update(only_search)
    assert float(grad_norm) == 0.0 and "anchor_loss" not in stats
    assert all(torch.equal(a, b) for a, b in zip(before, unanchored.model.parameters()))


def test_greedy_anchor_backward_per_micro_batch_gives_the_same_gradients(ref_dir, demos):
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.2, 0.9]] * len(demos), P.apo.beta1), "demo-goals")
    gradients = {}
    for lean in (False, True):
        apo = dataclasses.replace(ANCHORED.apo, micro_batch=3, backward_per_micro_batch=lean)
        trainer = _drifted_trainer(ref_dir, table, dataclasses.replace(ANCHORED, apo=apo))
        trainer.optimizer.step = lambda: None  # compare the gradients of one batch
        _, loss, stats, _ = trainer.update(_greedy_search_batch(demos))
        gradients[lean] = (loss.item(), stats["anchor_loss"],
                           {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
    (loss, anchor, plain), (lean_loss, lean_anchor, lean) = gradients[False], gradients[True]
    assert anchor > 0 and lean_anchor == pytest.approx(anchor, rel=1e-5)
    assert lean_loss == pytest.approx(loss, rel=1e-5) and plain.keys() == lean.keys()
    for name in plain:
        torch.testing.assert_close(lean[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


def test_search_grad_weight_scales_only_the_querys_gradient(ref_dir, demos):
    """The weight multiplies the search turns' share of every parameter's gradient and nothing else: the loss keeps
    its value, the gradient is linear in the weight (g(3) - g(1) = 2 (g(2) - g(1))), the search share is not zero,
    and the memory-lean update scales it the same way."""
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.2, 0.9]] * len(demos), P.apo.beta1), "demo-goals")

    def update(weight, lean=False):
        apo = dataclasses.replace(P.apo, micro_batch=3, grad_clip=1e9, search_grad_weight=weight,
                                  backward_per_micro_batch=lean)
        trainer = Trainer(*load_models(ref_dir, "cpu"), table, dataclasses.replace(P, apo=apo), seed=3)
        trainer.optimizer.step = lambda: None  # compare the gradients of one batch
        _, loss, _, _ = trainer.update(demos)
        return loss.item(), torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    (loss1, g1), (loss2, g2), (loss3, g3) = update(1.0), update(2.0), update(3.0)
    assert loss2 == pytest.approx(loss1, rel=1e-6) and loss3 == pytest.approx(loss1, rel=1e-6)
    search_share = g2 - g1
    assert search_share.norm() > 0.05 * g1.norm(), "the query's tokens must carry part of the gradient"
    torch.testing.assert_close(g3 - g1, 2 * search_share, rtol=1e-3, atol=1e-6)
    lean_loss, lean = update(3.0, lean=True)
    assert lean_loss == pytest.approx(loss3, rel=1e-5)
    torch.testing.assert_close(lean, g3, rtol=1e-4, atol=1e-6)


def test_search_weights_mark_the_search_turns(ref_dir, demos):
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.2, 0.9]] * len(demos), P.apo.beta1), "demo-goals")
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, search_grad_weight=4.0))
    weights = search_weights(demos, table, profile)
    expected = [4.0 if k == 0 else 1.0 for t in demos for k in range(t.num_turns)]  # the expert searches once
    assert weights == expected and search_weights(demos, table, P) is None
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="search_grad_weight"):
            Trainer(*load_models(ref_dir, "cpu"), table,
                    dataclasses.replace(P, apo=dataclasses.replace(P.apo, search_grad_weight=bad)))
    with pytest.raises(ValueError, match="search_grad_weight needs one chat per turn"):
        Trainer(*load_models(ref_dir, "cpu"), table, dataclasses.replace(
            profile, policy=dataclasses.replace(P.policy, window=None)))


def test_greedy_kl_pulls_the_greedy_turns_distributions_back_to_pi_ref(ref_dir, demos):
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    only_search = [dataclasses.replace(t, turns=t.turns[:1]) for t in _greedy_search_batch(demos)]
    profile = dataclasses.replace(P, apo=dataclasses.replace(EXPLORING.apo, greedy_kl=1.0))
    trainer = _drifted_trainer(ref_dir, table, profile)
    _, loss, stats, grad_norm = trainer.update(only_search)  # no sampled turn: only the KL has a gradient
    first = stats["greedy_kl"]
    assert first > 0 and float(grad_norm) > 0 and loss.item() == pytest.approx(stats["apo_loss"] + first)
    for _ in range(5):
        last = trainer.update(only_search)[2]["greedy_kl"]
    assert last < 0.7 * first
    undrifted = Trainer(*load_models(ref_dir, "cpu"), table, profile, seed=3)  # the policy is pi_ref: no KL
    assert undrifted.update(only_search)[2]["greedy_kl"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="greedy_kl holds the turns .* needs one of them"):
        Trainer(trainer.model, trainer.ref_model, trainer.tokenizer, table,
                dataclasses.replace(P, apo=dataclasses.replace(P.apo, greedy_kl=1.0)))
    with pytest.raises(ValueError, match="greedy_kl must be 0"):
        Trainer(trainer.model, trainer.ref_model, trainer.tokenizer, table,
                dataclasses.replace(P, apo=dataclasses.replace(EXPLORING.apo, greedy_kl=-0.5)))


CLICKING_GREEDILY = dataclasses.replace(P, apo=dataclasses.replace(P.apo, greedy_clicks=True))


def test_greedy_pages_of_each_mode():
    assert greedy_pages(P.apo) == ()
    assert greedy_pages(EXPLORING.apo) == ("search",)
    assert greedy_pages(CLICKING_GREEDILY.apo) == ("results", "item", "detail")
    assert rollout_sampling(CLICKING_GREEDILY.apo, 1.0).greedy_pages == ("results", "item", "detail")
    with pytest.raises(ValueError, match="exclude each other"):
        greedy_pages(dataclasses.replace(EXPLORING.apo, greedy_clicks=True))
    with pytest.raises(ValueError, match="explore=0.3 draws clicks"):
        greedy_pages(dataclasses.replace(CLICKING_GREEDILY.apo, explore=0.3))
    with pytest.raises(ValueError, match="explore_options=0.2 draws clicks"):
        greedy_pages(dataclasses.replace(CLICKING_GREEDILY.apo, explore_options=0.2))
    with pytest.raises(ValueError, match="explore_search=0.5 draws queries"):
        greedy_pages(dataclasses.replace(EXPLORING.apo, explore_search=0.5))
    with pytest.raises(ValueError, match="explore_results=0.4 draws clicks"):
        greedy_pages(dataclasses.replace(CLICKING_GREEDILY.apo, explore_results=0.4))
    assert rollout_sampling(dataclasses.replace(EXPLORING.apo, explore_results=0.4), 1.0).explore_results == 0.4
    aimed = rollout_sampling(dataclasses.replace(EXPLORING.apo, explore_options=0.2, explore_once=True), 1.0)
    assert (aimed.explore_options, aimed.explore, aimed.explore_once) == (0.2, 0.5, True)
    drawing = rollout_sampling(dataclasses.replace(CLICKING_GREEDILY.apo, explore_search=0.5), 1.0)
    assert drawing.explore_search == 0.5 and drawing.greedy_pages == ("results", "item", "detail")
    read = rollout_sampling(dataclasses.replace(EXPLORING.apo, explore_options=0.3, option_draw="policy"), 1.0)
    assert (read.explore_options, read.option_draw) == (0.3, "policy")
    with pytest.raises(ValueError, match="option_draw='policy' picks the values explore_options draws"):
        rollout_sampling(dataclasses.replace(EXPLORING.apo, option_draw="policy"), 1.0)
    with pytest.raises(ValueError, match="option_draw must be one of"):
        rollout_sampling(dataclasses.replace(EXPLORING.apo, explore_options=0.3, option_draw="expert"), 1.0)


def test_greedy_clicks_samples_and_trains_only_the_search_turn(ref_dir, demos):
    model, ref_model, tokenizer = load_models(ref_dir, "cpu")
    seed_everything(0)
    _, episodes = sample_rewards(ref_model, tokenizer, [d.goal for d in demos[:4]], 2, CLICKING_GREEDILY,
                                 progress=False)
    turns = [u for t in episodes for u in t.turns]
    on_search_page = [u.observation.endswith(SEP + "Search") for u in turns]
    assert [not u.greedy for u in turns] == on_search_page  # the queries sampled (test_rollout: the other pages)
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    trainer = Trainer(model, ref_model, tokenizer, table, CLICKING_GREEDILY, seed=3)
    batch = [dataclasses.replace(d, turns=[dataclasses.replace(u, greedy=k > 0) for k, u in enumerate(d.turns)])
             for d in demos]  # as greedy_clicks rollouts look
    _, masks, owner = trained_sequences(batch, tokenizer, P.policy.window)
    inputs, loss, _, _ = trainer.update(batch)
    search_tokens = [sum(next(m for m, o in zip(masks, owner) if o == row)) for row in range(len(batch))]
    assert inputs.tokens.tolist() == search_tokens and min(search_tokens) > 0
    assert math.isfinite(loss.item())
    with pytest.raises(ValueError, match="ppo's critic needs every turn: use another objective or greedy_clicks"):
        Trainer(model, ref_model, tokenizer, table, CLICKING_GREEDILY, "ppo")


def test_greedy_anchor_needs_greedy_search_and_apo(models, demos):
    model, ref_model, tokenizer = models
    table = VStarTable(vstar_table([d.goal for d in demos], [[0.5, 1.0]] * len(demos), P.apo.beta1), "demo-goals")
    for profile, objective in [(dataclasses.replace(P, apo=dataclasses.replace(P.apo, greedy_anchor=1.0)), "apo"),
                               (ANCHORED, "grpo"), (ANCHORED, "apo_split")]:
        with pytest.raises(ValueError, match="greedy_anchor is a term of A.PO's regression"):
            Trainer(model, ref_model, tokenizer, table, profile, objective)
    with pytest.raises(ValueError, match="greedy_anchor must be 0"):
        Trainer(model, ref_model, tokenizer, table,
                dataclasses.replace(P, apo=dataclasses.replace(EXPLORING.apo, greedy_anchor=-1.0)))
    with pytest.raises(ValueError, match="exclude each other"):
        trained_sequences(demos, tokenizer, P.policy.window, sampled_only=True, greedy_only=True)


def test_learning_rate_held_or_decayed_after_the_warm_up():
    held = dataclasses.replace(P.apo, lr=1e-3, warmup=4)
    decayed = dataclasses.replace(held, lr_decay=True)
    for config in (held, decayed):  # the same warm-up
        assert [trainer_module.learning_rate(config, i, 20) for i in range(4)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4,
                                                                                                  1e-3])
    assert [trainer_module.learning_rate(held, i, 20) for i in range(3, 20)] == pytest.approx([1e-3] * 17)
    after = [trainer_module.learning_rate(decayed, i, 20) for i in range(4, 21)]
    assert after[0] == pytest.approx(1e-3) and after[-1] == pytest.approx(1e-4)  # 10% where the run ends
    assert all(a > b for a, b in zip(after, after[1:]))


def test_a_decaying_run_records_its_schedule(ref_dir, vstar):
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, lr_decay=True, warmup=1))
    trainer = _trainer(ref_dir, vstar, iterations=4, profile=profile)
    trainer.evaluator = None  # the schedule is the point: no val evaluations
    state = trainer.run(progress=False)
    expected = [trainer_module.learning_rate(profile.apo, i, 4) for i in range(4)]
    assert state.history["lr"].tolist() == pytest.approx(expected)
    assert expected[0] > expected[-1]


def _weights(model) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _shifted(vstar):
    return VStarTable(vstar.table.assign(vstar=vstar.table["vstar"] + 0.5), vstar.key)  # a non-zero advantage


def test_ema_averages_the_weights_and_the_evaluations_play_the_average(ref_dir, vstar):
    """``ema``: after each step avg <- d * avg + (1 - d) * weights from the initial weights; evaluations play the
    average and hand the trained weights back; ``keep_average`` makes the average the policy."""
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, ema=0.75))
    trainer = _trainer(ref_dir, _shifted(vstar), profile=profile)
    played = []
    trainer.evaluator = lambda model, *args: played.append(_weights(model)) or {"success": 0.0}
    start = _weights(trainer.model)
    trainer.iteration()
    first = _weights(trainer.model)
    trainer.iteration()
    second = _weights(trainer.model)
    assert any(not torch.equal(start[n], first[n]) for n in start)  # the steps moved the policy
    for name in start:
        expected = 0.75 * (0.75 * start[name] + 0.25 * first[name]) + 0.25 * second[name]
        assert torch.allclose(trainer.average[name], expected, atol=1e-6), name
    trainer.evaluate()
    assert all(torch.equal(played[0][n], trainer.average[n]) for n in start)  # the average played
    assert all(torch.equal(p, second[n]) for n, p in trainer.model.named_parameters())  # trained weights back
    trainer.keep_average()
    assert all(torch.equal(p, trainer.average[n]) for n, p in trainer.model.named_parameters())


def test_without_ema_the_evaluations_play_the_trained_weights(ref_dir, vstar):
    trainer = _trainer(ref_dir, _shifted(vstar))
    played = []
    trainer.evaluator = lambda model, *args: played.append(_weights(model)) or {"success": 0.0}
    trainer.iteration()
    trainer.evaluate()
    trainer.keep_average()
    assert trainer.average is None
    assert all(torch.equal(p, played[0][n]) for n, p in trainer.model.named_parameters())


def test_ema_resumes_exactly_and_refuses_a_checkpoint_without_its_average(ref_dir, vstar, tmp_path):
    profile = dataclasses.replace(P, apo=dataclasses.replace(P.apo, ema=0.9, iterations=2, eval_every=1,
                                                              checkpoint_every=1))
    table = _shifted(vstar)
    straight = _trainer(ref_dir, table, tmp_path / "straight", profile=profile)
    straight.run(progress=False)
    _trainer(ref_dir, table, tmp_path / "resumed", iterations=1, profile=profile).run(progress=False)
    assert (latest_checkpoint(tmp_path / "resumed") / trainer_module.AVERAGE_FILE).exists()
    second = _trainer(ref_dir, table, tmp_path / "resumed", profile=profile)
    assert second.load_checkpoint() == 1
    second.run(progress=False)
    pd.testing.assert_frame_equal(second.state.evals.reset_index(drop=True), straight.state.evals.reset_index(drop=True),
                                  check_dtype=False)
    for name, average in straight.average.items():
        assert torch.equal(second.average[name], average), name
    _trainer(ref_dir, table, tmp_path / "plain", iterations=1).run(progress=False)  # saved without ema
    with pytest.raises(ValueError, match="without ema"):
        _trainer(ref_dir, table, tmp_path / "plain", profile=profile).load_checkpoint()
    with pytest.raises(ValueError, match="decay of the weights' moving average"):
        _trainer(ref_dir, table, profile=dataclasses.replace(P, apo=dataclasses.replace(P.apo, ema=1.0)))


def test_hold_failed_draws_zeroes_only_the_advantage_of_failed_drawn_trajectories(models, demos):
    """``hold_failed_draws``: a trajectory with a drawn turn that scored below V* is regressed onto r itself
    (advantage 0); one that beat V*, and any without a drawn turn, keep V*. Off, every trajectory keeps V*; on
    without any draw, the trainer refuses."""
    from apo_helpers.apo.trainer import regression_value
    from apo_helpers.policy.prompts import Turn
    from apo_helpers.policy.rollout import Trajectory

    goal = demos[0].goal
    table = VStarTable(vstar_table([goal], [[0.5, 1.0]], P.apo.beta1), "one-goal")
    value = table.value(goal)

    def played(reward, drawn):
        turn = Turn(observation="results", actions=[], turns_left=5, explored=drawn)
        return Trajectory(goal=goal, turns=[Turn(observation="search", actions=[], turns_left=6), turn], reward=reward)

    holding = dataclasses.replace(P.apo, explore_results=0.3, hold_failed_draws=True)
    assert regression_value(played(0.2, True), table, holding) == pytest.approx(0.2)  # failed draw: held
    assert regression_value(played(1.0, True), table, holding) == pytest.approx(value)  # a draw that paid
    assert regression_value(played(0.2, False), table, holding) == pytest.approx(value)  # the policy's own failure
    assert regression_value(played(0.2, True), table, dataclasses.replace(holding, hold_failed_draws=False)) == \
        pytest.approx(value)
    model, ref_model, tokenizer = models
    with pytest.raises(ValueError, match="no turn is drawn"):
        Trainer(model, ref_model, tokenizer, table,
                dataclasses.replace(P, apo=dataclasses.replace(P.apo, hold_failed_draws=True)))


def _replaying(replay=2, capacity=3, **fields):
    return dataclasses.replace(P, apo=dataclasses.replace(P.apo, replay=replay, replay_capacity=capacity, **fields))


def test_replay_adds_the_latest_winners_to_each_update(ref_dir, vstar, monkeypatch):
    """``replay``: each update trains on the iteration's rollouts plus up to ``replay`` earlier trajectories that beat
    V*, drawn from the latest ``replay_capacity``; the history still describes the iteration's own rollouts."""
    low = VStarTable(vstar.table.assign(vstar=-1.0), vstar.key)  # every return beats V*: every trajectory wins
    trainer = _trainer(ref_dir, low, iterations=3, profile=_replaying())
    batches = []
    update = trainer.update
    monkeypatch.setattr(trainer, "update", lambda trajectories, *a: batches.append(list(trajectories)) or
                        update(trajectories, *a))
    state = trainer.run(progress=False)
    fresh = P.apo.batch_goals
    assert [len(b) for b in batches] == [fresh, fresh + 2, fresh + 2]
    assert state.history["replayed"].tolist() == [0, 2, 2]
    assert state.history["replay_buffer"].tolist() == [min(3, fresh), 3, 3]
    # the replayed ones are the latest winners so far: here the previous iteration's last three rollouts
    for earlier, later in zip(batches, batches[1:]):
        assert all(any(t is s for s in earlier[fresh - 3:fresh]) for t in later[fresh:])
        assert len({id(t) for t in later[fresh:]}) == 2  # drawn without replacement


def test_replay_keeps_only_the_latest_trajectories_that_beat_vstar(models, demos):
    model, ref_model, tokenizer = models
    goals = [d.goal for d in demos]
    table = VStarTable(vstar_table(goals, [[0.5, 0.5]] * len(goals), P.apo.beta1), "demo-goals")  # V* = 0.5
    trainer = Trainer(model, ref_model, tokenizer, table, _replaying(capacity=2))
    scored = [dataclasses.replace(d, reward=reward) for d, reward in zip(demos, [1.0, 0.0, 0.7, 0.5])]
    trainer.remember(scored)
    assert trainer.replay_buffer == [scored[0], scored[2]]  # 0.0 and 0.5 do not beat V*
    trainer.remember([dataclasses.replace(scored[0], reward=0.9)])
    assert [t.reward for t in trainer.replay_buffer] == [0.7, 0.9]  # the oldest left first
    assert sorted(t.reward for t in trainer.draw_replay()) == [0.7, 0.9]


def test_replay_off_draws_nothing_and_leaves_the_history_as_it_was(ref_dir, vstar):
    trainer = _trainer(ref_dir, vstar, iterations=1)
    state = trainer.run(progress=False)
    assert "replayed" not in state.history.columns and trainer.replay_buffer == []


def test_a_resumed_replay_run_continues_exactly(ref_dir, vstar, tmp_path):
    """The buffer and its generator travel in the checkpoint (``replay.jsonl``, ``state.json``)."""
    low = VStarTable(vstar.table.assign(vstar=-1.0), vstar.key)  # every trajectory wins
    profile = _replaying(iterations=3, eval_every=100, checkpoint_every=1)
    straight = _trainer(ref_dir, low, tmp_path / "straight", profile=profile)
    straight.run(progress=False)
    _trainer(ref_dir, low, tmp_path / "resumed", iterations=2, profile=profile).run(progress=False)
    assert (latest_checkpoint(tmp_path / "resumed") / "replay.jsonl").exists()
    seed_everything(12345)
    second = _trainer(ref_dir, low, tmp_path / "resumed", profile=profile)
    assert second.load_checkpoint() == 2 and second.replay_buffer
    second.run(progress=False)
    pd.testing.assert_frame_equal(_comparable(second.state.history), _comparable(straight.state.history))
    for a, b in zip(second.model.state_dict().values(), straight.model.state_dict().values()):
        assert torch.equal(a, b)
    # a run without replay left no buffer: resuming it with replay says so
    _trainer(ref_dir, low, tmp_path / "plain", iterations=1).run(progress=False)
    with pytest.raises(ValueError, match="replay.jsonl: it was saved by a run without replay"):
        _trainer(ref_dir, low, tmp_path / "plain", profile=profile).load_checkpoint()


def test_replay_is_refused_where_it_does_not_hold(ref_dir, vstar):
    with pytest.raises(ValueError, match="'grpo' objective reads the sampling policy's probabilities"):
        _trainer(ref_dir, vstar, objective="grpo", profile=_replaying())
    with pytest.raises(ValueError, match="replay=-1, replay_capacity=3"):
        _trainer(ref_dir, vstar, profile=_replaying(replay=-1))
    with pytest.raises(ValueError, match="replay_capacity=0"):
        _trainer(ref_dir, vstar, profile=_replaying(capacity=0))
