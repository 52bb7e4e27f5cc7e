"""helpers/core/seeds.py: each named stream gives the draw the collection has always used, and a bad name or a
missing index is refused with what to do."""

import pytest

from helpers.core.seeds import STREAMS, stream_seed


@pytest.mark.parametrize("seed", [0, 42, 46, 70_001])
def test_streams_reproduce_the_rules_they_replace(seed):
    for i in (0, 1, 7):
        assert stream_seed("query_demos", seed, i) == seed * 100_003 + i
        assert stream_seed("unrelated_demos", seed, i) == seed * 1000 + i + 1
        assert stream_seed("random_keep", seed, i) == seed * 1000 + i
    assert stream_seed("control_saliency", seed) == seed + 500
    assert stream_seed("ranking", seed) == seed + 1000
    assert stream_seed("fresh", seed) == seed + 1000
    assert stream_seed("two_way", seed) == seed + 2000


def test_a_streams_draws_never_meet_the_run_seeds():
    run = range(42, 47)  # the profiles' seeds
    for name, s in STREAMS.items():
        drawn = {stream_seed(name, r, 0) if s.per_item else stream_seed(name, r) for r in run}
        assert not drawn & set(run), name


def test_bad_stream_or_index_is_refused():
    with pytest.raises(KeyError, match="unknown seed stream 'rank'.*ranking"):
        stream_seed("rank", 42)
    with pytest.raises(ValueError, match="needs item index"):
        stream_seed("query_demos", 42)
    with pytest.raises(ValueError, match="takes no item index"):
        stream_seed("ranking", 42, 3)
