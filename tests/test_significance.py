"""Paired bootstrap intervals of a gain over the shared test goals and the seeds (notebook 07 section 3)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from apo_helpers.analysis.significance import (OUTCOME_COLUMNS, SINGLE_POLICY, check_against_seeds, first_reference,
                                               gain_interval, gain_table, gained_and_lost, gains_over_first_reference,
                                               run_label, run_outcomes, seed_agreement, success_matrix)
from apo_helpers.config import get_profile


def outcomes(policy: str, successes, seed: int = SINGLE_POLICY, split: str = "test") -> pd.DataFrame:
    return pd.DataFrame([{"policy": policy, "seed": seed, "split": split, "goal_index": i, "success": bool(s),
                          "score": float(s)} for i, s in enumerate(successes)], columns=OUTCOME_COLUMNS)


def table(*parts) -> pd.DataFrame:
    return pd.concat(parts, ignore_index=True)


def test_identical_policies_gain_nothing_and_the_interval_straddles_zero():
    rng = np.random.default_rng(1)
    ref = rng.random(200) < 0.3
    t = table(outcomes("ref", ref), *(outcomes("run", ref, seed=s) for s in range(3)))
    result = gain_interval(t, "run", "ref", samples=2000)
    assert result["gain"] == 0 and result["low"] == 0 and result["high"] == 0  # paired: every draw cancels
    assert result["goals"] == 200 and result["policy_seeds"] == 3 and result["baseline_seeds"] == 1


def test_a_gain_on_a_fifth_of_the_goals_is_bounded_away_from_zero():
    ref = np.zeros(200, dtype=bool)
    run = ref.copy()
    run[:40] = True  # +20 points, on 40 goals
    t = table(outcomes("ref", ref), *(outcomes("run", run, seed=s) for s in range(3)))
    result = gain_interval(t, "run", "ref", samples=4000, target=0.10)
    assert result["gain"] == pytest.approx(0.20)
    assert 0.12 < result["low"] < 0.20 < result["high"] < 0.28  # binomial sd of 40/200 is 2.8 points
    assert result["draws_above_zero"] == 1.0 and result["draws_at_target"] > 0.99
    same = gain_interval(t, "run", "ref", samples=4000, target=0.10)
    assert same == result  # seeded: the same numbers every call
    assert gain_interval(t, "run", "ref", samples=4000, seed=1) != {k: v for k, v in result.items()
                                                                     if k != "draws_at_target"}


def test_the_seeds_are_resampled_too():
    """Two seeds, one solving every goal and one none: the goals cannot say which seed a rerun would give, the seeds
    can, so the interval spans from 0 to 1 (a quarter of the draws take seed 0 twice, a quarter seed 1 twice)."""
    t = table(outcomes("ref", np.zeros(100)), outcomes("run", np.ones(100), seed=0),
              outcomes("run", np.zeros(100), seed=1))
    result = gain_interval(t, "run", "ref", samples=4000)
    assert result["gain"] == pytest.approx(0.5)
    assert result["low"] == 0 and result["high"] == 1
    assert 0.70 < result["draws_above_zero"] < 0.80  # 3 of the 4 equally likely seed draws


def test_a_loss_is_negative_and_the_table_lists_every_pair():
    ref = np.arange(100) < 50
    worse = np.arange(100) < 30
    t = table(outcomes("ref", ref), outcomes("worse", worse, seed=0), outcomes("same", ref, seed=0))
    rows = gain_table(t, [("worse", "ref"), ("same", "ref")], samples=1000)
    assert list(rows["policy"]) == ["worse", "same"]
    assert rows["gain"].tolist() == pytest.approx([-0.20, 0.0])
    assert rows["high"].iloc[0] < 0 and rows["draws_above_zero"].iloc[0] == 0


def test_bad_outcome_tables_are_refused_with_the_reason():
    ref = outcomes("ref", np.ones(10))
    with pytest.raises(KeyError, match="no test outcomes for policy 'run'.*'ref'"):
        gain_interval(ref, "run", "ref")
    with pytest.raises(KeyError, match="no val outcomes"):
        gain_interval(table(ref, outcomes("run", np.ones(10), seed=0)), "run", "ref", split="val")
    with pytest.raises(ValueError, match="different test goals"):
        gain_interval(table(ref, outcomes("run", np.ones(8), seed=0)), "run", "ref")
    with pytest.raises(ValueError, match="seeds of 'run' did not all play the same"):
        success_matrix(table(outcomes("run", np.ones(10), seed=0), outcomes("run", np.ones(8), seed=1)), "run")
    with pytest.raises(ValueError, match="more than one test outcome"):
        success_matrix(table(ref, ref), "ref")
    with pytest.raises(ValueError, match="samples must be at least 100"):
        gain_interval(table(ref, outcomes("run", np.ones(10), seed=0)), "run", "ref", samples=10)
    with pytest.raises(ValueError, match="level must lie strictly between 0 and 1"):
        gain_interval(table(ref, outcomes("run", np.ones(10), seed=0)), "run", "ref", level=1.0)


def test_run_label_drops_the_profile_suffix():
    assert run_label("runs/apo_sloppy_r3_class", get_profile("class")) == "apo_sloppy_r3"
    assert run_label("runs/apo_sloppy_r3_class", get_profile("ci")) == "apo_sloppy_r3_class"


@pytest.mark.usefixtures("torch_one_thread")
def test_run_outcomes_play_every_seed_and_the_first_pi_ref(tmp_path, ci_ref_dir):
    """Seeds whose weights are pi_ref's play pi_ref's greedy episodes goal by goal: their gain is exactly 0."""
    runs = tmp_path / "runs"
    shutil.copytree(ci_ref_dir, runs / "pi_ref_ci")
    run = runs / "apo_test_ci"
    for seed in (0, 1):
        shutil.copytree(ci_ref_dir, run / f"seed_{seed}" / "policy")
        (run / f"seed_{seed}" / "metrics.json").write_text(json.dumps(
            {"objective": "apo", "seed": seed, "profile": "ci", "ref": "pi_ref_ci", "apo_overrides": ""}))
    profile = get_profile("ci")
    t = run_outcomes(run, profile, "test", episodes=4, runs_dir=runs, progress=False)
    assert list(t.columns) == OUTCOME_COLUMNS and len(t) == 12
    assert sorted(t.groupby(["policy", "seed"]).groups) == [("apo_test", 0), ("apo_test", 1), ("pi_ref_ci", -1)]
    assert t["goal_index"].nunique() == 4
    for _, goal in t.groupby("goal_index"):
        assert goal["success"].nunique() == 1 and goal["score"].nunique() == 1
    result = gain_interval(t, "apo_test", "pi_ref_ci", samples=200)
    assert result["gain"] == 0 and result["goals"] == 4


def test_gains_over_the_first_pi_ref_pair_runs_and_soups_with_their_chain(tmp_path):
    ref, run, soup = np.arange(10) < 1, np.arange(10) < 4, np.arange(10) < 5
    t = table(outcomes("pi_ref_a", ref), outcomes("run_r3", run, seed=0), outcomes("run_r3", soup, seed=1),
              outcomes("run_r3_soup", soup), outcomes("stray", soup))
    pd.DataFrame([{"objective": "apo", "seed": 0.0, "ref": "pi_ref_a", "test_success": 0.4},
                  {"objective": "apo", "seed": 1.0, "ref": "pi_ref_a", "test_success": 0.5},
                  {"objective": "pi_ref", "seed": None, "ref": "pi_ref_a", "test_success": 0.1}]
                 ).to_csv(tmp_path / "run_r3_class_seeds.csv", index=False)
    gains = gains_over_first_reference(t, tmp_path, samples=500)
    assert list(gains["policy"]) == ["run_r3_soup", "run_r3"]  # largest gain first; "stray" has no chain
    assert set(gains["baseline"]) == {"pi_ref_a"}
    assert gains["gain"].tolist() == pytest.approx([0.4, 0.35])
    assert gains["success"].tolist() == pytest.approx([0.5, 0.45]) and (gains["baseline_success"] == 0.1).all()
    assert gains[["gained", "lost"]].to_numpy().tolist() == [[4.0, 0.0], [3.5, 0.0]]
    assert first_reference("run_r3_soup", tmp_path) == "pi_ref_a" and first_reference("stray", tmp_path) is None


def test_outcomes_that_disagree_with_the_seeds_table_are_refused(tmp_path):
    pd.DataFrame([{"objective": "apo", "seed": 0.0, "ref": "pi_ref_a", "test_success": 0.4},
                  {"objective": "apo", "seed": 1.0, "ref": "pi_ref_a", "test_success": 0.5},
                  {"objective": "pi_ref", "seed": None, "ref": "pi_ref_a", "test_success": 0.1}]
                 ).to_csv(tmp_path / "run_class_seeds.csv", index=False)
    good = table(outcomes("pi_ref_a", np.arange(10) < 1), outcomes("run", np.arange(10) < 4, seed=0),
                 outcomes("run", np.arange(10) < 5, seed=1))
    check = check_against_seeds(good, tmp_path)
    assert len(check) == 3 and (check["outcomes"] == check["seeds table"]).all()
    with pytest.raises(ValueError, match="disagree with the committed seeds tables"):
        check_against_seeds(table(good[good["seed"] != 1], outcomes("run", np.arange(10) < 6, seed=1)), tmp_path)
    with pytest.raises(ValueError, match="disagree with the committed seeds tables"):  # a seed never played
        check_against_seeds(good[good["seed"] != 1], tmp_path)
    with pytest.raises(ValueError, match="pi_ref_a"):  # the pi_ref row too
        check_against_seeds(table(good[good["policy"] != "pi_ref_a"], outcomes("pi_ref_a", np.arange(10) < 3)),
                            tmp_path)


@pytest.mark.usefixtures("torch_one_thread")
def test_outcomes_command_saves_the_goals_and_prints_each_runs_interval(tmp_path, ci_ref_dir, monkeypatch, capsys):
    import apo_helpers.__main__ as cli
    from apo_helpers.__main__ import main

    runs = tmp_path / "runs"
    shutil.copytree(ci_ref_dir, runs / "pi_ref_ci")
    run = runs / "apo_test_ci"
    shutil.copytree(ci_ref_dir, run / "seed_0" / "policy")
    (run / "seed_0" / "metrics.json").write_text(json.dumps(
        {"objective": "apo", "seed": 0, "profile": "ci", "ref": "pi_ref_ci", "apo_overrides": ""}))
    monkeypatch.setattr("apo_helpers.config.RUNS_DIR", runs)
    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path / "results")
    assert main(["outcomes", "--profile", "ci"]) != 0
    assert "outcomes needs --run RUN_FOLDER" in capsys.readouterr().err
    assert main(["outcomes", "--profile", "ci", "--run", str(run), "--policy", str(runs / "pi_ref_ci"),
                 "--episodes", "3", "--save", "--json"]) == 0
    gains = json.loads(capsys.readouterr().out.splitlines()[0])["gains"]
    assert [(g["policy"], g["baseline"], g["gain"]) for g in gains] == [("apo_test", "pi_ref_ci", 0.0)]
    saved = pd.read_csv(tmp_path / "results" / "goal_outcomes_ci.csv")
    assert len(saved) == 6 and sorted(saved["policy"].unique()) == ["apo_test", "pi_ref_ci"]


def test_gained_and_lost_goals_add_up_to_the_gain():
    ref = np.array([1, 1, 0, 0, 0, 1], dtype=bool)
    t = table(outcomes("ref", ref), outcomes("run", [1, 0, 1, 1, 0, 1], seed=0),
              outcomes("run", [0, 0, 1, 0, 0, 1], seed=1))
    moved = gained_and_lost(t, "run", "ref")
    assert moved == {"gained": 1.5, "lost": 1.5}  # goal 2 twice, goal 3 once; goal 1 twice, goal 0 once
    assert (moved["gained"] - moved["lost"]) / 6 == pytest.approx(gain_interval(t, "run", "ref", samples=100)["gain"])


def test_seed_agreement_counts_goals_by_the_seeds_that_solve_them():
    t = table(outcomes("ref", [1, 1, 0, 0, 0, 1]), outcomes("run", [1, 0, 1, 1, 0, 1], seed=0),
              outcomes("run", [0, 0, 1, 0, 0, 1], seed=1))
    counts = seed_agreement(t, "run", "ref")
    assert counts.loc["baseline fails"].tolist() == [1, 1, 1]  # goal 4 by none, goal 3 by one, goal 2 by both
    assert counts.loc["baseline solves"].tolist() == [1, 1, 1]  # goal 1 lost by both, goal 0 by one, goal 5 kept
    assert counts.to_numpy().sum() == 6
    with pytest.raises(ValueError, match="has 2 seeds"):
        seed_agreement(t, "ref", "run")


def test_val_outcomes_are_checked_on_the_goals_the_runs_final_evaluation_played(tmp_path):
    """A run's val success covers its first ``eval_episodes`` val goals (here 2 of 4, set by its overrides)."""
    pd.DataFrame([{"objective": "apo", "seed": 0.0, "ref": "pi_ref_a", "apo_overrides": "eval_episodes=2",
                   "test_success": 0.0, "val_success": 0.5},
                  {"objective": "pi_ref", "seed": None, "ref": "pi_ref_a", "apo_overrides": None,
                   "test_success": 0.0, "val_success": None}]).to_csv(tmp_path / "run_class_seeds.csv", index=False)
    val = table(outcomes("pi_ref_a", [0, 0, 0, 0], split="val"), outcomes("run", [1, 0, 1, 1], seed=0, split="val"))
    check = check_against_seeds(val, tmp_path, split="val")
    assert check[["policy", "goals", "outcomes"]].values.tolist() == [["run", 2, 0.5]]
    gains = gains_over_first_reference(val, tmp_path, samples=200, split="val")
    assert gains["gain"].tolist() == [0.75] and gains["split"].tolist() == ["val"]  # over all 4 val goals
    wrong = table(val[val["policy"] == "pi_ref_a"], outcomes("run", [1, 1, 1, 1], seed=0, split="val"))
    with pytest.raises(ValueError, match="per-goal val outcomes disagree"):
        check_against_seeds(wrong, tmp_path, split="val")
