"""The model registry: the tiny BPE tokenizer (tags, brackets, round trips), the tiny Llama, saving and loading."""

from __future__ import annotations

import pytest
import torch

from apo_helpers.config import get_profile, seed_everything
from apo_helpers.policy.models import (STOP_TEXT, TAG_TOKENS, build_tiny_model, create_policy, load_policy,
                                       save_policy, stop_token_ids, train_tiny_tokenizer)
from apo_helpers.policy.prompts import format_response, parse_response
from apo_helpers.webshop.agents import search_keywords
from apo_helpers.webshop.catalog import default_catalog

PROFILE = get_profile("ci")
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    """A few hundred strings of the shop's language: titles, instructions and formatted replies."""
    catalog = default_catalog()
    goals = catalog.split("train")[:150]
    texts = [p.title for p in catalog.products[:200]]
    texts += [g.instruction for g in goals]
    texts += [format_response("search for the key words of the instruction", f"search[{search_keywords(g.instruction)}]")
              for g in goals[:60]]
    texts += [format_response(f"item {k} matches the instruction best", f"click[item {k}]") for k in range(1, 6)]
    texts += [format_response("options set and price ok, buy it", "click[buy now]"),
              format_response("small is not offered, go back", "click[< prev]")]
    return texts


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tiny_tokenizer(corpus, PROFILE.model.vocab_size)


@pytest.fixture(scope="module")
def model(tokenizer):
    seed_everything(0)
    return build_tiny_model(tokenizer, PROFILE.model).eval()


def _tokens(tokenizer, text: str) -> list[str]:
    return tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))


def test_corpus_is_small(corpus):
    assert 200 <= len(corpus) <= 600


def test_tags_are_single_tokens(tokenizer):
    for tag in TAGS:
        ids = tokenizer.encode(tag, add_special_tokens=False)
        assert len(ids) == 1, (tag, _tokens(tokenizer, tag))
        assert ids[0] != tokenizer.unk_token_id
        assert tokenizer.convert_tokens_to_ids(tag) == ids[0]
    # also inside a reply, with or without the spaces around them
    for reply in ("<think> item 2 fits </think> <answer> click[item 2] </answer>",
                  "<think>item 2 fits</think><answer>click[item 2]</answer>"):
        tokens = _tokens(tokenizer, reply)
        assert [t for t in tokens if t in TAGS] == TAGS
        assert tokens[0] == "<think>" and tokens[-1] == "</answer>"
    assert set(TAG_TOKENS) >= set(TAGS)


def _words(tokens: list[str]) -> list[list[str]]:
    """Tokens grouped into words (a word starts at a token with the word-start marker)."""
    words: list[list[str]] = []
    for t in tokens:
        if t.startswith("▁") or not words:
            words.append([])
        words[-1].append(t)
    return words


@pytest.mark.parametrize("query,instruction", [
    ("yoga mat", "i need a yoga mat"),
    ("office chair lumbar support", "i want an office chair lumbar support"),
])
def test_search_bracket_is_its_own_token(tokenizer, query, instruction):
    tokens = _tokens(tokenizer, f"search[{query}]")
    assert tokens.count("[") == 1 and tokens[-1] == "]"
    assert not any(("[" in t or "]" in t) and len(t) > 1 for t in tokens)
    bracket = tokens.index("[")
    assert tokenizer.convert_tokens_to_string(tokens[:bracket]) == "search"
    inside = tokens[bracket + 1: -1]
    # the normalizer puts a space after "[", so the query decodes with it and "[" never swallows the first word
    assert tokenizer.convert_tokens_to_string(inside) == " " + query
    # every query word, the first included, tokenizes exactly as in the instruction
    asked = _words(_tokens(tokenizer, instruction))
    words = _words(inside)
    assert len(words) == len(query.split())
    assert words == asked[len(asked) - len(words):]


@pytest.mark.parametrize("text", [
    "i need a yoga mat, for less than 30.00 dollars",
    "search[office chair lumbar support high back]",
    "click[< prev]",
])
def test_lowercase_text_round_trips(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == text  # the decoder undoes the normalizer's space after "["
    assert tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False) == ids  # and so trains on the same ids


def test_uppercase_is_normalised(tokenizer):
    assert tokenizer.decode(tokenizer.encode("Yoga MAT", add_special_tokens=False)) == "yoga mat"


def test_reply_round_trips_through_parse(tokenizer):
    reply = "<think> item 2 fits </think> <answer> click[item 2] </answer>"
    decoded = tokenizer.decode(tokenizer.encode(reply, add_special_tokens=False), skip_special_tokens=True)
    assert parse_response(decoded) == ("item 2 fits", "click[item 2]", True)
    assert "".join(decoded.split()) == "".join(reply.split())


def test_digits_are_split(tokenizer):
    assert _tokens(tokenizer, "30.00") == ["3", "0", ".", "0", "0"]


