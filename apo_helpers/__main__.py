"""Command line: ``python -m apo_helpers <command> ...``, one command per step of the pipeline (environment, pi_ref,
stage 1, training, analysis, report); ``--help`` of each says what it runs and writes."""

from __future__ import annotations

import argparse
import json
import re
import sys

from pathlib import Path

from .config import DATA_DIR, RESULTS_DIR, TARGET_GAIN, device, get_profile, numerics, seed_everything, with_overrides
from .files import atomic_write_text
from .webshop.agents import QUERIES


def cmd_play(args) -> int:
    """A person plays one episode in the terminal."""
    from .webshop.env import WebShopEnv

    env = WebShopEnv(split=args.split, seed=args.seed)
    options = {"goal_index": args.goal} if args.goal is not None else None
    observation, info = env.reset(seed=args.seed, options=options)
    print("Type an action such as search[red shoes] or click[buy now]; 'quit' ends the game.\n")
    while True:
        print(observation.replace(" [SEP] ", "\n  "), "\n")
        print("available:", ", ".join(info["available_actions"]), f"({info['turns_left']} actions left)")
        try:
            action = input("> ")
        except EOFError:
            return 0
        if action.strip().lower() in {"quit", "exit"}:
            return 0
        observation, reward, terminated, truncated, info = env.step(action)
        if not info["valid"]:
            print(f"invalid action: {info['error']}")
        if terminated or truncated:
            print(f"\nEpisode over: reward {reward:.3f}, success {info['success']}")
            if "reward_breakdown" in info:
                print(json.dumps(info["reward_breakdown"], indent=1))
            return 0


def cmd_evaluate(args) -> int:
    """Greedy success, score and steps of an agent on a split; for a saved policy optionally pass@k and the success
    of single sampled episodes (temperature 1.0), and with ``--save`` one row of data/results/evaluations_<profile>.csv."""
    from pathlib import Path

    from .analysis.evaluate import evaluate, evaluate_policy, pass_at_k
    from .webshop.agents import AGENTS, make_agent

    policy = args.agent not in AGENTS
    if policy and not Path(args.agent).is_dir():
        raise ValueError(f"--agent {args.agent!r} is neither a scripted agent ({', '.join(AGENTS)}) nor a folder")
    if args.pass_k is not None and (not policy or args.pass_k < 1):
        raise ValueError("--pass-k samples a saved policy folder, with k >= 1 (scripted agents have no temperature)")
    profile = get_profile(args.profile)
    seed_everything(args.seed)
    if policy:
        from .policy.models import load_policy, with_rendering

        model, tokenizer = load_policy(args.agent, device())
        profile = with_rendering(profile, args.agent)
        result, _ = evaluate_policy(model, tokenizer, args.split, args.episodes, profile, name=args.agent,
                                    progress=not args.json)
    else:
        result = evaluate(make_agent(args.agent, args.seed), args.split, args.episodes, progress=not args.json)
    summary = {"agent": args.name or args.agent, "split": args.split, **result.summary()}
    if args.pass_k is not None:
        sampled = pass_at_k(model, tokenizer, args.split, summary["episodes"], args.pass_k, profile,
                            progress=not args.json)
        summary.update(k=args.pass_k, pass_at_k=sampled["pass_at_k"], sample_success=sampled["sample_success"])
    if args.save:
        from .files import merge_csv_rows

        low, high = summary["success_ci95"]
        row = {**{key: value for key, value in summary.items() if key != "success_ci95"},
               "ci95_low": low, "ci95_high": high}
        row.setdefault("k", 0)
        merge_csv_rows(RESULTS_DIR / f"evaluations_{profile.name}.csv", [row], ["agent", "split", "k"])
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>14}: {value}")
    return 0


