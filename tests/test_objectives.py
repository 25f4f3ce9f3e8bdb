"""The baseline objectives of notebook 05 (GRPO, PPO/StarPO, StarPO-S, kl_pg, weighted_sft) beside A*PO.

Hand-computed losses and gradients on batches of a few tokens, the pieces they share (group advantages, k3 KL,
clipping, GAE, StarPO-S's filter, the value head), and a one-step toy problem every objective must learn."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from apo_helpers.apo.losses import (OBJECTIVES, ObjectiveInputs, advantage_weights, anchor_loss, apo_loss,
                                    apo_objective, apo_split_loss, apo_split_objective, clipped_surrogate, distribution_kl,
                                    entropy_bonus,
                                    filter_by_variance, gae, group_normalize, grpo_objective, kl_k3,
                                    kl_pg_objective, ppo_objective, starpo_s_objective, weighted_sft_objective)
from apo_helpers.apo.value_head import ValueHead, turn_positions
from apo_helpers.config import get_profile

CONFIG = get_profile("ci").apo  # has none of the baselines' fields yet: they fall back to their defaults
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _config(**fields):
    """A config object with only the given attributes (objectives read what they need with getattr)."""
    return SimpleNamespace(**fields)


def _batch(token_logp, token_row, reward, *, ref=None, old=None, group=None, vstar=None, **extra) -> ObjectiveInputs:
    """Inputs whose per-trajectory sums are built from the per-token log-probs, as the trainer builds them."""
    token_logp, token_row = torch.as_tensor(token_logp), torch.as_tensor(token_row)
    reward = torch.as_tensor(reward, dtype=torch.float32)
    batch = len(reward)
    ref = token_logp.detach() if ref is None else torch.as_tensor(ref)
    old = token_logp.detach() if old is None else torch.as_tensor(old)

    def per_trajectory(values):
        return torch.zeros(batch, dtype=values.dtype).index_add(0, token_row, values)

    return ObjectiveInputs(
        logp=per_trajectory(token_logp), logp_ref=per_trajectory(ref), reward=reward,
        vstar=torch.zeros(batch) if vstar is None else torch.as_tensor(vstar, dtype=torch.float32),
        tokens=per_trajectory(torch.ones_like(token_logp)),
        group=torch.arange(batch) if group is None else torch.as_tensor(group),
        token_logp=token_logp, token_logp_ref=ref, token_logp_old=old, token_row=token_row, **extra)


def test_registry_names_every_objective():
    assert set(OBJECTIVES) == {"apo", "apo_split", "grpo", "ppo", "starpo_s", "kl_pg", "weighted_sft"}


# ---------------------------------------------------------------------------------------------- shared pieces

def test_group_normalize_hand_computed():
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # group [1, 0]: mean 0.5, Bessel std sqrt(0.5)
    got = group_normalize(torch.tensor([1.0, 0.5, 0.0, 0.5, 0.3]), torch.tensor([4, 9, 4, 9, 2]))
    assert got.tolist() == pytest.approx([a, 0.0, -a, 0.0, 0.0])  # equal rewards and a group of one: 0, not NaN


def test_kl_k3_hand_computed():
    got = kl_k3(torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.25, -2.0, -1.0]))
    assert got.tolist() == pytest.approx([math.exp(-0.25) + 0.25 - 1, 0.0, math.exp(-0.5) + 0.5 - 1])
    assert (got >= 0).all()


@pytest.mark.parametrize("ratio,advantage,clipped", [(1.5, 1.0, True), (1.5, -1.0, False), (0.5, 1.0, False),
                                                     (0.5, -1.0, True), (1.1, 1.0, False), (0.9, -1.0, False)])
def test_clipping_zeroes_the_gradient_on_the_clipped_side(ratio, advantage, clipped):
    logp = torch.tensor([math.log(ratio)], requires_grad=True)
    loss, fraction = clipped_surrogate(logp, torch.zeros(1), torch.tensor([advantage]), 0.2)
    loss.backward()
    if clipped:
        assert logp.grad.item() == 0.0 and fraction == 1.0
        assert loss.item() == pytest.approx(-min(1.2, max(0.8, ratio)) * advantage)
    else:
        assert logp.grad.item() == pytest.approx(-ratio * advantage) and fraction == 0.0
        assert loss.item() == pytest.approx(-ratio * advantage)


def test_gae_with_gamma_lambda_one_is_return_minus_value():
    # trajectory 0: three turns (indices 0, 2, 3) with rewards 0, -0.1 (format penalty), 1.0 (bought);
    # trajectory 1: one turn (index 1), interleaved in between
    rewards, values = torch.tensor([0.0, 0.5, -0.1, 1.0]), torch.tensor([0.2, 0.1, 0.5, 0.7])
    rows = torch.tensor([0, 1, 0, 0])
    advantages, returns = gae(rewards, values, rows)
    assert returns.tolist() == pytest.approx([0.9, 0.5, 0.9, 1.0])  # sums of the rewards from each turn on
    assert advantages.tolist() == pytest.approx([0.7, 0.4, 0.4, 0.3])
    # gamma = 0.5, lambda = 0: one-step TD errors r_t + 0.5 V_{t+1} - V_t
    advantages, returns = gae(rewards, values, rows, gamma=0.5, lam=0.0)
    assert advantages.tolist() == pytest.approx([0.05, 0.4, -0.25, 0.3])
    assert returns.tolist() == pytest.approx([0.25, 0.5, 0.25, 1.0])


def test_entropy_bonus_counts_only_kept_trajectories():
    inputs = _batch(torch.zeros(3), [0, 1, 1], [0.0, 0.0], entropy=torch.tensor([3.0, 1.0, 2.0]))
    loss = torch.tensor(0.0)
    assert entropy_bonus(loss, inputs, _config(entropy_coef=0.1)).item() == pytest.approx(-0.2)
    kept = entropy_bonus(loss, inputs, _config(entropy_coef=0.1), torch.tensor([False, True]))
    assert kept.item() == pytest.approx(-0.15)  # trajectory 1's tokens only
    assert entropy_bonus(loss, inputs, _config()).item() == 0.0


# ---------------------------------------------------------------------------------------------- A*PO split at a state

def _split_batch(token_logp, ref, after):
    """Two trajectories of three tokens: the first split before its last two tokens, the second not split."""
    return _batch(torch.tensor(token_logp, requires_grad=True), [0, 0, 0, 1, 1, 1], [0.9, 0.2], ref=ref,
                  vstar=[0.5, 0.6], token_after_split=torch.tensor(after),
                  split_value=torch.tensor([0.7, 0.0]), reward_before_split=torch.tensor([-0.1, 0.2]))


def test_apo_split_loss_hand_computed():
    # trajectory 1: before-part log-ratio 0.5, after-part 2.0; targets -0.1 + 0.7 - 0.5 = 0.1 and 0.9 + 0.1 - 0.7 = 0.3
    # trajectory 2 (not split): log-ratio 1.0, target 0.2 - 0.6 = -0.4, after-part empty
    loss = apo_split_loss(torch.tensor([0.5, 1.0]), torch.zeros(2), torch.tensor([2.0, 0.0]), torch.zeros(2),
                          torch.tensor([0.9, 0.2]), torch.tensor([-0.1, 0.2]), torch.tensor([0.5, 0.6]),
                          torch.tensor([0.7, 0.0]), beta2=0.1)
    expected = ((0.05 - 0.1) ** 2 + (0.2 - 0.3) ** 2 + (0.1 + 0.4) ** 2) / 2
    assert loss.item() == pytest.approx(expected)


def test_anchor_loss_hand_computed():
    # log-ratios 1.0 and 0.5 at beta2 = 0.5: residuals 0.5 and 0.25 against an advantage of 0
    loss = anchor_loss(torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -5.5]), beta2=0.5)
    assert loss.item() == pytest.approx((0.5 ** 2 + 0.25 ** 2) / 2)
    assert anchor_loss(torch.tensor([-2.0]), torch.tensor([-2.0]), beta2=0.5).item() == 0.0


def test_apo_objective_adds_the_weighted_anchor_of_the_greedy_turns():
    """The anchor's tokens are summed per trajectory apart from the trained ones; only they get its gradient."""
    anchor = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)  # trajectory 0: two greedy tokens, 1: one
    inputs = _batch([-0.5, -1.0], [0, 1], [1.0, 0.0], vstar=[0.5, 0.5], anchor_token_logp=anchor,
                    anchor_token_logp_ref=torch.tensor([-1.5, -2.0, -1.0]), anchor_token_row=torch.tensor([0, 0, 1]))
    plain, _ = apo_objective(inputs, _config(beta2=0.1, entropy_coef=0.0))
    loss, stats = apo_objective(inputs, _config(beta2=0.1, entropy_coef=0.0, greedy_anchor=2.0))
    expected_anchor = ((0.1 * 0.5) ** 2 + (0.1 * 0.5) ** 2) / 2  # log-ratios 0.5 and 0.5
    assert stats["anchor_loss"] == pytest.approx(expected_anchor)
    assert stats["anchor_log_ratio_abs"] == pytest.approx(0.5)
    assert loss.item() == pytest.approx(plain.item() + 2.0 * expected_anchor)
    loss.backward()  # d/d anchor token = 2 * weight * beta2 * (beta2 * ratio) / B, the same for a trajectory's tokens
    torch.testing.assert_close(anchor.grad, torch.full((3,), 2 * 2.0 * 0.1 * 0.05 / 2))
    unweighted, stats = apo_objective(inputs, _config(beta2=0.1, entropy_coef=0.0, greedy_anchor=0.0))
    assert unweighted.item() == pytest.approx(plain.item()) and "anchor_loss" not in stats


