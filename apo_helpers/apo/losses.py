"""The training objectives, each a small pure function on tensors (A*PO in notebook 04, the others in 05).

Every objective reads one ``ObjectiveInputs`` (what a batch of trajectories gives: summed and per-token
log-probabilities under the policy and pi_ref, rewards, V*; for PPO also per-turn values and rewards) and returns
``(loss, stats)``. The trainer does not know which objective it optimises; ``OBJECTIVES`` maps a name to each:

- ``apo``: A*PO stage 2, least squares on log(pi / pi_ref) (arXiv 2505.20686);
- ``apo_split``: the same least squares with each trajectory cut at its first item page, whose V* comes from
  pi_ref's continuations (``apo.turn_credit``; this project's variant, notebook 04 section 6);
- ``grpo``: group-normalised advantages, clipped ratio, optional KL to pi_ref (DeepSeekMath, arXiv 2402.03300);
- ``ppo``: RAGEN's StarPO with a critic: turn-level GAE, clipped ratio, value loss (arXiv 2504.20073);
- ``starpo_s``: ``grpo`` on the goals whose rewards vary most (StarPO-S's filter, arXiv 2504.20073);
- ``kl_pg`` and ``weighted_sft``: simpler A*PO variants some write-ups use (V* as the baseline, no least squares).

Hyperparameters beyond ``beta2`` and ``entropy_coef`` are read with ``getattr(config, name, default)``, so any
object with those attributes works as a config (the defaults are the ``*_DEFAULT`` values of each function).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ObjectiveInputs:
    """A batch of B trajectories with N trained tokens in all."""

    logp: torch.Tensor
    """(B,) log pi(y|x): the sum of the policy's log-probs over each trajectory's trained tokens (differentiable)."""
    logp_ref: torch.Tensor
    """(B,) the same sums under the frozen pi_ref."""
    reward: torch.Tensor
    """(B,) r(x, y): WebShop's reward plus format penalties."""
    vstar: torch.Tensor
    """(B,) V*(x) of each trajectory's goal (stage 1)."""
    tokens: torch.Tensor
    """(B,) trained tokens per trajectory."""
    group: torch.Tensor
    """(B,) an id per goal: trajectories of the same goal share it (group baselines)."""
    token_logp: torch.Tensor
    """(N,) the policy's log-prob of each trained token (differentiable)."""
    token_logp_ref: torch.Tensor
    """(N,) pi_ref's log-prob of each trained token."""
    token_logp_old: torch.Tensor
    """(N,) the policy's log-prob of each token when the batch was sampled (for importance ratios)."""
    token_row: torch.Tensor
    """(N,) the trajectory each token belongs to."""
    entropy: torch.Tensor | None = None
    """(N,) entropy of the policy's next-token distribution at each trained token, when computed."""
    values: torch.Tensor | None = None
    """(T,) the critic's V(s_t) for each of the batch's T turns, in turn order within each trajectory (``ppo`` only;
    differentiable: the value loss trains the critic)."""
    turn_row: torch.Tensor | None = None
    """(T,) the trajectory each turn belongs to (``ppo`` only)."""
    turn_rewards: torch.Tensor | None = None
    """(T,) each turn's reward (environment reward plus format penalty); they sum to ``reward`` (``ppo`` only)."""
    token_turn: torch.Tensor | None = None
    """(N,) the index into the T turns of each trained token (``ppo`` only)."""
    token_after_split: torch.Tensor | None = None
    """(N,) True for the tokens of the turns from each trajectory's split on (``apo_split`` only)."""
    split_value: torch.Tensor | None = None
    """(B,) V*(s_k) of the state where each trajectory is split, 0 when it is not (``apo_split`` only)."""
    reward_before_split: torch.Tensor | None = None
    """(B,) the rewards of the turns before the split, the whole reward when not split (``apo_split`` only)."""
    token_grad_weight: torch.Tensor | None = None
    """(N,) the factor on the gradient that reaches each trained token's log-prob (``APOConfig.search_grad_weight``;
    ``token_logp`` already carries it when it is differentiable), None when every factor is 1."""
    anchor_token_logp: torch.Tensor | None = None
    """(M,) the policy's log-prob of each token of the greedily typed turns (``greedy_anchor`` only; differentiable).
    Those tokens are not among the N trained ones."""
    anchor_token_logp_ref: torch.Tensor | None = None
    """(M,) pi_ref's log-prob of each of those tokens."""
    anchor_token_row: torch.Tensor | None = None
    """(M,) the trajectory each of those tokens belongs to."""


