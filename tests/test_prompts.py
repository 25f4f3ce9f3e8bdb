"""RAGEN's conversation format: parsing replies, the user message, windowed chats, the actions listed to the model."""

from __future__ import annotations

import pytest

from apo_helpers.policy.prompts import (FORMAT_REMINDER, SYSTEM_PROMPT, Turn, build_messages, episode_chats,
                                        format_response, parse_response, prompt_actions, user_message)


# ---------------------------------------------------------------------------------------------- parse_response

@pytest.mark.parametrize("text,think,action", [
    ("<think> a reason </think> <answer> search[yoga mat] </answer>", "a reason", "search[yoga mat]"),
    ("<think>tight</think><answer>click[item 2]</answer>", "tight", "click[item 2]"),
    ("  \n<think>\n  spaced out \n</think>\n\n  <answer>\n click[buy now]  \n</answer>\n  ", "spaced out", "click[buy now]"),
    ("<think> line one\nline two\n\nline three </think> <answer> click[< prev] </answer>",
     "line one\nline two\n\nline three", "click[< prev]"),
    ("<think></think> <answer> click[next >] </answer>", "", "click[next >]"),
])
def test_parse_good_replies(text, think, action):
    assert parse_response(text) == (think, action, True)


@pytest.mark.parametrize("text", [
    None,
    "",
    "   ",
    "search[yoga mat]",                                                  # no tags at all
    "<answer> search[yoga mat] </answer>",                               # no think
    "<think> a reason </think>",                                         # no answer
    "<think> a reason </think> search[yoga mat]",                        # answer without its tags
    "<think> a reason </think> <answer> search[yoga mat]",               # unclosed answer
    "<think> a reason <answer> search[yoga mat] </answer>",              # unclosed think
    "<think> a reason </think> <answer> </answer>",                      # empty answer
    "<think> a reason </think> <answer>\n \n</answer>",                  # blank answer
    "sure! <think> a reason </think> <answer> search[yoga mat] </answer>",  # text before
    "<think> a reason </think> <answer> search[yoga mat] </answer> done",   # text after
    "<answer> search[yoga mat] </answer> <think> a reason </think>",     # wrong order
    "<think> a <think> b </think> </think> <answer> click[item 1] </answer>",       # nested think
    "<think> a </think> <answer> <answer> click[item 1] </answer> </answer>",       # nested answer
    "<think> a </think> <answer> click[item 1] </answer> <answer> click[item 2] </answer>",  # two answers
    "<think> a </think> <answer> click[item 1] </answer><think> b </think> <answer> click[buy now] </answer>",
    "<THINK> a </THINK> <ANSWER> click[item 1] </ANSWER>",              # tags are case-sensitive
])
def test_parse_bad_replies(text):
    think, action, ok = parse_response(text)
    assert ok is False
    assert action == ""


@pytest.mark.parametrize("think,action", [
    ("search for the key words of the instruction", "search[yoga leggings four way stretch]"),
    ("item 2 matches the instruction best", "click[item 2]"),
    ("small is not offered, go back", "click[< prev]"),
    ("two\nlines", "click[next >]"),
    ("", "click[buy now]"),
])
def test_format_response_round_trips(think, action):
    reply = format_response(think, action)
    assert reply.startswith("<think>") and reply.endswith("</answer>")
    assert parse_response(reply) == (think, action, True)


# ---------------------------------------------------------------------------------------------- messages

def test_user_message_fields():
    observation = "WebShop [SEP] Instruction: [SEP] i need a yoga mat [SEP] Search"
    message = user_message(3, observation, ["search[<query>]"], 7)
    assert message.startswith("Turn 3:\n")
    assert "State:\n" + observation in message
    assert "Available actions: search[<query>]" in message
    assert message.endswith(f"You have 7 actions left. {FORMAT_REMINDER}")
    assert FORMAT_REMINDER == "Always output: <think> ... </think> <answer> ... </answer>"
    assert "You have 7 actions left. Always output: <think> ... </think> <answer> ... </answer>" in message
    assert "Earlier actions" not in message
    # the order of the parts
    parts = ["Turn 3:", "State:", observation, "Available actions:", "You have 7 actions left."]
    positions = [message.index(p) for p in parts]
    assert positions == sorted(positions)


