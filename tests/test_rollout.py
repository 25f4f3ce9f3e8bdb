"""Batched multi-turn rollouts with the REAL tiny Llama (ci sizes): structure, penalties, determinism, batching,
JSONL files, and a model trained to replay one expert episode (the whole pipeline end to end)."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from apo_helpers.apo.sft import expert_demonstrations, tokenize_demonstrations, tokenizer_corpus
from apo_helpers.config import get_profile, seed_everything
from apo_helpers.policy.models import build_tiny_model, stop_token_ids, train_tiny_tokenizer
from apo_helpers.policy.prompts import encode_chat, episode_chats, parse_response
from apo_helpers.policy.rollout import (GREEDY, Sampling, Trajectory, generate_replies, load_trajectories, rollout,
                                        save_trajectories)
from apo_helpers.policy.scoring import collate, token_logprobs
from apo_helpers.webshop.catalog import default_catalog

P = get_profile("ci")
MAX_TURNS = 3


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def catalog():
    return default_catalog()


@pytest.fixture(scope="module")
def demos():
    return expert_demonstrations(P, 20)


@pytest.fixture(scope="module")
def tokenizer(catalog, demos):
    return train_tiny_tokenizer(tokenizer_corpus(catalog, demos, P.policy.window), P.model.vocab_size)


@pytest.fixture(scope="module")
def model(tokenizer):
    seed_everything(0)
    return build_tiny_model(tokenizer, P.model).eval()


@pytest.fixture(scope="module")
def goals(catalog):
    return catalog.split("test")[:6]


@pytest.fixture(scope="module")
def sampled(model, tokenizer, goals):
    seed_everything(1)
    return rollout(model, tokenizer, goals, Sampling(), P.policy, P.policy_env(), max_turns=MAX_TURNS)


def _imitate(model, tokenizer, demo, max_steps: int = 150):
    """Train ``model`` on ``demo``'s chats until teacher-forced greedy decoding reproduces every assistant token."""
    tokenize_demonstrations([demo], tokenizer, P.policy.window)
    ids, attn, mask = collate(demo.input_ids, demo.assistant_mask, tokenizer.pad_token_id)

    def reproduced(loss):
        with torch.no_grad():
            greedy = model(input_ids=ids, attention_mask=attn).logits[:, :-1].argmax(-1)
        return bool(((greedy == ids[:, 1:]) | (mask[:, 1:] == 0)).all()) and loss < 0.05

    return _fit(model, ids, attn, mask, max_steps, reproduced, check_every=10)


@pytest.fixture(scope="module")
def scripted(model, tokenizer, demos):
    """A copy of the tiny model trained on ONE short expert demonstration until it replays it."""
    demo = copy.deepcopy(min(demos, key=lambda d: (len(d.turns), d.goal.index)))
    seed_everything(0)
    trained, steps = _imitate(copy.deepcopy(model), tokenizer, demo)
    return trained, demo, steps


# ---------------------------------------------------------------------------------------------- structure

def test_sampled_rollout_structure(sampled, goals, tokenizer):
    assert len(sampled) == len(goals)
    assert [t.goal for t in sampled] == goals
    for t in sampled:
        assert 1 <= t.num_turns <= MAX_TURNS
        assert len(t.sample_logprobs) == t.num_turns
        for turn, lp in zip(t.turns, t.sample_logprobs):
            assert 1 <= len(lp) <= P.policy.max_new_tokens
            assert all(math.isfinite(x) and x <= 0 for x in lp)
            assert turn.observation and turn.actions and turn.turns_left >= 1
        assert t.generated_tokens == sum(len(lp) for lp in t.sample_logprobs)
        # window=1: one chat per turn, each ending in that turn's reply
        assert P.policy.window == 1
        assert len(t.input_ids) == len(t.assistant_mask) == t.num_turns
        for ids, mask, turn in zip(t.input_ids, t.assistant_mask, t.turns):
            assert len(ids) == len(mask)
            assert (sum(mask) > 0) == bool(turn.response)
        chats = episode_chats(t.turns, P.policy.window)
        assert [encode_chat(tokenizer, c) for c in chats] == list(zip(t.input_ids, t.assistant_mask))
    assert sum(sum(m) for t in sampled for m in t.assistant_mask) > 0


