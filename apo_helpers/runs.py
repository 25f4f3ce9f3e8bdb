"""One training run, headless: the ``train`` command's worker (notebook 04 runs the same pieces by hand).

It sits above the package's layers, as the command line does: stage 1 and the loop come from ``apo``, the greedy
evaluations and their option rates from ``analysis`` (``greedy_evaluation``), which the Trainer receives as its
evaluator.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .analysis.evaluate import greedy_evaluation
from .apo.sft import with_reference_goals
from .apo.trainer import Trainer, latest_checkpoint, load_models, make_accelerator
from .apo.vstar import stage1
from .config import MODEL_SIZE_FIELDS, PROFILES, ModelConfig, Profile, apo_overrides, numerics
from .files import atomic_write_text
from .policy.models import averaged_count, lineage, lineage_files, rendering_files, save_policy, with_rendering


def _ref_record(ref_dir) -> dict:
    """What a run records of its pi_ref's ``metrics.json``: ``demo_skip_options`` and ``demo_forget_options`` (the
    shares of demonstrations that ignored the options or did not select them; 0 when not recorded),
    ``ref_demonstrations`` (how many pi_ref imitated) and ``ref_model_size`` (where ``train-ref --model`` resized the
    tiny Llama of pi_ref's profile, e.g. ``hidden 256, 4 layers, 3.9M parameters``; else None),
    ``ref_pretrain_steps`` and ``ref_sft_steps`` (where ``train-ref --pretrain-steps`` or ``--sft-steps`` imitated
    longer or shorter than pi_ref's profile; else None, as for a file that does not record them), ``demo_think``
    (how the demonstrator wrote its think, ``short`` when not recorded), ``demo_query`` (what it searched,
    ``instruction`` when not recorded); all None when the folder has no such file, e.g. a policy saved by hand."""
    path = Path(ref_dir) / "metrics.json"
    if not path.exists():
        return {"demo_skip_options": None, "demo_forget_options": None, "ref_demonstrations": None,
                "ref_model_size": None, "ref_pretrain_steps": None, "ref_sft_steps": None, "demo_think": None,
                "demo_query": None}
    metrics = json.loads(path.read_text())
    size = metrics.get("model_size")
    profile = PROFILES.get(metrics.get("profile"))
    base = profile.model if profile else ModelConfig()
    resized = size is not None and any(size[name] != getattr(base, name) for name in MODEL_SIZE_FIELDS)
    steps = {name: metrics.get(name) for name in ("pretrain_steps", "sft_steps")}
    return {"demo_skip_options": metrics.get("demo_skip_options", 0.0),
            "demo_forget_options": metrics.get("demo_forget_options", 0.0),
            "demo_think": metrics.get("demo_think", "short"),
            "demo_query": metrics.get("demo_query", "instruction"),
            "ref_demonstrations": metrics.get("demonstrations"),
            "ref_model_size": (f"hidden {size['hidden_size']}, {size['num_layers']} layers, "
                               f"{metrics['parameters'] / 1e6:.1f}M parameters") if resized else None,
            **{f"ref_{name}": value if profile and value not in (None, getattr(profile.reference, name)) else None
               for name, value in steps.items()}}


def finished_metrics(out_dir) -> dict:
    """The metrics a finished ``train_run`` wrote to ``out_dir/metrics.json``, less the numerics (the seeds' table
    keeps scalars); a clear error where the seed has not finished (``train --gather``)."""
    out_dir = Path(out_dir)
    missing = [name for name in ("metrics.json", "history.csv", "evals.csv") if not (out_dir / name).exists()]
    if missing:
        raise ValueError(f"{out_dir} lacks {', '.join(missing)}: that seed has not finished; finish it "
                         f"(train --resume) or leave it out of --seeds")
    metrics = json.loads((out_dir / "metrics.json").read_text())
    metrics.pop("numerics", None)
    return metrics


def train_run(profile: Profile, ref_dir, vstar_dir, out_dir, seed: int = 0, objective: str = "apo",
              iterations: int | None = None, resume: bool = False, progress: bool = True) -> dict:
    """One seed, headless: stage 1 (cached), the loop (resumable), the final policy and its greedy test result.

    Writes under ``out_dir``: ``checkpoints/``, ``history.csv``, ``evals.csv``, ``policy/`` and ``metrics.json``.
    ``policy/`` can be the next run's pi_ref (re-anchoring: stage 1 and the regression then start from it); its
    ``lineage.json`` keeps the first pi_ref, which names the run (``ref``) beside ``ref_rounds`` and
    ``ref_iterations``, the runs and iterations that came before this one, and ``ref_averaged``, how many seeds'
    policies were averaged into this run's pi_ref (0: none).
    """
    out_dir = Path(out_dir)
    profile = with_reference_goals(with_rendering(profile, ref_dir), ref_dir)  # pages and goals as pi_ref learned
    chain = lineage(ref_dir)  # a previous run's final policy as pi_ref: the run is described by the chain's origin
    accelerator = make_accelerator()
    model, ref_model, tokenizer = load_models(ref_dir, str(accelerator.device))
    with accelerator.main_process_first():  # one process samples stage 1 (when not cached), the others load it
        vstar = stage1(ref_model, tokenizer, profile, vstar_dir, progress=progress and accelerator.is_main_process)
    trainer = Trainer(model, ref_model, tokenizer, vstar, profile, objective, seed, out_dir, iterations, accelerator,
                      evaluator=greedy_evaluation)
    if resume and latest_checkpoint(out_dir) is not None:
        trainer.load_checkpoint()
    start = time.perf_counter()
    state = trainer.run(progress)
    trainer.keep_average()  # with ema, the averaged weights are the run's policy: tested and saved
    test = trainer.evaluate("test", profile.apo.test_episodes)
    metrics = {"objective": objective, "seed": seed, "profile": profile.name, "iterations": state.iteration,
               "ref": chain.origin.name, "ref_rounds": chain.rounds, "ref_iterations": chain.iterations,
               "ref_averaged": averaged_count(ref_dir),
               "apo_overrides": apo_overrides(profile),
               **_ref_record(chain.origin),
               "show_selected_options": profile.policy.show_selected_options,
               **{f"test_{k}": v for k, v in test.items() if k not in ("iteration", "split")},
               "val_success": float(state.evals["success"].iloc[-1]),
               "train_seconds": round(float(state.history["seconds"].sum()), 1),
               "wall_seconds_this_call": round(time.perf_counter() - start, 1),
               "episodes": int(state.iteration * profile.apo.batch_goals),
               "generated_tokens": int(state.history["generated_tokens"].sum()), "vstar_key": vstar.key,
               "vstar_goals": len(vstar.table),
               "vstar_seconds": vstar.seconds, "peak_memory_mb": trainer.peak_memory_mb(),
               "device": str(next(model.parameters()).device),
               "processes": accelerator.num_processes}
    if accelerator.is_main_process:
        state.history.to_csv(out_dir / "history.csv", index=False)
        state.evals.to_csv(out_dir / "evals.csv", index=False)
        save_policy(model, tokenizer, out_dir / "policy",
                    extra_files={**rendering_files(profile.policy), **lineage_files(ref_dir, state.iteration)})
        # numerics (versions, CPU kernels) only in the run's own file: the seeds' table keeps one row of scalars
        atomic_write_text(out_dir / "metrics.json", json.dumps({**metrics, "numerics": numerics()}, indent=1) + "\n")
    accelerator.wait_for_everyone()
    return metrics