def test_distribution_kl_hand_computed():
    # pi = (0.5, 0.5), pi_ref = (0.25, 0.75): KL = 0.5 log 2 + 0.5 log(2/3); identical distributions: 0
    pi, ref = torch.tensor([[0.5, 0.5], [0.1, 0.9]]).log(), torch.tensor([[0.25, 0.75], [0.1, 0.9]]).log()
    kl = distribution_kl(pi, ref)
    assert kl[0].item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    assert kl[1].item() == pytest.approx(0.0, abs=1e-7)
    logits = torch.tensor([0.3, -0.2, 1.0], requires_grad=True)  # its gradient moves every token, not one
    distribution_kl(torch.log_softmax(logits, -1)[None], torch.log(torch.tensor([[0.2, 0.3, 0.5]])))[0].backward()
    assert (logits.grad != 0).all() and logits.grad.sum().item() == pytest.approx(0.0, abs=1e-6)


def test_apo_split_without_a_split_is_apo():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    reward, vstar = torch.tensor([0.8, 0.1]), torch.tensor([0.5, 0.4])
    split = apo_split_loss(logp, ref, torch.zeros(2), torch.zeros(2), reward, reward, vstar, torch.zeros(2), 0.2)
    assert split.item() == pytest.approx(apo_loss(logp, ref, reward, vstar, 0.2).item())