def test_turns_left_counts_down(sampled):
    for t in sampled:
        assert [u.turns_left for u in t.turns] == list(range(MAX_TURNS, MAX_TURNS - t.num_turns, -1))


def test_untrained_replies_fail_to_parse(sampled):
    turns = [u for t in sampled for u in t.turns]
    failed = [u for u in turns if not u.format_ok]
    assert len(failed) >= 0.8 * len(turns)
    for u in failed:
        assert parse_response(u.response)[2] is False
        assert u.action == ""
        assert u.valid is False
        assert u.reward == P.policy.format_penalty == -0.1
    for t in sampled:
        assert t.reward == pytest.approx(sum(u.reward for u in t.turns))
        assert not t.success and t.env_reward == 0.0
        assert t.num_turns == MAX_TURNS                    # nothing bought: truncated after max_turns
        assert t.invalid_actions == sum(not u.valid for u in t.turns)


def test_replies_stop_at_answer(sampled):
    for t in sampled:
        for u, lp in zip(t.turns, t.sample_logprobs):
            assert u.response.count("</answer>") <= 1
            if "</answer>" in u.response:
                assert u.response.endswith("</answer>")


# ---------------------------------------------------------------------------------------------- determinism, batching

def _summary(trajectories):
    return [[(u.response, u.action, u.valid, u.reward) for u in t.turns] for t in trajectories]


def test_greedy_rollout_is_deterministic(scripted, tokenizer, goals):
    trained = scripted[0]
    first = rollout(trained, tokenizer, goals, GREEDY, P.policy, P.policy_env(), max_turns=MAX_TURNS)
    second = rollout(trained, tokenizer, goals, GREEDY, P.policy, P.policy_env(), max_turns=MAX_TURNS)
    assert [dataclasses.asdict(t) for t in first] == [dataclasses.asdict(t) for t in second]
    assert trained.training is False


def test_rollout_restores_training_mode(model, tokenizer, goals):
    model.train()
    try:
        rollout(model, tokenizer, goals[:1], GREEDY, P.policy, P.policy_env(), max_turns=1)
        assert model.training
    finally:
        model.eval()


def test_batched_equals_one_at_a_time(scripted, tokenizer, goals):
    trained = scripted[0]
    batched = rollout(trained, tokenizer, goals, GREEDY, dataclasses.replace(P.policy, batch_size=6), P.policy_env(),
                      max_turns=MAX_TURNS)
    single = rollout(trained, tokenizer, goals, GREEDY, dataclasses.replace(P.policy, batch_size=1), P.policy_env(),
                     max_turns=MAX_TURNS)
    assert [[u.action for u in t.turns] for t in batched] == [[u.action for u in t.turns] for t in single]
    assert _summary(batched) == _summary(single)
    # the trained model writes well-formed replies on unseen goals too, so this compares real actions
    assert sum(u.format_ok for t in batched for u in t.turns) > 0
    for b, s in zip(batched, single):
        for lb, ls in zip(b.sample_logprobs, s.sample_logprobs):
            assert len(lb) == len(ls)
            assert lb == pytest.approx(ls, abs=1e-3)


def test_batch_smaller_than_goals_plays_all(model, tokenizer, goals):
    played = rollout(model, tokenizer, goals[:5], GREEDY, dataclasses.replace(P.policy, batch_size=2), P.policy_env(),
                     max_turns=1)
    assert [t.goal for t in played] == goals[:5]
    assert all(t.num_turns == 1 and len(t.sample_logprobs) == 1 for t in played)