def cmd_train_ref(args) -> int:
    """Train pi_ref by imitation, save it, and report its success, score and pass@k on val and test."""
    from .analysis.evaluate import evaluate_policy, pass_at_k, taught_query_share
    from .analysis.failures import option_columns
    from .apo.sft import reference_dir, train_reference
    from .config import MODEL_SIZE_FIELDS, replace, with_model_size
    from .policy.models import count_parameters

    profile = get_profile(args.profile)
    default_out = reference_dir(profile)
    if args.skip_options:  # a sloppy pi_ref gets its own folder unless told: the profile's pi_ref is never replaced
        profile = replace(profile, reference=replace(profile.reference, demo_skip_options=args.skip_options))
        default_out = default_out.with_name(f"{default_out.name}_skip_options_{args.skip_options:g}")
    if args.forget_options:  # checks the options but does not select them: a pi_ref of its own too
        profile = replace(profile, reference=replace(profile.reference, demo_forget_options=args.forget_options))
        default_out = default_out.with_name(f"{default_out.name}_forget_options_{args.forget_options:g}")
    if args.progress_think:  # the same actions, another think: a pi_ref of its own
        profile = replace(profile, reference=replace(profile.reference, demo_think="progress"))
        default_out = default_out.with_name(f"{default_out.name}_think_progress")
    if args.query and args.query != profile.reference.demo_query:  # the same episodes, another search typed
        profile = replace(profile, reference=replace(profile.reference, demo_query=args.query))
        default_out = default_out.with_name(f"{default_out.name}_query_{args.query}")
    if args.show_selected_options:  # pages that say which option value is selected: a pi_ref of its own too
        profile = replace(profile, policy=replace(profile.policy, show_selected_options=True))
        default_out = default_out.with_name(f"{default_out.name}_selected")
    if args.demonstrations is not None and args.demonstrations != profile.reference.demonstrations:
        default_out = default_out.with_name(f"{default_out.name}_demos_{args.demonstrations}")  # another pi_ref
    if args.model:  # a larger (or smaller) tiny Llama: a pi_ref of its own, its size in the folder name
        base = profile.model
        profile = with_model_size(profile, args.model)
        changed = [f"{name}_{getattr(profile.model, name)}" for name in MODEL_SIZE_FIELDS
                   if getattr(profile.model, name) != getattr(base, name)]
        default_out = default_out.with_name("_".join([default_out.name, *changed]))
    steps = {name: getattr(profile.reference, name) if getattr(args, name) is None else getattr(args, name)
             for name in ("pretrain_steps", "sft_steps")}
    for name, count in steps.items():  # imitated longer or shorter: a pi_ref of its own too
        if count != getattr(profile.reference, name):
            default_out = default_out.with_name(f"{default_out.name}_{name}_{count}")
    if args.seed is not None:  # the same demonstrations, other initial weights and batch order: another pi_ref
        default_out = default_out.with_name(f"{default_out.name}_seed_{args.seed}")
    args.out = args.out or default_out
    ref = train_reference(profile, args.out, args.demonstrations, steps["pretrain_steps"], steps["sft_steps"],
                          progress=not args.json, init_seed=args.seed)
    cfg = profile.reference
    metrics = {"profile": profile.name, "demonstrations": len(ref.demonstrations),
               "demo_goals": profile.reference.demonstrations if args.demonstrations is None else args.demonstrations,
               "demo_skip_options": cfg.demo_skip_options, "demo_forget_options": cfg.demo_forget_options,
               "demo_think": cfg.demo_think, "demo_query": cfg.demo_query,
               "show_selected_options": profile.policy.show_selected_options,
               "model": profile.model.name,  # the tiny Llama's size only: a named model keeps its own
               "model_size": ({name: getattr(profile.model, name) for name in MODEL_SIZE_FIELDS}
                              if profile.model.name == "tiny" else None),
               "parameters": count_parameters(ref.model),
               "init_seed": profile.seed if args.seed is None else args.seed,
               **steps,
               "train_seconds": round(ref.seconds, 1), "final_loss": round(float(ref.history["loss"].iloc[-1]), 4)}
    for split in () if args.no_eval else ("val", "test"):
        seed_everything(profile.seed)
        result, trajectories = evaluate_policy(ref.model, ref.tokenizer, split, cfg.eval_episodes, profile,
                                               name="pi_ref", progress=not args.json)
        metrics[split] = result.summary()
        metrics[split]["query_as_taught"] = taught_query_share(trajectories, cfg.demo_query)
        metrics[split].update(option_columns(trajectories))  # what RL can convert: the option clicks
        metrics[split].update(pass_at_k(ref.model, ref.tokenizer, split, cfg.pass_k_goals, cfg.pass_k, profile,
                                        progress=not args.json))
    metrics["numerics"] = numerics()  # what a retrain elsewhere must match to give these numbers
    atomic_write_text(Path(args.out) / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    print(json.dumps(metrics) if args.json else json.dumps(metrics, indent=1))
    mismatch = committed_reference_mismatch(Path(args.out).name, metrics, RESULTS_DIR)
    if mismatch:
        print(f"train-ref: warning: {mismatch}", file=sys.stderr)
    return 0


def committed_reference_mismatch(name: str, metrics: dict, results_dir: Path) -> str | None:
    """Why a freshly trained pi_ref is not the one committed under the same folder name, or None. Introduced with
    the 2.3M pi_refs (notebook 07): ``train-ref`` names its folder by its command, so the same command on another
    CPU kind writes another policy under a committed name, and every run and per-goal table from it would be filed
    under the wrong pi_ref. Compared: success on each split both evaluated."""
    committed_file = results_dir / f"{name}.json"
    if not committed_file.exists():
        return None
    committed = json.loads(committed_file.read_text())
    differences = [f"{split} success {metrics[split]['success_rate']:.3f} here, {committed[split]['success_rate']:.3f} "
                   f"committed" for split in ("val", "test")
                   if split in metrics and split in committed
                   and abs(metrics[split]["success_rate"] - committed[split]["success_rate"]) > 1e-9]
    if not differences:
        return None
    here = metrics.get("numerics", {}).get("processor", "?")
    there = committed.get("numerics", {}).get("processor", "?")
    return (f"this pi_ref is not the committed {name} ({'; '.join(differences)}; processor here {here!r}, "
            f"committed {there!r}): another CPU kind trains another policy. Give it its own folder (--out "
            f"runs/{name}_<machine>) before training or saving anything from it.")


def refuse_uncommitted_reference(folder, results_dir: Path) -> None:
    """Raise before a per-goal table is merged under the name of a committed pi_ref from a folder of that name that
    holds another policy (``committed_reference_mismatch``): ``outcomes --save`` keys a pi_ref's rows by its folder's
    name, so a rebuilt policy's rows would silently replace the committed one's. A folder without ``metrics.json`` or
    a name with no committed file passes."""
    metrics_file = Path(folder) / "metrics.json"
    if not metrics_file.exists():
        return
    mismatch = committed_reference_mismatch(Path(folder).name, json.loads(metrics_file.read_text()), results_dir)
    if mismatch:
        raise ValueError(f"{folder}: not saving rows under a committed name: {mismatch}")


def cmd_sweep_ref(args) -> int:
    """pi_ref's greedy test success against the number of demonstrations, with and without pretraining. With
    ``--save`` each finished point is merged into data/results/ref_sweep.csv at once (keyed by demonstrations,
    pretraining and imitation steps), so an interrupted sweep keeps its points and sweeps can run side by side."""
    from .analysis.evaluate import evaluate_policy
    from .apo.sft import train_reference
    from .files import merge_csv_rows

    profile = get_profile(args.profile)
    for pretrain in args.pretrain_steps or [profile.reference.pretrain_steps]:
        for count in args.demonstrations:
            ref = train_reference(profile, None, count, pretrain, progress=not args.json)
            seed_everything(profile.seed)
            result, _ = evaluate_policy(ref.model, ref.tokenizer, "test", profile.reference.eval_episodes, profile,
                                        progress=False)
            s = result.summary()
            row = {"demonstrations": count, "pretrain_steps": pretrain, "sft_steps": profile.reference.sft_steps,
                   "successful_demonstrations": len(ref.demonstrations),
                   "test_success_rate": s["success_rate"], "ci95_low": s["success_ci95"][0],
                   "ci95_high": s["success_ci95"][1], "test_mean_score": round(s["mean_score"], 4),
                   "invalid_rate": round(s["invalid_rate"], 4), "train_seconds": round(ref.seconds, 1)}
            print(json.dumps(row), flush=True)
            if args.save:
                merge_csv_rows(RESULTS_DIR / "ref_sweep.csv", [row], ["demonstrations", "pretrain_steps", "sft_steps"])
    return 0


def _write_tables(out: Path, local: dict, save: bool, results: dict) -> None:
    """Write ``{file name: DataFrame}`` under the run folder ``out``, and with ``save`` the ``results`` ones under
    data/results/ (what the README and notebooks read)."""
    for name, table in local.items():
        atomic_write_text(out / name, table.to_csv(index=False))
    for name, table in (results.items() if save else ()):
        atomic_write_text(RESULTS_DIR / name, table.to_csv(index=False))


def _reference_arg(args, profile, seed: int | None = None):
    """The pi_ref folder of ``--ref`` (default: the profile's); ``{seed}`` in it becomes ``seed`` (``train``: each seed
    re-anchored on its own earlier run, ``--ref runs/<run>/seed_{seed}/policy``)."""
    from .apo.sft import reference_dir

    if args.ref and "{seed}" in args.ref and seed is None:
        raise ValueError(f"--ref {args.ref} names a folder per seed ({{seed}}); only `train` fills it in")
    ref = Path(args.ref.replace("{seed}", str(seed))) if args.ref else reference_dir(profile)
    if not (ref / "model.safetensors").exists():
        raise ValueError(f"no pi_ref at {ref}: train it with `python -m apo_helpers train-ref --profile {profile.name}`")
    return ref


def cmd_average(args) -> int:
    """The mean of several policies' weights saved as one policy folder (a soup of one run's seeds)."""
    from .policy.models import average_policies

    out = average_policies(args.policies, args.out)
    if args.json:
        print(json.dumps({"out": str(out), "averaged": args.policies}))
    else:
        print(f"averaged {len(args.policies)} policies into {out}")
    return 0


def cmd_pretrained(args) -> int:
    """The profile's pretrained model (SmolLM2 by default) on val, zero-shot and after a short imitation."""
    from .analysis.pretrained import before_after_imitation

    profile = get_profile(args.profile)
    table = before_after_imitation(profile, progress=not args.json)
    out = Path(args.out or f"runs/pretrained_{profile.name}")
    _write_tables(out, {"results.csv": table}, args.save, {f"pretrained_{profile.name}.csv": table})
    print(table.to_json(orient="records") if args.json else table.to_string(index=False))
    return 0


def cmd_vstar(args) -> int:
    """A*PO stage 1: V* of the profile's train goals from N samples of the frozen pi_ref (cached)."""
    from .apo.sft import with_reference_goals
    from .apo.vstar import stage1
    from .policy.models import load_policy, with_rendering

    profile = with_overrides(get_profile(args.profile), args.set)
    ref = _reference_arg(args, profile)
    profile = with_reference_goals(with_rendering(profile, ref), ref)
    ref_model, tokenizer = load_policy(ref, device())
    result = stage1(ref_model, tokenizer, profile, args.out, progress=not args.json)
    table = result.table
    if table.empty:  # the filters left nothing: no means to report, and `train` would refuse
        print(f"warning: the goal filters left no goal of the {result.dropped} sampled; `train` needs some",
              file=sys.stderr)

    def number(value):  # the mean of no goals is None in the JSON, which has no NaN
        return None if table.empty else round(float(value), 4)

    summary = {"key": result.key, "folder": str(Path(args.out) / result.key), "loaded_from_cache": result.loaded,
               "goals": len(table), "dropped_by_filters": result.dropped, "N": profile.apo.vstar_samples,
               "beta1": profile.apo.beta1, "mean_vstar": number(table["vstar"].mean()),
               "mean_reward": number(table["mean"].mean()),
               "sample_success": number(table["successes"].mean() / profile.apo.vstar_samples),
               "goals_never_solved": int((table["successes"] == 0).sum())}
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))
    return 0


