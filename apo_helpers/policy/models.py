"""The model registry: a tiny Llama trained here, or any Hugging Face causal LM (notebook 02).

- ``tiny``: a small ``LlamaForCausalLM`` built from a config, with a BPE tokenizer trained by ``tokenizers`` on the
  shop's text (catalog, instructions, demonstrations) and wrapped as a ``PreTrainedTokenizerFast`` with a chat
  template. Its pre-tokenizer isolates brackets and punctuation and splits digits, and its normalizer puts a space
  after ``[``, so ``search[`` never swallows the first query word and a query is copied token for token from the
  instruction (the prototype's lesson: token boundaries decide whether a tiny model can copy).
- ``hf:<path-or-id>``: ``AutoModelForCausalLM`` and ``AutoTokenizer`` from a local folder (nothing is downloaded).

Both save and load with ``save_pretrained`` / ``from_pretrained`` (safetensors, never pickle).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ..config import ModelConfig

hf_logging.disable_progress_bar()  # no "Loading weights" bars in notebooks; our own loops have tqdm bars

SPECIAL_TOKENS = ["<unk>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TAG_TOKENS = ["<think>", "</think>", "<answer>", "</answer>", "[sep]"]
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
STOP_TEXT = "</answer>"


def train_tiny_tokenizer(texts, vocab_size: int = 2048) -> PreTrainedTokenizerFast:
    """A lowercase BPE tokenizer for the shop's language, with the chat template and tag tokens."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    # "[" gets a space after it, so the first word of a query is the same token as that word in the instruction
    tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace("[", "[ ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never"),
        pre_tokenizers.Split(Regex(r"[\[\]<>/:;,.$()|\-]"), behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
    ])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    alphabet = [chr(c) for c in range(32, 127)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    # a tag absorbs the space before it ("a [SEP] b" -> a, [sep], ▁b); the word after it keeps its "▁" start
    tok.add_tokens([AddedToken(t, lstrip=True, rstrip=False, normalized=True) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|end|>",
                                   additional_special_tokens=SPECIAL_TOKENS[2:5])
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.padding_side = "left"
    fast.truncation_side = "left"
    return fast


def build_tiny_model(tokenizer, config: ModelConfig) -> LlamaForCausalLM:
    """A freshly initialised small Llama sized by ``config`` (seed first: ``seed_everything``)."""
    llama = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_positions, tie_word_embeddings=True, rms_norm_eps=1e-5,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    model = LlamaForCausalLM(llama)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)
    model.generation_config.bos_token_id = None
    return model


def stop_token_ids(tokenizer) -> list[int]:
    """End-of-turn token, plus ``</answer>`` when it is one token (generation also stops on the text itself)."""
    ids = [tokenizer.eos_token_id]
    answer = tokenizer.convert_tokens_to_ids(STOP_TEXT)
    if isinstance(answer, int) and answer != tokenizer.unk_token_id:
        ids.append(answer)
    return ids


def create_policy(name: str, config: ModelConfig, corpus=None):
    """``(model, tokenizer)`` by registry name: ``tiny`` (needs ``corpus``, an iterable of texts) or ``hf:<path>``."""
    if name == "tiny":
        if corpus is None:
            raise ValueError("the tiny model trains its tokenizer on a corpus: pass corpus=[texts...]")
        tokenizer = train_tiny_tokenizer(corpus, config.vocab_size)
        return build_tiny_model(tokenizer, config), tokenizer
    if name.startswith("hf:"):
        return load_policy(name[3:])
    raise ValueError(f"unknown model {name!r}: use 'tiny' or 'hf:<path-or-id>'")


def load_policy(directory, device: str | None = None, dtype: torch.dtype | None = None):
    """``(model, tokenizer)`` saved by ``save_policy`` or any Hugging Face model folder; offline only."""
    directory = str(directory)
    if not Path(directory).exists():
        raise FileNotFoundError(f"no model folder at {directory!r} (nothing is downloaded at run time)")
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, use_safetensors=True,
                                                 dtype=dtype or torch.float32)
    if device:
        model.to(device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def save_policy(model, tokenizer, directory) -> Path:
    """Save weights (safetensors) and tokenizer; a crash mid-save leaves any earlier copy intact."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        old = directory.with_name(f".{directory.name}.old")
        if directory.exists():
            shutil.rmtree(old, ignore_errors=True)
            directory.rename(old)
        tmp.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
