"""The episode viewer and the play widget, driven without a kernel: set widget values or call the methods, read HTML."""

from __future__ import annotations

import html

import pytest

from apo_helpers.analysis.viewer import EpisodeViewer, PlayWidget, episode_label, episodes_html
from apo_helpers.policy.prompts import Turn, format_response
from apo_helpers.policy.rollout import Trajectory, load_trajectories, save_trajectories
from apo_helpers.webshop.catalog import Goal
from apo_helpers.webshop.env import WebShopEnv

SEP = " [SEP] "
TRICKY = "find me a <b>bold</b> mug & saucer set, and price lower than 20.00 dollars"


def _goal(instruction, category, product_type, asin, index):
    return Goal(instruction=instruction, asin=asin, product_type=product_type, category=category,
                attributes=["machine washable"], options={}, price_upper=50.0,
                target_title=f"Kestrel {product_type.title()} - machine washable", split="test", index=index)


def _search_page(instruction):
    return SEP.join(["WebShop", "Instruction:", instruction, "Search"])


def _results_page(instruction, rows):
    parts = ["Instruction:", instruction, "Back to Search", f"Page 1 (Total results: {len(rows)})"]
    for asin, title, price in rows:
        parts += [asin, title, price]
    return SEP.join(parts)


def _item_page(instruction, title, price):
    return SEP.join(["Instruction:", instruction, "Back to Search", "< Prev", title, f"Price: {price}",
                     "Rating: 4.5", "Description", "Features", "Reviews", "Buy Now"])


def _turn(observation, actions, turns_left, think, action, valid=True, reward=0.0):
    return Turn(observation=observation, actions=actions, turns_left=turns_left,
                response=format_response(think, action), think=think, action=action, format_ok=True,
                valid=valid, reward=reward)


def _success() -> Trajectory:
    instr = "please get me a machine washable hoodie, for less than 50.00 dollars"
    results = [("B0FB072WKN", "Redfern Hoodie - heavyweight, kangaroo pocket", "$39.38"),
               ("B0HYWD2ET0", "Oakridge Hoodie - machine washable, drawstring hood", "$45.95")]
    results_actions = ["click[back to search]", "click[b0fb072wkn]", "click[b0hywd2et0]"]
    item = _item_page(instr, "Oakridge Hoodie - machine washable, drawstring hood", "$45.95")
    item_actions = ["click[back to search]", "click[< prev]", "click[description]", "click[features]",
                    "click[reviews]", "click[buy now]"]
    turns = [
        _turn(_search_page(instr), ["search[<query>]"], 15, "search for the hoodie", "search[machine washable hoodie]"),
        _turn(_results_page(instr, results), results_actions, 14, "the oakridge one is washable and cheap enough",
              "click[b0hywd2et0]"),
        _turn(item, item_actions, 13, "this matches, buy it", "click[buy now]", reward=1.0),
    ]
    breakdown = {"reward": 1.0, "r_type": 1.0, "query_match": True, "category_match": True, "title_score": 1.0,
                 "attributes_matched": ["machine washable"], "attributes_missing": [], "options_matched": [],
                 "options_missing": [], "price_ok": True}
    return Trajectory(goal=_goal(instr, ["clothing", "men", "sweatshirts"], "hoodie", "B0HYWD2ET0", 0), turns=turns,
                      reward=1.0, env_reward=1.0, success=True, breakdown=breakdown,
                      input_ids=[[1, 2, 3]], assistant_mask=[[0, 1, 1]], sample_logprobs=[[-0.1], [-0.2, -0.3], [-0.05]])


