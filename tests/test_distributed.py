"""Data parallelism through accelerate: two CPU processes (gloo) give the one-process update (notebook 04)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from apo_helpers.apo.trainer import load_models
from apo_helpers.apo.vstar import stage1, stage1_goals
from apo_helpers.config import get_profile

SCRIPT = Path(__file__).parent / "distributed" / "one_update.py"
P = get_profile("ci")
BATCH = 4  # tests/distributed/one_update.py's fixed batch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(processes: int, ref_dir, vstar_dir, out) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", APO_PROFILE="ci")
    args = [str(SCRIPT), str(ref_dir), str(vstar_dir), str(out)]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                   "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *args]
    else:
        command = [sys.executable, *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def setup(ci_ref_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    _, ref_model, tokenizer = load_models(ci_ref_dir, "cpu")
    # V* of the goals the fixed batch plays (the script overwrites V* itself: only the table's goals matter)
    table = stage1(ref_model, tokenizer, P, root / "vstar", goals=stage1_goals(P)[:BATCH], progress=False)
    return root, ci_ref_dir, root / "vstar" / table.key


def test_two_processes_give_the_one_process_update(setup):
    root, ref_dir, vstar_dir = setup
    one = _run(1, ref_dir, vstar_dir, root / "one")
    two = _run(2, ref_dir, vstar_dir, root / "two")
    assert (one["processes"], two["processes"]) == (1, 2)
    assert two["rewards"] == one["rewards"]  # the same fixed batch, split in two
    assert one["grad_norm"] > 1e-3  # a real gradient, which each half alone would not give
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-7)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    grads_one, grads_two = load_file(str(root / "one" / "grads.safetensors")), \
        load_file(str(root / "two" / "grads.safetensors"))
    assert grads_one.keys() == grads_two.keys() and grads_one
    for name, grad in grads_one.items():
        assert (grads_two[name] - grad).abs().max().item() <= 1e-5 + 1e-4 * grad.abs().max().item(), name
