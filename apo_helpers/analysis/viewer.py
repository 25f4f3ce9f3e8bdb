"""Widgets to look at episodes: play the shop yourself (``PlayWidget``, notebook 01) and step through recorded
language-model episodes (``EpisodeViewer``, introduced in notebook 02 and used again in notebooks 04 and 06).

Every widget keeps its logic in plain methods (``act``, ``restart``; ``show``, ``next_turn``, ``set_filter``) and
renders through functions that return HTML strings, so tests can drive it without a kernel: set
``widget.action.value``, call ``widget.act()``, read ``widget.page.value``. ``episodes_html`` is the static
counterpart of the viewer: plain HTML that an exported notebook shows without a kernel.
"""

from __future__ import annotations

import html
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import ipywidgets as widgets

from ..webshop.env import WebShopEnv
from ..webshop.pages import SEP

if TYPE_CHECKING:  # the policy package imports torch: only load it when a JSONL path is given
    from ..policy.rollout import Trajectory

_STYLE = ("font-family: monospace; font-size: 13px; line-height: 1.45; border: 1px solid #ccc; "
          "padding: 8px; max-height: 420px; overflow-y: auto")


def page_html(observation: str, buttons: list[str]) -> str:
    """A page as HTML: one line per visible string, clickable strings in blue brackets."""
    clickable = {b.lower() for b in buttons}
    lines = []
    for part in observation.split(SEP):
        text = html.escape(part)
        lines.append(f'<span style="color:#1f5fbf">[{text}]</span>' if part.lower() in clickable else text)
    return f'<div style="{_STYLE}">' + "<br>".join(lines) + "</div>"


def breakdown_html(breakdown: dict) -> str:
    """The reward breakdown of a purchase as a small table."""
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in breakdown.items())
    return f"<table>{rows}</table>"


class PlayWidget:
    """Play one episode by typing actions (``search[...]`` / ``click[...]``) or clicking the buttons."""

    def __init__(self, env: WebShopEnv | None = None, goal_index: int = 0):
        self.env = env or WebShopEnv(split="test")
        self.goal_index = goal_index
        self.action = widgets.Text(placeholder="search[red running shoes] or click[buy now]",
                                   layout=widgets.Layout(width="60%"))
        self.go = widgets.Button(description="Act", button_style="primary")
        self.new = widgets.Button(description="New episode")
        self.status = widgets.HTML()
        self.page = widgets.HTML()
        self.choices = widgets.HBox(layout=widgets.Layout(flex_flow="row wrap"))
        self.go.on_click(lambda _: self.act())
        self.new.on_click(lambda _: self.restart(self.goal_index + 1))
        self.box = widgets.VBox([widgets.HBox([self.action, self.go, self.new]), self.status, self.choices, self.page])
        self.restart(goal_index)

    def restart(self, goal_index: int) -> None:
        self.goal_index = goal_index % len(self.env.goals)
        self.observation, self.info = self.env.reset(options={"goal_index": self.goal_index})
        self.total, self.done, self.history = 0.0, False, []
        self._show("New episode: find and buy what the instruction asks for.")

    def act(self, action: str | None = None) -> None:
        """Take ``action`` (default: the text box) and show the new page."""
        action = self.action.value if action is None else action
        if self.done:
            self._show("The episode is over: press <b>New episode</b>.")
            return
        self.observation, reward, terminated, truncated, self.info = self.env.step(action)
        self.history.append(action)
        self.done = terminated or truncated
        self.action.value = ""
        if not self.info["valid"]:
            message = f"<b>invalid:</b> {html.escape(self.info['error'])}"
        elif terminated:
            message = (f"<b>bought: reward {reward:.3f}</b> ({'success' if self.info['success'] else 'not a success'})"
                       + breakdown_html(self.info["reward_breakdown"]))
        elif truncated:
            message = "<b>out of actions</b>: reward 0"
        else:
            message = f"ok: {html.escape(action)}"
        self._show(message)

    def _show(self, message: str) -> None:
        turns = f"turn {self.env.turn}/{self.env.config.max_turns}"
        self.status.value = f"{message} &nbsp; <i>{turns}</i>"
        self.page.value = page_html(self.observation, self.env.buttons)
        buttons = []
        for choice in ([] if self.done else self.info["available_actions"]):
            if choice.startswith("search["):
                continue
            b = widgets.Button(description=choice[len("click["):-1], layout=widgets.Layout(width="auto"))
            b.on_click(lambda _, a=choice: self.act(a))
            buttons.append(b)
        self.choices.children = buttons

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)


