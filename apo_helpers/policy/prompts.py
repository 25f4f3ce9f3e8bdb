"""RAGEN's conversation format: what the model reads each turn and how its answer is parsed (notebook 02).

One episode is one chat. The system message states the task and the action grammar; every turn adds a user
message (``Turn k:``, ``State:``, the observation, the available actions, ``You have N actions left. Always output:
<think> ... </think> <answer> ... </answer>``) and the model's reply as an assistant message.

The context can be the whole history (RAGEN's default, ``window=None``) or the last ``window`` turns, with older
turns reduced to the list of their actions; the profiles say which they use (``PolicyConfig.window``).

``encode_chat`` turns a chat into token ids plus the *assistant mask* (1 on tokens of assistant message contents,
0 elsewhere) for any tokenizer with a chat template, by locating each assistant message in the rendered text and
mapping characters to tokens with the tokenizer's offsets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SYSTEM_PROMPT = (
    "Find and buy the product the instruction describes. Actions: search[query] on the search page, "
    "click[button] for a button on the page. Reply <think> a short reason </think> <answer> one action </answer>."
)
FORMAT_REMINDER = "Always output: <think> ... </think> <answer> ... </answer>"
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_BRACKET_SPACE = re.compile(r"\[\s+")  # "click[ item 2]" (how the tiny tokenizer writes it) -> "click[item 2]"
_RESPONSE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.S)


@dataclass
class Turn:
    """What one turn showed the agent and what it answered."""

    observation: str
    actions: list[str]
    """Available actions as listed in the prompt."""
    turns_left: int
    response: str = ""
    """The raw text the model produced."""
    think: str = ""
    action: str = ""
    """The action sent to the environment: the parsed answer, or "" (an invalid action) when the reply did not parse."""
    format_ok: bool = False
    valid: bool = False
    """Whether the environment accepted the action."""
    reward: float = 0.0
    """Environment reward of the turn plus the format penalty when the response did not parse, minus
    ``Sampling.repeat_penalty`` when the turn repeated the previous action on an unchanged page."""
    greedy: bool = False
    """Whether the reply was the most likely one rather than a sample (greedy decoding, or a page of
    ``Sampling.greedy_pages``): the algorithms train only on the sampled turns."""
    explored: bool = False
    """Whether the reply was written for a click drawn at random (``Sampling.explore``) instead of generated."""
    repeated: bool = False
    """Whether the turn typed the previous turn's action again and left its page as it was (``repeats_previous``):
    a loop's turn, which ``APOConfig.credit_repeats=False`` leaves out of a winning trajectory's log-ratio."""


def parse_response(text: str) -> tuple[str, str, bool]:
    """``(think, action, ok)`` from ``<think>...</think> <answer>...</answer>``; ok is False for anything else.

    Whitespace just after ``[`` is dropped from the action: the tiny tokenizer writes ``search[ query]``."""
    match = _RESPONSE.fullmatch(text or "")
    if match is None:
        return "", "", False
    think, action = match.group(1).strip(), _BRACKET_SPACE.sub("[", match.group(2).strip())
    if any(tag in think or tag in action for tag in _TAGS):  # nested or repeated tags: not one think + one answer
        return "", "", False
    return think, action, bool(action)


def format_response(think: str, action: str) -> str:
    """The reply a well-formed agent writes."""
    return f"<think> {think} </think> <answer> {action} </answer>"


def prompt_actions(available: list[str]) -> list[str]:
    """The available actions as listed to the model: products by position when positions are shown."""
    if any(a.startswith("click[item ") for a in available):
        return [a for a in available if not re.fullmatch(r"click\[b0[a-z0-9]{8}\]", a)]
    return list(available)


def user_message(turn_number: int, observation: str, actions: list[str], turns_left: int,
                 earlier_actions: list[str] | None = None) -> str:
    earlier = f"Earlier actions: {', '.join(earlier_actions)}\n" if earlier_actions else ""
    return (f"{earlier}Turn {turn_number}:\nState:\n{observation}\nAvailable actions: {', '.join(actions)}\n"
            f"You have {turns_left} actions left. {FORMAT_REMINDER}")


def build_messages(turns: list[Turn], window: int | None, include_last_response: bool = False) -> list[dict]:
    """The chat for the last turn of ``turns``: system, then the (windowed) history, ending in its user message
    (or in its assistant reply with ``include_last_response``)."""
    start = 0 if window is None else max(0, len(turns) - window)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    for i in range(start, len(turns)):
        t = turns[i]
        earlier = [u.action or u.response for u in turns[:start]] if i == start else None
        messages.append({"role": "user", "content": user_message(i + 1, t.observation, t.actions, t.turns_left, earlier)})
        if i < len(turns) - 1 or include_last_response:
            messages.append({"role": "assistant", "content": t.response})
    return messages


def episode_chats(turns: list[Turn], window: int | None) -> list[list[dict]]:
    """The chats a finished episode is trained on: the whole episode as one chat (full history), or one chat per
    turn (with a window), each ending in an assistant reply."""
    if window is None:
        return [build_messages(turns, None, include_last_response=True)]
    return [build_messages(turns[: k + 1], window, include_last_response=True) for k in range(len(turns))]


class ChatTemplateError(ValueError):
    """The tokenizer's chat template does not render messages in a way the assistant mask can be found."""


def encode_chat(tokenizer, messages: list[dict], part: str = "all") -> tuple[list[int], list[int]]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template, and the assistant mask.

    Works for any fast tokenizer whose template renders a chat as a growing prefix: the characters of each assistant
    message's content are located in the rendered text and every token lying inside them gets mask 1. With
    ``part="answer"`` only the tokens from ``<answer>`` to the end of each reply get 1 (the action, not the think).
    """
    if part not in ("all", "answer"):
        raise ValueError(f"part must be 'all' or 'answer', got {part!r}")
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        head = tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True)
        upto = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
        if not text.startswith(upto) or not upto.startswith(head):
            raise ChatTemplateError(f"the chat template does not render message {i} as a prefix of the chat")
        at = upto.find(message["content"], len(head))
        if at < 0:
            raise ChatTemplateError(f"assistant message {i} is not rendered verbatim by the chat template")
        end = at + len(message["content"])
        if part == "answer":
            answer = message["content"].rfind("<answer>")
            # from the space before the tag: tokenizers fold it into the tag's first token (" <answer>", "Ġ<")
            at = at + len(message["content"][:answer].rstrip()) if answer >= 0 else end  # no answer: no token
        spans.append((at, end))
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(lo <= a and b <= hi for lo, hi in spans) and b > a) for a, b in encoded["offset_mapping"]]
    return list(encoded["input_ids"]), mask