def test_user_message_lists_actions_and_earlier_actions():
    message = user_message(2, "obs", ["click[item 1]", "click[next >]"], 4, earlier_actions=["search[a b]", "click[x]"])
    assert message.startswith("Earlier actions: search[a b], click[x]\nTurn 2:\n")
    assert "Available actions: click[item 1], click[next >]\n" in message


def _turns(n: int) -> list[Turn]:
    return [Turn(observation=f"observation {k}", actions=[f"click[option {k}]"], turns_left=10 - k,
                 response=format_response(f"reason {k}", f"click[a{k}]"), think=f"reason {k}", action=f"click[a{k}]",
                 format_ok=True) for k in range(1, n + 1)]


def test_build_messages_full_history():
    turns = _turns(3)
    messages = build_messages(turns, None)
    assert messages[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    for k, turn in enumerate(turns):
        user = messages[1 + 2 * k]["content"]
        assert user == user_message(k + 1, turn.observation, turn.actions, turn.turns_left)
        assert user.startswith(f"Turn {k + 1}:")
        if k < 2:
            assert messages[2 + 2 * k] == {"role": "assistant", "content": turn.response}
    assert "Earlier actions" not in "".join(m["content"] for m in messages)

    full = build_messages(turns, None, include_last_response=True)
    assert full[:-1] == messages
    assert full[-1] == {"role": "assistant", "content": turns[-1].response}


def test_build_messages_window_one():
    turns = _turns(3)
    messages = build_messages(turns, 1)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert user.startswith("Earlier actions: click[a1], click[a2]\nTurn 3:\n")
    assert "observation 3" in user
    assert "observation 1" not in user and "observation 2" not in user
    assert "reason" not in user                     # older replies are reduced to their actions

    with_reply = build_messages(turns, 1, include_last_response=True)
    assert with_reply[:-1] == messages
    assert with_reply[-1] == {"role": "assistant", "content": turns[-1].response}

    # the first turn has no earlier actions; a window of 2 keeps two turns
    assert not build_messages(turns[:1], 1)[1]["content"].startswith("Earlier")
    two = build_messages(turns, 2)
    assert [m["role"] for m in two] == ["system", "user", "assistant", "user"]
    assert two[1]["content"].startswith("Earlier actions: click[a1]\nTurn 2:")
    assert two[2]["content"] == turns[1].response
    assert two[3]["content"].startswith("Turn 3:")


def test_episode_chats_full_and_windowed():
    turns = _turns(4)
    (chat,) = episode_chats(turns, None)
    assert chat == build_messages(turns, None, include_last_response=True)
    assert [m["content"] for m in chat if m["role"] == "assistant"] == [t.response for t in turns]

    chats = episode_chats(turns, 1)
    assert len(chats) == len(turns)
    for k, c in enumerate(chats):
        assert c[-1] == {"role": "assistant", "content": turns[k].response}
        assert c == build_messages(turns[: k + 1], 1, include_last_response=True)
        assert sum(m["role"] == "assistant" for m in c) == 1
    assert episode_chats([], 1) == []


# ---------------------------------------------------------------------------------------------- prompt_actions

def test_prompt_actions_drops_asins_only_with_item_aliases():
    asins = ["click[b06d1pq7fe]", "click[b0jalgfu95]"]
    others = ["click[back to search]", "click[next >]", "click[< prev]"]
    items = ["click[item 1]", "click[item 2]"]
    assert prompt_actions(others + asins + items) == others + items
    assert prompt_actions(others + asins) == others + asins          # no aliases: the asins are the only way to click
    assert prompt_actions(["search[<query>]"]) == ["search[<query>]"]
    options = ["click[small]", "click[blue]", "click[buy now]", "click[description]"]
    assert prompt_actions(options) == options
    # a returned list is a copy
    available = others + asins
    assert prompt_actions(available) is not available


def test_prompt_actions_on_a_real_results_page():
    from apo_helpers.config import get_profile
    from apo_helpers.webshop.env import WebShopEnv

    env = WebShopEnv(split="test", config=get_profile("ci").policy_env())
    env.reset(options={"goal_index": 0})
    _, _, _, _, info = env.step("search[office chair]")
    listed = prompt_actions(info["available_actions"])
    assert any(a.startswith("click[item ") for a in listed)
    assert not any(a.startswith("click[b0") for a in listed)
    assert set(listed) <= set(info["available_actions"])