# ---------------------------------------------------------------------------------------------- episode viewer

OUTCOMES = ("all", "success", "failure")
_OK, _BAD = '<span style="color:#1a7f37">{}</span>', '<span style="color:#c62828">{}</span>'


def _category(trajectory: "Trajectory") -> str:
    """The top-level category of an episode's goal (``"?"`` when the goal has none)."""
    return trajectory.goal.category[0] if trajectory.goal.category else "?"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _buttons(actions: list[str]) -> list[str]:
    """The clickable strings behind ``click[...]`` actions (``search[...]`` is not a button)."""
    return [a[len("click["):-1] for a in actions if a.startswith("click[") and a.endswith("]")]


def _matches(trajectory: "Trajectory", outcome: str, category: str) -> bool:
    if outcome == "success" and not trajectory.success:
        return False
    if outcome == "failure" and trajectory.success:
        return False
    return category == "all" or _category(trajectory) == category


def episode_label(index: int, trajectory: "Trajectory") -> str:
    """The episode dropdown's label: ``#3 ✓ 1.00 · clothing · <first 50 characters of the instruction>``.

    Plain text (the dropdown shows it as text, so it is not HTML-escaped); the number is ``trajectory.reward``.
    """
    mark = "✓" if trajectory.success else "✗"
    return f"#{index} {mark} {trajectory.reward:.2f} · {_category(trajectory)} · {_clip(trajectory.goal.instruction, 51)}"


def _turn_flags(turn) -> str:
    """Parsed / valid marks of a turn as HTML."""
    parsed = _OK.format("✓ parsed") if turn.format_ok else _BAD.format("✗ reply did not parse")
    valid = _OK.format("✓ valid") if turn.valid else _BAD.format("✗ invalid action")
    return f"{parsed} · {valid}"


def _turn_action_html(turn, limit: int | None = None) -> str:
    """The action sent, or the raw reply when it did not parse."""
    if turn.format_ok or turn.action:
        return f"<code>{html.escape(turn.action)}</code>"
    raw = turn.response if limit is None else _clip(turn.response, limit)
    return f"<i>(no action; raw reply:)</i> <code>{html.escape(raw)}</code>"


def _outcome_html(trajectory: "Trajectory") -> str:
    """Final reward, success and the reward breakdown (or "nothing bought") of an episode."""
    mark = _OK.format("✓ success") if trajectory.success else _BAD.format("✗ failure")
    head = (f"<b>Episode over:</b> reward {trajectory.reward:.3f} (WebShop reward {trajectory.env_reward:.3f}) "
            f"· {mark}")
    body = breakdown_html(trajectory.breakdown) if trajectory.breakdown else "<p><i>nothing bought</i></p>"
    return f"<div>{head}</div>{body}"


def episodes_html(trajectories: list["Trajectory"], max_episodes: int = 20) -> str:
    """A static, self-contained HTML summary of episodes (for exported notebooks, where widgets need a kernel).

    A summary line, a table of every episode (index, success, reward, turns, category, instruction) and, for the
    first ``max_episodes`` episodes, their turns as a compact list (think, action, parsed / valid, reward). All text
    is escaped. The static counterpart of ``EpisodeViewer`` (notebook 02; used again in 04 and 06).
    """
    trajectories = list(trajectories)
    if not trajectories:
        return "<div><p><i>No episodes.</i></p></div>"
    n = len(trajectories)
    wins = sum(t.success for t in trajectories)
    mean = sum(t.reward for t in trajectories) / n
    parts = [f"<div><p><b>{n} episodes</b> · success {wins}/{n} ({wins / n:.0%}) · mean reward {mean:.3f}</p>"]
    rows = []
    for i, t in enumerate(trajectories):
        mark = _OK.format("✓") if t.success else _BAD.format("✗")
        rows.append(f"<tr><td>{i}</td><td>{mark}</td><td>{t.reward:.3f}</td><td>{t.num_turns}</td>"
                    f"<td>{html.escape(_category(t))}</td><td>{html.escape(t.goal.instruction)}</td></tr>")
    parts.append('<div style="max-height: 360px; overflow-y: auto"><table>'
                 "<tr><th>#</th><th>success</th><th>reward</th><th>turns</th><th>category</th><th>instruction</th></tr>"
                 + "".join(rows) + "</table></div>")
    shown = trajectories[: max(0, max_episodes)]
    for i, t in enumerate(shown):
        items = []
        for k, turn in enumerate(t.turns, start=1):
            think = html.escape(_clip(turn.think, 300)) if turn.think else "—"
            items.append(f"<li><i>{think}</i> → {_turn_action_html(turn, 200)} · {_turn_flags(turn)} "
                         f"· reward {turn.reward:.3f}</li>")
        turns = f"<ol>{''.join(items)}</ol>" if items else "<p><i>no turns</i></p>"
        mark = "✓" if t.success else "✗"
        parts.append(f"<details><summary>#{i} {mark} {t.reward:.3f} · {html.escape(_category(t))} · "
                     f"{html.escape(t.goal.instruction)}</summary>{turns}{_outcome_html(t)}</details>")
    if len(shown) < n:
        parts.append(f"<p><i>Turns of the first {len(shown)} of {n} episodes shown.</i></p>")
    parts.append("</div>")
    return "".join(parts)


