"""Evaluation: the Wilson interval by hand, the summary's fields and numbers, determinism."""

from __future__ import annotations

import math

import pytest

from apo_helpers.analysis.evaluate import (Episode, Evaluation, copied_query, evaluate, run_episode, summary_table,
                                           wilson_interval)
from apo_helpers.policy.prompts import Turn
from apo_helpers.policy.rollout import Trajectory
from apo_helpers.webshop.agents import ExpertAgent, OracleAgent, RandomAgent
from apo_helpers.webshop.env import WebShopEnv

Z = 1.96


def _wilson(k: int, n: int) -> tuple[float, float]:
    """The textbook formula: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)."""
    p = k / n
    center = p + Z**2 / (2 * n)
    half = Z * math.sqrt(p * (1 - p) / n + Z**2 / (4 * n**2))
    return (center - half) / (1 + Z**2 / n), (center + half) / (1 + Z**2 / n)


def test_wilson_hand_checked_values():
    # 0/10: upper bound z^2/n / (1 + z^2/n) = 0.38416 / 1.38416
    low, high = wilson_interval(0, 10)
    assert low == pytest.approx(0.0, abs=1e-12)
    assert high == pytest.approx(0.38416 / 1.38416)
    assert round(high, 4) == 0.2775
    # 10/10: the mirror image
    low, high = wilson_interval(10, 10)
    assert low == pytest.approx(1 / 1.38416)
    assert round(low, 4) == 0.7225
    assert high == pytest.approx(1.0, abs=1e-12)
    # 5/10: centred on 0.5, half width 1.96 * sqrt(0.025 + 0.009604) / 1.38416
    low, high = wilson_interval(5, 10)
    half = 1.96 * math.sqrt(0.025 + 0.009604) / 1.38416
    assert (low, high) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)


@pytest.mark.parametrize("k,n", [(1, 3), (7, 20), (199, 200), (50, 200), (1, 1000)])
def test_wilson_matches_the_formula(k, n):
    assert wilson_interval(k, n) == pytest.approx(_wilson(k, n))
    low, high = wilson_interval(k, n)
    assert 0.0 <= low < k / n < high <= 1.0


def test_wilson_bounds_and_empty_sample():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    for n in (1, 5, 200):
        for k in (0, n):
            low, high = wilson_interval(k, n)
            assert 0.0 <= low <= high <= 1.0
    assert wilson_interval(3, 10, z=2.576)[1] > wilson_interval(3, 10)[1]  # a wider interval at 99%


def _episode(i, reward, success, valid):
    return Episode(goal_index=i, instruction=f"goal {i}", category="toys", observations=["o"] * len(valid),
                   actions=["a"] * len(valid), valid=valid, reward=reward, success=success, bought=reward > 0)


EPISODES = [
    _episode(0, 1.0, True, [True, True, True]),
    _episode(1, 0.5, False, [True, False, True, True]),
    _episode(2, 0.0, False, [True] * 8 + [False, False]),
]


def test_summary_fields_values_and_types():
    summary = Evaluation("hand", "test", EPISODES).summary()
    assert list(summary) == ["success_rate", "success_ci95", "mean_score", "mean_steps", "invalid_rate", "episodes"]
    assert summary["success_rate"] == pytest.approx(1 / 3)
    low, high = wilson_interval(1, 3)
    assert summary["success_ci95"] == [round(low, 4), round(high, 4)]
    assert summary["mean_score"] == pytest.approx(0.5)
    assert summary["mean_steps"] == pytest.approx(17 / 3)
    assert summary["invalid_rate"] == pytest.approx(3 / 17)
    assert summary["episodes"] == 3
    for key in ("success_rate", "mean_score", "mean_steps", "invalid_rate"):
        assert type(summary[key]) is float, key
    assert type(summary["episodes"]) is int
    assert isinstance(summary["success_ci95"], list) and len(summary["success_ci95"]) == 2
    assert all(type(x) is float for x in summary["success_ci95"])


def test_summary_of_no_episodes():
    summary = Evaluation("none", "test", []).summary()
    assert summary == {"success_rate": 0.0, "success_ci95": [0.0, 1.0], "mean_score": 0.0, "mean_steps": 0.0,
                       "invalid_rate": 0.0, "episodes": 0}


def test_table_has_one_row_per_episode():
    table = Evaluation("hand", "test", EPISODES).table()
    assert list(table["goal_index"]) == [0, 1, 2]
    assert list(table["steps"]) == [3, 4, 10]
    assert list(table["invalid"]) == [0, 1, 2]
    assert list(table["success"]) == [True, False, False]


def test_summary_table(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog)
    oracle = evaluate(OracleAgent(), env=env, progress=False)
    rand = evaluate(RandomAgent(0), env=env, progress=False, name="monkey")
    table = summary_table([oracle, rand])
    assert list(table.index) == ["oracle", "monkey"]
    assert table.loc["oracle", "success_rate"] == 1.0 and table.loc["oracle", "ci95_high"] == 1.0
    assert table.loc["monkey", "episodes"] == 10 and table.loc["oracle", "split"] == "test"


