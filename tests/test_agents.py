"""Scripted agents: oracle solves everything, expert >= 90% without the goal, rule and random do what they say."""

from __future__ import annotations

import pytest

from apo_helpers.analysis.evaluate import evaluate, run_episode
from apo_helpers.webshop.agents import (AGENTS, QUERIES, ExpertAgent, OracleAgent, RandomAgent, RuleAgent,
                                        expert_search, instruction_of, make_agent, parse_budget, parse_results,
                                        parse_wanted_options, search_description, search_keywords, search_request,
                                        words_after)
from apo_helpers.webshop.env import SEARCH_PLACEHOLDER, WebShopEnv
from apo_helpers.webshop.reward import webshop_reward
from apo_helpers.webshop.text import content_words, normalize


class GoalHidingEnv:
    """Passes everything through to ``env`` but removes ``goal`` from the info dicts the agent is given."""

    def __init__(self, env: WebShopEnv):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    @staticmethod
    def _hide(info: dict) -> dict:
        return {k: v for k, v in info.items() if k != "goal"}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._hide(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._hide(info)


@pytest.fixture(scope="module")
def test_env(full_catalog):
    return WebShopEnv(split="test", catalog=full_catalog)


def _episodes(evaluation):
    return [(e.actions, e.reward, e.success) for e in evaluation.episodes]


def test_oracle_solves_every_test_goal(test_env):
    evaluation = evaluate(OracleAgent(), env=test_env, progress=False)
    assert len(evaluation.episodes) == 200
    assert all(e.success and e.reward == 1.0 for e in evaluation.episodes)
    assert evaluation.summary()["success_rate"] == 1.0
    assert evaluation.summary()["invalid_rate"] == 0.0


def test_oracle_needs_the_goal(test_env):
    """The goal-hiding wrapper really hides it: the oracle cannot play without it."""
    with pytest.raises(KeyError):
        run_episode(GoalHidingEnv(test_env), OracleAgent(), 0)


def test_expert_succeeds_on_90_percent_of_test_goals_without_seeing_them(test_env):
    hidden = evaluate(ExpertAgent(), env=GoalHidingEnv(test_env), progress=False)
    plain = evaluate(ExpertAgent(), env=test_env, progress=False)
    assert hidden.summary()["success_rate"] >= 0.9
    assert hidden.summary()["invalid_rate"] == 0.0
    assert _episodes(hidden) == _episodes(plain)


def test_sloppy_expert_ignores_options_in_its_share_of_episodes_and_still_buys(test_env):
    """skip_options=1 never clicks an option and succeeds only where the goal asks for none; 0 is the full expert;
    a share in between draws which episodes are sloppy from its seed (the same seed, the same episodes)."""
    sloppy = evaluate(ExpertAgent(skip_options=1.0), env=test_env, progress=False)
    full = evaluate(ExpertAgent(skip_options=0.0), env=test_env, progress=False)
    assert _episodes(full) == _episodes(evaluate(ExpertAgent(), env=test_env, progress=False))
    with_options = [bool(goal.options) for goal in test_env.goals]
    for episode, asks in zip(sloppy.episodes, with_options):
        wanted = parse_wanted_options(episode.instruction)
        assert not any(a[len("click["):-1] in wanted for a in episode.actions[1:]), episode.actions
        if episode.bought and not asks:
            assert episode.success
        if asks:
            assert not episode.success
    assert sum(e.bought for e in sloppy.episodes) >= 0.9 * len(sloppy.episodes)
    assert sloppy.summary()["success_rate"] < full.summary()["success_rate"] - 0.3
    half = ExpertAgent(seed=3, skip_options=0.5)
    draws = []
    for _ in range(200):
        half.reset()
        draws.append(half.skipping)
    assert 0.4 < sum(draws) / len(draws) < 0.6
    again = ExpertAgent(seed=3, skip_options=0.5)
    assert [again.reset() or again.skipping for _ in range(200)] == draws
    with pytest.raises(ValueError, match="skip_options"):
        ExpertAgent(skip_options=1.5)


def test_forgetful_expert_chooses_the_item_as_the_full_expert_but_selects_no_option(test_env):
    """forget_options=1 opens and rejects the same items as the full expert (it still checks that the options are
    offered) and buys the same one, only without the option clicks; with both shares, an episode is one kind of
    sloppy or the other, never both."""
    forgetful = evaluate(ExpertAgent(forget_options=1.0), env=test_env, progress=False)
    full = evaluate(ExpertAgent(), env=test_env, progress=False)
    skipping = evaluate(ExpertAgent(skip_options=1.0), env=test_env, progress=False)
    for episode, expert in zip(forgetful.episodes, full.episodes):
        wanted = parse_wanted_options(episode.instruction)
        expert_without_clicks = [a for a in expert.actions if a[len("click["):-1] not in wanted or a == expert.actions[0]]
        # the same actions, and where the expert ran out of turns the forgetful one (fewer clicks) may still buy
        assert episode.actions[: len(expert_without_clicks)] == expert_without_clicks
        assert episode.actions == expert_without_clicks or not expert.bought
        assert episode.success == (expert.success and not wanted)
    # the skipping expert buys items that lack the options where the forgetful one goes back
    assert _episodes(forgetful) != _episodes(skipping)
    assert sum("click[< prev]" in e.actions for e in forgetful.episodes) > sum(
        "click[< prev]" in e.actions for e in skipping.episodes)
    both = ExpertAgent(seed=3, skip_options=0.5, forget_options=0.5)
    draws = []
    for _ in range(400):
        both.reset()
        assert not (both.skipping and both.forgetting) and both.sloppy == (both.skipping or both.forgetting)
        draws.append((both.skipping, both.forgetting))
    assert 0.4 < sum(s for s, _ in draws) / len(draws) < 0.6
    assert 0.2 < sum(f for _, f in draws) / len(draws) < 0.3  # half of the half that does not skip
    with pytest.raises(ValueError, match="forget_options"):
        ExpertAgent(forget_options=-0.1)


def test_rule_agent_searches_the_instruction_clicks_the_first_result_and_buys(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog)
    for i, goal in enumerate(env.goals):
        episode = run_episode(env, RuleAgent(), i)
        first = env.search_engine.search(normalize(goal.instruction))[0]
        assert episode.actions == [f"search[{goal.instruction}]", f"click[{first}]", "click[buy now]"]
        assert episode.bought and all(episode.valid)
        assert episode.reward == webshop_reward(small_catalog.by_asin[first], {}, goal).reward


def test_rule_agent_goes_back_when_there_are_no_results():
    no_results = "Instruction: [SEP] find me a qqq [SEP] Back to Search [SEP] Page 1 (Total results: 0) [SEP] No results"
    assert RuleAgent().act(no_results, {"page": "results"}) == "click[back to search]"
    assert RuleAgent().act("x", {"page": "detail"}) == "click[< prev]"


def test_random_agent_only_uses_available_actions(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog)
    agent = RandomAgent(seed=3)
    searches = 0
    for i in range(len(env.goals)):
        obs, info = env.reset(options={"goal_index": i})
        agent.reset()
        allowed_words = set(content_words(env.goal.instruction))
        done = False
        while not done:
            action = agent.act(obs, info)
            if action.startswith("search["):
                searches += 1
                assert info["available_actions"] == [SEARCH_PLACEHOLDER]
                query = action[len("search["):-1].split()
                assert 1 <= len(query) <= 4 and set(query) <= allowed_words, action
            else:
                assert action in info["available_actions"]
            obs, _, terminated, truncated, info = env.step(action)
            assert info["valid"], (action, info.get("error"))
            done = terminated or truncated
    assert searches >= len(env.goals)


def test_random_agent_is_seeded(small_catalog):
    env = WebShopEnv(split="test", catalog=small_catalog)
    runs = [[run_episode(env, RandomAgent(seed=s), i).actions for i in range(5)] for s in (0, 0, 1)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_make_agent_builds_each_agent():
    assert set(AGENTS) == {"random", "rule", "expert", "oracle"}
    for name, cls in AGENTS.items():
        agent = make_agent(name, seed=2)
        assert type(agent) is cls and agent.name == name


def test_make_agent_unknown_name_raises():
    with pytest.raises(ValueError, match="unknown agent 'gpt'"):
        make_agent("gpt")


# ---------------------------------------------------------------------------------------------- parsing helpers

INSTRUCTION = "i need a t-shirt that is slim fit and v neck, in navy, size x-large, and price lower than 30.00 dollars"


def test_instruction_of():
    assert instruction_of(f"WebShop [SEP] Instruction: [SEP] {INSTRUCTION} [SEP] Search") == INSTRUCTION


def test_parse_budget_and_options():
    assert parse_budget(INSTRUCTION) == 30.0
    assert parse_budget("find me a hat") == float("inf")
    assert parse_wanted_options(INSTRUCTION) == ["navy", "x-large"]
    assert parse_wanted_options("show me a phone case: slim, model: iphone 15, under 20.00 dollars") == ["iphone 15"]
    assert parse_wanted_options("find me some tea, flavor: ginger, pack: 2-pack, for less than 9.00 dollars") == \
        ["ginger", "2-pack"]


def test_search_keywords_drop_filler_options_and_budget():
    assert search_keywords(INSTRUCTION) == "t shirt slim fit v neck"


def test_parse_results(small_catalog, paged_query):
    env = WebShopEnv(split="test", catalog=small_catalog)
    env.reset(options={"goal_index": 0})
    obs = env.step(f"search[{paged_query}]")[0]
    expected = [(a, small_catalog.by_asin[a].title, small_catalog.by_asin[a].price) for a in env.state.results[:10]]
    assert parse_results(obs) == expected


def test_parse_wanted_options_recovers_every_test_goals_options(full_catalog):
    for goal in full_catalog.split("test"):
        assert parse_wanted_options(goal.instruction) == list(goal.options.values()), goal.instruction
        assert parse_budget(goal.instruction) == goal.price_upper


# ---------------------------------------------------------------------------------------------- explain

def test_explain_words_clicks_as_the_expert_does(full_catalog):
    """Every think the full expert writes on results and item pages is what ``explain`` writes for its click,
    except the reasons that name what it found missing (those depend on the page, not on the click)."""
    from apo_helpers.config import get_profile
    from apo_helpers.webshop.agents import EXPLAINED_PAGES, explain, explorable_actions

    env = WebShopEnv(split="train", catalog=full_catalog, config=get_profile("class").policy_env())
    expert, checked = ExpertAgent(seed=0), 0
    for index in range(40):
        obs, info = env.reset(options={"goal_index": index})
        expert.reset()
        done = False
        while not done:
            action = expert.act(obs, info)
            if info["page"] in EXPLAINED_PAGES and not expert.reason.endswith(("is not offered, go back",
                                                                               "no result left to try")):
                assert action in explorable_actions(info["available_actions"])
                assert explain(action, info["page"]) == expert.reason, (action, info["page"])
                checked += 1
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
    assert checked > 80


@pytest.mark.parametrize("action,page", [("search[shoes]", "results"), ("click[description]", "item"),
                                         ("click[item 1]", "search")])
def test_explain_refuses_what_the_expert_never_clicks(action, page):
    from apo_helpers.webshop.agents import explain

    with pytest.raises(ValueError, match="explain words the clicks"):
        explain(action, page)


def test_explorable_actions_leave_out_the_info_pages():
    from apo_helpers.webshop.agents import explorable_actions

    available = ["click[back to search]", "click[< prev]", "click[description]", "click[features]",
                 "click[reviews]", "click[large]", "click[buy now]"]
    assert explorable_actions(available) == ["click[back to search]", "click[< prev]", "click[large]",
                                             "click[buy now]"]


def test_progress_think_takes_the_same_actions_and_names_what_follows_each_selected_value(test_env):
    """think="progress" changes the words, never the actions: after an option click the think names the
    instruction's words that follow that value, the next option's phrase before the next click and the budget's
    before buying; the first click and sloppy episodes keep the short think."""
    from apo_helpers.apo.sft import expert_demonstration

    short, progress = ExpertAgent(seed=1, skip_options=0.5), ExpertAgent(seed=1, skip_options=0.5, think="progress")
    read_on = 0
    for goal in test_env.goals[:60]:
        plain, told = expert_demonstration(test_env, short, goal), expert_demonstration(test_env, progress, goal)
        assert [t.action for t in plain.turns] == [t.action for t in told.turns]
        clicked = []
        for turn, before in zip(told.turns, plain.turns):
            value = turn.action[len("click["):-1]
            if value in parse_wanted_options(goal.instruction):
                expected = f"after {clicked[-1]}: " if clicked else "the instruction asks for "
                assert turn.think.startswith(expected) and turn.think.endswith(value), (turn.think, goal.instruction)
                clicked.append(value)
            elif turn.action == "click[buy now]" and clicked:
                assert turn.think.startswith(f"after {clicked[-1]}: ") and turn.think.endswith("dollars, buy it")
                read_on += 1
            if turn.action != "click[buy now]" and not clicked:
                assert turn.think == before.think
    assert read_on >= 5
    assert words_after("i need a pot, in black, size 4 inch; my budget is 60.00 dollars", "black") == "size 4 inch"
    assert words_after("i need a pot, in black, size 4 inch; my budget is 60.00 dollars", "4 inch") == \
        "my budget is 60.00 dollars"
    with pytest.raises(ValueError, match="does not ask for 'red'"):
        words_after("i need a pot, in black, and price lower than 9.00 dollars", "red")
    with pytest.raises(ValueError, match="think must be one of"):
        ExpertAgent(think="long")


def test_search_description_is_the_instruction_up_to_its_options_or_budget():
    assert search_description(INSTRUCTION) == INSTRUCTION[:INSTRUCTION.index(", in ")]
    assert search_description("i am shopping for some squat proof, high waist yoga leggings; my budget is 80.00 "
                              "dollars") == "i am shopping for some squat proof, high waist yoga leggings"
    assert search_description("show me a summer dress: lightweight, in purple, size small, under 90.00 dollars") == \
        "show me a summer dress: lightweight"
    assert search_description("red shoes") == "red shoes"  # nothing to cut
    assert search_description("red shoes under 30.00 dollars") == "red shoes under 30.00 dollars"  # no separator


def test_search_description_keeps_every_attribute_and_ranks_targets_as_the_whole_instruction(full_catalog):
    """The description names the product type and every attribute, drops the budget, and BM25 puts each test
    target within the first 10 results as often as the whole instruction does, with 40% fewer words to copy."""
    from apo_helpers.webshop.search import search_engine

    engine, goals = search_engine(full_catalog), full_catalog.split("test")
    described = [search_description(g.instruction) for g in goals]
    for goal, text in zip(goals, described):
        assert goal.instruction.startswith(text) and "dollars" not in text and not text.endswith((",", ";", " "))
        assert goal.product_type in text and all(a in text for a in goal.attributes), (text, goal.instruction)
    top10 = [sum(g.asin in engine.search(q)[:10] for g, q in zip(goals, queries)) / len(goals)
             for queries in ([g.instruction for g in goals], described)]
    assert abs(top10[0] - top10[1]) <= 0.02, top10
    words = [sum(len(q.split()) for q in queries) for queries in ([g.instruction for g in goals], described)]
    assert words[1] < 0.7 * words[0]


def test_search_request_is_the_instruction_without_its_budget():
    assert search_request(INSTRUCTION) == "i need a t-shirt that is slim fit and v neck, in navy, size x-large"
    assert search_request("i am shopping for some yoga leggings, size small; my budget is 80.00 dollars") == \
        "i am shopping for some yoga leggings, size small"
    assert search_request("red shoes") == "red shoes"  # nothing to cut
    assert search_request("red shoes under 30.00 dollars") == "red shoes under 30.00 dollars"  # no separator
    assert search_description(INSTRUCTION) == search_request(INSTRUCTION)[:search_request(INSTRUCTION).index(", in ")]


def test_search_request_keeps_every_option_and_lists_what_the_description_lists(full_catalog):
    """The request asks for the same option values as the instruction, drops only the budget, and (the search
    indexes no option values) BM25 lists the description's first 10 results for nearly every test goal."""
    from apo_helpers.webshop.search import search_engine

    engine, goals = search_engine(full_catalog), full_catalog.split("test")
    requests = [search_request(g.instruction) for g in goals]
    for goal, text in zip(goals, requests):
        assert goal.instruction.startswith(text) and "dollars" not in text and not text.endswith((",", ";", " "))
        assert parse_wanted_options(text) == parse_wanted_options(goal.instruction), (text, goal.instruction)
        assert text.startswith(search_description(goal.instruction))
    same = sum(engine.search(q)[:10] == engine.search(search_description(g.instruction))[:10]
               for g, q in zip(goals, requests))
    assert same >= 0.98 * len(goals), same
    words = [sum(len(q.split()) for q in queries) for queries in ([g.instruction for g in goals], requests)]
    assert words[1] < 0.8 * words[0]


@pytest.mark.parametrize("query", QUERIES)
def test_expert_types_the_search_of_its_query_kind_and_buys_the_same(test_env, query):
    from apo_helpers.analysis.evaluate import taught_query_share
    from apo_helpers.apo.sft import expert_demonstration

    goal = test_env.goals[3]
    turns = expert_demonstration(test_env, ExpertAgent(seed=0, query=query), goal).turns
    think, action = expert_search(goal.instruction, query)
    assert (turns[0].think, turns[0].action) == (think, action)
    assert taught_query_share([expert_demonstration(test_env, ExpertAgent(seed=0, query=query), g)
                               for g in test_env.goals[:5]], query) == 1.0
    assert expert_search(goal.instruction, "description") == ("search for the product described",
                                                              f"search[{search_description(goal.instruction)}]")
    assert expert_search(goal.instruction, "request") == ("search for the product and its options",
                                                          f"search[{search_request(goal.instruction)}]")
    with pytest.raises(ValueError, match="query must be one of"):
        ExpertAgent(query="title")
    with pytest.raises(ValueError, match="query must be one of"):
        expert_search(goal.instruction, "title")
