"""Page states, their text rendering and their buttons (notebook 01).

A page is a frozen ``PageState``; an action maps one state to the next (``env.py``). Observations are WebShop's
text: the visible strings of the page joined by `` [SEP] ``. ``buttons(state)`` lists what ``click[...]`` accepts on
a page, in the case shown; the environment compares them case- and whitespace-insensitively.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..config import EnvConfig
from .catalog import Catalog, Goal
from .text import normalize

SEARCH, RESULTS, ITEM, DETAIL = "search", "results", "item", "detail"
SEP = " [SEP] "
BACK, NEXT, PREV, BUY = "Back to Search", "Next >", "< Prev", "Buy Now"
DETAIL_BUTTONS = ("Description", "Features", "Reviews")


@dataclass(frozen=True)
class PageState:
    """Everything that decides what the agent sees; equal states render equal observations."""

    kind: str = SEARCH
    """``search``, ``results``, ``item`` or ``detail``."""
    query: str = ""
    """The last search query."""
    results: tuple[str, ...] = ()
    """Asins returned by the last search, best first."""
    page: int = 1
    """Results page (1-based)."""
    asin: str | None = None
    """The open item (item and detail pages)."""
    selected: tuple[tuple[str, str], ...] = field(default=())
    """Selected options of the open item, as sorted (name, value) pairs."""
    detail: str | None = None
    """Which detail page is open: ``description``, ``features`` or ``reviews``."""

    @property
    def selected_options(self) -> dict[str, str]:
        return dict(self.selected)

    def select(self, name: str, value: str) -> "PageState":
        """The same page with option ``name`` set to ``value`` (replacing an earlier choice)."""
        chosen = dict(self.selected) | {name: value}
        return replace(self, selected=tuple(sorted(chosen.items())))


def page_results(state: PageState, config: EnvConfig) -> list[str]:
    """Asins shown on the current results page."""
    start = (state.page - 1) * config.results_per_page
    return list(state.results[start: start + config.results_per_page])


def num_pages(state: PageState, config: EnvConfig) -> int:
    return max(1, -(-len(state.results) // config.results_per_page))


def buttons(state: PageState, catalog: Catalog, config: EnvConfig) -> list[str]:
    """The clickable strings of a page, as shown."""
    if state.kind == SEARCH:
        return []
    if state.kind == RESULTS:
        found = page_results(state, config)
        nav = ([PREV] if state.page > 1 else []) + ([NEXT] if state.page < num_pages(state, config) else [])
        items = [f"item {k}" for k in range(1, len(found) + 1)] if config.show_item_positions else []
        return [BACK, *nav, *found, *items]
    if state.kind == ITEM:
        product = catalog.by_asin[state.asin]
        values = [v for vs in product.options.values() for v in vs]
        return [BACK, PREV, *values, *DETAIL_BUTTONS, BUY]
    return [BACK, PREV]


def render(state: PageState, goal: Goal, catalog: Catalog, config: EnvConfig) -> str:
    """The observation text of a page."""
    head = ["Instruction:", goal.instruction]
    if state.kind == SEARCH:
        return SEP.join(["WebShop", *head, "Search"])
    if state.kind == RESULTS:
        found = page_results(state, config)
        nav = ([PREV] if state.page > 1 else []) + ([NEXT] if state.page < num_pages(state, config) else [])
        parts = [*head, BACK, f"Page {state.page} (Total results: {len(state.results)})", *nav]
        if not found:
            parts.append("No results")
        for k, asin in enumerate(found, start=1):
            product = catalog.by_asin[asin]
            position = [f"item {k}"] if config.show_item_positions else []
            parts += [*position, asin, product.title, f"${product.price:.2f}"]
        return SEP.join(parts)
    product = catalog.by_asin[state.asin]
    if state.kind == ITEM:
        parts = [*head, BACK, PREV]
        for name, values in product.options.items():
            parts += [option_heading(name, state, config), *values]
        rating = "N.A." if product.rating is None else f"{product.rating}"
        parts += [product.title, f"Price: ${product.price:.2f}", f"Rating: {rating}", *DETAIL_BUTTONS, BUY]
        return SEP.join(parts)
    if state.detail == "description":
        body = [product.description]
    elif state.detail == "features":
        body = list(product.bullets)
    else:
        body = [f"{r['rating']} stars: {r['text']}" for r in product.reviews] or ["No reviews yet"]
    return SEP.join([*head, BACK, PREV, *body])


def option_heading(name: str, state: PageState, config: EnvConfig) -> str:
    """An option's name as the item page shows it: with its selected value when ``show_selected_options``."""
    if not config.show_selected_options:
        return name
    chosen = state.selected_options.get(name)
    return f"{name} (selected: {chosen})" if chosen is not None else f"{name} (not selected)"


def option_of(value: str, state: PageState, catalog: Catalog) -> str | None:
    """The option name a clicked value belongs to on the open item, or None."""
    for name, values in catalog.by_asin[state.asin].options.items():
        if any(normalize(v) == value for v in values):
            return name
    return None
