"""Imitation warm start: expert demonstrations, the learning-rate schedule, train_reference at ci sizes, and the
policy evaluations (evaluate_policy, pass_at_k) on a few goals."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from apo_helpers.analysis.evaluate import Evaluation, evaluate_policy, pass_at_k, policy_goals
from apo_helpers.apo.sft import (expert_demonstration, expert_demonstrations, lr_at, tokenize_demonstrations,
                                 train_reference)
from apo_helpers.config import get_profile
from apo_helpers.policy.models import load_policy
from apo_helpers.policy.prompts import format_response, parse_response, prompt_actions
from apo_helpers.webshop.agents import ExpertAgent
from apo_helpers.webshop.catalog import default_catalog
from apo_helpers.webshop.env import WebShopEnv

P = get_profile("ci")
SUMMARY_KEYS = {"success_rate", "success_ci95", "mean_score", "mean_steps", "invalid_rate", "episodes"}


pytestmark = pytest.mark.usefixtures("torch_one_thread")


# ---------------------------------------------------------------------------------------------- demonstrations

def test_expert_demonstration_replies():
    catalog = default_catalog()
    env = WebShopEnv(split="train", catalog=catalog, config=P.policy_env())
    goal = catalog.split("train")[5]
    demo = expert_demonstration(env, ExpertAgent(), goal)
    assert demo.goal == goal
    assert demo.success and demo.reward == demo.env_reward == 1.0
    assert demo.breakdown is not None
    assert demo.turns[0].action.startswith("search[") and demo.turns[-1].action == "click[buy now]"
    for turn in demo.turns:
        assert turn.response == format_response(turn.think, turn.action)
        assert parse_response(turn.response) == (turn.think, turn.action, True)
        assert turn.format_ok and turn.valid
        assert turn.think
        assert turn.actions == prompt_actions(turn.actions)          # already as listed to the model
    assert [t.reward for t in demo.turns[:-1]] == [0.0] * (len(demo.turns) - 1)
    assert demo.turns[-1].reward == demo.reward
    assert [t.turns_left for t in demo.turns] == list(range(P.env.max_turns, P.env.max_turns - len(demo.turns), -1))
    assert demo.input_ids == [] and demo.sample_logprobs == []


def test_expert_demonstrations_deterministic_and_successful():
    first = expert_demonstrations(P, 12)
    second = expert_demonstrations(P, 12)
    assert [dataclasses.asdict(d) for d in first] == [dataclasses.asdict(d) for d in second]
    assert 0 < len(first) <= 12
    assert all(d.success and d.reward == 1.0 for d in first)
    assert all(d.goal.split == "train" for d in first)
    assert len({d.goal.index for d in first}) == len(first)
    other = expert_demonstrations(P, 12, seed=1)
    assert [d.goal.index for d in other] != [d.goal.index for d in first]
    # a longer list starts with the same goals (one shuffle, then the first `count`)
    longer = expert_demonstrations(P, 20)
    assert [d.goal.index for d in longer[: len(first)]] == [d.goal.index for d in first]


def test_sloppy_demonstrations_keep_the_episodes_that_ignored_options():
    """With a sloppy demonstrator, its option-free purchases are kept although they fail; the full expert's list
    (demo_skip_options=0) is unchanged by the option's existence."""
    sloppy_profile = dataclasses.replace(P, reference=dataclasses.replace(P.reference, demo_skip_options=1.0))
    sloppy = expert_demonstrations(sloppy_profile, 30)
    full = expert_demonstrations(P, 30)
    assert [d.goal.index for d in full] == [d.goal.index for d in expert_demonstrations(P, 30)]
    assert len(sloppy) >= len(full) - 3
    assert all(d.env_reward > 0 and d.turns[-1].action == "click[buy now]" for d in sloppy)
    assert any(not d.success for d in sloppy)                       # goals with options, bought without them
    assert all(d.success == (not d.goal.options) for d in sloppy)
    assert all(t.think != "options set and price ok, buy it" for d in sloppy for t in d.turns)


def test_forgetful_demonstrations_keep_the_item_choice_and_drop_only_the_option_clicks():
    """demo_forget_options=1: the full expert's goals and purchases, without the option clicks; the failed ones
    (goals with options) are kept since they bought something."""
    forgetful_profile = dataclasses.replace(P, reference=dataclasses.replace(P.reference, demo_forget_options=1.0))
    forgetful = {d.goal.index: d for d in expert_demonstrations(forgetful_profile, 30)}
    full = {d.goal.index: d for d in expert_demonstrations(P, 30)}
    assert set(full) <= set(forgetful)
    for index, demo in full.items():
        clicks = [t.action for t in demo.turns if t.think.startswith("the instruction asks for")]
        assert [t.action for t in forgetful[index].turns] == [t.action for t in demo.turns if t.action not in clicks]
    assert any(not d.success for d in forgetful.values()) and any(d.success for d in forgetful.values())
    assert all(d.success == (not d.goal.options) for d in forgetful.values())


