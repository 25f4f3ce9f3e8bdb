"""Assistant masks for any chat template: the tiny tokenizer, and a second, byte-level BPE with a ChatML template."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from apo_helpers.config import get_profile
from apo_helpers.policy.models import SPECIAL_TOKENS, train_tiny_tokenizer
from apo_helpers.policy.prompts import SYSTEM_PROMPT, ChatTemplateError, encode_chat, episode_chats, format_response

PROFILE = get_profile("ci")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHATML_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def demos():
    from apo_helpers.apo.sft import expert_demonstrations

    return expert_demonstrations(PROFILE, 6)


@pytest.fixture(scope="module")
def corpus(demos) -> list[str]:
    from apo_helpers.apo.sft import tokenizer_corpus
    from apo_helpers.webshop.catalog import default_catalog

    texts = tokenizer_corpus(default_catalog(), demos, PROFILE.policy.window)
    return texts[:300] + texts[-100:]      # some products, and the demonstration chats at the end


def byte_level_tokenizer(corpus, vocab_size: int = 700) -> PreTrainedTokenizerFast:
    """A GPT-2 style byte-level BPE with a ChatML template: nothing like the tiny tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=CHATML_SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    fast.padding_side = "left"
    return fast


@pytest.fixture(scope="module")
def tokenizers_(corpus):
    return {"tiny": train_tiny_tokenizer(corpus, PROFILE.model.vocab_size), "bytelevel": byte_level_tokenizer(corpus)}


def _chats(demos) -> list[list[dict]]:
    by_hand = [{"role": "system", "content": SYSTEM_PROMPT},
               {"role": "user", "content": "Turn 1:\nState:\ni need a yoga mat\nAvailable actions: search[<query>]"},
               {"role": "assistant", "content": format_response("search for the key words", "search[yoga mat]")},
               {"role": "user", "content": "Turn 2:\nState:\nresults\nAvailable actions: click[item 1], click[next >]"},
               {"role": "assistant", "content": format_response("item 1 matches the instruction best", "click[item 1]")}]
    chats = [by_hand, by_hand[:3]]
    chats += episode_chats(demos[0].turns, None)          # one chat with every turn
    chats += episode_chats(demos[1].turns, 1)             # one chat per turn
    return chats


def _squash(text: str, lower: bool) -> str:
    text = "".join(text.split())
    return text.lower() if lower else text


def _runs(mask: list[int]) -> int:
    return sum(1 for k, m in enumerate(mask) if m and (k == 0 or not mask[k - 1]))


@pytest.mark.parametrize("name", ["tiny", "bytelevel"])
def test_mask_is_exactly_the_assistant_contents(tokenizers_, demos, name):
    tokenizer = tokenizers_[name]
    lower = name == "tiny"                                  # the tiny tokenizer lowercases
    role_tokens = SPECIAL_TOKENS if name == "tiny" else CHATML_SPECIAL
    role_ids = set(tokenizer.convert_tokens_to_ids(role_tokens))
    for chat in _chats(demos):
        ids, mask = encode_chat(tokenizer, chat)
        assert len(ids) == len(mask)
        assert set(mask) <= {0, 1}
        assert ids == tokenizer(tokenizer.apply_chat_template(chat, tokenize=False), add_special_tokens=False).input_ids
        masked = [i for i, m in zip(ids, mask) if m]
        unmasked = [i for i, m in zip(ids, mask) if not m]
        contents = [m["content"] for m in chat if m["role"] == "assistant"]
        # exactly the assistant contents, one contiguous run per assistant message
        assert _squash(tokenizer.decode(masked), lower) == _squash("".join(contents), lower)
        assert _runs(mask) == len(contents)
        # never a role / end token, never system or user text
        assert not role_ids & set(masked)
        others = [m["content"] for m in chat if m["role"] != "assistant"]
        rest = _squash(tokenizer.decode(unmasked), lower)
        for text in others:
            assert _squash(text, lower) in rest
        assert _squash("".join(contents), lower) not in rest
        assert len(_squash(tokenizer.decode(unmasked), lower)) + len(_squash(tokenizer.decode(masked), lower)) == \
            len(_squash(tokenizer.decode(ids), lower))
        # the masked run starts right after the assistant header and stops before the end-of-turn token
        header = "<|assistant|>" if name == "tiny" else "assistant"
        for k, m in enumerate(mask):
            if m and not mask[k - 1]:
                assert tokenizer.decode(ids[:k]).rstrip().endswith(header)
            if m and k + 1 < len(mask) and not mask[k + 1]:
                assert ids[k + 1] == tokenizer.convert_tokens_to_ids("<|end|>" if name == "tiny" else "<|im_end|>")


def test_the_two_tokenizers_differ(tokenizers_):
    tiny, byte = tokenizers_["tiny"], tokenizers_["bytelevel"]
    text = "<think> a </think> <answer> click[item 1] </answer>"
    assert tiny.tokenize(text) != byte.tokenize(text)
    assert "</answer>" not in byte.get_vocab()               # the stop text is several tokens here
    assert byte.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                    add_generation_prompt=True) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_empty_assistant_content_has_empty_mask(tokenizers_):
    chat = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": ""}]
    for tokenizer in tokenizers_.values():
        ids, mask = encode_chat(tokenizer, chat)
        assert len(ids) == len(mask) and sum(mask) == 0


def test_template_that_alters_assistant_content(tokenizers_):
    tokenizer = tokenizers_["tiny"]
    upper = ("{% for m in messages %}<|{{ m['role'] }}|>{% if m['role'] == 'assistant' %}{{ m['content'] | upper }}"
             "{% else %}{{ m['content'] }}{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>"
             "{% endif %}")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think> a </think> <answer> b </answer>"}]
    original = tokenizer.chat_template
    try:
        tokenizer.chat_template = upper
        with pytest.raises(ChatTemplateError, match="verbatim"):
            encode_chat(tokenizer, chat)
        # a template that does not render a chat as a growing prefix (it counts the messages first)
        tokenizer.chat_template = "{{ messages | length }}" + original
        with pytest.raises(ChatTemplateError, match="prefix"):
            encode_chat(tokenizer, chat)
    finally:
        tokenizer.chat_template = original
    assert sum(encode_chat(tokenizer, chat)[1]) > 0
    assert issubclass(ChatTemplateError, ValueError)
