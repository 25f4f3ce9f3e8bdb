"""Log-prob scoring: the output layer restricted to trained positions gives the same numbers as the full one."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from apo_helpers.policy.scoring import collate, masked_token_stats, selected_logprobs, sequence_logprob_sums, token_logprobs


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def _batch():
    sequences = [[1, 5, 7, 9, 11, 3], [2, 4, 6, 8]]
    masks = [[0, 0, 1, 1, 0, 1], [0, 1, 1, 0]]
    return collate(sequences, masks, pad_id=0)


def test_collate_right_pads_and_keeps_masks():
    ids, attn, loss = _batch()
    assert ids.tolist() == [[1, 5, 7, 9, 11, 3], [2, 4, 6, 8, 0, 0]]
    assert attn.tolist() == [[1] * 6, [1, 1, 1, 1, 0, 0]]
    assert loss.tolist() == [[0, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 0]]


def test_selected_logprobs_match_the_full_computation():
    model = _model()
    ids, attn, loss = _batch()
    full = token_logprobs(model, ids, attn)
    expected = (full * loss[:, 1:]).sum(-1)
    logp, rows, entropy = selected_logprobs(model, ids, attn, loss, with_entropy=True)
    assert rows.tolist() == [0, 0, 0, 1, 1]
    torch.testing.assert_close(sequence_logprob_sums(model, ids, attn, loss), expected)
    sums, counts, mean_entropy = masked_token_stats(model, ids, attn, loss)
    torch.testing.assert_close(sums, expected)
    assert counts.tolist() == [3.0, 2.0]
    torch.testing.assert_close(entropy.mean(), mean_entropy)
    assert (logp <= 0).all()


def test_sequence_logprob_sums_are_differentiable():
    model = _model()
    ids, attn, loss = _batch()
    total = sequence_logprob_sums(model, ids, attn, loss).sum()
    total.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