def test_progress_think_demonstrations_keep_the_actions_and_change_the_thinks_after_option_clicks():
    """demo_think="progress": the same goals and actions as the short think; only the thinks after an option click
    differ, and they say where in the instruction the expert is."""
    told_profile = dataclasses.replace(P, reference=dataclasses.replace(P.reference, demo_think="progress"))
    told, short = expert_demonstrations(told_profile, 30), expert_demonstrations(P, 30)
    assert [[t.action for t in d.turns] for d in told] == [[t.action for t in d.turns] for d in short]
    changed = [(a.think, b.think) for d, e in zip(told, short) for a, b in zip(d.turns, e.turns) if a.think != b.think]
    assert changed and all(new.startswith("after ") for new, _ in changed)


def test_cli_train_ref_skip_options_reaches_the_demonstrations(tmp_path, monkeypatch):
    """``train-ref --skip-options`` trains on the sloppy demonstrator's episodes, in a folder of its own unless
    ``--out`` names one (the profile's pi_ref otherwise)."""
    from apo_helpers import __main__ as cli
    from apo_helpers.apo import sft

    seen, forgotten, seeds, thinks = [], [], [], []

    def stop(profile, out_dir, *args, **kwargs):
        seen.append((profile.reference.demo_skip_options, profile.policy.show_selected_options, str(out_dir)))
        forgotten.append(profile.reference.demo_forget_options)
        seeds.append(kwargs.get("init_seed"))
        thinks.append(profile.reference.demo_think)
        raise KeyboardInterrupt  # the demonstrations' setting, the rendering and the folder are all this test needs

    monkeypatch.setattr(sft, "train_reference", stop)
    for argv in (["--skip-options", "0.5", "--out", str(tmp_path)], [], ["--skip-options", "0.25"],
                 ["--skip-options", "0.5", "--show-selected-options"], ["--demonstrations", "40"],
                ["--demonstrations", str(P.reference.demonstrations)], ["--forget-options", "0.5"],
                ["--skip-options", "0.5", "--seed", "2"], ["--skip-options", "0.5", "--progress-think"]):
        with pytest.raises(KeyboardInterrupt):
            cli.main(["train-ref", "--profile", "ci", *argv])
    default = str(sft.reference_dir(P))
    assert seen == [(0.5, False, str(tmp_path)), (P.reference.demo_skip_options, False, default),
                    (0.25, False, default + "_skip_options_0.25"), (0.5, True, default + "_skip_options_0.5_selected"),
                    (P.reference.demo_skip_options, False, default + "_demos_40"),
                    (P.reference.demo_skip_options, False, default),  # the profile's count: the profile's pi_ref
                    (P.reference.demo_skip_options, False, default + "_forget_options_0.5"),
                    (0.5, False, default + "_skip_options_0.5_seed_2"),  # the same data, another pi_ref
                    (0.5, False, default + "_skip_options_0.5_think_progress")]  # the same actions, other thinks
    assert forgotten == [P.reference.demo_forget_options] * 6 + [0.5] + [P.reference.demo_forget_options] * 2
    assert seeds == [None] * 7 + [2, None]
    assert thinks == ["short"] * 8 + ["progress"]


# ---------------------------------------------------------------------------------------------- schedule

def test_lr_warmup_then_cosine_decay():
    total, peak, warmup = 100, 2e-3, 10
    lrs = [lr_at(s, total, peak, warmup) for s in range(total)]
    assert lrs[:warmup] == pytest.approx([peak * (s + 1) / warmup for s in range(warmup)])
    assert lrs[warmup - 1] == pytest.approx(peak)
    assert lrs[warmup] == pytest.approx(peak)
    assert all(a <= b for a, b in zip(lrs[:warmup], lrs[1:warmup + 1]))          # warm-up rises
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))           # then decays
    assert min(lrs) >= 0.1 * peak and max(lrs) <= peak * (1 + 1e-12)
    assert lr_at(total, total, peak, warmup) == pytest.approx(0.1 * peak)       # decays to 10% of the peak
    midpoint = warmup + (total - warmup) // 2
    assert lr_at(midpoint, total, peak, warmup) == pytest.approx(peak * (0.1 + 0.45))
    assert lr_at(0, 1, peak, 1) == pytest.approx(peak)


# ---------------------------------------------------------------------------------------------- train_reference

@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "ref"
    return train_reference(P, out_dir=out, progress=False), out