def test_progress_is_updated_per_chunk(model, tokenizer, goals):
    class Counter:
        n = 0

        def update(self, k):
            self.n += k

    counter = Counter()
    rollout(model, tokenizer, goals[:3], GREEDY, dataclasses.replace(P.policy, batch_size=2), P.policy_env(),
            max_turns=1, progress=counter)
    assert counter.n == 3


# ---------------------------------------------------------------------------------------------- files

def test_jsonl_round_trip(sampled, tmp_path):
    path = save_trajectories(sampled, tmp_path / "t.jsonl")
    assert len(path.read_text().splitlines()) == len(sampled)
    loaded = load_trajectories(path)
    assert all(isinstance(t, Trajectory) for t in loaded)
    assert [dataclasses.asdict(t) for t in loaded] == [dataclasses.asdict(t) for t in sampled]
    assert [t.reward for t in loaded] == [t.reward for t in sampled]


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", '"just a string"', "null", '{"goal": {}}'])
def test_corrupt_jsonl_line_is_named(sampled, tmp_path, bad):
    path = tmp_path / "t.jsonl"
    lines = [t.to_json() for t in sampled[:3]]
    lines.insert(2, bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="line 3"):
        load_trajectories(path)


def test_blank_lines_are_skipped(sampled, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + sampled[0].to_json() + "\n\n" + sampled[1].to_json() + "\n")
    assert len(load_trajectories(path)) == 2


# ---------------------------------------------------------------------------------------------- end to end

def test_scripted_model_replays_the_expert(scripted, tokenizer):
    trained, demo, steps = scripted
    assert steps < 150, "imitation did not converge"
    policy = dataclasses.replace(P.policy, max_new_tokens=64)  # the demo's query is the whole instruction
    (played,) = rollout(trained, tokenizer, [demo.goal], GREEDY, policy, P.policy_env())
    assert [u.action for u in played.turns] == [u.action for u in demo.turns]
    for got, want in zip(played.turns, demo.turns):
        assert got.format_ok and got.valid
        assert parse_response(got.response)[:2] == parse_response(want.response)[:2]
        assert got.observation == want.observation
    assert played.success == demo.success is True
    assert played.reward == pytest.approx(demo.reward)
    assert played.env_reward == pytest.approx(demo.env_reward)
    assert played.breakdown == demo.breakdown
    # the replies stopped on </answer>: no token after it was generated
    stop = tokenizer.convert_tokens_to_ids("</answer>")
    for u, want, lp in zip(played.turns, demo.turns, played.sample_logprobs):
        assert u.response.endswith("</answer>")
        # the model generated exactly the demonstration's tokens (decoding adds the space after "[", so compare
        # with the demonstration's reply, not a re-encoding of the decoded text)
        assert len(lp) == len(tokenizer.encode(want.response, add_special_tokens=False))
        assert tokenizer.encode(want.response, add_special_tokens=False)[-1] == stop
        assert all(x > -1.0 for x in lp)                   # the trained model is confident of every token


def test_rollout_continues_from_a_prefix(scripted, tokenizer):
    """The expert's first turns replayed as a prefix: the model plays the rest of the demonstration from there."""
    trained, demo, _ = scripted
    policy = dataclasses.replace(P.policy, max_new_tokens=64)
    k = len(demo.turns) - 1
    (played,) = rollout(trained, tokenizer, [demo.goal], GREEDY, policy, P.policy_env(), prefixes=[demo.turns[:k]])
    assert [u.action for u in played.turns] == [u.action for u in demo.turns]
    assert played.turns[k].observation == demo.turns[k].observation        # the replay restored the state
    assert played.turns[k].turns_left == demo.turns[k].turns_left
    assert played.turns[0] is not demo.turns[0]                            # copies: the demonstration is untouched
    assert played.sample_logprobs[:k] == [[]] * k and len(played.sample_logprobs[k]) > 0
    assert played.success and played.reward == pytest.approx(demo.reward)