class EpisodeViewer:
    """Step through recorded episodes turn by turn (introduced in notebook 02; used again in notebooks 04 and 06).

    ``EpisodeViewer(trajectories_or_path, title=None)`` takes a list of ``Trajectory`` or the path of a JSONL file
    written by ``save_trajectories``. Widgets: ``outcome`` (all / success / failure) and ``category`` dropdowns
    filter the ``episode`` dropdown (values: indices into ``trajectories``); ``turn`` is a slider over the turn
    numbers, **1-based** (1 .. number of turns), with ``prev`` / ``next`` buttons. ``html`` holds the shown turn:
    instruction, turn k / n, the page the agent saw, its think and action, whether the reply parsed and the action
    was valid, the turn reward, and on the last turn the episode's reward, success and reward breakdown.

    The logic is in plain methods -- ``set_filter(outcome, category)``, ``show(position, turn)``, ``next_turn()``,
    ``prev_turn()`` -- and setting a widget's ``value`` runs the same code, so tests need no kernel.
    ``static_html()`` is ``episodes_html`` of the trajectories, for exported notebooks.
    """

    def __init__(self, trajectories_or_path, title: str | None = None):
        if isinstance(trajectories_or_path, (str, os.PathLike)):
            from ..policy.rollout import load_trajectories

            self.trajectories = load_trajectories(trajectories_or_path)
            title = title if title is not None else Path(trajectories_or_path).name
        else:
            self.trajectories = list(trajectories_or_path)
        self.title = title
        self.categories = sorted({_category(t) for t in self.trajectories})
        self.visible: list[int] = []
        """Indices (into ``trajectories``) of the episodes the filter lets through, in order."""
        self.position: int | None = None
        """Position in ``visible`` of the episode shown (None when nothing is shown)."""
        self.turn_number = 0
        self._quiet_depth = 0

        self.outcome = widgets.Dropdown(options=list(OUTCOMES), value="all", description="outcome")
        self.category = widgets.Dropdown(options=["all", *self.categories], value="all", description="category")
        self.episode = widgets.Dropdown(options=[], description="episode", layout=widgets.Layout(width="90%"))
        self.turn = widgets.IntSlider(value=1, min=1, max=1, description="turn", continuous_update=False)
        self.prev = widgets.Button(description="◀ prev", layout=widgets.Layout(width="auto"))
        self.next = widgets.Button(description="next ▶", layout=widgets.Layout(width="auto"))
        self.header = widgets.HTML(f"<h4>{html.escape(title)}</h4>" if title else "")
        self.html = widgets.HTML()

        self.outcome.observe(self._on_filter, names="value")
        self.category.observe(self._on_filter, names="value")
        self.episode.observe(self._on_episode, names="value")
        self.turn.observe(self._on_turn, names="value")
        self.prev.on_click(lambda _: self.prev_turn())
        self.next.on_click(lambda _: self.next_turn())
        self.box = widgets.VBox([self.header, widgets.HBox([self.outcome, self.category]), self.episode,
                                 widgets.HBox([self.prev, self.turn, self.next]), self.html])
        self.set_filter("all", "all")

    # ------------------------------------------------------------------ logic
    @property
    def current(self) -> "Trajectory | None":
        """The episode shown, or None when no episode matches the filter."""
        return None if self.position is None else self.trajectories[self.visible[self.position]]

    def set_filter(self, outcome: str = "all", category: str = "all") -> None:
        """Keep the episodes with this outcome (all / success / failure) and top-level category; show the first."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
        if category != "all" and category not in self.categories:
            raise ValueError(f"unknown category {category!r}; the episodes have {self.categories}")
        self.visible = [i for i, t in enumerate(self.trajectories) if _matches(t, outcome, category)]
        with self._quiet():
            self.outcome.value, self.category.value = outcome, category
            self.episode.options = [(episode_label(i, self.trajectories[i]), i) for i in self.visible]
        if self.visible:
            self.show(0, 1)
        else:
            self._show_empty(outcome, category)

    def show(self, position: int = 0, turn: int = 1) -> None:
        """Show turn ``turn`` (1-based; clamped) of the episode at ``position`` among the filtered ones (clamped)."""
        if not self.visible:
            self._show_empty(self.outcome.value, self.category.value)
            return
        position = min(max(int(position), 0), len(self.visible) - 1)
        index = self.visible[position]
        trajectory = self.trajectories[index]
        last = max(1, trajectory.num_turns)
        turn = min(max(int(turn), 1), last)
        self.position, self.turn_number = position, turn
        with self._quiet():
            self.episode.value = index
            self.turn.max = last
            self.turn.value = turn
            self.turn.disabled = self.episode.disabled = False
        self.prev.disabled = turn <= 1
        self.next.disabled = turn >= last
        self.html.value = self.turn_html(index, turn)

    def next_turn(self) -> None:
        """One turn on (stays on the last turn)."""
        if self.position is not None:
            self.show(self.position, self.turn_number + 1)

    def prev_turn(self) -> None:
        """One turn back (stays on the first turn)."""
        if self.position is not None:
            self.show(self.position, self.turn_number - 1)

    def turn_html(self, index: int, turn: int) -> str:
        """HTML of turn ``turn`` (1-based) of ``trajectories[index]``."""
        t = self.trajectories[index]
        mark = _OK.format("✓ success") if t.success else _BAD.format("✗ failure")
        parts = [f"<div><b>Episode #{index}</b> · {mark} · reward {t.reward:.3f} · {html.escape(_category(t))}</div>",
                 f"<div><b>Instruction:</b> {html.escape(t.goal.instruction)}</div>"]
        if not t.turns:
            parts.append("<p><i>This episode has no turns.</i></p>")
            return "".join(parts) + _outcome_html(t)
        u = t.turns[turn - 1]
        parts += [f"<div><b>Turn {turn} / {t.num_turns}</b> · {u.turns_left} actions left</div>",
                  page_html(u.observation, _buttons(u.actions)),
                  f"<div><b>think:</b> <i>{html.escape(u.think) if u.think else '—'}</i></div>",
                  f"<div><b>action:</b> {_turn_action_html(u)}</div>",
                  f"<div>{_turn_flags(u)} · <b>turn reward</b> {u.reward:.3f}</div>"]
        if turn == t.num_turns:
            parts.append(_outcome_html(t))
        return "".join(parts)

    def static_html(self, max_episodes: int = 20) -> str:
        """``episodes_html`` of all the trajectories (ignores the filter): what an exported notebook can show."""
        return episodes_html(self.trajectories, max_episodes)

    # ------------------------------------------------------------------ widget plumbing
    def _show_empty(self, outcome: str, category: str) -> None:
        self.position, self.turn_number = None, 0
        with self._quiet():
            self.turn.value = self.turn.max = 1
            self.turn.disabled = self.episode.disabled = True
        self.prev.disabled = self.next.disabled = True
        why = (f"outcome = {html.escape(outcome)}, category = {html.escape(category)}" if self.trajectories
               else "there are no episodes")
        self.html.value = f"<p><b>No episodes match</b> ({why}).</p>"

    @contextmanager
    def _quiet(self):
        """Set widget values without their observers running (the methods already render)."""
        self._quiet_depth += 1
        try:
            yield
        finally:
            self._quiet_depth -= 1

    def _on_filter(self, _change) -> None:
        if not self._quiet_depth:
            self.set_filter(self.outcome.value, self.category.value)

    def _on_episode(self, change) -> None:
        if not self._quiet_depth and change["new"] is not None:
            self.show(self.visible.index(change["new"]), 1)

    def _on_turn(self, change) -> None:
        if not self._quiet_depth and self.position is not None:
            self.show(self.position, change["new"])

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)