def _failure() -> Trajectory:
    """A kitchen episode: a reply that does not parse, an invalid click, then out of turns without buying."""
    results = [("B0MUG00001", "Harbor Mug Set - stoneware, dishwasher safe", "$18.00")]
    turns = [
        Turn(observation=_search_page(TRICKY), actions=["search[<query>]"], turns_left=3,
             response="I think I should look for mugs", think="", action="", format_ok=False, valid=False,
             reward=-0.1),
        _turn(_search_page(TRICKY), ["search[<query>]"], 2, "search mugs", "search[mug & saucer <set>]"),
        _turn(_results_page(TRICKY, results), ["click[back to search]", "click[b0mug00001]"], 1,
              "buy the first one", "click[buy now]", valid=False),
    ]
    return Trajectory(goal=_goal(TRICKY, ["kitchen", "dining", "mugs"], "mug set", "B0MUG00001", 1), turns=turns,
                      reward=-0.1, env_reward=0.0, success=False, breakdown=None)


def _partial() -> Trajectory:
    """A clothing episode that bought the wrong product: a failure with a breakdown."""
    instr = "i need a fleece lined jacket in red, and price lower than 80.00 dollars"
    item = _item_page(instr, "Tidewater Jacket - fleece lined", "$75.49")
    turns = [
        _turn(_search_page(instr), ["search[<query>]"], 15, "look for jackets", "search[fleece lined jacket]"),
        _turn(item, ["click[back to search]", "click[< prev]", "click[buy now]"], 14, "close enough",
              "click[buy now]", reward=0.5),
    ]
    breakdown = {"reward": 0.5, "r_type": 1.0, "query_match": True, "category_match": True, "title_score": 0.9,
                 "attributes_matched": ["fleece lined"], "attributes_missing": [], "options_matched": [],
                 "options_missing": ["color: red"], "price_ok": True}
    return Trajectory(goal=_goal(instr, ["clothing", "women", "coats"], "jacket", "B0JACKET01", 2), turns=turns,
                      reward=0.5, env_reward=0.5, success=False, breakdown=breakdown)


@pytest.fixture
def episodes() -> list[Trajectory]:
    return [_success(), _failure(), _partial()]


def _labels(viewer: EpisodeViewer) -> list[str]:
    return [label for label, _ in viewer.episode.options]


# ---------------------------------------------------------------------------------------------- EpisodeViewer


def test_starts_on_first_turn_of_first_episode(episodes):
    v = EpisodeViewer(episodes, title="eval <step 0>")
    assert v.visible == [0, 1, 2] and v.episode.value == 0
    assert v.outcome.options == ("all", "success", "failure")
    assert v.category.options == ("all", "clothing", "kitchen")
    assert (v.turn.min, v.turn.max, v.turn.value) == (1, 3, 1)
    page = v.html.value
    assert "please get me a machine washable hoodie" in page
    assert "Turn 1 / 3" in page
    assert "search[machine washable hoodie]" in page and "search for the hoodie" in page
    assert "Episode over" not in page  # not the last turn
    assert v.prev.disabled and not v.next.disabled
    assert "eval &lt;step 0&gt;" in v.header.value


def test_labels(episodes):
    v = EpisodeViewer(episodes)
    labels = _labels(v)
    assert labels[0].startswith("#0 ✓ 1.00 · clothing · please get me")
    assert labels[1].startswith("#1 ✗ -0.10 · kitchen · ")
    assert labels[1].endswith("…") and len(labels[1].split(" · ", 2)[2]) == 51  # 50 characters and the ellipsis
    assert episode_label(2, episodes[2]) == labels[2]


def test_filter_by_outcome_and_category(episodes):
    v = EpisodeViewer(episodes)
    v.outcome.value = "success"
    assert v.visible == [0] and [i for _, i in v.episode.options] == [0]
    v.outcome.value = "failure"
    assert [i for _, i in v.episode.options] == [1, 2]
    assert v.episode.value == 1 and "Turn 1 / 3" in v.html.value
    v.category.value = "clothing"
    assert [i for _, i in v.episode.options] == [2]
    assert "fleece lined jacket" in v.html.value
    v.set_filter("all", "kitchen")
    assert (v.outcome.value, v.category.value) == ("all", "kitchen")
    assert v.visible == [1] and html.escape(TRICKY) in v.html.value
    v.set_filter("all", "all")
    assert v.visible == [0, 1, 2]
    with pytest.raises(ValueError):
        v.set_filter("maybe", "all")
    with pytest.raises(ValueError):
        v.set_filter("all", "garden")