def test_apo_split_objective_sums_each_part_of_the_trajectory():
    token_logp = [-0.5, -1.0, -1.5, -0.2, -0.3, -0.4]
    ref = torch.tensor([-1.0, -1.0, -1.0, -1.0, -1.0, -1.0])
    after = [False, True, True, False, False, False]
    inputs = _split_batch(token_logp, ref, after)
    loss, stats = apo_split_objective(inputs, _config(beta2=0.1, entropy_coef=0.0))
    before_1, after_1, whole_2 = 0.5, 0.0 + -0.5, 0.8 + 0.7 + 0.6
    expected = apo_split_loss(torch.tensor([before_1, whole_2]), torch.zeros(2), torch.tensor([after_1, 0.0]),
                              torch.zeros(2), torch.tensor([0.9, 0.2]), torch.tensor([-0.1, 0.2]),
                              torch.tensor([0.5, 0.6]), torch.tensor([0.7, 0.0]), 0.1)
    assert loss.item() == pytest.approx(expected.item())
    assert stats["split_value"] == pytest.approx(0.7)             # only the split trajectory counts
    assert stats["advantage_after_split"] == pytest.approx(0.9 + 0.1 - 0.7)
    # the after-part's tokens get the gradient of the after-part's residual only
    loss.backward()
    grad = inputs.token_logp.grad
    residual_after = 0.1 * after_1 - 0.3
    assert grad[1].item() == pytest.approx(2 * residual_after * 0.1 / 2)
    assert grad[1].item() == pytest.approx(grad[2].item())
    assert grad[0].item() != pytest.approx(grad[1].item())


