"""A pretrained LLM as the agent: zero-shot, then after a short imitation (notebook 02, the `gpu` profile's model).

``before_after_imitation`` plays greedy val episodes with the named model as it ships (does it follow RAGEN's
``<think> ... </think> <answer> ... </answer>`` format? does it ever buy the right product?), imitates the expert's
demonstrations for a few steps, and plays the same episodes again. The sizes come from the profile's
``PretrainedConfig``: seconds under ``ci``, minutes on a CPU under ``class``, the full run on a GPU under ``gpu``.
"""

from __future__ import annotations

import dataclasses
import time

import pandas as pd

from ..apo.sft import expert_demonstrations, imitate, tokenize_demonstrations
from ..config import PROJECT_ROOT, RESULTS_DIR, RUNS_DIR, Profile, device, seed_everything
from ..policy.models import count_parameters, load_named_model
from .evaluate import evaluate_policy


def format_valid_rate(trajectories) -> float:
    """Share of all turns whose reply parsed as ``<think> ... </think> <answer> ... </answer>``."""
    turns = [turn.format_ok for t in trajectories for turn in t.turns]
    return sum(turns) / max(1, len(turns))


def _row(stage: str, model, tokenizer, profile: Profile, episodes: int, seconds: float) -> dict:
    start = time.perf_counter()
    result, trajectories = evaluate_policy(model, tokenizer, "val", episodes, profile, name=stage, progress=False)
    s = result.summary()
    return {"stage": stage, "format_valid_rate": format_valid_rate(trajectories), "success_rate": s["success_rate"],
            "mean_score": s["mean_score"], "invalid_rate": s["invalid_rate"], "mean_steps": s["mean_steps"],
            "episodes": s["episodes"], "train_seconds": round(seconds, 1),
            "eval_seconds": round(time.perf_counter() - start, 1)}


def before_after_imitation(profile: Profile, progress: bool = True) -> pd.DataFrame:
    """Greedy val results of ``profile.pretrained.model`` zero-shot and after ``sft_steps`` imitation steps.

    One row per stage: format-valid rate (share of turns), success rate, mean score, invalid-action rate, mean
    steps, episodes, seconds; the model, its size, the device and the settings are in the columns too."""
    cfg = profile.pretrained
    seed_everything(profile.seed)
    model, tokenizer = load_named_model(cfg.model, device())
    # the agent's turns as the profile plays them, with the reply budget and turn limit of this check
    play = dataclasses.replace(profile, policy=dataclasses.replace(profile.policy, max_new_tokens=cfg.max_new_tokens),
                               env=dataclasses.replace(profile.env, max_turns=cfg.max_turns))
    rows = [_row("zero-shot", model, tokenizer, play, cfg.episodes, 0.0)]
    demos = expert_demonstrations(profile, cfg.demonstrations, seed=profile.seed)
    tokenize_demonstrations(demos, tokenizer, profile.policy.window)
    history = imitate(model, tokenizer, demos, pretrain_steps=0, sft_steps=cfg.sft_steps, batch_size=cfg.batch_size,
                      lr=cfg.lr, seed=profile.seed, progress=progress)
    rows.append(_row(f"after {cfg.sft_steps} imitation steps", model, tokenizer, play, cfg.episodes,
                     float(history["seconds"].iloc[-1])))
    settings = {"model": cfg.model, "parameters_m": round(count_parameters(model) / 1e6, 1), "device": device(),
                "profile": profile.name, "demonstrations": cfg.demonstrations, "batch_size": cfg.batch_size,
                "lr": cfg.lr, "max_new_tokens": cfg.max_new_tokens, "max_turns": cfg.max_turns,
                "final_imitation_loss": round(float(history["loss"].tail(5).mean()), 4)}
    return pd.DataFrame(rows).assign(**settings)


def load_or_run(profile: Profile, progress: bool = True) -> tuple[pd.DataFrame, str]:
    """``(table, where it came from)``: the table ``python -m apo_helpers pretrained`` saved for this profile under
    runs/ (``make report`` runs it first: on a CPU it takes longer than a notebook cell may), else the one committed
    under data/results/ by ``pretrained --save``, else a live run."""
    for saved in (RUNS_DIR / f"pretrained_{profile.name}" / "results.csv",
                  RESULTS_DIR / f"pretrained_{profile.name}.csv"):
        if saved.exists():
            where = saved.relative_to(PROJECT_ROOT)
            return pd.read_csv(saved), f"{where} (python -m apo_helpers pretrained --profile {profile.name})"
    return before_after_imitation(profile, progress), "computed live in this notebook"
