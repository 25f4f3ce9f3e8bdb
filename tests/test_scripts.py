"""scripts/gpu_lease.sh: the one-go chain a lent GPU runs (pi_ref, its test evaluation beside stage 1, three seeds
side by side, gathered), dry-run on a CPU under the ``ci`` profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from apo_helpers.config import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "gpu_lease.sh"


def run_script(tmp_path: Path, **settings) -> subprocess.CompletedProcess:
    """The script with ``settings`` as its environment, this interpreter first on the PATH, run from the project."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "WORK": str(tmp_path), "SAVE": "0", **settings}
    return subprocess.run(["bash", str(SCRIPT)], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


def test_a_failed_step_stops_the_chain_and_names_its_log(tmp_path):
    done = run_script(tmp_path, PROFILE="no_such_profile")
    assert done.returncode == 1
    timeline = (tmp_path / "apo_gpu_sloppy_lr2e5_logs" / "timeline.txt").read_text()
    assert "train-ref failed: see" in timeline and "train_ref.log" in timeline and "stage 1" not in timeline


@pytest.mark.slow
def test_the_chain_runs_to_a_gathered_table(tmp_path):
    done = run_script(tmp_path, PROFILE="ci", SET="vstar_goals=16 greedy_search=True", MINUTES="5", DEADLINE="1",
                      ROUNDS="2", NAME="dry")
    assert done.returncode == 0, done.stdout + done.stderr
    table = pd.read_csv(tmp_path / "dry" / "results.csv")
    assert sorted(table["seed"]) == [0, 1, 2] and (table["objective"] == "apo").all()
    # the deadline, long past once stage 1 is done, cuts the 5-minute budget to its floor
    assert "max_minutes=0.1" in table["apo_overrides"].iloc[0] and "lr=2e-05" in table["apo_overrides"].iloc[0]
    logs = tmp_path / "dry_logs"
    timeline = (logs / "timeline.txt").read_text()
    assert "round 1 training budget: 0.10 minutes per seed" in timeline
    assert (logs / "pi_ref_test.json").read_text().startswith("{")
    assert json.loads((logs / "pi_ref_metrics.json").read_text())["profile"] == "ci"
    assert pd.read_csv(logs / "results.csv").equals(table)
    # the second round re-anchored each seed on its own first-round policy, measured against the first pi_ref
    second = pd.read_csv(logs / "r2_results.csv")
    assert sorted(second["seed"]) == [0, 1, 2] and (second["ref_rounds"] == 1).all()
    assert (second["ref"] == table["ref"].iloc[0]).all() and (second["ref_iterations"] == table["iterations"]).all()
    # (the ci pi_ref's samples all score alike, so A*PO leaves its weights and their stage-1 key as they were)
    assert all(json.loads((logs / f"r2_vstar_{k}.json").read_text())["goals"] == 16 for k in range(3))
    assert "round 2 gathered" in timeline and timeline.rstrip().endswith("done; pi_ref's test result in "
                                                                          f"{logs}/pi_ref_test.json")
    assert not list((PROJECT_ROOT / "data" / "results").glob("dry_*"))  # SAVE=0 writes nothing there


def fake_lease(log: Path) -> None:
    """A log folder as a lease of the chain leaves it when the call ends with seed 0 still in its test evaluation."""
    log.mkdir()
    (log / "timeline.txt").write_text("[11:42:25 +0s] start: profile gpu, lr 2e-5, 4.2 minutes of training per seed\n"
                                      "[11:44:03 +98s] pi_ref trained\n[11:46:11 +226s] stage 1 done\n")
    ref = {"profile": "gpu", "demonstrations": 595, "demo_skip_options": 0.5, "train_seconds": 77.6,
           "final_loss": 0.0109, "numerics": {"gpu": "NVIDIA H200", "torch": "2.11", "transformers": "5.17"}}
    (log / "train_ref.log").write_text("imitation: 100%|##| 400/400\r{'not': 'this'}\n" + json.dumps(ref, indent=1))
    (log / "pi_ref_test.json").write_text(json.dumps({"success_rate": 0.46, "mean_score": 0.78, "mean_steps": 3.8,
                                                      "invalid_rate": 0.03, "episodes": 200,
                                                      "success_ci95": [0.39, 0.53]}))
    (log / "vstar.json").write_text(json.dumps({"key": "k", "goals": 93, "dropped_by_filters": 35, "N": 8,
                                                "beta1": 0.5, "mean_vstar": 0.75, "mean_reward": 0.73,
                                                "sample_success": 0.3, "goals_never_solved": 24}))

    def bar(seed, iteration, kl, val):
        return (f"apo seed {seed}:  2%|| {iteration}/60 [00:26<25:47, 26.23s/it]\r"
                f"apo seed {seed}:  2%|| {iteration}/60 [00:26<25:47, 26.23s/it, kl={kl}, reward=0.74, success=0.27,"
                f" val={val}]\r")
    (log / "seed_0.log").write_text(bar(0, 1, "0.00", "0.42") + bar(0, 2, "3.28", "0.58"))
    finished = {"objective": "apo", "seed": 1, "iterations": 2, "test_success": 0.56,
                "apo_overrides": "beta2=0.03 eval_every=1000 max_minutes=4.2"}
    (log / "seed_1.log").write_text(bar(1, 1, "0.00", "0.42") + bar(1, 2, "1.50", "0.56") + "\n"
                                    + json.dumps(finished) + "\n")


def record_lease(tmp_path: Path, monkeypatch, name: str, record: str, timeline: str = "") -> Path:
    """scripts/gpu_record.py run on a fake lease (its timeline extended by ``timeline``); the results folder."""
    import runpy

    script = runpy.run_path(str(PROJECT_ROOT / "scripts" / "gpu_record.py"))
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setitem(script["main"].__globals__, "RESULTS", results)
    fake_lease(tmp_path / "res")
    with (tmp_path / "res" / "timeline.txt").open("a") as lines:
        lines.write(timeline)
    script["main"](str(tmp_path / "res"), name, record)
    return results


def test_a_lease_is_recorded_from_its_logs_with_the_seeds_that_finished(tmp_path, monkeypatch):
    results = record_lease(tmp_path, monkeypatch, "apo_long", "long_run")
    seeds = pd.read_csv(results / "apo_long_gpu_seeds.csv")
    assert list(seeds["seed"]) == [1] and seeds["test_success"].iloc[0] == 0.56
    progress = pd.read_csv(results / "apo_long_gpu_progress.csv")
    assert progress.groupby("seed")["iteration"].max().to_dict() == {0: 2, 1: 2}
    run = json.loads((results / "long_run.json").read_text())
    assert run["seeds_finished"] == [1] and run["seeds_unfinished"] == {
        "0": {"iterations": 2, "last_val_success": 0.58, "last_kl": 3.28}}
    assert run["timeline_seconds"] == {"start": 0, "pi_ref trained": 98, "stage 1 done": 226}
    assert run["pi_ref"]["test_success_rate"] == 0.46 and run["pi_ref"]["train_seconds"] == 77.6
    assert run["device"].startswith("NVIDIA H200") and run["max_kl"] == 3.28
    assert "lr=2e-5" in run["commands"][-1] and "max_minutes=4.2" in run["commands"][-1]
    assert "eval_every" not in run["commands"][2]  # stage 1's command keeps the recipe alone


def test_a_re_anchored_lease_records_each_rounds_commands(tmp_path, monkeypatch):
    results = record_lease(tmp_path, monkeypatch, "apo_re", "re_run",
                           "[11:47:00 +275s] round 1 training budget: 0.36 minutes per seed\n"
                           "[11:52:00 +575s] round 2 training budget: 0.10 minutes per seed\n"
                           "[11:55:00 +755s] done; pi_ref's test result in /tmp/res/pi_ref_test.json\n")
    run = json.loads((results / "re_run.json").read_text())
    assert list(run["timeline_seconds"])[-1] == "done"
    stage1, train = run["commands"][-2:]
    assert stage1.startswith("vstar --ref runs/apo_re/seed_k/policy") and "eval_every" not in stage1
    assert train.startswith("train --ref 'runs/apo_re/seed_{seed}/policy'") and "--out runs/apo_re_r2" in train
    assert "max_minutes=0.10" in train and "lr=2e-5" in train