def test_apo_split_is_zero_when_each_part_meets_its_target():
    # trajectory 1: parts at their targets 0.1 / 0.3 (beta2 = 0.1 -> log-ratios 1.0 and 3.0): the whole then
    # meets A*PO's r - V* = 0.4, so A*PO's loss is 0 too
    token_logp = [0.0, 1.0, 2.0, -4.0, 0.0, 0.0]
    inputs = _split_batch(token_logp, torch.tensor([-1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
                          [False, True, True, False, False, False])
    loss, _ = apo_split_objective(inputs, _config(beta2=0.1, entropy_coef=0.0))
    assert loss.item() == pytest.approx(0.0, abs=1e-10)
    assert apo_loss(inputs.logp, inputs.logp_ref, inputs.reward, inputs.vstar, 0.1).item() == pytest.approx(0, abs=1e-10)


def test_apo_split_names_what_is_missing():
    inputs = _batch(torch.zeros(2), [0, 1], [1.0, 0.0])
    with pytest.raises(ValueError, match="split_values"):
        apo_split_objective(inputs, _config(beta2=0.1))
    with pytest.raises(ValueError, match="beta2"):
        apo_split_loss(*[torch.zeros(1)] * 8, beta2=0.0)


# ---------------------------------------------------------------------------------------------- GRPO, StarPO-S

def _grpo_batch():
    """Goal 0: rewards 1 and 0 (A = +-a); goal 1: 0.5 twice (A = 0). Token ratios 1.5, 0.9 | 0.5 | 1 | 1."""
    old = torch.tensor([-1.0, -2.0, -1.0, -1.0, -1.0])
    logp = (old + torch.log(torch.tensor([1.5, 0.9, 0.5, 1.0, 1.0]))).requires_grad_()
    return _batch(logp, [0, 0, 1, 2, 3], [1.0, 0.0, 0.5, 0.5], ref=old, old=old, group=[0, 0, 1, 1]), logp


def test_grpo_hand_computed():
    inputs, logp = _grpo_batch()
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    loss, stats = grpo_objective(inputs, CONFIG)
    # surrogates: min(1.5a, 1.2a) = 1.2a (clipped), 0.9a, min(-0.5a, -0.8a) = -0.8a (clipped), 0, 0
    assert loss.item() == pytest.approx(-(1.2 + 0.9 - 0.8) * a / 5)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([0.0, -0.9 * a / 5, 0.0, 0.0, 0.0])
    assert stats["clip_fraction"] == pytest.approx(2 / 5)
    assert all(isinstance(v, float) for v in stats.values())


def test_grpo_kl_term_is_the_mean_k3():
    inputs, logp = _grpo_batch()
    plain, _ = grpo_objective(inputs, _config())
    with_kl, stats = grpo_objective(inputs, _config(grpo_kl=0.1))
    k3 = kl_k3(logp.detach(), inputs.token_logp_ref).mean().item()
    assert stats["kl_k3"] == pytest.approx(k3) and k3 > 0
    assert with_kl.item() == pytest.approx(plain.item() + 0.1 * k3)


def test_filter_by_variance_keeps_the_goals_whose_rewards_vary_most():
    # goals 7: [0, 0] (always fails), 3: [0, 1] (std .71), 5: [0.4, 0.6] (std .14), 1: [1, 1] (always solves)
    group = torch.tensor([7, 3, 5, 1, 3, 7, 5, 1])
    rewards = torch.tensor([0.0, 0.0, 0.4, 1.0, 1.0, 0.0, 0.6, 1.0])
    assert filter_by_variance(rewards, group).tolist() == [False, True, False, False, True, False, False, False]
    assert filter_by_variance(rewards, group, 0.5).tolist() == [False, True, True, False, True, False, True, False]
    assert filter_by_variance(rewards, group, 1.0).all()
    # two goals of one rollout each (std 0): int(0.25 * 2) = 0, yet one is kept; the tie goes to the smaller id
    assert filter_by_variance(rewards[:2], group[:2]).tolist() == [False, True]
    with pytest.raises(ValueError, match="keep"):
        filter_by_variance(rewards, group, 0.0)


def test_starpo_s_is_grpo_on_the_kept_goals():
    old = torch.tensor([-1.0, -1.2, -0.7, -2.0, -1.5, -1.0])
    logp = (old + torch.tensor([0.1, -0.1, 0.05, 0.2, -0.1, 0.0])).requires_grad_()  # ratios in [0.8, 1.2]
    token_row, rewards, group = [0, 1, 2, 3, 3, 2], [1.0, 0.0, 0.3, 0.3], [0, 0, 1, 1]
    loss, stats = starpo_s_objective(_batch(logp, token_row, rewards, old=old, group=group), _config(grpo_kl=0.1))
    loss.backward()
    assert stats["kept_fraction"] == 0.5
    assert logp.grad[2:].eq(0).all() and logp.grad[:2].ne(0).all()  # goal 1's tokens: exactly no gradient
    kept = logp.detach()[:2].requires_grad_()
    expected, _ = grpo_objective(_batch(kept, [0, 1], rewards[:2], old=old[:2], group=group[:2]), _config(grpo_kl=0.1))
    expected.backward()
    assert loss.item() == pytest.approx(expected.item())
    assert logp.grad[:2].tolist() == pytest.approx(kept.grad.tolist())


# ---------------------------------------------------------------------------------------------- PPO (StarPO)

def test_ppo_hand_computed():
    # trajectory 0: turns 0, 1 (rewards 0, 1); trajectory 1: turn 2 (reward 0). Returns 1, 1, 0.
    values = torch.tensor([0.5, 0.2, 0.3], requires_grad=True)
    logp = torch.tensor([-1.0, -0.5, -2.0, -1.0], requires_grad=True)
    inputs = _batch(logp, [0, 0, 0, 1], [1.0, 0.0], values=values, turn_row=torch.tensor([0, 0, 1]),
                    turn_rewards=torch.tensor([0.0, 1.0, 0.0]), token_turn=torch.tensor([0, 0, 1, 2]))
    loss, stats = ppo_objective(inputs, CONFIG)
    # A = returns - values = 0.5, 0.8, -0.3 -> per token 0.5, 0.5, 0.8, -0.3; ratios 1
    value_loss = (0.5 ** 2 + 0.8 ** 2 + 0.3 ** 2) / 3
    assert stats["policy_loss"] == pytest.approx(-1.5 / 4) and stats["value_loss"] == pytest.approx(value_loss)
    assert loss.item() == pytest.approx(-1.5 / 4 + 0.5 * value_loss)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-0.125, -0.125, -0.2, 0.075])
    assert values.grad.tolist() == pytest.approx([-0.5 / 3, -0.8 / 3, 0.3 / 3])  # value_coef * 2 (V - G) / T


