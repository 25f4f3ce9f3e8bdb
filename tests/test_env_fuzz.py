"""Property test: arbitrary text never makes ``step`` raise, and an invalid action changes nothing, on every page."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings, strategies as st

from apo_helpers.webshop.env import WebShopEnv
from apo_helpers.webshop.text import normalize

from conftest import PAGE_KINDS, open_page

KINDS = ["search", "click", "SEARCH", "Click", "cLiCk", "ſearch", "clıck", "cli\u0130ck", "clic\u212a", "serch", "clik", "",
         "search search", "buy"]
BUTTONS = ["buy now", "Buy Now", "< prev", "next >", "back to search", "description", "features", "reviews",
           "item 1", "black", "small", "x-large", "navy"]
INNER = st.one_of(st.text(max_size=30), st.sampled_from(BUTTONS), st.from_regex(r"[A-Za-z0-9 <>\[\]-]{0,20}", fullmatch=True))
NEAR_MISS = st.builds(
    lambda kind, space, open_, inner, close, tail: kind + space + open_ + inner + close + tail,
    st.sampled_from(KINDS), st.sampled_from(["", " ", "  ", "\t", "\n", "\u00a0"]),
    st.sampled_from(["[", "", "[[", "(", " [", "]"]), INNER, st.sampled_from(["]", "", "]]", ")", "] ", "["]),
    st.sampled_from(["", "x", "]", "\x00", " click[buy now]", "\u200b", "  "]))
QUERIES = st.from_regex(r"[a-z0-9]{1,10}( [a-z0-9]{1,10}){0,4}", fullmatch=True).map(lambda q: f"search[{q}]")
ACTIONS = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=600),
    NEAR_MISS,
    st.from_regex(r"(?i)\s*(search|click)\s*\[[^\]]{0,40}\]?\s*", fullmatch=True),
    st.none(), st.integers(), st.binary(max_size=20),
)


@pytest.fixture(scope="module")
def fuzz_env(small_catalog, option_product):
    """An env plus the state of each page kind, reached once by real actions (each example restores one)."""
    env = WebShopEnv(split="test", catalog=small_catalog)
    states = {}
    for kind in PAGE_KINDS:
        env.reset(options={"goal_index": 0})
        open_page(env, kind, option_product.title, option_product.asin)
        states[kind] = env.state
    return env, states


def _reference(action, kind, available) -> tuple[bool, str | None, str | None]:
    """A reading of the action rules written independently of ``parse_action``: (valid, verb, argument)."""
    if not isinstance(action, str):
        return False, None, None
    text = action.strip()
    if not text or len(text) > 500 or any(unicodedata.category(c)[0] == "C" for c in text):
        return False, None, None
    match = re.fullmatch(r"([A-Za-z]+)\s*\[([^\[\]]*)\]", text)
    if match is None or match.group(1).lower() not in ("search", "click"):
        return False, None, None
    verb, arg = match.group(1).lower(), normalize(match.group(2))
    if not arg:
        return False, verb, arg
    if verb == "search":
        return kind == "search", verb, arg
    return f"click[{arg}]" in available, verb, arg


# kinds that re.IGNORECASE would match but are not ASCII: long s, dotless i, dotted capital I, Kelvin sign
LOOK_ALIKES = {"search": ["\u017fearch", "SEARCH".replace("S", "\u017f", 1)],
               "click": ["cl\u0131ck", "CL\u0130CK", "clic\u212a"]}


@st.composite
def _decorated(draw, action: str) -> str:
    """``action`` (``verb[arg]``) in random letter case with random ASCII or Unicode spacing."""
    verb, arg = action[:-1].split("[", 1)
    pad = st.sampled_from(["", " ", "  ", "\u00a0", "\u3000"])
    gap = st.sampled_from([" ", "  ", "\u00a0"])
    words = [draw(st.sampled_from([w, w.upper(), w.title()])) for w in arg.split(" ")]
    inner = draw(pad) + draw(gap).join(words) + draw(pad)
    spelled = draw(st.sampled_from([verb, verb.upper(), verb.title(), *LOOK_ALIKES[verb]]))
    return draw(pad) + spelled + draw(st.sampled_from(["", " "])) + f"[{inner}]"


@settings(max_examples=200, deadline=None)
@given(action=ACTIONS, data=st.data())
def test_step_never_raises_and_invalid_changes_nothing(fuzz_env, action, data):
    env, states = fuzz_env
    for kind in PAGE_KINDS:
        env.reset(options={"goal_index": 0})
        env.state = states[kind]
        available = env.available_actions
        # half the time, one of the page's own actions in random case and spacing (often valid)
        own = QUERIES.flatmap(_decorated) if kind == "search" else st.sampled_from(available).flatmap(_decorated)
        action_here = data.draw(st.one_of(st.just(action), own))
        _check_step(env, states[kind], kind, available, action_here)


def _check_step(env, state, kind, available, action):
    observation = env.observation
    valid, verb, arg = _reference(action, kind, available)
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["valid"] is valid, (kind, action, info.get("error"))
    assert 0.0 <= reward <= 1.0
    assert not truncated  # one step of ten
    if not valid:
        assert env.state == state
        assert obs == observation
        assert reward == 0.0 and not terminated
        assert isinstance(info["error"], str) and info["error"]
    else:
        assert "error" not in info
        assert terminated == (kind == "item" and arg == "buy now")
        assert env.state != state or terminated


@settings(max_examples=200, deadline=None)
@given(inner=st.text(max_size=40), kind=st.sampled_from(PAGE_KINDS), verb=st.sampled_from(["search", "click"]))
def test_well_formed_actions_with_arbitrary_arguments(fuzz_env, inner, kind, verb):
    env, states = fuzz_env
    env.reset(options={"goal_index": 0})
    env.state = states[kind]
    available = env.available_actions
    action = f"{verb}[{inner}]"
    _, reward, _, _, info = env.step(action)
    assert info["valid"] is _reference(action, kind, available)[0], (kind, action, info.get("error"))
    if not info["valid"]:
        assert env.state == states[kind] and reward == 0.0
    elif verb == "search":
        assert env.state.kind == "results" and env.state.query == normalize(inner)
