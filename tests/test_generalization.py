"""Seen and unseen goals (notebook 04 section 6): a run's policies on the goals it trained on and on held-out goals
chosen the same way."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from apo_helpers.analysis.generalization import (GENERALIZATION_COLUMNS, GROUPS, disagreeing_goals,
                                                 generalization_gains, run_seeds, seen_and_unseen)
from apo_helpers.apo import vstar
from apo_helpers.apo.vstar import stage1
from apo_helpers.config import get_profile
from apo_helpers.policy.models import load_policy
from apo_helpers.webshop.catalog import default_catalog

P = get_profile("ci")
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def fake_run(tmp_path, ref_dir, vstar_key: str, seeds=(0,), overrides: str = "") -> tuple:
    """A runs folder holding pi_ref and a `train` run whose seeds' final policies are copies of it."""
    runs = tmp_path / "runs"
    shutil.copytree(ref_dir, runs / "pi_ref_ci")
    run = runs / "apo_test_ci"
    for seed in seeds:
        shutil.copytree(ref_dir, run / f"seed_{seed}" / "policy")
        (run / f"seed_{seed}" / "metrics.json").write_text(json.dumps(
            {"objective": "apo", "seed": seed, "profile": "ci", "ref": "pi_ref_ci", "apo_overrides": overrides,
             "vstar_key": vstar_key}))
    return runs, run


@pytest.fixture(scope="module")
def ci_vstar(ci_ref_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("vstar")
    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    return folder, stage1(model, tokenizer, P, folder, progress=False)


def test_policies_identical_to_pi_ref_score_as_pi_ref_on_every_group(tmp_path, ci_ref_dir, ci_vstar):
    vstar_dir, trained = ci_vstar
    runs, run = fake_run(tmp_path, ci_ref_dir, trained.key, seeds=(0, 1))
    table = seen_and_unseen(run, P, vstar_dir=vstar_dir, runs_dir=runs, unseen_goals=4, progress=False)
    assert list(table.columns) == GENERALIZATION_COLUMNS
    assert sorted(table["policy"].unique()) == ["pi_ref", "seed 0", "seed 1"]
    assert list(table[table["policy"] == "pi_ref"]["goals"]) == list(GROUPS)
    sizes = table.groupby("goals")["n_goals"].first()
    assert sizes["trained on"] == len(trained.table) and sizes["unseen, all"] == 8  # 4 val + 4 test goals
    assert sizes["unseen, samples disagree"] <= sizes["unseen, all"]
    for _, part in table.groupby("goals"):  # the same weights play the same greedy episodes
        assert part["greedy_success"].nunique(dropna=False) == 1 and part["mean_score"].nunique(dropna=False) == 1
    gains = generalization_gains(table)
    assert list(gains["goals"]) == list(GROUPS) and (gains["gain"].fillna(0) == 0).all()
    assert (gains["seeds"] == 2).all()


def test_held_out_goals_are_kept_by_the_training_goals_rule(monkeypatch, ci_ref_dir):
    goals = default_catalog().split("val")[:4]
    rewards = [[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.5, 1.0]]  # disagree, always, never, disagree
    monkeypatch.setattr(vstar, "sample_rewards", lambda *a, **k: (rewards, []))
    monkeypatch.setattr(vstar, "weights_hash", lambda model: "no-model")
    kept = disagreeing_goals(None, None, goals, P, progress=False)
    assert [g.index for g in kept] == [goals[0].index, goals[3].index]


def test_a_run_from_another_pi_ref_is_refused(tmp_path, ci_ref_dir, ci_vstar):
    vstar_dir, _ = ci_vstar
    runs, run = fake_run(tmp_path, ci_ref_dir, "0123456789abcdef")
    with pytest.raises(ValueError, match="0123456789abcdef.*pi_ref it started from"):
        seen_and_unseen(run, P, vstar_dir=vstar_dir, runs_dir=runs, unseen_goals=2, progress=False)
    with pytest.raises(ValueError, match="'ci' profile, not 'class'"):
        seen_and_unseen(run, get_profile("class"), vstar_dir=vstar_dir, runs_dir=runs, progress=False)


def test_run_seeds_needs_finished_seeds_of_one_recipe(tmp_path, ci_ref_dir):
    with pytest.raises(FileNotFoundError, match="no seed_"):
        run_seeds(tmp_path)
    _, run = fake_run(tmp_path, ci_ref_dir, "aaaa", seeds=(1, 0))
    assert [s["seed"] for s in run_seeds(run)] == [0, 1]
    metrics = run / "seed_1" / "metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "vstar_key": "bbbb"}))
    with pytest.raises(ValueError, match="disagree on vstar_key"):
        run_seeds(run)
    for seed in (0, 1):  # re-anchored seeds each trained on the V* table of their own earlier policy
        path = run / f"seed_{seed}" / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "ref_rounds": 1}))
    assert [s["vstar_key"] for s in run_seeds(run)] == ["aaaa", "bbbb"]
    with pytest.raises(ValueError, match="re-anchored"):
        seen_and_unseen(run, P, runs_dir=tmp_path, progress=False)