def cmd_headroom(args) -> int:
    """One changed click in each greedy episode of a policy: how many failed goals it would fix, and whether A*PO's
    target policy pi* ~ pi_ref exp(r / beta2) makes that change (analysis.headroom)."""
    from .analysis.evaluate import policy_goals
    from .analysis.headroom import headroom_summary, one_step_alternatives, target_choices
    from .apo.vstar import stage1_goals
    from .policy.models import load_policy, with_rendering

    profile = get_profile(args.profile)
    ref = _reference_arg(args, profile)
    profile = with_rendering(profile, ref)
    goals = stage1_goals(profile)[: args.goals] if args.split == "train" else policy_goals(args.split, args.goals)
    model, tokenizer = load_policy(ref, device())
    table = one_step_alternatives(model, tokenizer, goals, profile, progress=not args.json)
    summary = headroom_summary(target_choices(table))
    print(summary.round(3).to_json(orient="index") if args.json else summary.round(3).to_string())
    if args.save:
        suffix = f"_{args.name}" if args.name else ""
        path = RESULTS_DIR / f"headroom{suffix}_{profile.name}.csv"
        atomic_write_text(path, table.to_csv(index=False))
        print(f"saved {path}")
    return 0


def cmd_corrections(args) -> int:
    """The results-page choice taught directly: pi_ref fine-tuned on every branched goal's successful click, against
    pi_ref and a control without the corrections (analysis.corrections)."""
    from .analysis.corrections import correction_experiment, correction_goals
    from .policy.models import with_rendering

    profile = get_profile(args.profile)
    ref = _reference_arg(args, profile)
    profile = with_rendering(profile, ref)
    if not len(args.steps) == len(args.lr) == len(args.replay):
        raise ValueError(f"--steps, --lr and --replay go together, one value each per setting: got {len(args.steps)} "
                         f"steps, {len(args.lr)} learning rates and {len(args.replay)} replay flags")
    settings = list(zip(args.steps, args.lr, map(bool, args.replay)))
    result = correction_experiment(ref, correction_goals(profile, args.goals), profile, settings,
                                   progress=not args.json)
    result = {"profile": profile.name, "ref": Path(ref).name, **result}
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    if args.save:
        path = RESULTS_DIR / f"corrections_{profile.name}.json"
        atomic_write_text(path, json.dumps(result, indent=1) + "\n")
        print(f"saved {path}")
    return 0


def cmd_decisions(args) -> int:
    """The item-page decision of several policies at the same item pages (those one policy reaches greedily), and
    each policy's greedy episodes by the number of options their goals ask for; with --early-purchases, the
    decision one click later, where a greedy episode bought with a requested option value unselected."""
    import pandas as pd

    from .analysis.decisions import decision_summary, item_page_states, option_click_rates
    from .analysis.evaluate import evaluate_policy
    from .analysis.failures import option_decisions, option_progress
    from .policy.models import load_policy, with_rendering

    profile = with_rendering(get_profile(args.profile), args.states_from)
    named = []
    for pair in args.models:
        name, sep, folder = pair.partition("=")
        if not sep or not name or not (Path(folder) / "model.safetensors").exists():
            raise ValueError(f"--models takes NAME=FOLDER pairs with a model.safetensors in FOLDER, got {pair!r}")
        if with_rendering(profile, folder).policy != profile.policy:
            raise ValueError(f"{folder} was trained on pages rendered unlike those of {args.states_from} "
                             f"(policy.models.RENDERING_FILE): probe policies of one rendering together")
        named.append((name, folder))
    model, tokenizer = load_policy(args.states_from, device())
    if args.early_purchases:
        return _early_purchase_probe(args, profile, model, tokenizer, named)
    pages = item_page_states(model, tokenizer, args.split, args.episodes, profile)
    tables, episodes = [], []
    for name, folder in named:
        model, tokenizer = load_policy(folder, device())
        tables.append(option_click_rates(model, tokenizer, pages, profile, name, args.samples, seed=args.seed))
        result, _ = evaluate_policy(model, tokenizer, args.split, args.episodes, profile, name=name, progress=False)
        episodes.append(option_decisions(result, name))
    table, progress = pd.concat(tables, ignore_index=True), pd.concat(episodes, ignore_index=True)
    print(decision_summary(table).round(3).to_string())
    print(f"\nGreedy episodes on the {args.split} goals that ask for options, by how many:")
    print(option_progress(progress).round(3).to_string())
    if args.save:
        suffix = f"_{args.name}" if args.name else ""
        for stem, frame in (("decisions", table), ("option_progress", progress)):
            path = RESULTS_DIR / f"{stem}{suffix}_{profile.name}.csv"
            atomic_write_text(path, frame.to_csv(index=False))
            print(f"saved {path}")
    return 0


