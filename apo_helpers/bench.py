"""Benchmarks behind ``python -m apo_helpers bench ...`` (numbers quoted in the README).

Benchmarks measure; tests assert behaviour. Each benchmark repeats its measurement and reports medians, because
these machines are noisy.
"""

from __future__ import annotations

import os
import statistics
import time

from .config import CatalogConfig, EnvConfig, seed_everything
from .webshop.agents import RandomAgent
from .webshop.catalog import generate_catalog
from .webshop.env import WebShopEnv
from .webshop.search import search_engine


def bench_env(num_products: int = 1000, steps: int = 20000, repeats: int = 5, seed: int = 0) -> dict:
    """Random-agent env steps per second (one process) and median BM25 search latency, at ``num_products``."""
    seed_everything(seed)
    config = CatalogConfig(num_products=num_products, seed=seed,
                           test_targets=min(200, num_products // 5), val_targets=min(200, num_products // 5))
    t0 = time.perf_counter()
    catalog = generate_catalog(config)
    generate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine = search_engine(catalog, EnvConfig().max_results)
    index_s = time.perf_counter() - t0
    env = WebShopEnv(split="train", catalog=catalog, seed=seed)
    agent = RandomAgent(seed)
    rates = []
    for _ in range(repeats):
        done, count = True, 0
        start = time.perf_counter()
        while count < steps // repeats:
            if done:
                observation, info = env.reset()
                agent.reset()
            observation, _, terminated, truncated, info = env.step(agent.act(observation, info))
            done = terminated or truncated
            count += 1
        rates.append(count / (time.perf_counter() - start))
    queries = [g.instruction for g in catalog.goals["train"][:500]]
    latencies = []
    for query in queries:
        start = time.perf_counter()
        engine.search(query)
        latencies.append((time.perf_counter() - start) * 1000)
    return {"products": num_products, "steps_per_second": round(statistics.median(rates), 1),
            "steps_per_second_runs": [round(r, 1) for r in rates],
            "search_ms_median": round(statistics.median(latencies), 4),
            "search_ms_p95": round(sorted(latencies)[int(0.95 * len(latencies)) - 1], 4),
            "catalog_seconds": round(generate_s, 2), "index_seconds": round(index_s, 2),
            "targets": {"steps_per_second": 5000, "search_ms_median_at_1000": 1.0},
            "cpu_count": os.cpu_count()}


def bench_rollout(batch: int = 32, ref: str | None = None, split: str = "val", repeats: int = 3, seed: int = 0) -> dict:
    """Agent tokens per second: ``batch`` episodes in lockstep vs the same episodes one at a time (greedy, same
    goals, same model). Without ``ref`` the model is an untrained tiny Llama (every reply runs to the token limit)."""
    import dataclasses

    import torch

    from .apo.sft import expert_demonstrations, tokenizer_corpus
    from .config import device, get_profile
    from .policy.models import create_policy, load_policy, with_rendering
    from .policy.rollout import GREEDY, rollout
    from .webshop.catalog import default_catalog

    profile = get_profile()
    seed_everything(seed)
    if ref:
        profile = with_rendering(profile, ref)
        model, tokenizer = load_policy(ref, device())
    else:
        demos = expert_demonstrations(profile, 100)
        model, tokenizer = create_policy("tiny", profile.model, tokenizer_corpus(default_catalog(), demos, profile.policy.window))
        model.to(device())
    goals = default_catalog().split(split)[:batch]
    seconds_of = {"batched": [], "sequential": []}
    tokens = {}
    for _ in range(repeats):
        for mode, size in (("batched", batch), ("sequential", 1)):
            config = dataclasses.replace(profile.policy, batch_size=size)
            start = time.perf_counter()
            trajectories = rollout(model, tokenizer, goals, GREEDY, config, profile.policy_env())
            seconds = time.perf_counter() - start
            tokens[mode] = sum(t.generated_tokens for t in trajectories)
            seconds_of[mode].append(seconds)
    prefill, prompt_tokens = {}, 0
    for mode, size in (("batched", batch), ("sequential", 1)):
        timings = [_prefill(model, tokenizer, trajectories, profile.policy, size) for _ in range(repeats)]
        prefill[mode], prompt_tokens = statistics.median(s for s, _ in timings), timings[0][1]
    runs = {mode: [tokens[mode] / s for s in seconds] for mode, seconds in seconds_of.items()}
    batched, sequential = statistics.median(runs["batched"]), statistics.median(runs["sequential"])
    return {"batch": batch, "model": ref or "tiny (untrained)", "device": str(model.device),
            "torch_threads": torch.get_num_threads(),
            "tokens_per_second_batched": round(batched, 1), "tokens_per_second_sequential": round(sequential, 1),
            "speedup": round(batched / sequential, 2), "generated_tokens": tokens,
            "turns": sum(t.num_turns for t in trajectories),
            "prompt_tokens": prompt_tokens,
            "seconds_median": {k: round(statistics.median(v), 3) for k, v in seconds_of.items()},
            "prefill_seconds_median": {k: round(v, 3) for k, v in prefill.items()},
            # every prompt must be read once, batched or not: no batching beats sequential time / batched prefill
            "speedup_bound_from_prefill": round(statistics.median(seconds_of["sequential"]) / prefill["batched"], 2),
            "runs": {k: [round(v, 1) for v in vs] for k, vs in runs.items()}, "target_speedup": 8.0}


def _prefill(model, tokenizer, trajectories, config, batch: int) -> tuple[float, int]:
    """Seconds of the prompt forward passes alone (no generation) of a rollout's turns, grouped as the rollout
    grouped them (turn k of the episodes still running, ``batch`` episodes at a time), and the prompt tokens read."""
    import torch

    from .policy.prompts import build_messages
    from .policy.rollout import encode_prompts

    seconds, tokens = 0.0, 0
    for start in range(0, len(trajectories), batch):
        chunk = trajectories[start: start + batch]
        for k in range(max(t.num_turns for t in chunk)):
            chats = [build_messages(t.turns[: k + 1], config.window) for t in chunk if t.num_turns > k]
            inputs = encode_prompts(tokenizer, chats, config, model.device)
            tokens += int(inputs["attention_mask"].sum())
            begin = time.perf_counter()
            with torch.no_grad():
                model(**inputs, logits_to_keep=1)
            seconds += time.perf_counter() - begin
    return seconds, tokens


def bench_train(ref: str | None = None, batch: int = 32, repeats: int = 5, seed: int = 0, model_name: str = "tiny",
                objective: str = "apo") -> dict:
    """Seconds of one A*PO iteration (``batch`` goals, one rollout each, one update), split into rollout, the
    policy's forward pass, pi_ref's scoring and the update (backward + step); tokens per second for generation and
    for the training step; peak memory. ``model_name`` ``tiny`` uses the profile's pi_ref (or ``ref``); a named
    pretrained model (``smollm2-135m``) is used as it ships, as both policy and pi_ref. V* comes from 2 pi_ref
    samples per goal (not timed): its values change the loss, not the cost. ``objective`` times another objective
    with the comparison's settings (grpo and starpo_s: 8 rollouts per goal, the same episodes per iteration)."""
    import dataclasses

    import torch

    from .apo.compare import OBJECTIVE_SETTINGS
    from .apo.sft import reference_dir
    from .apo.trainer import Trainer, load_models, peak_memory_mb
    from .apo.vstar import stage1, stage1_goals
    from .config import device, get_profile, with_overrides
    from .policy.models import load_named_model, with_rendering

    profile = with_overrides(get_profile(), [f"batch_goals={batch}", *OBJECTIVE_SETTINGS.get(objective, [])])
    if model_name == "tiny":
        ref = ref or reference_dir(profile)
        profile = with_rendering(profile, ref)
        model, ref_model, tokenizer = load_models(ref)
    else:  # a pretrained model's long chats: the memory-lean update, a few chats per forward pass
        ref = model_name
        profile = dataclasses.replace(profile, apo=dataclasses.replace(
            profile.apo, backward_per_micro_batch=True, micro_batch=min(profile.apo.micro_batch, 4)))
        model, tokenizer = load_named_model(model_name, device())
        ref_model, _ = load_named_model(model_name, device())
    goals = stage1_goals(profile, seed)[: max(batch, 8)]
    quick = dataclasses.replace(profile, apo=dataclasses.replace(profile.apo, vstar_samples=2))
    vstar = stage1(ref_model, tokenizer, quick, None, goals=goals, progress=False)
    trainer = Trainer(model, ref_model, tokenizer, vstar, profile, objective, seed)
    trainer.iteration()  # warm-up: first-call allocations
    rows = [trainer.iteration() for _ in range(repeats)]
    keys = ["seconds", "rollout_seconds", "policy_forward_seconds", "ref_seconds", "update_seconds"]
    medians = {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}
    generation = [r["generated_tokens"] / r["rollout_seconds"] for r in rows]
    training = [r["trained_tokens"] / (r["policy_forward_seconds"] + r["ref_seconds"] + r["update_seconds"])
                for r in rows]
    return {"profile": profile.name, "model": str(ref), "objective": objective, "device": str(model.device),
            "batch_goals": batch, "micro_batch": profile.apo.micro_batch,
            "backward_per_micro_batch": profile.apo.backward_per_micro_batch,
            "torch_threads": torch.get_num_threads(), **{f"{k}_median": v for k, v in medians.items()},
            "generated_tokens_median": statistics.median(r["generated_tokens"] for r in rows),
            "trained_tokens_median": statistics.median(r["trained_tokens"] for r in rows),
            "generation_tokens_per_second_median": round(statistics.median(generation), 1),
            "training_tokens_per_second_median": round(statistics.median(training), 1),
            "peak_memory_mb": peak_memory_mb(),
            "runs_seconds": [round(r["seconds"], 3) for r in rows], "target_seconds": 6.0}


def bench_update_memory(ref: str | None = None, batches: tuple[int, ...] = (32, 64, 96), repeats: int = 3,
                        seed: int = 0) -> dict:
    """Peak memory and seconds of one update (phase 2, no optimizer step) on batches of ``batches`` pi_ref episodes,
    backpropagated through the whole batch at once and one micro-batch at a time (``lean_update``). More episodes
    stand for what a policy that drifts from pi_ref plays: longer episodes, more tokens to score. Memory is the
    process's peak resident set above its size before the update (CPU: Linux's VmHWM, reset for each update) or
    torch's peak allocation (CUDA); medians over ``repeats``."""
    import dataclasses

    import torch

    from .apo.sft import reference_dir
    from .apo.trainer import Trainer, load_models
    from .apo.vstar import rollout_sampling, stage1, stage1_goals
    from .config import get_profile
    from .policy.models import with_rendering
    from .policy.rollout import rollout

    profile = get_profile()
    ref = ref or reference_dir(profile)
    profile = with_rendering(profile, ref)
    model, ref_model, tokenizer = load_models(ref)
    quick = dataclasses.replace(profile, apo=dataclasses.replace(profile.apo, vstar_samples=2))
    vstar = stage1(ref_model, tokenizer, quick, None, goals=stage1_goals(profile, seed)[: max(batches)], progress=False)
    kept = vstar.goals()  # the stage-1 filter may drop some: goals repeat, each episode its own sample
    goals = [kept[i % len(kept)] for i in range(max(batches))]
    seed_everything(seed)
    episodes = rollout(ref_model, tokenizer, goals, rollout_sampling(profile.apo, profile.apo.temperature),
                       profile.policy, profile.policy_env())
    trainers = {}
    for mode, lean in (("whole", False), ("lean", True)):
        apo = dataclasses.replace(profile.apo, backward_per_micro_batch=lean, max_graph_tokens=0)
        trainers[mode] = Trainer(model, ref_model, tokenizer, vstar, dataclasses.replace(profile, apo=apo), seed=seed)
        trainers[mode].optimizer.step = lambda: None  # the same weights for every measurement
    rows = []
    for batch in batches:
        trajectories = episodes[:batch]
        row = {"episodes": len(trajectories), "turns": sum(t.num_turns for t in trajectories)}
        for mode, trainer in trainers.items():
            peaks, seconds = [], []
            for _ in range(repeats):
                before = _reset_peak_memory()
                start = time.perf_counter()
                stats = trainer.update(trajectories)[2]
                row["scored_tokens"] = stats["scored_tokens"]  # the update's own count, the same on both paths
                seconds.append(time.perf_counter() - start)
                peaks.append(_peak_memory_mb() - before)
                model.zero_grad(set_to_none=True)
            row[f"{mode}_peak_mb_median"] = round(statistics.median(peaks), 1)
            row[f"{mode}_seconds_median"] = round(statistics.median(seconds), 3)
        row["peak_ratio"] = round(row["whole_peak_mb_median"] / max(row["lean_peak_mb_median"], 1e-9), 2)
        row["seconds_ratio"] = round(row["lean_seconds_median"] / row["whole_seconds_median"], 2)
        rows.append(row)
    whole = [(r["scored_tokens"], r["whole_peak_mb_median"]) for r in rows]
    slope = ((whole[-1][1] - whole[0][1]) / (whole[-1][0] - whole[0][0]) * 1000
             if len(whole) > 1 and whole[-1][0] != whole[0][0] else None)
    return {"profile": profile.name, "model": str(ref), "device": str(model.device),
            "parameters": sum(p.numel() for p in model.parameters()), "micro_batch": profile.apo.micro_batch,
            "torch_threads": torch.get_num_threads(), "rows": rows,
            "whole_mb_per_1k_tokens": round(slope, 2) if slope is not None else None}


def _reset_peak_memory() -> float:
    """Start a new peak-memory window; returns the memory in use now (MiB): torch's allocation on CUDA, else the
    resident set after handing freed heap back to the system (so that the next peak counts what the update needs)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the window starts from the resident set as it is
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: VmHWM := VmRSS
    return _status_mb("VmRSS")


def _peak_memory_mb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (kB) in MiB; Linux only, as the CPU peak-memory window needs."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}: the CPU memory benchmark needs Linux")