def apo_loss(logp_policy: torch.Tensor, logp_ref: torch.Tensor, reward: torch.Tensor, vstar: torch.Tensor,
             beta2: float) -> torch.Tensor:
    """A*PO stage 2: mean_i ( beta2 * [log pi(y_i|x_i) - log pi_ref(y_i|x_i)] - (r_i - V*(x_i)) )^2.

    Least squares: the log-ratio to pi_ref, scaled by beta2, is regressed onto the advantage r - V*. Its minimiser is
    the optimal KL-regularised policy pi* ~ pi_ref * exp(r / beta2); no ratio clipping, no critic.
    """
    if not beta2 > 0:
        raise ValueError(f"beta2 must be positive, got {beta2}")
    target = reward - vstar
    return (beta2 * (logp_policy - logp_ref) - target).pow(2).mean()


def apo_objective(inputs: ObjectiveInputs, config):
    """``apo_loss`` with ``config.beta2``, plus ``greedy_anchor`` times the greedy turns' anchor (when the inputs
    carry those turns), minus an optional entropy bonus (``config.entropy_coef``); stats too."""
    loss = apo_loss(inputs.logp, inputs.logp_ref, inputs.reward, inputs.vstar, config.beta2)
    stats = {"apo_loss": loss.item(), "advantage": (inputs.reward - inputs.vstar).mean().item()}
    weight = getattr(config, "greedy_anchor", 0.0)
    if weight and inputs.anchor_token_logp is not None:
        batch = len(inputs.reward)
        logp = torch.zeros(batch, device=inputs.reward.device).index_add(0, inputs.anchor_token_row,
                                                                         inputs.anchor_token_logp)
        logp_ref = torch.zeros_like(logp).index_add(0, inputs.anchor_token_row, inputs.anchor_token_logp_ref)
        anchor = anchor_loss(logp, logp_ref, config.beta2)
        loss = loss + weight * anchor
        stats.update(anchor_loss=anchor.item(), anchor_log_ratio_abs=(logp - logp_ref).detach().abs().mean().item())
    return entropy_bonus(loss, inputs, config), stats


def anchor_loss(logp_greedy: torch.Tensor, logp_ref_greedy: torch.Tensor, beta2: float) -> torch.Tensor:
    """mean_i (beta2 * [log pi - log pi_ref](greedy turns of y_i))^2: ``apo_loss`` on the turns typed greedily with
    an advantage of 0 (``APOConfig.greedy_anchor``). Those turns are not sampled, so their outcome says nothing about
    how good they were; regressing their log-ratio to 0 holds them at pi_ref while the sampled turns learn."""
    zeros = torch.zeros_like(logp_greedy)
    return apo_loss(logp_greedy, logp_ref_greedy, zeros, zeros, beta2)


