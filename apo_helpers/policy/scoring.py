"""Log-probabilities of token sequences under a model: the quantity every objective is built from (notebook 02).

Sequences are right-padded into a batch; ``token_logprobs`` gives log p(token_t | tokens_<t) for t >= 1, and the
assistant mask picks the tokens the agent wrote. Summing them over an episode's chats gives log pi(y | x).
"""

from __future__ import annotations

import torch


def collate(sequences: list[list[int]], masks: list[list[int]], pad_id: int, device=None):
    """Right-padded ``(input_ids, attention_mask, loss_mask)`` tensors."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(sequences), width), dtype=torch.long)
    loss = torch.zeros((len(sequences), width), dtype=torch.float32)
    for row, (seq, mask) in enumerate(zip(sequences, masks)):
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
        loss[row, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
    return ids.to(device), attn.to(device), loss.to(device)


def token_logprobs(model, input_ids, attention_mask) -> torch.Tensor:
    """``(B, T-1)`` log-probabilities of tokens 1..T-1 given their prefixes."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def masked_token_stats(model, input_ids, attention_mask, loss_mask):
    """``(sum of masked log-probs per sequence, masked token count per sequence, mean entropy of masked tokens)``."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    mask = loss_mask[:, 1:]
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return (logp * mask).sum(-1), mask.sum(-1), (entropy * mask).sum() / mask.sum().clamp(min=1)


def selected_logprobs(model, input_ids, attention_mask, loss_mask, with_entropy: bool = False):
    """Log-probs of the tokens where ``loss_mask[:, 1:]`` is 1, computing the output layer only there.

    Returns ``(logp, rows, entropy)``: a flat tensor of log-probs, the batch row of each, and (optionally) the
    entropy of the predicted distribution at each. Projecting only the trained positions onto the vocabulary
    saves most of the output layer's cost when, as in imitation, few tokens of a sequence are trained on.
    """
    return selected_logprobs_and_hidden(model, input_ids, attention_mask, loss_mask, with_entropy)[:3]


def _selected_log_softmax(model, input_ids, attention_mask, loss_mask):
    """One forward pass: ``(K, V)`` log-softmax at the K positions where ``loss_mask[:, 1:]`` is 1, their rows and
    columns, and the last hidden states ``(B, T, H)``. Only those positions are projected onto the vocabulary."""
    hidden_all = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    rows, cols = loss_mask[:, 1:].nonzero(as_tuple=True)
    logits = model.get_output_embeddings()(hidden_all[:, :-1][rows, cols]).float()
    return torch.log_softmax(logits, dim=-1), rows, cols, hidden_all


def selected_logprobs_and_hidden(model, input_ids, attention_mask, loss_mask, with_entropy: bool = False):
    """``selected_logprobs`` plus the last hidden states ``(B, T, H)`` of the same forward pass (for a critic)."""
    logp_all, rows, cols, hidden_all = _selected_log_softmax(model, input_ids, attention_mask, loss_mask)
    logp = logp_all.gather(-1, input_ids[rows, cols + 1].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, rows, entropy, hidden_all


def selected_log_distributions(model, input_ids, attention_mask, loss_mask):
    """``(K, V)`` log-softmax over the whole vocabulary at the K positions where ``loss_mask[:, 1:]`` is 1 (the
    distributions the masked tokens were drawn from), and the batch row of each (``APOConfig.greedy_kl``)."""
    logp_all, rows, _, _ = _selected_log_softmax(model, input_ids, attention_mask, loss_mask)
    return logp_all, rows


def sequence_logprob_sums(model, input_ids, attention_mask, loss_mask) -> torch.Tensor:
    """Per sequence, the sum of the log-probs of its masked tokens (differentiable)."""
    logp, rows, _ = selected_logprobs(model, input_ids, attention_mask, loss_mask)
    return torch.zeros(input_ids.shape[0], device=logp.device, dtype=logp.dtype).index_add(0, rows, logp)
