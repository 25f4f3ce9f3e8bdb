"""The training objectives, each a small pure function on tensors (A*PO in notebook 04, the others in 05).

Every objective reads one ``ObjectiveInputs`` (what a batch of trajectories gives: summed and per-token
log-probabilities under the policy and pi_ref, rewards, V*) and returns ``(loss, stats)``. The trainer does not
know which objective it optimises; the comparison issue plugs in GRPO, PPO and the others the same way.
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
    """``apo_loss`` with ``config.beta2``, minus an optional entropy bonus (``config.entropy_coef``); stats too."""
    loss = apo_loss(inputs.logp, inputs.logp_ref, inputs.reward, inputs.vstar, config.beta2)
    stats = {"apo_loss": loss.item(), "advantage": (inputs.reward - inputs.vstar).mean().item()}
    if config.entropy_coef and inputs.entropy is not None:
        loss = loss - config.entropy_coef * inputs.entropy.mean()
    return loss, stats


def kl_estimate(token_logp: torch.Tensor, token_logp_ref: torch.Tensor, rows: torch.Tensor, batch: int) -> torch.Tensor:
    """Per-trajectory estimate of KL(pi || pi_ref) on sampled tokens: the sum of log pi - log pi_ref (k1)."""
    diff = (token_logp - token_logp_ref).detach()
    return torch.zeros(batch, dtype=diff.dtype, device=diff.device).index_add(0, rows, diff)


OBJECTIVES = {"apo": apo_objective}
"""Objectives by name, for ``train --objective``: each maps ``(ObjectiveInputs, APOConfig)`` to ``(loss, stats)``."""