def test_gains_are_the_seeds_mean_minus_pi_ref():
    rows = [("pi_ref", "trained on", 0.5), ("seed 0", "trained on", 0.7), ("seed 1", "trained on", 0.8),
            ("pi_ref", "unseen, all", 0.3), ("seed 0", "unseen, all", 0.3), ("seed 1", "unseen, all", 0.2)]
    table = pd.DataFrame([{"run": "r", "ref": "x", "policy": p, "goals": g, "n_goals": 10, "greedy_success": s,
                           "mean_score": s} for p, g, s in rows])
    gains = generalization_gains(table).set_index("goals")
    assert gains.loc["trained on", "gain"] == pytest.approx(0.25)
    assert gains.loc["trained on", "std over seeds"] == pytest.approx(0.05)
    assert gains.loc["unseen, all", "gain"] == pytest.approx(-0.05)
    with pytest.raises(ValueError, match="needs a pi_ref row"):
        generalization_gains(table[table["policy"] != "pi_ref"])
    assert generalization_gains(table[table["policy"] == "pi_ref"]).empty  # a pi_ref measured alone


def test_sharpening_ceiling_counts_the_disagreeing_goals_pi_ref_fails():
    from apo_helpers.analysis.generalization import sharpening_ceiling

    rows = [("pi_ref", "unseen, samples disagree", 40, 0.25), ("pi_ref", "unseen, all", 400, 0.30),
            ("seed 0", "unseen, samples disagree", 40, 0.5), ("seed 0", "unseen, all", 400, 0.33)]
    table = pd.DataFrame([{"run": "r", "ref": "x", "policy": p, "goals": g, "n_goals": n, "greedy_success": s,
                           "mean_score": s} for p, g, n, s in rows])
    row = sharpening_ceiling(table).iloc[0]
    assert row["share whose samples disagree"] == pytest.approx(0.1)
    assert row["most gain from them"] == pytest.approx(30 / 400)  # 40 goals, 30 of them failed greedily
    assert row["measured gain (all unseen)"] == pytest.approx(0.03)
    with pytest.raises(ValueError, match="needs pi_ref rows"):
        sharpening_ceiling(table[table["goals"] == "unseen, all"])
    alone = sharpening_ceiling(table[table["policy"] == "pi_ref"]).iloc[0]  # reference_only's rows
    assert alone["seeds"] == 0 and alone["most gain from them"] == pytest.approx(30 / 400)
    assert pd.isna(alone["measured gain (all unseen)"])


def test_reference_only_measures_the_unseen_groups_of_a_pi_ref(ci_ref_dir):
    from apo_helpers.analysis.generalization import reference_only

    table = reference_only(ci_ref_dir, P, unseen_goals=3, progress=False)
    assert list(table["goals"]) == list(GROUPS[1:]) and set(table["policy"]) == {"pi_ref"}
    assert table.set_index("goals").loc["unseen, all", "n_goals"] == 6
    assert (table["run"] == ci_ref_dir.name).all()


def test_cached_unseen_samples_pick_the_same_goals_and_load_the_second_time(tmp_path, monkeypatch, ci_ref_dir):
    from apo_helpers.config import seed_everything

    model, tokenizer = load_policy(ci_ref_dir, "cpu")
    goals = default_catalog().split("val")[:6]
    seed_everything(P.seed)
    rewards, _ = vstar.sample_rewards(model, tokenizer, goals, P.apo.vstar_samples, P, P.apo.vstar_temperature,
                                      progress=False)
    seed_everything(P.seed)
    drawn = disagreeing_goals(model, tokenizer, goals, P, progress=False)
    cached = disagreeing_goals(model, tokenizer, goals, P, progress=False, cache_dir=tmp_path)
    [folder] = [f.parent for f in tmp_path.glob("*/vstar.csv")]
    assert list(vstar.load_vstar(folder).table["rewards"]) == [[round(x, 6) for x in r] for r in rewards]
    assert [g.index for g in cached] == [g.index for g in drawn]  # the same seed, the same samples

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampled again despite the cache")

    monkeypatch.setattr(vstar, "sample_rewards", no_sampling)
    again = disagreeing_goals(model, tokenizer, goals, P, progress=False, cache_dir=tmp_path)
    assert [g.index for g in again] == [g.index for g in drawn]