def test_empty_filter_shows_message(episodes):
    v = EpisodeViewer(episodes)
    v.outcome.value = "success"
    v.category.value = "kitchen"  # the kitchen episode failed
    assert v.visible == [] and v.episode.options == ()
    assert "no episodes match" in v.html.value.lower()
    assert v.current is None and v.turn.disabled and v.prev.disabled and v.next.disabled
    v.next_turn()  # nothing to move: no error
    v.prev_turn()
    v.show(0, 2)
    assert "no episodes match" in v.html.value.lower()
    v.category.value = "clothing"
    assert v.visible == [0] and "Turn 1 / 3" in v.html.value and not v.turn.disabled
    assert "no episodes match" in EpisodeViewer([]).html.value.lower()


def test_slider_and_buttons_move_through_turns(episodes):
    v = EpisodeViewer(episodes)
    v.turn.value = 2
    page = v.html.value
    assert "Turn 2 / 3" in page
    assert "Page 1 (Total results: 2)" in page and "Oakridge Hoodie - machine washable, drawstring hood" in page
    assert "click[b0hywd2et0]" in page and "the oakridge one is washable and cheap enough" in page
    assert '<span style="color:#1f5fbf">[B0HYWD2ET0]</span>' in page  # a button of the page, shown clickable
    assert '<span style="color:#1f5fbf">[Page 1' not in page
    v.next_turn()
    assert v.turn.value == 3 and "Turn 3 / 3" in v.html.value and "click[buy now]" in v.html.value
    assert v.next.disabled and not v.prev.disabled
    v.next_turn()  # stays on the last turn
    assert v.turn.value == 3
    v.prev_turn()
    v.prev_turn()
    assert v.turn.value == 1 and "search[machine washable hoodie]" in v.html.value
    assert "Page 1 (Total results" not in v.html.value
    v.prev_turn()
    assert v.turn.value == 1
    v.next.click()  # the buttons call the same methods
    assert v.turn.value == 2 and "Turn 2 / 3" in v.html.value
    v.prev.click()
    assert v.turn.value == 1


def test_choosing_an_episode_resets_the_turn(episodes):
    v = EpisodeViewer(episodes)
    v.turn.value = 3
    v.episode.value = 2
    assert v.position == 2 and v.turn.value == 1 and v.turn.max == 2
    assert "fleece lined jacket" in v.html.value and "Turn 1 / 2" in v.html.value
    v.show(1, 99)  # clamped to the last turn
    assert v.turn.value == 3 and v.episode.value == 1 and "Turn 3 / 3" in v.html.value
    assert v.current is episodes[1]


def test_last_turn_shows_reward_and_breakdown(episodes):
    v = EpisodeViewer(episodes)
    v.show(0, 3)
    page = v.html.value
    assert "Episode over" in page and "✓ success" in page and "reward 1.000" in page
    assert "<td>attributes_matched</td><td>[&#x27;machine washable&#x27;]</td>" in page
    assert "<td>price_ok</td><td>True</td>" in page
    v.show(2, 2)
    page = v.html.value
    assert "✗ failure" in page and "options_missing" in page and "color: red" in page
    v.show(1, 3)
    page = v.html.value
    assert "nothing bought" in page and "<table>" not in page


def test_invalid_and_unparsed_turns_are_marked(episodes):
    v = EpisodeViewer(episodes)
    v.episode.value = 1
    page = v.html.value
    assert "reply did not parse" in page and "invalid action" in page
    assert "I think I should look for mugs" in page  # the raw reply is shown when it did not parse
    assert "turn reward</b> -0.100" in page
    v.turn.value = 2
    page = v.html.value
    assert "✓ parsed" in page and "✓ valid" in page and "invalid action" not in page
    assert "search[mug &amp; saucer &lt;set&gt;]" in page and "<set>" not in page
    v.turn.value = 3
    assert "✓ parsed" in v.html.value and "✗ invalid action" in v.html.value
    v.show(0, 1)
    assert "invalid" not in v.html.value and "did not parse" not in v.html.value


