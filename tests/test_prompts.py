"""Prompt rendering, the position record, and seeded sampling."""

from __future__ import annotations

import pytest

from helpers.core import prompts, tasks
from helpers.core.offline_models import gpt2_tokenizer
from helpers.core.prompts import Demo, build_prompt


@pytest.fixture(scope="module")
def tok():
    return gpt2_tokenizer()


def test_hand_computed_positions_gpt2(tok):
    # Review(0) :(1) ␣good(2) \n(3) Sent(4) iment(5) :(6) ␣Positive(7) \n(8) Review(9) :(10) ␣bad(11) \n(12) Sent(13) iment(14) :(15)
    p = build_prompt(tok, "sst2", [Demo("good", 1)], Demo("bad", 0), bos=False)
    assert p.text == "Review: good\nSentiment: Positive\nReview: bad\nSentiment:"
    assert p.tokens.tolist()[7] == 33733  # ' Positive'
    assert p.label_pos == [7] and p.label_class == [1] and p.label_spans == [(7, 8)]
    assert p.format_pos == [0, 1, 3, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15]
    assert p.text_spans == [(2, 3)] and p.query_span == (11, 12)
    assert p.q == 15 == len(p) - 1 and p.gold == 0
    assert p.anchor_pos == [0, 1, 3, 4, 5, 6, 7, 8]


def test_anchor_keeps_every_label_token_and_the_newline_after(tok):
    """Hidden_anchor keeps the whole "Answer Type: <label>" line, also for a multi-token label word that comes last."""
    # " Abbreviation" is 3 GPT-2 tokens; as the last demonstration its newline precedes the query
    p = build_prompt(tok, "trec", [Demo("who?", 3), Demo("what is NASA?", 0)], Demo("why?", 2), bos=False)
    (a, b) = p.label_spans[-1]
    assert b - a == 3 and tok.decode(p.tokens[a:b].tolist()) == " Abbreviation"
    assert set(range(a, b)) <= set(p.anchor_pos)
    assert b in p.anchor_pos and tok.decode([int(p.tokens[b])]) == "\n"
    assert all(i not in p.anchor_pos for s, e in p.text_spans for i in range(s, e))
    assert max(p.anchor_pos) == b  # nothing of the query


def test_bos_shifts_every_position(tok):
    a = build_prompt(tok, "sst2", [Demo("good", 1)], "bad", bos=False)
    b = build_prompt(tok, "sst2", [Demo("good", 1)], "bad", bos=True)
    assert b.tokens[0].item() == tok.bos_token_id and b.tokens[1:].tolist() == a.tokens.tolist()
    assert b.label_pos == [x + 1 for x in a.label_pos] and b.q == a.q + 1
    assert b.format_pos == [x + 1 for x in a.format_pos] and 0 in b.anchor_pos


def test_record_decodes_back_to_the_pieces(tiny_model):
    task = tasks.get_task("trec")
    demos = [Demo("What is the capital of France ?", 4), Demo("Who wrote Hamlet ?", 3), Demo("What does NASA stand for ?", 0)]
    p = build_prompt(tiny_model, task, demos, Demo("How far is the moon ?", 5))
    dec = lambda a, b: tiny_model.tokenizer.decode(p.tokens[a:b])  # noqa: E731
    lids = tasks.label_token_ids(tiny_model.tokenizer, task)
    for k, d in enumerate(demos):
        assert p.tokens[p.label_pos[k]].item() == lids[d.label]
        assert dec(*p.label_spans[k]) == " " + task.label_words[d.label]
        assert dec(*p.text_spans[k]).strip() == d.text
    assert p.label_spans[2][1] - p.label_spans[2][0] > 1  # ' Abbreviation' spans several GPT-2 tokens
    assert dec(*p.query_span).strip() == "How far is the moon ?"
    assert dec(p.q, p.q + 1) == ":"
    fmt = "".join(tiny_model.tokenizer.decode(p.tokens[i]) for i in p.format_pos)
    assert fmt == ("Question:\nAnswer Type:\n" * 3) + "Question:\nAnswer Type:"


def test_demo_sampling_is_seeded_nested_and_shuffled():
    train = tasks.load_split("agnews", "train")
    a = prompts.sample_demos(train, "agnews", 2, seed=42)
    b = prompts.sample_demos(train, "agnews", 2, seed=42)
    c = prompts.sample_demos(train, "agnews", 2, seed=43)
    assert a == b and a != c
    assert sorted(d.label for d in a) == [0, 0, 1, 1, 2, 2, 3, 3]
    d1 = prompts.class_draws(train, "agnews", 1, 42)
    d5 = prompts.class_draws(train, "agnews", 5, 42)
    assert all(x[0] == y[0] for x, y in zip(d1, d5))  # 1-shot demos are the first of the 5-shot draws
    ex = prompts.sample_demos(train, "agnews", 1, 42, exclude=[i for per in d1 for i in per])
    assert not {d.idx for d in ex} & {i for per in d1 for i in per}
    orders = {tuple(d.label for d in prompts.sample_demos(train, "agnews", 1, s)) for s in range(42, 52)}
    assert len(orders) > 1  # order is shuffled, not grouped by class