def test_ppo_without_a_critic_says_what_is_missing():
    inputs, _ = _grpo_batch()
    with pytest.raises(ValueError, match="values, turn_row, turn_rewards, token_turn"):
        ppo_objective(inputs, CONFIG)


def test_value_head_positions_and_values():
    positions, token_turn = turn_positions([0, 0, 1, 1, 0, 0, 0, 1, 0])
    assert positions == [1, 6] and token_turn == [0, 0, 1]
    with pytest.raises(ValueError, match="position 0"):
        turn_positions([1, 0])
    head = ValueHead(4)
    hidden = torch.randn(2, 9, 4)
    values = head(hidden, torch.tensor([0, 0, 1]), torch.tensor([1, 6, 3]))
    assert values.shape == (3,) and values.eq(0).all()  # starts at V = 0
    values.sum().backward()
    assert torch.allclose(head.linear.weight.grad[0], hidden[0, 1] + hidden[0, 6] + hidden[1, 3])


# ---------------------------------------------------------------------------------------------- simpler variants

def _variant_batch(reward):
    """Trajectory 0: two tokens at log-prob -1 (pi_ref: -1.25); trajectory 1: one token at -3 (pi_ref: -3)."""
    logp = torch.tensor([-1.0, -1.0, -3.0], requires_grad=True)
    return _batch(logp, [0, 0, 1], reward, ref=torch.tensor([-1.25, -1.25, -3.0]), vstar=[0.5, 0.5]), logp


K3 = math.exp(-0.25) + 0.25 - 1            # k3 of each of trajectory 0's tokens (trajectory 1's is 0)
K3_GRAD = 1 - math.exp(-0.25)              # its derivative in the token's log-prob


