"""The results-page choice taught directly: can pi_ref learn it from labelled corrections? (notebook 04 section 5)

An RL update can only teach what its samples show, and the sample that matters most here is the click on the
results page (``headroom``: most of the failures one changed click fixes are there). This module hands that
information to the model as plainly as possible, to see whether the model can use it at all:

- ``branch_results`` plays pi_ref's greedy episode of each goal and, at its first results page, tries every click
  (written as the expert writes it, ``webshop.agents.explain``), each followed by greedy play: the return of every
  choice at that state. A goal is *corrected* when pi_ref's own click fails and another click succeeds.
- ``labelled_turns`` keeps one results turn per goal that some click solves: pi_ref's own click when it succeeds,
  else the first successful other click. These labels are the best any reward-driven update could learn from these
  states, with none of an RL update's noise.
- ``imitate_choices`` fine-tunes a copy of pi_ref on those turns (cross-entropy on the reply, as imitation does),
  alone or mixed into pi_ref's own demonstrations (``replay``: results turns alone can make the model forget the
  other pages), and measures greedy success on val (goals it never saw) and on the branched goals themselves.

If even that does not raise val success, no objective fed by the same information will; a control fine-tunes on
pi_ref's own successful clicks only, so that what the corrections add is told apart from fine-tuning as such.

``python -m apo_helpers corrections --goals 1000 --save`` writes ``data/results/corrections_<profile>.json``.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
from tqdm.auto import tqdm

from ..apo.sft import expert_demonstrations, imitate, tokenize_demonstrations
from ..apo.turn_credit import require_turn_chats
from ..apo.vstar import stage1_goals
from ..config import Profile, seed_everything
from ..policy.models import load_policy
from ..policy.prompts import Turn, build_messages, encode_chat
from ..policy.rollout import GREEDY, Trajectory, rollout
from ..webshop.agents import explorable_actions
from ..webshop.catalog import Goal, default_catalog
from ..webshop.env import WebShopEnv
from .evaluate import evaluate_policy
from .headroom import _decisions, _ends, _forced

BRANCH_COLUMNS = ["split", "goal_index", "turn", "action", "own", "greedy_success", "return", "success"]
"""One row per (goal, click at the first results page of its greedy episode)."""


def branch_results(model, tokenizer, goals: list[Goal], profile: Profile,
                   progress: bool = True) -> tuple[pd.DataFrame, list[list[Turn]]]:
    """Every click at the first results page of each goal's greedy episode, each followed by greedy play:
    ``(table, prefixes)``, one row and one prefix (the turns up to and including that click) per branch. Goals whose
    greedy episode never reaches a results page have no row."""
    env_config, catalog = profile.policy_env(), default_catalog()
    greedy = rollout(model, tokenizer, goals, GREEDY, profile.policy, env_config)
    rows, prefixes, todo = [], [], []
    for goal, played in zip(goals, greedy):
        env = WebShopEnv(split=goal.split, catalog=catalog, config=env_config)
        first = next(((k, before) for k, page, before in _decisions(played, env) if page == "results"), None)
        if first is None:
            continue
        k, before = first
        for action in explorable_actions(played.turns[k].actions):
            own = action == played.turns[k].action
            prefix = [*before, played.turns[k] if own else _forced(played.turns[k], action, "results")]
            row = {"split": goal.split, "goal_index": goal.index, "turn": k, "action": action, "own": own,
                   "greedy_success": played.success, "return": played.reward, "success": played.success}
            if not own:  # the own click's continuation is the greedy episode itself
                over, row["return"], row["success"] = _ends(goal, prefix, env)
                if not over:
                    todo.append((len(rows), goal))
            rows.append(row)
            prefixes.append(prefix)
    bar = tqdm(total=len(todo), desc="greedy play after each click", disable=not progress)
    continued = rollout(model, tokenizer, [goal for _, goal in todo], GREEDY, profile.policy, env_config,
                        prefixes=[prefixes[i] for i, _ in todo], progress=bar) if todo else []
    bar.close()
    for (i, _), episode in zip(todo, continued):
        rows[i]["return"], rows[i]["success"] = episode.reward, episode.success
    return pd.DataFrame(rows, columns=BRANCH_COLUMNS), prefixes


def labelled_turns(table: pd.DataFrame, prefixes: list[list[Turn]],
                   corrections: bool = True) -> tuple[list[list[Turn]], int]:
    """Per goal that some click solves, the prefix ending in the labelled results turn: pi_ref's own click when it
    succeeds, else (with ``corrections``) the first successful other click. Returns them and how many are
    corrections."""
    labelled, corrected = [], 0
    for _, branches in table.groupby(["split", "goal_index"], sort=False):
        solved = branches[branches["success"].astype(bool)]
        own = solved[solved["own"]]
        if len(own):
            labelled.append(prefixes[own.index[0]])
        elif corrections and len(solved):
            labelled.append(prefixes[solved.index[0]])
            corrected += 1
    return labelled, corrected


def imitate_choices(ref_dir, labelled: list[list[Turn]], profile: Profile, steps: int = 300, lr: float = 1e-4,
                    batch_size: int = 16, seed: int = 0, replay: bool = False, progress: bool = True):
    """A copy of pi_ref fine-tuned on the labelled results turns (cross-entropy on each turn's reply, one chat per
    turn): ``(model, tokenizer, history)``. With ``replay`` the batches are drawn from those turns and every turn
    of pi_ref's own demonstrations (the profile's count and seed, so the same episodes it imitated) together."""
    require_turn_chats(profile.policy.window, "imitate_choices")
    if not labelled:
        raise ValueError("no labelled turns to imitate: no branched goal was solved by any click")
    model, tokenizer = load_policy(ref_dir)
    examples = []
    for prefix in labelled:
        ids, mask = encode_chat(tokenizer, build_messages(prefix, profile.policy.window, include_last_response=True))
        examples.append(Trajectory(goal=None, turns=prefix, input_ids=[ids], assistant_mask=[mask]))
    if replay:
        demos = expert_demonstrations(profile, profile.reference.demonstrations, seed=profile.seed)
        tokenize_demonstrations(demos, tokenizer, profile.policy.window)
        examples += demos
    seed_everything(seed)
    history = imitate(model, tokenizer, examples, 0, steps, batch_size, lr, weight_decay=0.0, seed=seed,
                      progress=progress)
    return model, tokenizer, history


def correction_experiment(ref_dir, goals: list[Goal], profile: Profile, settings=((300, 1e-4, False),),
                          val_goals: int = 200, fit_goals: int = 200, progress: bool = True) -> dict:
    """Branch the results page of ``goals``, then, for each ``(steps, lr, replay)`` of ``settings``, fine-tune
    pi_ref on the labelled turns with and without the corrections (``imitate_choices``). Greedy success of pi_ref
    and of every fine-tuned copy on ``val_goals`` val goals and on the first ``fit_goals`` branched goals (how far
    the labels were fitted); one entry of ``runs`` per fine-tuned copy."""
    model, tokenizer = load_policy(ref_dir)
    table, prefixes = branch_results(model, tokenizer, goals, profile, progress)
    branched = table.drop_duplicates(["split", "goal_index"])
    fit_indices = set(branched["goal_index"].head(fit_goals))
    fit_set = [g for g in goals if g.index in fit_indices]
    solved = table.groupby(["split", "goal_index"])["success"].any()
    own = table[table["own"]].set_index(["split", "goal_index"])["success"].astype(bool)

    def greedy_success(policy, policy_tokenizer) -> dict:
        seed_everything(profile.seed)
        val, _ = evaluate_policy(policy, policy_tokenizer, "val", val_goals, profile, name="policy", progress=False)
        fitted = rollout(policy, policy_tokenizer, fit_set, GREEDY, profile.policy, profile.policy_env())
        return {"val_success": val.summary()["success_rate"], "val_score": val.summary()["mean_score"],
                "branched_goals_success": sum(t.success for t in fitted) / max(1, len(fitted))}

    result = {"goals": int(len(branched)), "branches": int(len(table)),
              "greedy_success": float(own.mean()), "solved_by_some_click": float(solved.mean()),
              "corrected_goals": int((solved & ~own).sum()), "fit_goals": len(fit_set),
              "pi_ref": greedy_success(model, tokenizer), "runs": []}
    label_sets = {"with corrections": labelled_turns(table, prefixes),
                  "own clicks only": labelled_turns(table, prefixes, corrections=False)}
    for steps, lr, replay in settings:
        for labels, (labelled, corrected) in label_sets.items():
            tuned, tuned_tokenizer, history = imitate_choices(ref_dir, labelled, profile, steps, lr, replay=replay,
                                                              progress=progress)
            result["runs"].append({"labels": labels, "steps": steps, "lr": lr, "replay": bool(replay),
                                   "labelled_turns": len(labelled),
                                   "corrections": corrected, "final_loss": float(history["loss"].tail(20).mean()),
                                   **greedy_success(tuned, tuned_tokenizer)})
    return result


def correction_goals(profile: Profile, count: int) -> list[Goal]:
    """The train goals after the demonstrations (stage 1's goals and the ones after them)."""
    return stage1_goals(dataclasses.replace(profile, apo=dataclasses.replace(profile.apo, vstar_goals=count)))