def test_stop_token_ids(tokenizer):
    stops = stop_token_ids(tokenizer)
    assert tokenizer.eos_token_id in stops
    assert tokenizer.convert_tokens_to_ids(STOP_TEXT) in stops
    assert tokenizer.convert_tokens_to_ids(STOP_TEXT) != tokenizer.unk_token_id


def test_chat_template_and_padding(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|user|>hi<|end|><|assistant|>"
    assert tokenizer.padding_side == "left" and tokenizer.truncation_side == "left"
    assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id


def test_tiny_model_vocabulary(tokenizer, model):
    assert model.config.vocab_size == len(tokenizer)
    assert model.get_input_embeddings().weight.shape == (len(tokenizer), PROFILE.model.hidden_size)
    assert model.get_output_embeddings().weight.shape[0] == len(tokenizer)
    assert model.config.num_hidden_layers == PROFILE.model.num_layers
    assert sorted(model.generation_config.eos_token_id) == sorted(stop_token_ids(tokenizer))
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    # every token of the tokenizer has a row, including the tags added after training
    assert max(tokenizer.convert_tokens_to_ids(TAGS)) < model.config.vocab_size


def test_build_is_seeded(tokenizer, model):
    seed_everything(0)
    again = build_tiny_model(tokenizer, PROFILE.model)
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)


def test_numerics_names_what_decides_the_numbers(monkeypatch):
    """A run records the versions and CPU kernels its numbers depend on (README, Development)."""
    import tokenizers
    import transformers

    from apo_helpers.config import numerics

    monkeypatch.setenv("MKL_CBWR", "AVX2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "SSE4_2")
    info = numerics()
    assert (info["torch"], info["transformers"], info["tokenizers"]) == (
        torch.__version__, transformers.__version__, tokenizers.__version__)
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and info["mkl_cbwr"] == "AVX2"
    assert info["mkl_instructions"] == "SSE4_2"
    assert info["torch_threads"] == torch.get_num_threads() and info["device"] in ("cpu", "cuda")
    assert isinstance(info["processor"], str) and info["machine"]


def _batch(tokenizer):
    texts = ["<think> item 2 fits </think> <answer> click[item 2] </answer>", "i need a yoga mat"]
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def test_save_load_round_trip(tmp_path, tokenizer, model):
    folder = save_policy(model, tokenizer, tmp_path / "policy")
    assert folder == tmp_path / "policy"
    names = {p.name for p in folder.iterdir()}
    assert "model.safetensors" in names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".pickle"))], names
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]          # no temporary folder left behind

    loaded, tok = load_policy(folder)
    assert tok.padding_side == "left" and tok.truncation_side == "left"
    assert tok.chat_template == tokenizer.chat_template
    for text in ("search[yoga mat]", "<think> a </think> <answer> click[item 1] </answer>"):
        assert tok.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
    batch = _batch(tokenizer)
    with torch.no_grad():
        expected = model(**batch).logits
        got = loaded.eval()(**_batch(tok)).logits
    assert torch.equal(expected, got)

    # saving again over the folder replaces it
    save_policy(model, tokenizer, folder)
    assert {p.name for p in tmp_path.iterdir()} == {"policy"}
    # the hf: registry name loads the same folder
    via_registry, _ = create_policy(f"hf:{folder}", PROFILE.model)
    with torch.no_grad():
        assert torch.equal(via_registry.eval()(**batch).logits, expected)


def test_a_saved_policy_records_its_rendering(tmp_path, tokenizer, model):
    import dataclasses

    from apo_helpers.policy.models import RENDERING_FILE, rendering_files, with_rendering

    marked = dataclasses.replace(PROFILE.policy, show_selected_options=True)
    folder = save_policy(model, tokenizer, tmp_path / "policy", extra_files=rendering_files(marked))
    assert with_rendering(PROFILE, folder).policy == marked
    assert with_rendering(PROFILE, folder).policy_env().show_selected_options
    assert with_rendering(PROFILE, tmp_path) is PROFILE  # no record: the profile as it is
    for text, message in [("{not json", "not valid JSON"), ('{"batch_size": 3}', "fields from"),
                          ('["show_selected_options"]', "fields from"), ('{"show_selected_options": 1}', "should be a bool")]:
        (folder / RENDERING_FILE).write_text(text)
        with pytest.raises(ValueError, match=message):
            with_rendering(PROFILE, folder)


def test_load_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_policy(tmp_path / "nothing here")


def test_create_policy_errors(corpus):
    with pytest.raises(ValueError, match="unknown model"):
        create_policy("nope", PROFILE.model)
    with pytest.raises(ValueError, match="corpus"):
        create_policy("tiny", PROFILE.model)


def test_create_policy_tiny(corpus):
    seed_everything(0)
    model, tokenizer = create_policy("tiny", PROFILE.model, corpus=corpus)
    assert model.config.vocab_size == len(tokenizer)
    assert len(tokenizer) <= PROFILE.model.vocab_size + len(TAG_TOKENS)