def test_kl_pg_hand_computed():
    inputs, logp = _variant_batch([1.0, 0.0])
    loss, stats = kl_pg_objective(inputs, CONFIG)
    # A = r + 0.1 (log pi_ref - log pi) - V* = 1 + 0.1 * (-0.5) - 0.5 = 0.45 and 0 + 0 - 0.5 = -0.5
    assert stats["advantage"] == pytest.approx((0.45 - 0.5) / 2)
    assert loss.item() == pytest.approx(-(-1 * 0.45 + -3 * -0.5) / 2 + 0.05 * K3 / 2)
    loss.backward()  # A is detached: only log pi / tokens and the KL carry gradient
    row0 = -0.45 / 2 / 2 + 0.05 * K3_GRAD / 2 / 2
    assert logp.grad.tolist() == pytest.approx([row0, row0, 0.5 / 2])


def test_kl_pg_clamps_the_advantage():
    inputs, _ = _variant_batch([3.0, -3.0])
    loss, stats = kl_pg_objective(inputs, CONFIG)
    assert stats["advantage"] == pytest.approx(0.0)  # clamped to +1 and -1
    assert loss.item() == pytest.approx(-(-1 * 1 + -3 * -1) / 2 + 0.05 * K3 / 2)
    loss, _ = kl_pg_objective(inputs, _config(kl_pg_clamp=10.0))
    assert loss.item() == pytest.approx(-(-1 * 2.45 + -3 * -3.5) / 2 + 0.05 * K3 / 2)


def test_weighted_sft_hand_computed():
    inputs, logp = _variant_batch([1.0, 0.0])
    a = 0.5 / (math.sqrt(0.5) + 1e-6)       # r - V* = +-0.5 normalised over the batch
    loss, stats = weighted_sft_objective(inputs, CONFIG)
    assert stats["weight_max"] == pytest.approx(1 + a)
    assert loss.item() == pytest.approx(-((1 + a) * -1 + (1 - a) * -3) / 2 + 0.05 * K3 / 2)
    loss.backward()
    row0 = -(1 + a) / 2 / 2 + 0.05 * K3_GRAD / 2 / 2
    assert logp.grad.tolist() == pytest.approx([row0, row0, -(1 - a) / 2])


def test_advantage_weights_are_clamped():
    high = advantage_weights(torch.tensor([0.0] * 30 + [1.0]))
    low = advantage_weights(torch.tensor([1.0] * 30 + [0.0]))
    assert high.max().item() == pytest.approx(5.0) and low.min().item() == pytest.approx(0.1)
    assert advantage_weights(torch.tensor([0.7])).tolist() == [1.0]  # a batch of one: no normalisation, weight 1


# ---------------------------------------------------------------------------------------------- every objective learns

ACTIONS = torch.tensor([0, 1, 2, 0, 1, 2, 1, 2])
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])          # goals 0 and 1 have rewards that vary, goal 2 does not
REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]      # action 0 is the rewarded one


def _toy_inputs(logits, value):
    """One-step trajectories: one token each, the action drawn from softmax(logits); pi_ref is uniform."""
    token = torch.log_softmax(logits, -1)[ACTIONS]
    rows = torch.arange(len(ACTIONS))
    return _batch(token, rows, REWARDS, ref=torch.full((len(ACTIONS),), -math.log(3)), group=GROUPS,
                  vstar=[0.4] * len(ACTIONS), values=value.expand(len(ACTIONS)), turn_row=rows,
                  turn_rewards=torch.tensor(REWARDS), token_turn=rows,
                  # apo_split: no trajectory split (one-step episodes), so it is A*PO here
                  token_after_split=torch.zeros(len(ACTIONS), dtype=torch.bool), split_value=torch.zeros(len(ACTIONS)),
                  reward_before_split=torch.tensor(REWARDS))


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_moves_the_policy_toward_the_rewarded_action(name):
    logits, value = torch.zeros(3, requires_grad=True), torch.zeros(1, requires_grad=True)  # value: ppo's critic
    optimizer = torch.optim.SGD([logits, value], lr=1.0)
    for _ in range(20):
        loss, stats = OBJECTIVES[name](_toy_inputs(logits, value), CONFIG)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    probs = torch.softmax(logits.detach(), -1)
    assert probs[0] > 0.55 and probs[0] > probs[1] and probs[0] > probs[2], probs  # from 1/3
    assert torch.isfinite(loss) and all(isinstance(v, float) and math.isfinite(v) for v in stats.values())