def test_all_text_is_escaped(episodes):
    v = EpisodeViewer(episodes)
    v.episode.value = 1
    page = v.html.value
    assert "<b>bold</b> mug" not in page
    assert "&lt;b&gt;bold&lt;/b&gt; mug &amp; saucer" in page


def test_round_trip_through_jsonl(episodes, tmp_path):
    path = save_trajectories(episodes, tmp_path / "eval.jsonl")
    assert len(path.read_text().splitlines()) == 3
    loaded = load_trajectories(path)
    assert loaded[0].turns[1].actions == episodes[0].turns[1].actions and loaded[1].breakdown is None
    v = EpisodeViewer(path)
    assert v.title == "eval.jsonl" and "eval.jsonl" in v.header.value
    assert len(v.trajectories) == 3 and isinstance(v.trajectories[0], Trajectory)
    assert _labels(v) == _labels(EpisodeViewer(episodes))
    v.outcome.value = "failure"
    assert v.visible == [1, 2]
    v.show(1, 2)
    assert "Tidewater Jacket - fleece lined" in v.html.value and "Episode over" in v.html.value
    assert EpisodeViewer(str(path), title="mine").title == "mine"


def test_static_html(episodes):
    v = EpisodeViewer(episodes)
    page = v.static_html()
    assert page == episodes_html(episodes)
    assert "3 episodes" in page and "success 1/3" in page
    for t in episodes:
        assert html.escape(t.goal.instruction) in page
    assert TRICKY not in page and "&lt;b&gt;bold&lt;/b&gt; mug &amp; saucer set" in page
    for action in ("search[machine washable hoodie]", "click[b0hywd2et0]", "click[buy now]", "search[fleece lined jacket]"):
        assert action in page
    assert "search[mug &amp; saucer &lt;set&gt;]" in page
    assert "I think I should look for mugs" in page and "invalid action" in page and "nothing bought" in page
    assert page.count("<li>") == 8  # 3 + 3 + 2 turns
    short = episodes_html(episodes, max_episodes=1)
    assert short.count("<li>") == 3 and "first 1 of 3" in short
    assert html.escape(TRICKY) in short  # the table still lists every episode
    assert "No episodes" in episodes_html([])


def test_ipython_display(episodes, monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    v = EpisodeViewer(episodes)
    v._ipython_display_()
    assert shown == [v.box]


# ---------------------------------------------------------------------------------------------- PlayWidget


@pytest.fixture(scope="module")
def test_env() -> WebShopEnv:
    return WebShopEnv(split="test")


def test_play_widget_search_click_and_buy(test_env):
    w = PlayWidget(test_env, goal_index=0)
    goal = test_env.goal
    assert "New episode" in w.status.value and "Search" in w.page.value
    assert html.escape(goal.instruction) in w.page.value and w.choices.children == ()
    w.action.value = f"search[{goal.product_type}]"
    w.act()
    assert "ok: search[" in w.status.value and "turn 1/" in w.status.value
    assert "Back to Search" in w.page.value and "Total results" in w.page.value
    assert w.action.value == "" and w.history == [f"search[{goal.product_type}]"]
    item = next(b for b in w.choices.children if b.description not in ("back to search", "next >"))
    w.action.value = f"click[{item.description}]"
    w.act()
    assert "Buy Now" in w.page.value and "turn 2/" in w.status.value
    w.action.value = "click[buy now]"
    w.act()
    assert "bought: reward" in w.status.value and "<table>" in w.status.value and w.done
    w.act("click[buy now]")
    assert "episode is over" in w.status.value
    w.restart(0)
    assert not w.done and "New episode" in w.status.value


def test_play_widget_invalid_action(test_env):
    w = PlayWidget(test_env, goal_index=1)
    before = w.page.value
    w.action.value = "click[nothing like this]"
    w.act()
    assert "invalid" in w.status.value and w.page.value == before and not w.done
