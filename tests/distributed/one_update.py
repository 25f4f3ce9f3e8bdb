"""One A*PO update on a fixed batch, under ``torchrun --nproc_per_node K`` or as a plain process (K = 1).

Every process rolls out the same fixed batch greedily, keeps its share (``Trainer.share``) and takes one
``Trainer.update``: the gradients are averaged across processes before the step. Process 0 writes the loss, the
gradient norm and the averaged gradients, which ``tests/test_distributed.py`` compares between K = 1 and K = 2.

    python tests/distributed/one_update.py REF_DIR VSTAR_DIR OUT_DIR
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from apo_helpers.apo.trainer import Trainer, load_models, make_accelerator
from apo_helpers.apo.vstar import load_vstar
from apo_helpers.config import get_profile
from apo_helpers.policy.rollout import GREEDY, rollout

BATCH = 4


def main(ref_dir: str, vstar_dir: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    profile = get_profile("ci")
    accelerator = make_accelerator()
    model, ref_model, tokenizer = load_models(ref_dir, str(accelerator.device))
    vstar = load_vstar(vstar_dir)
    # a different advantage r - V* per trajectory: a ci-sized pi_ref scores about the same everywhere, and equal
    # advantages around zero would give (near) zero gradients, which any split reproduces
    vstar.table["vstar"] = [-1.5 + 0.3 * i for i in range(len(vstar.table))]
    trajectories = rollout(model, tokenizer, vstar.goals()[:BATCH], GREEDY, profile.policy, profile.policy_env())
    trainer = Trainer(model, ref_model, tokenizer, vstar, profile, "apo", seed=0, accelerator=accelerator)
    _, loss, _, grad_norm = trainer.update(trainer.share(trajectories))
    if accelerator.is_main_process:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        grads = {name: p.grad.detach().clone().contiguous() for name, p in model.named_parameters()
                 if p.grad is not None}
        save_file(grads, str(out / "grads.safetensors"))
        (out / "result.json").write_text(json.dumps({
            "processes": accelerator.num_processes, "loss": loss.item(), "grad_norm": float(grad_norm),
            "rewards": [t.reward for t in trajectories]}))
    accelerator.wait_for_everyone()
    # tear gloo down before the interpreter exits: left to the exit handlers, its threads can abort process 0
    accelerator.end_training()


if __name__ == "__main__":
    main(*sys.argv[1:4])