def _early_purchase_probe(args, profile, model, tokenizer, named) -> int:
    """``decisions --early-purchases``: every policy continues the early purchases of ``--states-from``'s greedy
    episodes at each of ``--temperatures``."""
    import pandas as pd

    from .analysis.decisions import early_purchase_rates, early_purchase_summary, early_purchases
    from .policy.models import load_policy

    states = early_purchases(model, tokenizer, args.split, args.episodes, profile)
    print(f"{len(states)} greedy purchases of {args.states_from} on the first {args.episodes} {args.split} goals left a "
          "requested option value unselected that the bought item offers")
    tables = []
    for name, folder in named:
        model, tokenizer = load_policy(folder, device())
        for temperature in args.temperatures:
            tables.append(early_purchase_rates(model, tokenizer, states, profile, name, args.samples, temperature,
                                               args.seed, progress=True))
    table = pd.concat(tables, ignore_index=True)
    print(early_purchase_summary(table).round(3).to_string())
    if args.save:
        path = RESULTS_DIR / f"early_purchases{f'_{args.name}' if args.name else ''}_{profile.name}.csv"
        atomic_write_text(path, table.to_csv(index=False))
        print(f"saved {path}")
    return 0


def cmd_generalization(args) -> int:
    """pi_ref and a run's final policies, greedy, on the goals the run trained on and on unseen goals chosen the same
    way (analysis.generalization); with --save the rows are merged into data/results/generalization_<profile>.csv."""
    import pandas as pd

    from .analysis.generalization import generalization_gains, reference_only, seen_and_unseen, sharpening_ceiling
    from .files import merge_csv_rows

    if not args.run and not args.ref:
        raise ValueError("generalization needs --run RUN_FOLDER ... and/or --ref PI_REF_FOLDER ...")
    profile = get_profile(args.profile)
    tables = [seen_and_unseen(run, profile, vstar_dir=args.vstar, unseen_goals=args.goals, progress=not args.json)
              for run in args.run]
    tables += [reference_only(ref, profile, unseen_goals=args.goals, progress=not args.json, vstar_dir=args.vstar)
               for ref in args.ref]
    table = pd.concat(tables, ignore_index=True)
    gains, ceiling = generalization_gains(table), sharpening_ceiling(table)
    if args.json:
        print(json.dumps({"gains": gains.to_dict("records"), "ceiling": ceiling.to_dict("records")}))
    else:
        print(gains.round(3).to_string(index=False), ceiling.round(3).to_string(index=False), sep="\n\n")
    if args.save:
        path = RESULTS_DIR / f"generalization_{profile.name}.csv"
        merge_csv_rows(path, table.to_dict("records"), ["run", "policy", "goals"])
        print(f"saved {path}")
    return 0


def cmd_outcomes(args) -> int:
    """Per-goal greedy outcomes of runs' final policies (with the pi_ref each chain started from) and of single policy
    folders (analysis.significance); prints each run's gain over its pi_ref with a paired bootstrap interval, and with
    --save merges the rows into data/results/goal_outcomes_<profile>.csv."""
    import pandas as pd

    from .analysis.generalization import run_seeds
    from .analysis.significance import SINGLE_POLICY, gain_table, policy_outcomes, run_label, run_outcomes
    from .config import RUNS_DIR
    from .files import merge_csv_rows

    if not args.run and not args.policy:
        raise ValueError("outcomes needs --run RUN_FOLDER ... and/or --policy POLICY_FOLDER ...")
    profile = get_profile(args.profile)
    refs = {run: run_seeds(run)[0]["ref"] for run in args.run}  # each chain's first pi_ref, played once
    singles = {Path(p).name: p for p in [*(RUNS_DIR / ref for ref in refs.values()), *args.policy]}  # once each
    for path in singles.values() if args.save else ():  # before minutes of play
        refuse_uncommitted_reference(path, RESULTS_DIR)
    tables = [run_outcomes(run, profile, args.split, args.episodes, with_reference=False, progress=not args.json)
              for run in args.run]
    tables += [policy_outcomes(path, name, SINGLE_POLICY, profile, args.split, args.episodes, not args.json)
               for name, path in singles.items()]
    table = pd.concat(tables, ignore_index=True)
    pairs = [(run_label(run, profile), ref) for run, ref in refs.items()]
    gains = gain_table(table, pairs, args.split, target=TARGET_GAIN) if pairs else pd.DataFrame()
    if args.json:
        print(json.dumps({"gains": gains.to_dict("records")}))
    else:
        print(table.groupby(["policy", "seed"])["success"].mean().to_string())
        if not gains.empty:
            print(gains.round(3).to_string(index=False))
    if args.save:
        path = RESULTS_DIR / f"goal_outcomes_{profile.name}.csv"
        merge_csv_rows(path, table.to_dict("records"), ["policy", "seed", "split", "goal_index"])
        print(f"saved {path}")
    return 0


