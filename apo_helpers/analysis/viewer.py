"""Widgets to look at episodes: play the shop yourself (notebook 01); the trajectory viewer comes with notebook 02.

Every widget keeps its logic in plain methods (``act``, ``restart``) and renders through functions that return
HTML strings, so tests can drive it without a kernel: set ``widget.action.value``, call ``widget.act()``, read
``widget.page.value``.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ..webshop.env import WebShopEnv
from ..webshop.pages import SEP

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
        self.action.on_submit(lambda _: self.act())
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