def distribution_kl(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """(K,) KL(pi || pi_ref) = sum_v pi(v) [log pi(v) - log pi_ref(v)] at each of K positions, from ``(K, V)``
    log-distributions over the vocabulary (``APOConfig.greedy_kl``). Exact, not a one-sample estimate: its gradient
    moves probability between every token, not only the one that was typed."""
    return (logp.exp() * (logp - logp_ref)).sum(-1)


def apo_split_loss(logp_before: torch.Tensor, logp_ref_before: torch.Tensor, logp_after: torch.Tensor,
                   logp_ref_after: torch.Tensor, reward: torch.Tensor, reward_before: torch.Tensor,
                   vstar: torch.Tensor, split_value: torch.Tensor, beta2: float) -> torch.Tensor:
    """A*PO's least squares with each trajectory cut in two at a state s_k (``apo.turn_credit``):

        mean_i ( beta2 * logratio_<k - (r_<k + V*(s_k) - V*(x)) )^2 + ( beta2 * logratio_>=k - (r_>=k - V*(s_k)) )^2

    The two targets sum to A*PO's r - V*(x). A trajectory that is not split has no tokens after the split, its
    ``reward_before`` is the whole reward and its ``split_value`` 0: its second term is 0 and its first is ``apo_loss``'s.
    """
    if not beta2 > 0:
        raise ValueError(f"beta2 must be positive, got {beta2}")
    before = beta2 * (logp_before - logp_ref_before) - (reward_before + split_value - vstar)
    after = beta2 * (logp_after - logp_ref_after) - (reward - reward_before - split_value)
    return (before.pow(2) + after.pow(2)).mean()


def apo_split_objective(inputs: ObjectiveInputs, config):
    """``apo_split_loss`` with ``config.beta2``: the per-trajectory log-ratio sums split at ``token_after_split``."""
    if inputs.token_after_split is None or inputs.split_value is None or inputs.reward_before_split is None:
        raise ValueError("apo_split needs the split of each trajectory (apo.turn_credit.split_values): the trainer "
                         "computes it when the objective is apo_split")
    batch, after = len(inputs.reward), inputs.token_after_split.to(inputs.token_logp.dtype)

    def part(values, weight):
        return torch.zeros(batch, dtype=values.dtype, device=values.device).index_add(0, inputs.token_row,
                                                                                      values * weight)

    logp_after, logp_ref_after = part(inputs.token_logp, after), part(inputs.token_logp_ref, after)
    loss = apo_split_loss(inputs.logp - logp_after, inputs.logp_ref - logp_ref_after, logp_after, logp_ref_after,
                          inputs.reward, inputs.reward_before_split, inputs.vstar, inputs.split_value, config.beta2)
    split = part(torch.ones_like(after), after) > 0  # trajectories with turns after a split
    after_advantage = inputs.reward - inputs.reward_before_split - inputs.split_value
    stats = {"apo_loss": loss.item(), "advantage": (inputs.reward - inputs.vstar).mean().item(),
             "split_fraction": split.float().mean().item(),  # the two means below are 0 when it is 0
             "split_value": _mean(inputs.split_value[split]).item(),
             "advantage_after_split": _mean(after_advantage[split]).item()}
    return entropy_bonus(loss, inputs, config), stats


def kl_estimate(token_logp: torch.Tensor, token_logp_ref: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
    """Per-trajectory estimate of KL(pi || pi_ref) on sampled tokens: the sum of log pi - log pi_ref (k1)."""
    diff = (token_logp - token_logp_ref).detach()
    return torch.zeros(batch, dtype=diff.dtype, device=diff.device).index_add(0, rows, diff)


# ------------------------------------------------------------------------------------------------ shared pieces

ADVANTAGE_EPS = 1e-6
"""Added to standard deviations before dividing by them."""


def entropy_bonus(loss: torch.Tensor, inputs: ObjectiveInputs, config, keep: torch.Tensor | None = None):
    """``loss - entropy_coef * mean entropy`` over the trained tokens (those of ``keep``'s trajectories when given)."""
    coef = getattr(config, "entropy_coef", 0.0)
    if not coef or inputs.entropy is None:
        return loss
    entropy = inputs.entropy if keep is None else inputs.entropy[keep[inputs.token_row]]
    return loss - coef * _mean(entropy)


def _mean(x: torch.Tensor) -> torch.Tensor:
    """The mean, 0 (not NaN) for an empty tensor."""
    return x.sum() / max(1, x.numel())


def _group_stats(values: torch.Tensor, group: torch.Tensor):
    """``(index of each element's group, per-group mean, per-group std)``; the std is Bessel-corrected (as
    ``torch.std``, TRL and verl) and 0 for a group of one."""
    _, index = torch.unique(group, return_inverse=True)
    groups = int(index.max()) + 1 if index.numel() else 0
    values = values.detach()
    counts = torch.bincount(index, minlength=groups).to(values.dtype)
    mean = torch.zeros(groups, dtype=values.dtype, device=values.device).index_add(0, index, values) / counts
    squares = torch.zeros_like(mean).index_add(0, index, (values - mean[index]).pow(2))
    return index, mean, (squares / (counts - 1).clamp(min=1)).sqrt()


def group_normalize(values: torch.Tensor, group: torch.Tensor, eps: float = ADVANTAGE_EPS) -> torch.Tensor:
    """(v - mean of its group) / (std of its group + eps), detached: GRPO's advantage (a group of one gets 0)."""
    index, mean, std = _group_stats(values, group)
    return (values.detach() - mean[index]) / (std[index] + eps)


def kl_k3(token_logp: torch.Tensor, token_logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased, low variance;
    Schulman's "Approximating KL divergence", as in GRPO). Differentiable in ``token_logp``: its gradient,
    1 - pi_ref / pi, pulls each sampled token's probability back toward pi_ref's."""
    diff = token_logp_ref.detach() - token_logp
    return torch.expm1(diff) - diff  # exp(d) - 1 without cancellation for small d


def sequence_kl(inputs: ObjectiveInputs) -> torch.Tensor:
    """mean over trajectories of the per-token mean of ``kl_k3``: the length-normalised KL term of ``kl_pg`` and
    ``weighted_sft``."""
    per_token = kl_k3(inputs.token_logp, inputs.token_logp_ref)
    sums = torch.zeros(len(inputs.reward), dtype=per_token.dtype, device=per_token.device).index_add(
        0, inputs.token_row, per_token)
    return (sums / inputs.tokens.clamp(min=1)).mean()


def clipped_surrogate(token_logp: torch.Tensor, token_logp_old: torch.Tensor, token_advantage: torch.Tensor,
                      clip: float):
    """PPO's clipped objective, as a loss averaged over tokens -> ``(loss, fraction of tokens clipped)``.

    loss = -mean_t min(rho_t * A_t, clip(rho_t, 1 - clip, 1 + clip) * A_t), with rho_t = exp(logp_t - logp_old_t).
    Where the clipped term is the smaller one (rho > 1 + clip with A > 0, rho < 1 - clip with A < 0) the token's
    gradient is zero: the update stops pushing a ratio that has already moved far enough.
    """
    ratio = torch.exp(token_logp - token_logp_old.detach())
    advantage = token_advantage.detach()
    unclipped = ratio * advantage
    clipped = ratio.clamp(1 - clip, 1 + clip) * advantage
    clip_fraction = _mean((clipped < unclipped).float()).item()
    return -_mean(torch.minimum(unclipped, clipped)), clip_fraction


def gae(turn_rewards: torch.Tensor, values: torch.Tensor, turn_row: torch.Tensor, gamma: float = 1.0,
        lam: float = 1.0):
    """Generalised advantage estimation over turns -> ``(advantages, returns)``, both (T,) and detached.

    delta_t = r_t + gamma * V_{t+1} - V_t and A_t = delta_t + gamma * lam * A_{t+1}, with V and A = 0 after a
    trajectory's last turn (every episode ends: bought, or out of turns with reward 0); returns = A + V. With
    gamma = lam = 1 (RAGEN's turn-level setting here): return_t = the sum of the trajectory's rewards from turn t on,
    A_t = return_t - V_t. Turns of one trajectory must be in order; trajectories may interleave.
    """
    rewards, old = turn_rewards.detach().tolist(), values.detach().float().tolist()
    advantages, next_value, next_advantage = [0.0] * len(rewards), {}, {}
    for t, row in reversed(list(enumerate(turn_row.tolist()))):
        delta = rewards[t] + gamma * next_value.get(row, 0.0) - old[t]
        advantages[t] = delta + gamma * lam * next_advantage.get(row, 0.0)
        next_value[row], next_advantage[row] = old[t], advantages[t]
    advantages = torch.tensor(advantages, dtype=torch.float32, device=values.device)
    return advantages, advantages + values.detach().float()


# ------------------------------------------------------------------------------------------------ GRPO, StarPO-S

CLIP_DEFAULT = 0.2
"""``clip_eps``: PPO/GRPO ratio clip (both papers: 0.2)."""
GRPO_KL_DEFAULT = 0.0
"""``grpo_kl``: weight of the k3 KL to pi_ref in ``grpo`` and ``starpo_s`` (DeepSeekMath: 0.04; 0 = no pi_ref)."""
STARPO_KEEP_DEFAULT = 0.25
"""``starpo_keep``: fraction of goals StarPO-S keeps (RAGEN: the top 25% by reward variance)."""


def _grpo(inputs: ObjectiveInputs, config, keep: torch.Tensor | None = None):
    """GRPO's loss on all trajectories, or on those where ``keep`` (B,) is True."""
    clip, coef = getattr(config, "clip_eps", CLIP_DEFAULT), getattr(config, "grpo_kl", GRPO_KL_DEFAULT)
    advantage = group_normalize(inputs.reward, inputs.group)
    tokens = slice(None) if keep is None else keep[inputs.token_row]
    token_logp = inputs.token_logp[tokens]
    policy_loss, clip_fraction = clipped_surrogate(token_logp, inputs.token_logp_old[tokens],
                                                   advantage[inputs.token_row][tokens], clip)
    kl = _mean(kl_k3(token_logp, inputs.token_logp_ref[tokens]))
    loss = entropy_bonus(policy_loss + coef * kl, inputs, config, keep)
    kept = advantage if keep is None else advantage[keep]
    return loss, {"policy_loss": policy_loss.item(), "kl_k3": kl.item(), "clip_fraction": clip_fraction,
                  "advantage_abs": _mean(kept.abs()).item()}


def grpo_objective(inputs: ObjectiveInputs, config):
    """GRPO (DeepSeekMath, arXiv 2402.03300) on n rollouts per goal (a group = one ``inputs.group`` id).

    A_i = (r_i - mean(r of i's group)) / (std(r of i's group) + eps), the same for every token of trajectory i;
    loss = -mean_tokens min(rho_t A, clip(rho_t, 1 - eps_clip, 1 + eps_clip) A) + grpo_kl * mean_tokens k3_t,
    rho_t = pi(token) / pi_old(token), k3 = ``kl_k3``. Averaged over all the batch's assistant tokens (token-level,
    as verl/RAGEN; DeepSeekMath averaged each sequence first). A goal whose rollouts all score the same teaches
    nothing (A = 0), so the trainer must sample several rollouts per goal. Config: ``clip_eps``, ``grpo_kl``,
    ``entropy_coef``.
    """
    return _grpo(inputs, config)


def filter_by_variance(rewards: torch.Tensor, group: torch.Tensor, keep: float = STARPO_KEEP_DEFAULT) -> torch.Tensor:
    """StarPO-S's rollout filter (RAGEN, arXiv 2504.20073): a (B,) bool mask of the trajectories whose goal (group)
    is among the ``keep`` fraction of goals with the highest reward variance (std, Bessel-corrected).

    Keeps ``max(1, int(keep * goals))`` goals, as RAGEN's ``topk(int(ratio * groups))``, at least one; ties go to
    the smaller group id. Low-variance goals are ones the policy always solves or always fails: no signal.
    """
    if not 0 < keep <= 1:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    index, _, std = _group_stats(rewards, group)
    chosen = torch.sort(std, descending=True, stable=True).indices[: max(1, int(keep * len(std) + 1e-9))]
    kept = torch.zeros(len(std), dtype=torch.bool, device=rewards.device)
    kept[chosen] = True
    return kept[index]


def starpo_s_objective(inputs: ObjectiveInputs, config):
    """StarPO-S (RAGEN, arXiv 2504.20073): ``grpo`` on the trajectories ``filter_by_variance`` keeps.

    mask = filter_by_variance(r, group, starpo_keep); loss = grpo's loss over the tokens of masked trajectories only
    (the dropped ones get exactly zero gradient). Config: ``starpo_keep`` and grpo's.
    """
    keep = filter_by_variance(inputs.reward, inputs.group, getattr(config, "starpo_keep", STARPO_KEEP_DEFAULT))
    loss, stats = _grpo(inputs, config, keep)
    return loss, {**stats, "kept_fraction": keep.float().mean().item()}


# ------------------------------------------------------------------------------------------------ PPO (StarPO)

VALUE_COEF_DEFAULT = 0.5
"""``value_coef``: weight of the critic's mean squared error in ``ppo``."""


def ppo_objective(inputs: ObjectiveInputs, config):
    """PPO with a critic as RAGEN's StarPO uses it (arXiv 2504.20073), with turn-level values.

    (A_t, G_t) = gae(turn rewards, V(s_t), gamma = gae_gamma, lam = gae_lambda), by default gamma = lam = 1:
    G_t = sum of the trajectory's rewards from turn t on, A_t = G_t - V(s_t); every token of turn t gets A_t.
    loss = -mean_tokens min(rho A, clip(rho, 1 - eps_clip, 1 + eps_clip) A) + value_coef * mean_t (V(s_t) - G_t)^2.
    Needs ``values``, ``turn_row``, ``turn_rewards`` and ``token_turn`` (a critic: see ``value_head.ValueHead``).
    Config: ``clip_eps``, ``value_coef``, ``gae_gamma``, ``gae_lambda``, ``entropy_coef``.
    """
    missing = [name for name in ("values", "turn_row", "turn_rewards", "token_turn") if getattr(inputs, name) is None]
    if missing:
        raise ValueError(f"ppo needs per-turn critic inputs; ObjectiveInputs lacks {', '.join(missing)} "
                         "(attach a value_head.ValueHead and give per-turn values and rewards)")
    values = inputs.values.float()
    advantage, returns = gae(inputs.turn_rewards, values, inputs.turn_row, getattr(config, "gae_gamma", 1.0),
                             getattr(config, "gae_lambda", 1.0))
    clip = getattr(config, "clip_eps", CLIP_DEFAULT)
    policy_loss, clip_fraction = clipped_surrogate(inputs.token_logp, inputs.token_logp_old,
                                                   advantage[inputs.token_turn], clip)
    value_loss = _mean((values - returns).pow(2))
    loss = entropy_bonus(policy_loss + getattr(config, "value_coef", VALUE_COEF_DEFAULT) * value_loss, inputs, config)
    return loss, {"policy_loss": policy_loss.item(), "value_loss": value_loss.item(), "clip_fraction": clip_fraction,
                  "advantage_abs": _mean(advantage.abs()).item(), "value": _mean(values.detach()).item()}


# ------------------------------------------------------------------------------------------------ simpler variants

KL_PG_BETA_DEFAULT = 0.1
"""``kl_pg_beta``: weight of log(pi_ref / pi) inside ``kl_pg``'s advantage."""
KL_PG_LAMBDA_DEFAULT = 0.05
"""``kl_pg_lambda``: weight of the KL term of ``kl_pg``."""
KL_PG_CLAMP_DEFAULT = 1.0
"""``kl_pg_clamp``: ``kl_pg``'s advantage is clamped to [-clamp, clamp]."""
WSFT_KL_DEFAULT = 0.05
"""``wsft_kl``: weight of the KL term of ``weighted_sft``."""


def kl_pg_objective(inputs: ObjectiveInputs, config):
    """KL-regularised policy gradient with V* as the baseline (one of the simpler A*PO variants some write-ups use).

    A_i = clamp(r_i + beta * log(pi_ref(y_i|x_i) / pi(y_i|x_i)) - V*(x_i), -clamp, clamp), detached;
    loss = -mean_i (log pi(y_i|x_i) / tokens_i) * A_i + lambda * KL, KL = ``sequence_kl`` (k3, length-normalised).
    Config: ``kl_pg_beta``, ``kl_pg_lambda``, ``kl_pg_clamp``, ``entropy_coef``.
    """
    beta = getattr(config, "kl_pg_beta", KL_PG_BETA_DEFAULT)
    limit = getattr(config, "kl_pg_clamp", KL_PG_CLAMP_DEFAULT)
    advantage = (inputs.reward + beta * (inputs.logp_ref - inputs.logp) - inputs.vstar).detach().clamp(-limit, limit)
    policy_loss = -(inputs.logp / inputs.tokens.clamp(min=1) * advantage).mean()
    kl = sequence_kl(inputs)
    loss = entropy_bonus(policy_loss + getattr(config, "kl_pg_lambda", KL_PG_LAMBDA_DEFAULT) * kl, inputs, config)
    return loss, {"policy_loss": policy_loss.item(), "kl_k3": kl.item(), "advantage": advantage.mean().item()}


def advantage_weights(advantage: torch.Tensor, low: float = 0.1, high: float = 5.0,
                      eps: float = ADVANTAGE_EPS) -> torch.Tensor:
    """clamp((a - mean a) / (std a + eps) + 1, low, high) over the batch, detached: ``weighted_sft``'s weights."""
    return (group_normalize(advantage, torch.zeros_like(advantage, dtype=torch.long), eps) + 1).clamp(low, high)


def weighted_sft_objective(inputs: ObjectiveInputs, config):
    """Advantage-weighted imitation of the sampled trajectories (one of the simpler A*PO variants some write-ups use).

    w_i = clamp(normalize(r_i - V*(x_i)) + 1, 0.1, 5), normalize = (x - mean) / (std + eps) over the batch, detached;
    loss = -mean_i w_i * log pi(y_i|x_i) / tokens_i + wsft_kl * KL, KL = ``sequence_kl``. Every weight is positive:
    it imitates everything it sampled, the better trajectories more. Config: ``wsft_kl``, ``entropy_coef``.
    """
    weights = advantage_weights(inputs.reward - inputs.vstar)
    sft_loss = -(weights * inputs.logp / inputs.tokens.clamp(min=1)).mean()
    kl = sequence_kl(inputs)
    loss = entropy_bonus(sft_loss + getattr(config, "wsft_kl", WSFT_KL_DEFAULT) * kl, inputs, config)
    return loss, {"sft_loss": sft_loss.item(), "kl_k3": kl.item(), "weight_max": weights.max().item()}


OBJECTIVES = {"apo": apo_objective, "apo_split": apo_split_objective, "grpo": grpo_objective, "ppo": ppo_objective, "starpo_s": starpo_s_objective,
              "kl_pg": kl_pg_objective, "weighted_sft": weighted_sft_objective}
"""Objectives by name, for ``train --objective``: each maps ``(ObjectiveInputs, APOConfig)`` to ``(loss, stats)``."""