def cmd_purchases(args) -> int:
    """pi_ref and each seed's final policy of one or more runs, greedy on a split: every episode's failure class and
    what its last results page offered (analysis.purchases); with --save the rows are merged into
    data/results/purchases_<profile>.csv."""
    import pandas as pd

    from .analysis.purchases import choice_summary, copy_summary, purchase_summary, run_choices, run_purchases
    from .files import merge_csv_rows

    profile = get_profile(args.profile)
    if args.probe:
        table = pd.concat([run_choices(run, profile, args.split, args.episodes, args.samples) for run in args.run],
                          ignore_index=True)
        print(choice_summary(table).round(3).to_string())
        if args.save:
            path = RESULTS_DIR / f"results_choices_{profile.name}.csv"
            merge_csv_rows(path, table.to_dict("records"), ["run", "policy", "goal_index"])
            print(f"saved {path}")
        return 0
    table = pd.concat([run_purchases(run, profile, args.split, args.episodes) for run in args.run], ignore_index=True)
    print(purchase_summary(table).round(1).to_string())
    print(copy_summary(table).round(3).to_string())
    if args.save:
        path = RESULTS_DIR / f"purchases_{profile.name}.csv"
        merge_csv_rows(path, table.to_dict("records"), ["run", "policy", "split", "goal_index"])
        print(f"saved {path}")
    return 0


def _main_process() -> bool:
    """False in every process but the first under ``accelerate launch`` / ``torchrun``."""
    from accelerate import PartialState

    return PartialState().is_main_process