def test_train_reference_history(reference):
    ref, _ = reference
    cfg = P.reference
    history = ref.history
    assert list(history.columns) == ["step", "phase", "loss", "lr", "seconds"]
    assert len(history) == cfg.pretrain_steps + cfg.sft_steps
    assert history["step"].tolist() == list(range(len(history)))
    assert history["phase"].tolist() == ["pretrain"] * cfg.pretrain_steps + ["sft"] * cfg.sft_steps
    assert history["loss"].map(math.isfinite).all()
    assert (history["loss"] > 0).all()
    sft = history[history.phase == "sft"]["loss"].tolist()
    assert sft[-1] < sft[0]
    pretrain = history[history.phase == "pretrain"]["loss"].tolist()
    assert pretrain[-1] < pretrain[0]
    assert history["seconds"].is_monotonic_increasing
    assert ref.seconds >= history["seconds"].iloc[-1]


def test_train_reference_demonstrations(reference):
    ref, _ = reference
    assert 0 < len(ref.demonstrations) <= P.reference.demonstrations
    for d in ref.demonstrations:
        assert d.success
        assert len(d.input_ids) == len(d.assistant_mask) == len(d.turns)           # window=1: a chat per turn
        assert all(len(i) == len(m) and sum(m) > 0 for i, m in zip(d.input_ids, d.assistant_mask))


def test_train_reference_folder_reloads(reference):
    ref, out = reference
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "history.csv", "config.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pkl"))]
    model, tokenizer = load_policy(out)
    demo = ref.demonstrations[0]
    ids = torch.tensor([demo.input_ids[0]])
    with torch.no_grad():
        assert torch.equal(model.eval()(input_ids=ids).logits, ref.model.eval()(input_ids=ids).logits)
    # the saved tokenizer encodes the demonstrations as the trained one did
    copy = dataclasses.replace(demo, input_ids=[], assistant_mask=[])
    tokenize_demonstrations([copy], tokenizer, P.policy.window)
    assert copy.input_ids == demo.input_ids and copy.assistant_mask == demo.assistant_mask


def test_train_reference_init_seed_changes_the_weights_not_the_demonstrations(tmp_path):
    """``init_seed`` draws other initial weights and batch order from the same demonstrations; None keeps the
    profile's pi_ref, the same weights each time."""
    def train(init_seed):
        return train_reference(P, demonstrations=6, pretrain_steps=1, sft_steps=1, progress=False, init_seed=init_seed)

    default, again, other = train(None), train(None), train(P.seed + 1)
    assert [d.turns for d in other.demonstrations] == [d.turns for d in default.demonstrations]
    weights = [dict(r.model.named_parameters()) for r in (default, again, other)]
    assert all(torch.equal(weights[0][n], weights[1][n]) for n in weights[0])           # reproducible
    assert not all(torch.equal(weights[0][n], weights[2][n]) for n in weights[0])       # another pi_ref


# ---------------------------------------------------------------------------------------------- evaluation

def test_evaluate_policy_keys(reference):
    ref, _ = reference
    evaluation, trajectories = evaluate_policy(ref.model, ref.tokenizer, "test", 4, profile=P, progress=False)
    assert isinstance(evaluation, Evaluation)
    summary = evaluation.summary()
    assert set(summary) == SUMMARY_KEYS
    assert summary["episodes"] == 4 and len(trajectories) == 4
    assert 0.0 <= summary["success_rate"] <= 1.0 and 0.0 <= summary["invalid_rate"] <= 1.0
    assert [t.goal for t in trajectories] == policy_goals("test", 4)
    assert [e.goal_index for e in evaluation.episodes] == [g.index for g in policy_goals("test", 4)]
    assert [e.steps for e in evaluation.episodes] == [t.num_turns for t in trajectories]
    assert evaluation.table().shape[0] == 4


def test_pass_at_k_keys(reference):
    ref, _ = reference
    result = pass_at_k(ref.model, ref.tokenizer, "test", goals=4, k=2, profile=P, progress=False)
    assert set(result) == {"split", "k", "goals", "pass_at_k", "sample_success"}
    assert (result["split"], result["k"], result["goals"]) == ("test", 2, 4)
    assert 0.0 <= result["sample_success"] <= result["pass_at_k"] <= 1.0   # a solved goal counts at least 1/k samples


def test_sweep_ref_merges_each_point_into_the_results_table(tmp_path, monkeypatch, capsys):
    import pandas as pd

    import apo_helpers.__main__ as cli

    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path)
    args = ["sweep-ref", "--profile", "ci", "--demonstrations", "12", "--save", "--json"]
    assert cli.main(args) == 0  # the profile's pretraining steps by default
    assert cli.main(args[:5] + ["--pretrain-steps", "0"] + args[5:]) == 0
    table = pd.read_csv(tmp_path / "ref_sweep.csv")
    assert table[["demonstrations", "pretrain_steps"]].values.tolist() == [[12, 0], [12, P.reference.pretrain_steps]]
    assert table["test_success_rate"].between(0, 1).all() and (table["successful_demonstrations"] <= 12).all()