def test_run_episode_records_every_step(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog)
    episode = run_episode(env, OracleAgent(), 4)
    goal = small_catalog.split("test")[4]
    assert episode.goal_index == 4 and episode.instruction == goal.instruction and episode.category == goal.category[0]
    assert episode.steps == len(episode.observations) == len(episode.valid) >= 2
    assert episode.actions[0] == f"search[{goal.target_title}]" and episode.actions[-1] == "click[buy now]"
    assert episode.observations[0].endswith(" [SEP] Search")
    assert episode.bought and episode.success and episode.reward == 1.0
    assert episode.breakdown["reward"] == 1.0


def test_run_episode_without_a_purchase(small_catalog):
    class Idle:
        name = "idle"

        def reset(self):
            pass

        def act(self, observation, info):
            return "click[nothing]"

    env = WebShopEnv(split="test", catalog=small_catalog, max_turns=4)
    episode = run_episode(env, Idle(), 0)
    assert episode.steps == 4 and episode.valid == [False] * 4
    assert (episode.reward, episode.success, episode.bought, episode.breakdown) == (0.0, False, False, None)
    assert Evaluation("idle", "test", [episode]).summary()["invalid_rate"] == 1.0


def test_evaluate_is_deterministic(small_catalog):
    runs = []
    for _ in range(2):
        env = WebShopEnv(split="test", catalog=small_catalog)
        random_run = evaluate(RandomAgent(seed=0), env=env, progress=False)
        expert_run = evaluate(ExpertAgent(), env=env, progress=False)
        runs.append([(ev.summary(), [(e.actions, e.reward) for e in ev.episodes]) for ev in (random_run, expert_run)])
    assert runs[0] == runs[1]


def test_evaluate_plays_the_first_goals(small_catalog):
    env = WebShopEnv(split="val", catalog=small_catalog)
    assert [e.goal_index for e in evaluate(OracleAgent(), env=env, episodes=3, progress=False).episodes] == [0, 1, 2]
    assert len(evaluate(OracleAgent(), env=env, episodes=1000, progress=False).episodes) == 10


def test_evaluation_is_labelled_with_the_split_it_played(small_catalog):
    env = WebShopEnv(split="val", catalog=small_catalog)
    evaluation = evaluate(OracleAgent(), env=env, episodes=2, progress=False)  # split argument left at "test"
    assert evaluation.split == "val"
    assert evaluation.episodes[0].instruction == small_catalog.split("val")[0].instruction


def test_cli_samples_a_policy_and_saves_one_row_per_agent_split_and_k(ci_ref_dir, tmp_path, monkeypatch, capsys):
    import json

    import pandas as pd

    import apo_helpers.__main__ as cli

    monkeypatch.setattr(cli, "RESULTS_DIR", tmp_path)
    base = ["evaluate", "--agent", str(ci_ref_dir), "--profile", "ci", "--split", "val", "--episodes", "6",
            "--name", "pi_ref", "--save", "--json"]
    assert cli.main(base + ["--pass-k", "3"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["k"] == 3 and first["episodes"] == 6
    assert 0 <= first["sample_success"] <= first["pass_at_k"] <= 1  # one sample can only do worse than the best of 3
    assert cli.main(base + ["--pass-k", "3"]) == 0  # the same agent, split and k again: replaced, not appended
    assert json.loads(capsys.readouterr().out) == first  # seeded: the same numbers
    assert cli.main(base) == 0  # greedy only: its own row (k = 0)
    table = pd.read_csv(tmp_path / "evaluations_ci.csv")
    assert sorted(table["k"]) == [0, 3] and set(table["agent"]) == {"pi_ref"}
    assert table.loc[table["k"] == 3, "success_rate"].item() == first["success_rate"]


def test_cli_refuses_to_sample_a_scripted_agent(capsys):
    from apo_helpers.__main__ import main

    assert main(["evaluate", "--agent", "rule", "--split", "val", "--episodes", "2", "--pass-k", "4"]) != 0
    assert "--pass-k samples a saved policy" in capsys.readouterr().err
    assert main(["evaluate", "--agent", "no/such/folder"]) != 0
    assert "neither a scripted agent" in capsys.readouterr().err


def test_seed_range_draws_the_mean_and_the_seeds_extremes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from apo_helpers.analysis.plots import seed_range

    fig, ax = plt.subplots()
    assert seed_range(ax, 300, [0.25, 0.30, 0.41], fmt="s") == pytest.approx((0.32, 0.25, 0.41))
    line, _, (bars,) = ax.containers[0].lines
    assert line.get_xydata().ravel().tolist() == pytest.approx([300, 0.32])
    assert bars.get_segments()[0].ravel().tolist() == pytest.approx([300, 0.25, 300, 0.41])
    plt.close(fig)


def test_copied_query_means_the_whole_instruction_exactly():
    env = WebShopEnv(split="test")
    observation, info = env.reset(options={"goal_index": 0})
    instruction = env.goal.instruction

    def played(action):
        turn = Turn(observation, info["available_actions"], info["turns_left"], action=action)
        return Trajectory(goal=env.goal, turns=[turn])

    assert copied_query(played(f"search[{instruction}]"))
    assert not copied_query(played(f"search[{instruction[:-1]}]"))  # one character short
    assert not copied_query(played(f"search[{instruction} now]"))
    assert not copied_query(played(""))  # a reply that did not parse
    assert not copied_query(Trajectory(goal=env.goal, turns=[]))