def cmd_train(args) -> int:
    """RAGEN's loop with an objective (A*PO by default), one run per seed, then greedy test results."""
    import pandas as pd

    from .analysis.evaluate import greedy_evaluation
    from .policy.models import lineage, load_policy, with_rendering
    from .runs import finished_metrics, train_run

    profile = with_overrides(get_profile(args.profile), args.set)
    refs = {seed: _reference_arg(args, profile, seed) for seed in args.seeds}
    # the pi_ref row is the chain's first pi_ref: a run re-anchored on earlier runs' policies is measured against it
    origins = {lineage(ref).origin for ref in refs.values()}
    if len(origins) > 1:
        raise ValueError(f"the seeds' pi_refs come from different first pi_refs ({sorted(map(str, origins))}); "
                         f"one table compares its seeds with one pi_ref")
    ref = origins.pop()
    profile = with_rendering(profile, ref)
    out = Path(args.out or f"runs/{args.objective}_{profile.name}")
    rows = []
    for seed in args.seeds:
        if args.gather:
            metrics = finished_metrics(out / f"seed_{seed}")
        else:
            metrics = train_run(profile, refs[seed], args.vstar, out / f"seed_{seed}", seed, args.objective,
                                args.iterations, resume=args.resume, progress=not args.json)
        rows.append(metrics)
        if _main_process():
            print(json.dumps(metrics), flush=True)
    from accelerate import PartialState

    main_process = _main_process()
    # the processes share no more work: end the launcher's group now, since left to the interpreter's exit, gloo's
    # threads can abort a process that has already finished (SIGABRT); a no-op without a launcher
    PartialState().destroy_process_group()
    if not main_process:  # under `accelerate launch`: process 0 reports
        return 0
    if not args.skip_ref:
        seed_everything(profile.seed)
        ref_model, tokenizer = load_policy(ref, device())
        ref_test = greedy_evaluation(ref_model, tokenizer, "test", profile.apo.test_episodes, profile)
        rows.append({"objective": "pi_ref", "seed": None, "profile": profile.name, "iterations": 0,
                     "ref": Path(ref).name, **{f"test_{k}": v for k, v in ref_test.items()}})
    table = pd.DataFrame(rows)
    curves = pd.concat([pd.read_csv(out / f"seed_{seed}" / "history.csv").assign(seed=seed) for seed in args.seeds])
    evals = pd.concat([pd.read_csv(out / f"seed_{seed}" / "evals.csv").assign(seed=seed) for seed in args.seeds])
    stem = f"{args.name or args.objective}_{profile.name}"
    _write_tables(out, {"results.csv": table}, args.save,
                  {f"{stem}_seeds.csv": table, f"{stem}_history.csv": curves, f"{stem}_evals.csv": evals})
    trained = table[table["objective"] != "pi_ref"]
    reference = "" if args.skip_ref else f"; pi_ref {ref_test['success']:.3f}"
    print(f"{args.objective}: test success {trained['test_success'].mean():.3f} +- {trained['test_success'].std(ddof=0):.3f} "
          f"over {len(trained)} seeds{reference}; results in {out / 'results.csv'}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_compare(args) -> int:
    """Every objective from the same pi_ref, goals and budget; curves and a summary per objective."""
    from .apo.compare import compare, dynamics

    profile = get_profile(args.profile)
    out = Path(args.out or f"runs/compare_{profile.name}")
    summary, curves = compare(args.objectives, args.seeds, profile.name, out, args.ref, args.vstar, args.iterations,
                              args.target, args.set, progress=lambda line: print(line, file=sys.stderr, flush=True),
                              jobs=args.jobs)
    history = dynamics(out, args.objectives, args.seeds)
    stem = f"compare_{profile.name}"
    _write_tables(out, {"summary.csv": summary, "curves.csv": curves, "history.csv": history}, args.save,
                  {f"{stem}_summary.csv": summary, f"{stem}_curves.csv": curves, f"{stem}_history.csv": history})
    summary_json = summary.to_json(orient="records", indent=1)
    atomic_write_text(out / "summary.json", summary_json)
    if args.save:
        atomic_write_text(RESULTS_DIR / f"{stem}_summary.json", summary_json)
    print(summary.to_json(orient="records") if args.json else summary.round(3).to_string(index=False))
    return 0


def cmd_sweep(args) -> int:
    """One A*PO run per value of an APOConfig field (default: beta2), same seed, goals and budget."""
    from .apo.compare import sweep

    profile = get_profile(args.profile)
    out = Path(args.out or f"runs/sweep_{args.name}_{profile.name}")
    table, histories = sweep(args.name, args.values, args.seed, profile.name, out, args.ref, args.vstar,
                             args.iterations, args.objective, args.set,
                             progress=lambda line: print(line, file=sys.stderr, flush=True))
    stem = f"sweep_{args.name}_{profile.name}"
    _write_tables(out, {"sweep.csv": table}, args.save, {f"{stem}.csv": table, f"{stem}_history.csv": histories})
    print(table.to_json(orient="records") if args.json else table.round(3).to_string(index=False))
    return 0


def cmd_bench(args) -> int:
    from . import bench

    if args.tag and (args.what != "train" or not re.fullmatch(r"[A-Za-z0-9_.-]+", args.tag)):
        raise SystemExit(f"--tag {args.tag!r}: only `bench train` takes a tag, made of letters, digits, '_', '.' "
                         "and '-' (it becomes part of a file name)")
    machine = numerics()  # recorded with every result: seconds compare only within one machine
    if args.what == "train":
        if args.objective == "all":  # every objective in turn, one process: compare seconds, not memory
            from .apo.losses import OBJECTIVES

            result = [bench.bench_train(args.ref, args.batch, args.repeats, model_name=args.model, objective=name)
                      for name in OBJECTIVES]
            for row in result:  # one process's peak RSS spans all objectives: the comparison measures memory
                row.pop("peak_memory_mb")
            name = "bench_train_objectives.json"
        else:
            result = bench.bench_train(args.ref, args.batch, args.repeats, model_name=args.model,
                                       objective=args.objective)
            name = "bench_train.json" if args.model == "tiny" else f"bench_train_{args.model}.json"
            if args.objective != "apo":
                name = name.replace(".json", f"_{args.objective}.json")
        for row in result if isinstance(result, list) else [result]:
            row["numerics"] = machine
        if args.tag:
            name = name.replace(".json", f"_{args.tag}.json")
        if args.save:
            atomic_write_text(RESULTS_DIR / name, json.dumps(result, indent=1) + "\n")
        print(json.dumps(result) if args.json else json.dumps(result, indent=1))
        return 0
    if args.what == "update-memory":
        import pandas as pd

        result = {**bench.bench_update_memory(args.ref, tuple(args.batches), min(args.repeats, 3)),
                  "numerics": machine}
        if args.save:
            atomic_write_text(RESULTS_DIR / "bench_update_memory.json", json.dumps(result, indent=1) + "\n")
        if args.json:
            print(json.dumps(result))
        else:
            print(pd.DataFrame(result["rows"]).to_string(index=False))
            print(f"whole-batch backward: {result['whole_mb_per_1k_tokens']} MiB per 1,000 scored tokens")
        return 0
    if args.what == "rollout":
        result = {**bench.bench_rollout(args.batch, args.ref), "numerics": machine}
        if args.save:
            atomic_write_text(RESULTS_DIR / "bench_rollout.json", json.dumps(result, indent=1) + "\n")
        print(json.dumps(result) if args.json else json.dumps(result, indent=1))
        return 0
    if args.what == "env":
        results = [{**bench.bench_env(n, steps=args.steps), "numerics": machine} for n in args.products]
        if args.save:
            path = RESULTS_DIR / "bench_env.json"
            atomic_write_text(path, json.dumps(results, indent=1) + "\n")
            print(f"saved {path}", file=sys.stderr)
        out = results[0] if len(results) == 1 else results
        if args.json:
            print(json.dumps(out))
        else:
            for r in results:
                print(f"{r['products']:>7} products: {r['steps_per_second']:>9.0f} steps/s, "
                      f"search median {r['search_ms_median']:.3f} ms (p95 {r['search_ms_p95']:.3f} ms)")
    return 0


def cmd_data(args) -> int:
    """Regenerate data/catalog.json and data/goals.json, or check that they match a regeneration."""
    from .webshop.catalog import CATALOG_FILE, GOALS_FILE, catalog_to_json, generate_catalog, save_catalog

    catalog = generate_catalog()
    if args.check:
        stale = [name for name, text in zip((CATALOG_FILE, GOALS_FILE), catalog_to_json(catalog))
                 if not (DATA_DIR / name).exists() or (DATA_DIR / name).read_text() != text]
        if stale:
            print(f"out of date: {', '.join(stale)} (run `python -m apo_helpers data`)", file=sys.stderr)
            return 1
        print("data/ matches a fresh generation")
        return 0
    for path in save_catalog(catalog, DATA_DIR):
        print(f"wrote {path}")
    return 0


def cmd_report(args) -> int:
    from .analysis.readme import update_readme
    from .analysis.report import NotebookFailed, build_report

    try:
        build_report(args.only)
    except NotebookFailed as e:
        print(f"report stopped: {e}", file=sys.stderr)
        return 1
    for path in update_readme():
        print(f"{path.name} tables updated from data/results/")
    return 0


def cmd_readme(args) -> int:
    from .analysis.readme import update_readme

    changed = update_readme()
    print(", ".join(f"{path.name} updated" for path in changed) or "README.md and docs/experiments.md up to date")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .apo.compare import COMPARED_OBJECTIVES  # a light module: no torch

    parser = argparse.ArgumentParser(prog="python -m apo_helpers", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("play", help="play an episode yourself in the terminal")
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    p.add_argument("--goal", type=int, default=None, help="goal index in the split (default: random)")
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("evaluate", help="evaluate an agent on a split")
    p.add_argument("--agent", required=True, help="random | rule | expert | oracle | a saved policy folder")
    p.add_argument("--profile", default=None, help="profile whose policy settings a saved policy plays with")
    p.add_argument("--split", default="test", choices=["train", "val", "test"])
    p.add_argument("--episodes", type=int, default=None, help="first N goals of the split (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pass-k", type=int, default=None, metavar="K",
                   help="a saved policy only: also sample K episodes per goal (temperature 1.0): pass@K and the "
                        "success of one sampled episode")
    p.add_argument("--name", default=None, help="the agent's name in the output (default: --agent)")
    p.add_argument("--save", action="store_true",
                   help="add the result to data/results/evaluations_<profile>.csv (replacing the same agent, split, k)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("train-ref", help="train the reference policy pi_ref by imitation")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--out", default=None, help="folder for the model, history.csv and metrics.json "
                   "(default: runs/pi_ref_<profile>, where the notebooks look)")
    p.add_argument("--demonstrations", type=int, default=None, help="override the profile's demonstrations")
    p.add_argument("--pretrain-steps", type=int, default=None)
    p.add_argument("--sft-steps", type=int, default=None)
    p.add_argument("--show-selected-options", action="store_true",
                   help="item pages say which option value is selected (PolicyConfig.show_selected_options); recorded "
                        "in the folder for every later step; saved to runs/pi_ref_<profile>[_skip_options_<share>]"
                        "_selected unless --out is given")
    p.add_argument("--skip-options", type=float, default=None, metavar="SHARE",
                   help="a sloppy demonstrator: the share of demonstrations that ignore the instruction's options "
                        "(default 0); saved to runs/pi_ref_<profile>_skip_options_<share> unless --out is given")
    p.add_argument("--forget-options", type=float, default=None, metavar="SHARE",
                   help="a sloppy demonstrator of another kind: the share of demonstrations that choose an item "
                        "offering the options but buy without selecting them (default 0); saved to "
                        "runs/pi_ref_<profile>_forget_options_<share> unless --out is given")
    p.add_argument("--query", choices=QUERIES, default=None,
                   help="what the demonstrator types into the search box (ReferenceConfig.demo_query, default "
                        "instruction); another one is saved to runs/pi_ref_<profile>[...]_query_<query> unless --out "
                        "is given")
    p.add_argument("--progress-think", action="store_true",
                   help="the demonstrator's think says where it is in the instruction after each option click "
                        "(ReferenceConfig.demo_think='progress'); saved to runs/pi_ref_<profile>[...]_think_progress "
                        "unless --out is given")
    p.add_argument("--model", nargs="*", default=[], metavar="NAME=VALUE",
                   help="resize the tiny Llama (hidden_size, intermediate_size, num_layers, num_heads); saved to "
                        "runs/pi_ref_<profile>[...]_<name>_<value> unless --out is given; later steps read the size "
                        "from the folder")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the initial weights and the imitation's batch order only (the demonstrations stay "
                        "the profile's): another pi_ref from the same data, saved to runs/pi_ref_<profile>[...]"
                        "_seed_<seed> unless --out is given (default: the profile's seed)")
    p.add_argument("--no-eval", action="store_true",
                   help="save pi_ref and its training metrics only, without the val and test evaluations and pass@k "
                        "(minutes for a pretrained model; `train` evaluates pi_ref on test unless --skip-ref)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train_ref)

    p = sub.add_parser("sweep-ref", help="pi_ref success against the number of demonstrations")
    p.add_argument("--profile", default=None)
    p.add_argument("--demonstrations", type=int, nargs="+", default=[150, 300, 1200],
                   help="the profile's own count is pi_ref itself (train-ref)")
    p.add_argument("--pretrain-steps", type=int, nargs="+", default=None, help="default: the profile's")
    p.add_argument("--save", action="store_true", help="merge each point into data/results/ref_sweep.csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep_ref)

    p = sub.add_parser("pretrained", help="the pretrained model (SmolLM2) on val: zero-shot, then after imitation")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--out", default=None, help="default: runs/pretrained_<profile>")
    p.add_argument("--save", action="store_true", help="also write data/results/pretrained_<profile>.csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_pretrained)

    p = sub.add_parser("vstar", help="A*PO stage 1: V* of the train goals from pi_ref samples (cached)")
    p.add_argument("--ref", default=None, help="pi_ref folder (default: runs/pi_ref_<profile>)")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--out", default="runs/vstar", help="cache folder; the table goes to <out>/<key>/")
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                   help="override APOConfig fields, e.g. --set vstar_goals=1200 (as `train --set` must then too)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_vstar)

    p = sub.add_parser("headroom", help="one changed click per greedy episode: failures it fixes, and whether "
                       "A*PO's target makes the change")
    p.add_argument("--ref", default=None, help="the policy (default: runs/pi_ref_<profile>)")
    p.add_argument("--split", default="train", choices=["train", "val", "test"],
                   help="train: stage 1's goals (those RL trains on); val / test: the split's first goals")
    p.add_argument("--goals", type=int, default=100)
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--save", action="store_true", help="write data/results/headroom_<profile>.csv")
    p.add_argument("--name", default=None, help="with --save: headroom_<name>_<profile>.csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_headroom)

    p = sub.add_parser("corrections", help="the results-page choice taught directly: pi_ref fine-tuned on the clicks "
                                           "that solve its failed goals, evaluated on val")
    p.add_argument("--ref", default=None, help="the policy (default: runs/pi_ref_<profile>)")
    p.add_argument("--goals", type=int, default=1000, help="train goals after the demonstrations to branch")
    p.add_argument("--steps", type=int, nargs="+", default=[300, 600, 600],
                   help="fine-tuning steps of 16 chats, one per setting")
    p.add_argument("--lr", type=float, nargs="+", default=[1e-4, 1e-3, 1e-3],
                   help="peak fine-tuning learning rate, one per setting (paired with --steps)")
    p.add_argument("--replay", type=int, choices=(0, 1), nargs="+", default=[0, 0, 1],
                   help="1: mix pi_ref's demonstrations into the fine-tuning batches, one per setting")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--save", action="store_true", help="write data/results/corrections_<profile>.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_corrections)

    p = sub.add_parser("decisions", help="how likely each policy clicks an option at the same item pages, and how "
                       "far its own greedy episodes get with the options")
    p.add_argument("--states-from", required=True, help="the policy whose greedy episodes give the item pages")
    p.add_argument("--models", nargs="+", required=True, help="NAME=FOLDER of each policy to probe")
    p.add_argument("--split", default="test")
    p.add_argument("--episodes", type=int, default=200, help="first goals of the split (those with options count)")
    p.add_argument("--samples", type=int, default=16, help="sampled replies per item page (temperature 1); with "
                   "--early-purchases, continuations per state")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--save", action="store_true", help="write data/results/decisions_<profile>.csv (the probe) and "
                   "option_progress_<profile>.csv (each policy's greedy episodes, analysis.failures.option_decisions)")
    p.add_argument("--name", default=None, help="with --save: decisions_<name>_<profile>.csv and "
                   "option_progress_<name>_<profile>.csv, for another set of policies")
    p.add_argument("--early-purchases", action="store_true", help="the second probe instead: the purchases of "
                   "--states-from's greedy episodes that left a requested option value unselected, continued "
                   "--samples times by each policy (analysis.decisions.early_purchases); with --save, "
                   "data/results/early_purchases[_<name>]_<profile>.csv")
    p.add_argument("--temperatures", type=float, nargs="+", default=[1.0],
                   help="with --early-purchases: sampling temperatures of the continuations (default 1.0)")
    p.set_defaults(func=cmd_decisions)

    p = sub.add_parser("generalization", help="a run's policies on the goals it trained on and on unseen goals whose "
                       "pi_ref samples disagree as the training goals' did")
    p.add_argument("--run", nargs="*", default=[], help="folders of finished `train` runs (seed_*/policy inside)")
    p.add_argument("--ref", nargs="*", default=[], help="pi_ref folders measured alone on the unseen goals (the "
                   "profile's sampling settings), e.g. when a run's policies were not kept")
    p.add_argument("--vstar", default="runs/vstar", help="the V* cache the runs trained from; pi_ref's samples of the "
                   "unseen goals are cached there too")
    p.add_argument("--goals", type=int, default=None, help="unseen goals per held-out split (default: all)")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--save", action="store_true", help="merge the rows into data/results/generalization_<profile>.csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_generalization)

    p = sub.add_parser("outcomes", help="per-goal greedy outcomes of runs' final policies and their pi_ref, and each "
                       "run's gain with a paired bootstrap interval over goals and seeds")
    p.add_argument("--run", nargs="*", default=[], help="folders of finished `train` runs (seed_*/policy inside)")
    p.add_argument("--policy", nargs="*", default=[], help="single policy folders (a soup, a pi_ref), labelled by "
                   "their folder name")
    p.add_argument("--split", default="test")
    p.add_argument("--episodes", type=int, default=None, help="first goals of the split (default: all)")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--save", action="store_true", help="merge the rows into data/results/goal_outcomes_<profile>.csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_outcomes)

    p = sub.add_parser("purchases", help="a run's pi_ref and final policies, greedy: each episode's failure class "
                       "and what its last results page offered")
    p.add_argument("--run", nargs="+", required=True, help="folders of finished `train` runs (seed_*/policy inside)")
    p.add_argument("--split", default="test")
    p.add_argument("--episodes", type=int, default=200, help="first goals of the split")
    p.add_argument("--profile", default=None, help="ci | class | gpu (default: $APO_PROFILE or class)")
    p.add_argument("--probe", action="store_true", help="instead: at the results pages where pi_ref's greedy "
                   "episode bought above the budget with an affordable product of the goal's type listed, how likely "
                   "each policy opens one (analysis.purchases.affordable_click_rates); with --save, "
                   "data/results/results_choices_<profile>.csv")
    p.add_argument("--samples", type=int, default=16, help="with --probe: sampled replies per page (temperature 1)")
    p.add_argument("--save", action="store_true", help="merge the rows into data/results/purchases_<profile>.csv")
    p.set_defaults(func=cmd_purchases)

    p = sub.add_parser("train", help="RAGEN's loop with A*PO (or another objective), one run per seed")
    p.add_argument("--objective", default="apo", help="objective name (apo)")
    p.add_argument("--ref", default=None, help="pi_ref folder (default: runs/pi_ref_<profile>); {seed} in it is "
                   "each seed's number: --ref runs/<run>/seed_{seed}/policy re-anchors each seed on its own earlier "
                   "run's final policy (stage 1 and the regression start from it; the table's pi_ref row stays "
                   "the first pi_ref)")
    p.add_argument("--vstar", default="runs/vstar", help="stage-1 cache folder (computed there when missing)")
    p.add_argument("--profile", default=None)
    p.add_argument("--out", default=None, help="run folder (default: runs/<objective>_<profile>); one seed_<k>/ each")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--iterations", type=int, default=None, help="override the profile's iterations")
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                   help="override APOConfig fields, e.g. --set beta2=0.01 temperature=0.7")
    p.add_argument("--resume", action="store_true", help="continue each seed from its latest checkpoint")
    p.add_argument("--save", action="store_true", help="also write data/results/<name>_<profile>_*.csv")
    p.add_argument("--name", default=None, help="the saved tables' name (default: the objective), e.g. apo_sloppy "
                   "for runs from another pi_ref, so that they sit beside the default runs' tables")
    p.add_argument("--skip-ref", action="store_true", help="do not evaluate pi_ref on test (the comparison does once)")
    p.add_argument("--gather", action="store_true", help="train nothing: read each seed's finished folder (its "
                   "metrics.json, history.csv and evals.csv) and write the tables, e.g. for seeds that ran side by "
                   "side or on another machine")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("average", help="the mean of several policies' weights (one run's seeds) as one policy folder")
    p.add_argument("policies", nargs="+", help="policy folders, e.g. runs/<run>_class/seed_{0,1,2}/policy")
    p.add_argument("--out", required=True, help="the averaged policy's folder")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_average)

    p = sub.add_parser("compare", help="every objective from the same pi_ref and budget: curves, time, memory")
    p.add_argument("--objectives", nargs="+", default=COMPARED_OBJECTIVES)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--profile", default=None)
    p.add_argument("--ref", default=None)
    p.add_argument("--vstar", default="runs/vstar")
    p.add_argument("--iterations", type=int, default=None)
    p.add_argument("--target", type=float, default=0.8, help="val success whose time-to-reach is reported")
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="APOConfig overrides for every run")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side, the CPU cores shared among them")
    p.add_argument("--out", default=None, help="default: runs/compare_<profile>")
    p.add_argument("--save", action="store_true", help="write data/results/compare_<profile>_{summary,curves}.csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("sweep", help="one A*PO run per value of an APOConfig field (default beta2)")
    p.add_argument("--name", default="beta2", help="the APOConfig field to sweep")
    p.add_argument("--values", nargs="+", default=["0.01", "0.1", "1.0"])
    p.add_argument("--objective", default="apo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", default=None)
    p.add_argument("--ref", default=None)
    p.add_argument("--vstar", default="runs/vstar")
    p.add_argument("--iterations", type=int, default=None)
    p.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="other APOConfig overrides")
    p.add_argument("--out", default=None, help="default: runs/sweep_<name>_<profile>")
    p.add_argument("--save", action="store_true", help="write data/results/sweep_<name>_<profile>[_history].csv")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("bench", help="benchmarks (medians over repeats)")
    p.add_argument("what", choices=["env", "rollout", "train", "update-memory"])
    p.add_argument("--batch", type=int, default=32, help="rollout / train: episodes in lockstep (goals per iteration)")
    p.add_argument("--ref", default=None, help="rollout / train: a saved policy folder (rollout default: an untrained "
                   "tiny model; train default: runs/pi_ref_<profile>)")
    p.add_argument("--repeats", type=int, default=5, help="train: iterations timed")
    p.add_argument("--model", default="tiny", help="train: tiny (the profile's pi_ref) or a named pretrained model "
                   "(smollm2-135m), used as it ships")
    p.add_argument("--objective", default="apo", help="train: the objective timed, or `all` (each in turn, the "
                   "comparison's settings; saves bench_train_objectives.json)")
    p.add_argument("--batches", type=int, nargs="+", default=[32, 64, 96], help="update-memory: episodes per update "
                   "(more stand for a drifting policy's longer episodes); --repeats caps at 3 there")
    p.add_argument("--products", type=int, nargs="+", default=[1000], help="catalog sizes, e.g. 1000 10000 100000")
    p.add_argument("--steps", type=int, default=20000, help="random-agent steps per size")
    p.add_argument("--json", action="store_true")
    p.add_argument("--save", action="store_true", help="also write data/results/bench_<what>.json (quoted in the README)")
    p.add_argument("--tag", default="", help="train: save as bench_train[_<model>]_<tag>.json, a row of its own "
                   "beside the others (another machine, say); the README's table names each row's machine")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("data", help="regenerate data/catalog.json and data/goals.json")
    p.add_argument("--check", action="store_true", help="exit 1 when the committed files differ from a regeneration")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("report", help="execute the notebooks in order and export the HTML report")
    p.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 00 01")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("readme", help="rewrite the result tables of the README and docs/experiments.md from data/results/")
    p.set_defaults(func=cmd_readme)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
