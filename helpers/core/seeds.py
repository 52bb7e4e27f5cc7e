"""Named seed streams: every draw that is not a run's own seed comes from here.

A run has seeds (the profile's, e.g. 42-46). Some steps need draws that must never meet the evaluation prompts of
those seeds: the prompts that rank heads are not the prompts the heads are then ablated on, and each query of the
flow runs has its own demonstrations. Each such draw is a *stream*: a name, and a rule that turns the run's seed
(and an index, for per-item streams) into the seed of the draw. The rules are the ones the collection has always
used, so the draws, and every stored result, are unchanged; what changes is that each rule is written once, with
its name and reason, and a reader can look up where a number came from.

========================  =======================  =====================================================
stream                    seed of the draw         what it draws
========================  =======================  =====================================================
``query_demos``           ``seed * 100003 + i``    query i's own demonstrations (the flow runs, notebook 01)
``unrelated_demos``       ``seed * 1000 + i + 1``  prompt i's demonstrations on an unrelated task (two towers)
``random_keep``           ``seed * 1000 + d``      draw d of Hidden_random's kept positions (notebook 05)
``control_saliency``      ``seed + 500``           the controls' sequences for the flows (notebook 09)
``ranking``               ``seed + 1000``          the prompts that rank or score heads, apart from evaluation
``fresh``                 ``seed + 1000``          a confirmation seed that is none of the run's seeds
``two_way``               ``seed + 2000``          the two-way prompts of the two-towers check
========================  =======================  =====================================================

``seed + 1000`` serves two streams on purpose: a confirmation run (``fresh``) and a ranking draw never share a step,
and both only need to be apart from the run's own seeds (which the profiles keep below 1000 apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.core.checks import seed_arg

__all__ = ["Stream", "STREAMS", "stream_seed"]


@dataclass(frozen=True)
class Stream:
    """``seed * scale + offset`` (+ ``index + index_offset`` for a per-item stream)."""

    scale: int
    offset: int
    per_item: bool = False
    index_offset: int = 0
    what: str = ""


STREAMS: dict[str, Stream] = {
    "query_demos": Stream(100_003, 0, per_item=True, what="query i's own demonstrations"),
    "unrelated_demos": Stream(1000, 0, per_item=True, index_offset=1,
                              what="prompt i's demonstrations on an unrelated task"),
    "random_keep": Stream(1000, 0, per_item=True, what="draw d of Hidden_random's kept positions"),
    "control_saliency": Stream(1, 500, what="the controls' sequences for the flows"),
    "ranking": Stream(1, 1000, what="the prompts that rank or score heads"),
    "fresh": Stream(1, 1000, what="a confirmation seed apart from the run's seeds"),
    "two_way": Stream(1, 2000, what="the two-way prompts of the two-towers check"),
}


def stream_seed(name: str, seed: int, index: int | None = None) -> int:
    """The seed of stream ``name``'s draw for the run seed ``seed`` (and item ``index`` of a per-item stream)."""
    if name not in STREAMS:
        raise KeyError(f"unknown seed stream {name!r}; the streams are {', '.join(STREAMS)} (helpers/core/seeds.py)")
    s = STREAMS[name]
    seed = seed_arg(seed)  # None, a float, a string, a bool or a negative seed would map silently to another stream
    if s.per_item != (index is not None):
        raise ValueError(f"seed stream {name!r} {'needs' if s.per_item else 'takes no'} item index"
                         f"{' (the i-th item of the run)' if s.per_item else ''}")
    out = seed * s.scale + s.offset
    return out + seed_arg(index, "index") + s.index_offset if s.per_item else out
