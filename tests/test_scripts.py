"""scripts/gpu_lease.sh: the one-go chain a lent GPU runs (pi_ref, its test evaluation beside stage 1, three seeds
side by side, gathered), dry-run on a CPU under the ``ci`` profile."""

from __future__ import annotations

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
    done = run_script(tmp_path, PROFILE="ci", SET="vstar_goals=16 greedy_search=True", MINUTES="0.1", NAME="dry")
    assert done.returncode == 0, done.stdout + done.stderr
    table = pd.read_csv(tmp_path / "dry" / "results.csv")
    assert sorted(table["seed"]) == [0, 1, 2] and (table["objective"] == "apo").all()
    assert "max_minutes=0.1" in table["apo_overrides"].iloc[0] and "lr=2e-05" in table["apo_overrides"].iloc[0]
    assert (tmp_path / "dry_logs" / "pi_ref_test.json").read_text().startswith("{")
    assert not list((PROJECT_ROOT / "data" / "results").glob("dry_*"))  # SAVE=0 writes nothing there
