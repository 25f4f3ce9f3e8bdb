"""Small text helpers shared by search, reward and the agents (no state, no dependencies)."""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    "a an and are as at be by for from has have i m in is it its me my of on or please that the this to"
    " under was which with you your want need looking find get show buy shopping am some pair price priced lower"
    " than less dollars budget".split()
)
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    """Lowercase alphanumeric words of ``text``."""
    return _WORD.findall(text.lower())


def content_words(text: str) -> list[str]:
    """Words of ``text`` without stopwords and shopping filler ("i'm looking for", "price lower than")."""
    return [w for w in words(text) if w not in STOPWORDS]


def normalize(text: str) -> str:
    """Lowercase with runs of whitespace collapsed: how buttons and actions are compared."""
    return " ".join(text.lower().split())