def test_demonstrations_follow_the_seeded_training_pool():
    """The authors' draw: shuffle the training pool with the seed, take examples in that order."""
    import numpy as np

    for name in ("sst2", "agnews", "tweet_emotion"):
        train = tasks.load_split(name, "train")
        labels = np.asarray(train["label"])
        for seed in (42, 43):
            pool = np.random.default_rng(seed).permutation(len(train))
            first = {}
            for rank, i in enumerate(pool):
                first.setdefault(int(labels[i]), (rank, int(i)))
            expect = [i for _, i in sorted(first.values())]  # first example of each class, in pool order
            assert [d.idx for d in prompts.sample_demos(train, name, 1, seed)] == expect
    # so the class order depends on the task, not only on the seed and the number of classes
    # (the earlier draw gave every 4-class task the same class order for a seed)
    order = {name: [[d.label for d in prompts.sample_demos(tasks.load_split(name, "train"), name, 1, s)]
                    for s in (42, 43, 44, 45, 46)] for name in ("agnews", "tweet_emotion")}
    assert order["agnews"] != order["tweet_emotion"]


def test_test_sample_is_seeded_min_n():
    test = tasks.load_split("trec", "test")
    a = prompts.sample_test(test, 10000, 42)
    assert len(a) == len(test) == 500
    assert prompts.sample_test(test, 7, 42) == a[:7]
    assert prompts.sample_test(test, 7, 43) != a[:7]


def test_over_long_inputs_are_dropped_and_counted(tiny_model):
    demos = [Demo("short", 0), Demo("also short", 1)]
    queries = [Demo("tiny", 0), Demo("word " * 200, 1), Demo("small", 1)]
    kept, dropped = prompts.build_prompts(tiny_model, "sst2", demos, queries, max_len=60)
    assert dropped == 1 and [p.query.text for p in kept] == ["tiny", "small"]


def test_demonstrations_longer_than_the_context_drop_every_prompt_after_building_one(tiny_model, monkeypatch):
    """Demonstrations that alone pass the context make every prompt over-long: all are counted as dropped, the
    same as building each one finds, but only the first is built (a huge k_per_class is refused at once)."""
    demos = [Demo("word " * 40, 0), Demo("word " * 40, 1)]
    queries = [Demo(f"query {i}", i % 2) for i in range(30)]
    built = []
    real = prompts.build_prompt
    monkeypatch.setattr(prompts, "build_prompt", lambda *a, **k: built.append(1) or real(*a, **k))
    kept, dropped = prompts.build_prompts(tiny_model, "sst2", demos, queries, max_len=60)
    assert (kept, dropped) == ([], 30) and len(built) == 1
    assert all(len(real(tiny_model, "sst2", demos, q)) > 60 for q in queries)  # what building each would say
    built.clear()
    kept, dropped = prompts.build_prompts(tiny_model, "sst2", demos, queries, max_len=200)  # they fit: all built
    assert dropped == 0 and len(kept) == len(built) == 30
    with pytest.raises(prompts.PromptError, match="all 3 prompts are longer than"):
        prompts.make_icl_set(tiny_model, "sst2", 0, 3, k_per_class=2000)


def test_label_and_text_spans_of_many_demonstrations_match_a_by_hand_scan(tiny_model):
    """The spans come from one pass over the tokens (linear in the prompt); a scan per demonstration agrees."""
    demos = [Demo(f"text number {i}", i % 2) for i in range(40)]
    p = build_prompt(tiny_model, "sst2", demos, Demo("the query", 0))
    shift = 1 if p.bos else 0
    kinds = p.kinds[shift:]
    assert len(p.label_pos) == 40
    for k in range(40):
        a, b = p.label_spans[k]
        assert p.label_pos[k] == a and all(kinds[i - shift] == prompts.LABEL for i in range(a, b))
        t0, t1 = p.text_spans[k]
        assert all(kinds[i - shift] == prompts.TEXT for i in range(t0, t1)) and t0 < t1 < a
    assert p.label_pos == sorted(p.label_pos) and p.text_spans[-1][1] <= p.demo_end <= p.query_span[0]


def test_pad_batch_right_pads():
    tok = gpt2_tokenizer()
    ps = [build_prompt(tok, "sst2", [Demo("good", 1)], q, bos=False) for q in ("bad", "a much longer review text")]
    t, q = prompts.pad_batch(ps, pad_id=0)
    assert t.shape == (2, max(len(p) for p in ps))
    assert t[0, : len(ps[0])].tolist() == ps[0].tokens.tolist() and (t[0, len(ps[0]):] == 0).all()
    assert q.tolist() == [p.q for p in ps]