def test_prefixes_must_match_the_goals_and_leave_something_to_play(scripted, tokenizer):
    trained, demo, _ = scripted
    with pytest.raises(ValueError, match="1 prefixes for 2 goals"):
        rollout(trained, tokenizer, [demo.goal, demo.goal], GREEDY, P.policy, P.policy_env(), prefixes=[[]])
    with pytest.raises(ValueError, match=f"goal {demo.goal.split}/{demo.goal.index} ends the episode"):
        rollout(trained, tokenizer, [demo.goal], GREEDY, P.policy, P.policy_env(), prefixes=[demo.turns])


# ---------------------------------------------------------------------------------------------- stop strings

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_stop_string_replies_do_not_count_padding():
    """With a tokenizer where </answer> is several tokens, generation stops on the text; a reply that stops before
    the others in its batch is then padded, and those pads are not tokens of the reply (nor log-probs of it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    replies = ["<think> x </think> <answer> click[buy now] </answer>",
               "<think> a longer reason to think about </think> <answer> search[yoga mat for the gym] </answer>"]
    corpus = replies * 20 + ["a", "b", "assistant", "user"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    fast.padding_side = "left"
    assert stop_token_ids(fast) == [fast.eos_token_id]        # </answer> is not one token: stop on the text

    chats = [[{"role": "user", "content": "a"}, {"role": "assistant", "content": replies[0]}],
             [{"role": "user", "content": "b"}, {"role": "assistant", "content": replies[1]}]]
    encoded = [encode_chat(fast, c) for c in chats]
    ids, attn, mask = collate([e[0] for e in encoded], [e[1] for e in encoded], fast.pad_token_id)
    seed_everything(0)
    model = build_tiny_model(fast, P.model)
    _, steps = _imitate_batch(model, ids, attn, mask)
    config = dataclasses.replace(P.policy, max_new_tokens=64)
    texts, logprobs, _ = generate_replies(model, fast, [c[:1] for c in chats], GREEDY, config)
    assert texts == replies
    for reply, lp in zip(replies, logprobs):
        assert len(lp) == len(fast.encode(reply, add_special_tokens=False))
        assert all(x > -1.0 for x in lp)


def _imitate_batch(model, ids, attn, mask, max_steps: int = 300):
    return _fit(model, ids, attn, mask, max_steps, lambda loss: loss < 0.02, check_every=1)


def _fit(model, ids, attn, mask, max_steps, done, check_every):
    """Masked cross-entropy steps until ``done(loss)`` (checked every ``check_every`` steps)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(max_steps):
        logp = token_logprobs(model, ids, attn)
        loss = -(logp * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % check_every == check_every - 1 and done(loss.item()):
            break
    return model.eval(), step + 1



# ---------------------------------------------------------------------------------------------- where to explore

def test_greedy_pages_type_the_greedy_query_and_sample_the_clicks(scripted, tokenizer):
    """One batch holding an episode on the search page (greedy there) and one on a results page (sampled): two
    generate calls, merged back in order."""
    trained, demo, _ = scripted
    policy = dataclasses.replace(P.policy, max_new_tokens=64)
    (greedy,) = rollout(trained, tokenizer, [demo.goal], GREEDY, policy, P.policy_env())
    seed_everything(5)
    fresh, resumed = rollout(trained, tokenizer, [demo.goal, demo.goal], Sampling(greedy_pages=("search",)), policy,
                             P.policy_env(), prefixes=[[], demo.turns[:1]])
    assert fresh.turns[0].greedy and fresh.turns[0].response == greedy.turns[0].response
    assert fresh.num_turns > 1 and not any(u.greedy for u in fresh.turns[1:])
    assert resumed.turns[0].action == demo.turns[0].action and not resumed.turns[1].greedy
    assert resumed.turns[1].observation == demo.turns[1].observation
    assert all(u.greedy for u in greedy.turns)
    seed_everything(5)  # the mirror (``APOConfig.greedy_clicks``): the query sampled, every click greedy
    (clicking,) = rollout(trained, tokenizer, [demo.goal], Sampling(greedy_pages=("results", "item", "detail")),
                          policy, P.policy_env())
    assert clicking.num_turns > 1 and not clicking.turns[0].greedy and all(u.greedy for u in clicking.turns[1:])


def _played_twice(scripted, tokenizer, sampling: Sampling, episodes: int, max_turns: int, seed: int):
    """``episodes`` rollouts of the scripted model's goal, played twice from ``seed``: the drawn clicks repeat."""
    trained, demo, _ = scripted
    policy = dataclasses.replace(P.policy, max_new_tokens=64)
    played = []
    for _ in range(2):
        seed_everything(seed)
        played.append(rollout(trained, tokenizer, [demo.goal] * episodes, sampling, policy, P.policy_env(),
                              max_turns=max_turns))
    assert [[u.action for u in t.turns] for t in played[0]] == [[u.action for u in t.turns] for t in played[1]]
    return played[0]


def test_explored_turns_are_written_for_a_drawn_click(scripted, tokenizer):
    from apo_helpers.policy.prompts import format_response
    from apo_helpers.webshop.agents import explain, explorable_actions

    _, demo, _ = scripted
    played = _played_twice(scripted, tokenizer, Sampling(greedy_pages=("search",), explore=1.0), 3, 4, seed=2)
    for t in played:
        assert t.num_turns > 1
        for u, lp in zip(t.turns, t.sample_logprobs):
            if u.actions == ["search[<query>]"]:  # the search page (also after a drawn `back to search`)
                assert u.greedy and not u.explored and lp  # generated (greedily)
                continue
            page = "item" if "click[buy now]" in u.actions else "results"
            assert u.explored and not u.greedy
            assert u.action in explorable_actions(u.actions) and u.format_ok and u.valid
            assert u.response == format_response(explain(u.action, page), u.action)
            assert lp == []  # nothing was generated for it
    assert any(u.explored for t in played for u in t.turns)


def test_explore_once_draws_one_click_per_episode(scripted, tokenizer):
    """With ``explore_once`` the first results or item page is answered by a drawn click (explore=1.0), every
    later page by the model; without it every such page is drawn."""
    trained, demo, _ = scripted
    policy = dataclasses.replace(P.policy, max_new_tokens=64)
    seed_everything(2)
    once_sampling = Sampling(greedy_pages=("search",), explore=1.0, explore_once=True)
    once = rollout(trained, tokenizer, [demo.goal] * 4, once_sampling, policy, P.policy_env(), max_turns=5)
    for t in once:
        explored = [k for k, u in enumerate(t.turns) if u.explored]
        assert explored == [1]  # turn 0 searches (greedy), turn 1 is the results page
        assert all(lp for u, lp in zip(t.turns[2:], t.sample_logprobs[2:]) if not u.explored)  # generated
    seed_everything(2)
    every = rollout(trained, tokenizer, [demo.goal] * 4, Sampling(greedy_pages=("search",), explore=1.0), policy,
                    P.policy_env(), max_turns=5)
    assert any(sum(u.explored for u in t.turns) > 1 for t in every)


def test_explore_options_draws_values_of_the_unselected_options(scripted, tokenizer):
    """``explore_options=1.0``: every item-page turn with an option still unselected is a drawn click of one of
    those options' values, in the expert's words; once every option has a value the model answers again, and
    results pages are never drawn. Seeded draws repeat."""
    from apo_helpers.policy.prompts import format_response
    from apo_helpers.webshop.agents import explain
    from apo_helpers.webshop.env import WebShopEnv

    _, demo, _ = scripted
    played = _played_twice(scripted, tokenizer, Sampling(greedy_pages=("search",), explore_options=1.0), 4, 8, seed=4)
    drawn = 0
    for t in played:
        env = WebShopEnv(split=demo.goal.split, catalog=default_catalog(), config=P.policy_env(), max_turns=8)
        env.reset(options={"goal": demo.goal})
        for u, lp in zip(t.turns, t.sample_logprobs):
            unselected = env.unselected_option_actions
            assert u.explored == bool(unselected)  # rate 1: drawn exactly where an option is still unselected
            if u.explored:
                drawn += 1
                assert u.action in unselected and u.valid and lp == []
                assert u.response == format_response(explain(u.action, "item"), u.action)
            env.step(u.action)
    assert drawn > 0


def test_policy_option_draw_clicks_a_value_the_policy_weighs(scripted, tokenizer):
    """``option_draw="policy"``: the drawn turns are still clicks of unselected option values in the expert's words
    (nothing generated, seeded draws repeat), and each is drawn with the probability the model gives its reply:
    ``reply_logprobs`` is the chat's masked log-prob sum, and near temperature 0 the draw is its argmax."""
    from apo_helpers.policy.prompts import Turn, build_messages, format_response, prompt_actions
    from apo_helpers.policy.rollout import policy_option_click, reply_logprobs
    from apo_helpers.webshop.agents import explain
    from apo_helpers.webshop.env import WebShopEnv

    trained, demo, _ = scripted
    sampling = Sampling(greedy_pages=("search",), explore_options=1.0, option_draw="policy")
    played = _played_twice(scripted, tokenizer, sampling, 4, 8, seed=4)
    drawn = [u for t in played for u in t.turns if u.explored]
    assert drawn and all(u.response == format_response(explain(u.action, "item"), u.action) and u.valid for u in drawn)

    env = WebShopEnv(split=demo.goal.split, catalog=default_catalog(), config=P.policy_env(), max_turns=8)
    obs, info = env.reset(options={"goal": demo.goal})
    history = []
    while not env.unselected_option_actions:  # replay the demonstration to its first item page with options
        turn = demo.turns[len(history)]
        history.append(dataclasses.replace(turn))
        obs, _, _, _, info = env.step(turn.action)
    clicks = env.unselected_option_actions
    assert len(clicks) > 1  # a choice to make
    turns = history + [Turn(obs, prompt_actions(info["available_actions"]), info["turns_left"])]
    replies = [format_response(explain(c, "item"), c) for c in clicks]
    logp = reply_logprobs(trained, tokenizer, turns, replies, P.policy)
    for k, reply in enumerate(replies):  # the same sum, one chat at a time
        chat = build_messages(turns[:-1] + [dataclasses.replace(turns[-1], response=reply)], P.policy.window, True)
        ids, mask = encode_chat(tokenizer, chat)
        ids_t, attn, loss = collate([ids], [mask], tokenizer.pad_token_id)
        with torch.no_grad():
            expected = (token_logprobs(trained, ids_t, attn) * loss[:, 1:]).sum()
        assert float(logp[k]) == pytest.approx(float(expected), abs=1e-3)
    best = clicks[int(logp.argmax())]
    assert {policy_option_click(trained, tokenizer, turns, clicks, 1e-6, P.policy) for _ in range(5)} == {best}


def test_explore_results_draws_a_product_of_the_results_page(scripted, tokenizer):
    """``explore_results=1.0``: every results-page turn is a drawn click on one of the page's products (never paging
    or going back), in the expert's words, nothing generated for it; item pages are left to the model. Seeded draws
    repeat."""
    from apo_helpers.policy.prompts import format_response
    from apo_helpers.webshop.agents import explain, product_clicks

    _, demo, _ = scripted
    played = _played_twice(scripted, tokenizer, Sampling(greedy_pages=("search",), explore_results=1.0), 4, 6, seed=3)
    results_turns = 0
    for t in played:
        for u, lp in zip(t.turns, t.sample_logprobs):
            if "click[buy now]" in u.actions or u.actions == ["search[<query>]"]:
                assert not u.explored  # item and search pages: the model's
                continue
            results_turns += 1
            assert u.explored and lp == [] and u.valid
            assert u.action in product_clicks(u.actions) and u.action not in ("click[next >]", "click[back to search]")
            assert u.response == format_response(explain(u.action, "results"), u.action)
    assert results_turns > 0


def test_product_clicks_leave_out_paging_and_going_back():
    from apo_helpers.webshop.agents import product_clicks

    available = ["click[back to search]", "click[next >]", "click[< prev]", "click[b098cf9e3p]", "click[item 2]",
                 "click[description]"]
    assert product_clicks(available) == ["click[b098cf9e3p]", "click[item 2]"]


def test_explore_search_answers_the_search_page_with_the_instruction(scripted, tokenizer):
    """``explore_search=1.0``: every sampled search turn is written for a search of the whole instruction, nothing
    generated for it; greedy search turns and the other pages are left to the model; with ``explore_once`` the
    drawn search is the episode's one drawn turn, so no click is drawn after it."""
    from apo_helpers.policy.prompts import format_response

    trained, demo, _ = scripted
    policy = dataclasses.replace(P.policy, max_new_tokens=64)
    seed_everything(2)
    played = rollout(trained, tokenizer, [demo.goal] * 3, Sampling(explore_search=1.0, explore=1.0,
                                                                  explore_once=True),
                     policy, P.policy_env(), max_turns=4)
    query = f"search[{demo.goal.instruction}]"
    for t in played:
        first, rest = t.turns[0], t.turns[1:]
        assert first.explored and first.action == query and first.valid and t.sample_logprobs[0] == []
        assert first.response == format_response("search for the instruction", query)
        assert rest and not any(u.explored for u in rest)  # explore_once: the search was the one drawn turn
        assert all(lp for lp in t.sample_logprobs[1:])  # generated
    seed_everything(2)
    (greedy_search,) = rollout(trained, tokenizer, [demo.goal], Sampling(explore_search=1.0, greedy_pages=("search",)),
                               policy, P.policy_env(), max_turns=2)
    assert greedy_search.turns[0].greedy and not greedy_search.turns[0].explored


# ---------------------------------------------------------------------------------------------- sampled = trained

def test_training_chats_hold_the_sampled_tokens(scripted, tokenizer):
    """The reply text re-encodes to the generated tokens, so scoring the training chats gives back the log-probs
    of generation. With the tokenizer's earlier decoder ("click[ item 1]") every turn failed this. (A sampled reply
    can still be written in tokens the tokenizer would not choose, "[" + "find" for "[" + "▁find": rare for a
    trained pi_ref, about 0.4% of replies at temperature 1, and counted in ``token_mismatches``.)"""
    from apo_helpers.policy.scoring import sequence_logprob_sums
    from tokenizers import decoders

    trained, demo, _ = scripted
    policy = dataclasses.replace(P.policy, max_new_tokens=64)
    (played,) = rollout(trained, tokenizer, [demo.goal], GREEDY, policy, P.policy_env())
    assert played.token_mismatches == 0 and all(played.reply_ids)
    ids, attn, mask = collate(played.input_ids, played.assistant_mask, tokenizer.pad_token_id)
    with torch.no_grad():
        scored = sequence_logprob_sums(trained, ids, attn, mask)
    assert scored.tolist() == pytest.approx([sum(lp) for lp in played.sample_logprobs], abs=1e-3)
    plain = copy.deepcopy(tokenizer)
    plain.backend_tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    (again,) = rollout(trained, plain, [demo.goal], GREEDY, policy, P.policy_env())
    assert again.reply_ids == played.reply_ids and again.token_mismatches == again.num_turns > 1


def test_a_saved_tokenizer_gets_the_round_trip_decoder(scripted, tokenizer, tmp_path):
    from tokenizers import decoders

    from apo_helpers.policy.models import load_policy, save_policy

    trained, _, _ = scripted
    plain = copy.deepcopy(tokenizer)
    plain.backend_tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    save_policy(trained, plain, tmp_path / "old")
    _, loaded = load_policy(tmp_path / "old")
    ids = loaded("<think> item 1 best </think> <answer> click[item 1] </answer>", add_special_tokens=False)["input_ids"]
    text = loaded.decode(ids, skip_special_tokens=True)
    assert "click[item 1]" in text and loaded(text, add_special_tokens=False)["input_ids"] == ids


# ---------------------------------------------------------------------------------------------- stop at repeats

def _turn(observation: str, action: str) -> "Turn":
    from apo_helpers.policy.prompts import Turn
    return Turn(observation, [], 5, action=action)


def test_repeats_previous_flags_only_a_repeat_that_left_the_page_unchanged():
    from apo_helpers.policy.rollout import repeats_previous

    item = _turn("item page", "click[red]")
    assert not repeats_previous([_turn("results", "click[item 1]"), item], "item page")  # a first click
    assert not repeats_previous([_turn("item page", "click[blue]"), item], "item page")  # another value
    assert repeats_previous([_turn("item page", "click[red]"), item], "item page")  # red again, same page
    assert not repeats_previous([_turn("results 1", "click[next >]"), _turn("results 2", "click[next >]")],
                                "results 3")  # the page moved on
    assert not repeats_previous([_turn("item page", ""), _turn("item page", "")], "item page")  # unparsed
    assert not repeats_previous([item], "item page")


def _looping_replies(action_at_item: str):
    """Replies that search, open the first product, then type ``action_at_item`` on every later turn."""
    from apo_helpers.policy.prompts import format_response

    def replies(model, tokenizer, histories, sampling, config):
        out = []
        for turns in histories:
            k = len(turns) - 1
            action = ("search[usb c cable]", "click[item 1]")[k] if k < 2 else action_at_item
            out.append(format_response("scripted", action))
        return out, [[-0.1]] * len(out), [[1]] * len(out)
    return replies


@pytest.mark.parametrize("action", ["click[no such button]", "OPTION"])
def test_stop_repeats_ends_a_loop_unbought(monkeypatch, goals, tokenizer, model, action):
    """A reply typed again on the page it left unchanged (an invalid click, or an option value clicked twice) ends
    the episode at the repeat with WebShop's reward 0 under ``stop_repeats``; without it the loop runs to the limit."""
    import apo_helpers.policy.rollout as rollout_module
    from apo_helpers.webshop.env import WebShopEnv

    goal = goals[0]
    if action == "OPTION":  # a value of the first product's options, found by playing the scripted opening
        env = WebShopEnv(split=goal.split, catalog=default_catalog(), config=P.policy_env(), max_turns=8)
        env.reset(options={"goal_index": goal.index})
        env.step("search[usb c cable]")
        env.step("click[item 1]")
        assert env.unselected_option_actions, "the first usb c cable offers no option: pick another query"
        action = env.unselected_option_actions[0]
    monkeypatch.setattr(rollout_module, "_replies", _looping_replies(action))
    stopped, = rollout(model, tokenizer, [goal], Sampling(stop_repeats=True), P.policy, P.policy_env(), max_turns=8)
    assert [u.action for u in stopped.turns][2:] == [action, action]  # ended at the first repeat
    assert stopped.stopped_repeat and stopped.env_reward == 0.0 and not stopped.success
    assert len(stopped.input_ids) == stopped.num_turns == 4  # its turns still train
    looped, = rollout(model, tokenizer, [goal], Sampling(), P.policy, P.policy_env(), max_turns=8)
    assert looped.num_turns == 8 and not looped.stopped_repeat and looped.reward == 0.0
    priced, = rollout(model, tokenizer, [goal], Sampling(repeat_penalty=0.1), P.policy, P.policy_env(), max_turns=8)
    assert priced.num_turns == 8 and not priced.stopped_repeat  # priced, not stopped
    assert [u.reward for u in priced.turns] == pytest.approx([0.0] * 3 + [-0.1] * 5)  # turns 4 to 8 repeat turn 3
    assert priced.reward == pytest.approx(-0.5) and priced.env_reward == 0.0
    assert (stopped.repeats, looped.repeats, priced.repeats) == (1, 5, 5)
    assert [u.repeated for u in looped.turns] == [False] * 3 + [True] * 5  # the first click is not a repeat
