"""Anchor-only context compression (paper A, §3.2).

Hidden_anchor runs the demonstrations once, keeps at every layer the keys and
values of the anchor positions only (label tokens, the demonstrations'
formatting tokens and BOS: :attr:`helpers.core.prompts.Prompt.anchor_pos`), and runs
each test input alone (``Review: x\nSentiment:``) with that pruned cache
prepended. The cache is :mod:`helpers.core.prefix`'s, built with ``keep=``: kept
rows keep their original positions and the query continues at P0, where it
stands in the full prompt (tests: a pruned cache equals the full prompt with
attention from the query to the dropped positions blocked, on learned-position,
rotary, grouped-query and sliding-window models). Full ICL, the reference every
method is scored against, runs on the same engine with every position kept.

Baselines: Text_anchor (demonstration texts removed from the prompt string),
Hidden_random (formatting + BOS + one random text position per demonstration
instead of the label token; seeded) and Hidden_random-top (best of N seeded
Hidden_random draws by label loyalty against full ICL, selected on the same
test inputs as the paper does).

Query positions (``query_positions``, the methods with a cache: Hidden_anchor,
Hidden_random, Hidden_random-top). ``"original"`` (default, the method above):
the test input continues at P0, where it stands in the full prompt.
``"restart"``: its tokens get positions ``0..len-1``, as if no context preceded
them, while they still attend to the kept keys and values, whose positions were
fixed when the demonstrations ran (learned positions: ``W_pos[0:len]``; rotary:
the input's queries and its own keys rotated at ``0..len-1``). That is what the
released GPT-2 code of arXiv 2305.14160 (§3.2) runs: with the cached keys and
values it passes position ids ``0..len-1`` plus an offset that it sets only for
GPT-J (to the position after the last kept token, i.e. P0), so its GPT2-XL
Table 2 restarts the input at position 0 while its GPT-J Table 2 keeps the
original positions. ``"restart"`` exists to set a run beside the GPT2-XL
numbers; Text_anchor and full ICL have no cache and are the same in both modes.
Results of the two modes are stored under different keys
(:func:`cached_compression`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm

from helpers.core.accounting import forward_flops
from helpers.core.backend import is_bridge
from helpers.core.loyalty import label_loyalty, label_loyalty_rows, word_loyalty, word_loyalty_rows
from helpers.core.predict import Predictions, predict
from helpers.core.prefix import (
    PrefixCache,
    demo_prefix_len,
    keep_rows,
    restart_positions,
    run_prefix,
)
from helpers.core.prefix_runs import predict_shared, predict_with_cache, shared_cache, vanilla_predictions
from helpers.core.prompts import Demo, Prompt, build_prompts, label_span_arg
from helpers.core.seeds import stream_seed
from helpers.core.sizing import FORWARD_BATCH
from helpers.core.store import pins_weights, result_types

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["path_flops", "hidden_anchor_reference", "compression_set", "prefix_len", "anchor_keep", "random_keep", "QUERY_POSITIONS", "query_positions_arg", "build_cache", "predict_cached", "text_anchor_demos", "text_anchor_prompts", "token_counts", "CompressionResult", "run_compression", "cached_compression", "METHODS"]

prefix_len = demo_prefix_len  # P0: one past the newline that ends the last demonstration

QUERY_POSITIONS = ("original", "restart")  # where a test input run after a cache starts (module doc)


def query_positions_arg(query_positions: str) -> str:
    """``query_positions`` if it is one of :data:`QUERY_POSITIONS`, else a ValueError naming them."""
    if not isinstance(query_positions, str) or query_positions not in QUERY_POSITIONS:
        raise ValueError(f"query_positions must be one of {', '.join(map(repr, QUERY_POSITIONS))}; "
                         f"got {query_positions!r}")
    return query_positions


def anchor_keep(prompt: Prompt, span: str = "all") -> list[int]:
    """Hidden_anchor's kept positions: label tokens + demonstration formatting + BOS (before P0). ``span="all"``
    (the authors' code) keeps every token of a multi-token label word; ``"first"`` only its first token (notebook
    10's comparison of the two anchors)."""
    label_span_arg(span)
    p0 = prefix_len(prompt)
    drop = set() if span == "all" else {i for a, b in prompt.label_spans for i in range(a + 1, b)}
    return [p for p in prompt.anchor_pos if p < p0 and p not in drop]


def random_keep(prompt: Prompt, seed: int) -> list[int]:
    """Hidden_random: Hidden_anchor's positions without the label words' first tokens (the ones the labels are
    read from), plus one random text position per demonstration. As in the authors' code, the rest of the
    label line stays: formatting, BOS, the continuation tokens of a multi-token label word and the newline."""
    rng = np.random.default_rng(seed)
    keep = set(anchor_keep(prompt)) - set(prompt.label_pos)
    for (s, e), lp in zip(prompt.text_spans, prompt.label_pos):
        cand = [i for i in range(s, e) if i not in prompt.label_pos]
        keep.add(int(rng.choice(cand)) if cand else lp)
    return sorted(keep)


def build_cache(model, prompt: Prompt, keep: Sequence[int] | None = None,
                query_positions: str = "original", demos: PrefixCache | None = None) -> PrefixCache:
    """Run ``prompt``'s demonstrations (tokens before P0) once and keep the positions ``keep``.

    ``keep=None`` keeps the Hidden_anchor positions (:func:`anchor_keep`);
    ``keep=range(P0)`` keeps everything (then the cached run is plain ICL).
    ``query_positions``: ``"original"`` (inputs run after the cache continue at
    P0) or ``"restart"`` (they start at position 0; module doc).
    ``demos``: the demonstrations' keep-everything cache, already run: pruned instead of run again
    (:func:`helpers.core.prefix.keep_rows`; Hidden_anchor and every Hidden_random draw share one pass).
    """
    query_positions_arg(query_positions)
    p0 = prefix_len(prompt)
    keep = anchor_keep(prompt) if keep is None else keep
    if demos is not None:
        if not torch.equal(demos.tokens, prompt.tokens[:p0].cpu()):
            raise ValueError("demos is the cache of other demonstrations than this prompt's")
        cache = keep_rows(demos, keep, note="anchor cache")
    else:
        cache = run_prefix(model, prompt.tokens[:p0], keep, note="anchor cache")
    return restart_positions(cache) if query_positions == "restart" else cache


def predict_cached(model, cache: PrefixCache, prompts: Sequence[Prompt], label_ids: Sequence[int],
                   batch_size: int = FORWARD_BATCH, top_k: int = 5, progress: bool | str = False) -> Predictions:
    """:func:`helpers.core.predict.predict`, but each prompt's demonstrations are replaced by ``cache``."""
    return predict_shared(model, prompts, label_ids, batch_size=batch_size, top_k=top_k, cache=cache,
                          progress=progress)


def text_anchor_demos(demos: Sequence[Demo]) -> list[Demo]:
    """Demonstrations with their text removed (formatting and label words stay as plain text)."""
    return [Demo("", d.label, d.idx) for d in demos]


def text_anchor_prompts(model, task, demos: Sequence[Demo], queries: Sequence[Demo]) -> list[Prompt]:
    """Text_anchor prompts, e.g. ``"Review: \\nSentiment: Negative\\nReview: <x>\\nSentiment:"``."""
    prompts, dropped = build_prompts(model, task, text_anchor_demos(demos), queries)
    if dropped:
        raise ValueError(f"{dropped} Text_anchor prompts exceed the context")
    return prompts


def token_counts(prompts: Sequence[Prompt], cache: PrefixCache) -> dict:
    """L_demo (mean tokens per demonstration), L_x (mean query tokens), L_anchor (cache length), the bound.

    bound = (P0 + L_x) / (L_anchor + L_x): the ratio of the context each path's query reads, full prompt against
    kept positions, which the paper calls the upper bound of its speed-up (Table 3). It bounds the speed-up only
    when each path's cost grows with the tokens its query reads. Here full ICL runs its whole prompt through every
    layer, while Hidden_anchor runs only the query's L_x tokens after a cache built once per demonstration set,
    so in the layers' projections and MLPs the work falls as (P0 + L_x) / L_x and the speed-up can exceed the
    bound (:func:`path_flops` counts it).
    """
    p0 = cache.prefix_len
    n_demos = prompts[0].n_demos
    bos = 1 if prompts[0].bos else 0
    lx = float(np.mean([len(p) - p0 for p in prompts]))
    return dict(L_demo=(p0 - bos) / n_demos, L_context=p0, L_x=lx, L_anchor=len(cache),
                bound=(p0 + lx) / (len(cache) + lx))


def path_flops(cfg, prompts: Sequence[Prompt], cache: PrefixCache, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs of each prompt's two paths, counted from the shapes (:func:`helpers.core.accounting.forward_flops`):
    full ICL (every token of the prompt) and Hidden_anchor (the query's tokens after the ``len(cache)`` kept
    positions), each with the unembedding of q onto ``columns`` vocabulary entries. Their ratio is the speed-up
    the pruning buys in work, the same on any hardware; a measured time adds what does not scale with tokens
    (calls, memory traffic, the machine's load)."""
    unembed = 2.0 * cfg.d_model * columns
    p0 = cache.prefix_len
    full = np.array([forward_flops(cfg, 1, len(p), unembed=False) + unembed for p in prompts])
    anchor = np.array([forward_flops(cfg, 1, len(p) - p0, past=len(cache), unembed=False) + unembed for p in prompts])
    return full, anchor


@result_types
@dataclass
class CompressionResult:
    task: str
    seed: int
    metrics: dict  # method -> {"label_loyalty", "word_loyalty", "accuracy"} (fractions)
    counts: dict  # token_counts of Hidden_anchor
    random_top_draw: int  # which draw won Hidden_random-top
    n_test: int
    # method -> {"label_loyal": 0/1, "word_loyal": Jaccard, "correct": 0/1} per input (same inputs for every method)
    per_input: dict = field(default_factory=dict)
    query_positions: str = "original"  # positions of the inputs run after a cache (module doc)


METHODS = ("ICL", "Text_anchor", "Hidden_random", "Hidden_random-top", "Hidden_anchor")


def run_compression(model, icl_set, random_top_draws: int = 20, batch_size: int = FORWARD_BATCH,
                    progress: bool = False, query_positions: str = "original") -> CompressionResult:
    """Table 2 for one :class:`helpers.core.prompts.PromptSet` (1-shot, one seed): every method vs full ICL.

    ``query_positions`` applies to the cached methods (Hidden_anchor, Hidden_random, Hidden_random-top):
    ``"original"`` (default) or ``"restart"`` (module doc).
    """
    query_positions_arg(query_positions)
    prompts, lids, seed = icl_set.prompts, icl_set.label_ids, icl_set.seed
    ref = vanilla_predictions(model, prompts, lids, batch_size)  # full ICL (notebook 00's run, stored by content)

    per_input: dict = {}

    def score(pr: Predictions, name: str | None = None) -> dict:
        if name is not None:
            per_input[name] = {"label_loyal": label_loyalty_rows(pr.pred, ref.pred).tolist(),
                               "word_loyal": word_loyalty_rows(pr.topk, ref.topk, k=5).tolist(),
                               "correct": (pr.pred == pr.gold).int().tolist()}
        return dict(label_loyalty=label_loyalty(pr.pred, ref.pred),
                    word_loyalty=word_loyalty(pr.topk, ref.topk, k=5),
                    accuracy=pr.accuracy)

    out = {"ICL": score(ref, "ICL")}
    ta = text_anchor_prompts(model, icl_set.task, icl_set.demos, icl_set.test)
    ta_cache = shared_cache(model, ta)  # the text-less demonstrations, also run once where they are shared
    out["Text_anchor"] = score(predict_with_cache(model, ta, lids, batch_size, cache=ta_cache, top_k=5), "Text_anchor")
    demos = run_prefix(model, prompts[0].tokens[:prefix_len(prompts[0])])  # one pass, pruned per method and draw
    anchor = build_cache(model, prompts[0], query_positions=query_positions, demos=demos)
    out["Hidden_anchor"] = score(predict_cached(model, anchor, prompts, lids, batch_size), "Hidden_anchor")
    draws = []
    for d in tqdm(range(max(1, random_top_draws)), desc="random draws", disable=not progress, leave=False):
        c = build_cache(model, prompts[0], random_keep(prompts[0], seed=stream_seed("random_keep", seed, d)), query_positions,
                        demos=demos)
        draws.append(score(predict_cached(model, c, prompts, lids, batch_size), f"draw {d}"))
    out["Hidden_random"] = draws[0]
    best = int(np.argmax([s["label_loyalty"] for s in draws]))
    out["Hidden_random-top"] = draws[best]
    per_input["Hidden_random"], per_input["Hidden_random-top"] = per_input["draw 0"], per_input[f"draw {best}"]
    per_input = {m: per_input[m] for m in METHODS}
    return CompressionResult(icl_set.task.name, seed, {m: out[m] for m in METHODS}, token_counts(prompts, anchor),
                             best, len(prompts), per_input, query_positions)


@pins_weights
def cached_compression(model, icl_set, random_top_draws: int = 20, batch_size: int = FORWARD_BATCH, progress: bool = False,
                       query_positions: str = "original") -> CompressionResult:
    """:func:`run_compression`, stored on disk (:func:`helpers.core.store.cached`).

    The key is the model's weights (:func:`helpers.core.store.model_fingerprint`),
    the task, seed and every prompt (:func:`helpers.core.store.prompts_digest`),
    the number of Hidden_random draws and ``query_positions``, so a stored
    result only serves a request for the same inputs, draws and positions
    (batch size is not part of it: batched and one-by-one runs agree).
    """
    from helpers.core.store import cached, model_fingerprint, prompts_digest

    query_positions_arg(query_positions)
    params = dict(model=model_fingerprint(model), task=icl_set.task.name, seed=int(icl_set.seed),
                  prompts=prompts_digest(icl_set.prompts, icl_set.label_ids), n_test=len(icl_set.prompts),
                  draws=int(random_top_draws), query_positions=query_positions)
    return cached("compression_table2", params,
                  lambda: run_compression(model, icl_set, random_top_draws, batch_size, progress, query_positions))


@pins_weights
def compression_set(model, task: str, seed: int, n_test: int):
    """The prompt set of one (task, seed) (:func:`helpers.core.prompts.make_icl_set`), without the warning that a
    multi-token label word (e.g. TREC's " Abbreviation") stands for its class by its first token: notebook 00's
    task table shows those words once, the runs would repeat it at every prompt set."""
    import warnings

    from helpers.core.prompts import make_icl_set
    from helpers.core.tasks import LabelWordWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LabelWordWarning)
        return make_icl_set(model, task, seed, n_test)


# ---- the reference on one prompt (notebook 05's exercise is checked against it) and the claims ----


def hidden_anchor_reference(model: HookedTransformer, prompt: Prompt, keep: Sequence[int],
                            label_ids: Sequence[int]) -> torch.Tensor:
    """The helper's Hidden_anchor label logits at q for one prompt: :func:`build_cache` keeping ``keep``, then
    the input run as a suffix against it (:func:`predict_cached`). ``[classes]``, float32 on the CPU.

    On a TransformerLens 4 bridge (no key/value cache to prune, :mod:`helpers.core.backend`) the whole prompt
    runs with the rows from P0 on blocked from the demonstrations' positions outside ``keep``: the same
    numbers, since the kept rows' keys and values come from the full demonstrations either way."""
    if is_bridge(model):
        p0, dropped = prefix_len(prompt), sorted(set(range(prefix_len(prompt))) - set(keep))

        def block(scores, hook):  # [batch, head, query, key]
            scores = scores.clone()
            scores[:, :, p0:, dropped] = float("-inf")
            return scores

        hooks = [(f"blocks.{l}.attn.hook_attn_scores", block) for l in range(model.cfg.n_layers)]
        with torch.inference_mode():
            return predict(model, [prompt], label_ids, batch_size=1, top_k=0,
                           hooks=lambda batch, tokens, offset=0: hooks).label_logits[0].float().cpu()
    cache = build_cache(model, prompt, keep=keep)
    with torch.inference_mode():
        return predict_cached(model, cache, [prompt], label_ids, batch_size=1).label_logits[0].float().cpu()
