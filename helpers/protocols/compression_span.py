"""Hidden_anchor (§3.2, notebook 05) with a label word's first token or every token of it kept (notebook 10).

The authors' Hidden_anchor keeps every token of a multi-token label word (with the demonstrations' formatting),
although their other methods read the first one. :func:`span_anchor_runs` runs, on a task whose label words all
span several tokens (:data:`helpers.study.profiles.SPAN_TASK`), the demonstrations once and answers every input
from two pruned caches of that one pass: all the label tokens kept (``span="all"``, the paper's) and only each
word's first token (``"first"``, :func:`helpers.experiments.compression.anchor_keep`). If the later tokens carry
what q needs, accuracy falls when they are dropped; :func:`span_anchor_intervals` pairs the two per input.
"""

from __future__ import annotations

from helpers.core.loyalty import label_loyalty_rows
from helpers.core.prefix import run_prefix
from helpers.core.prefix_runs import vanilla_predictions
from helpers.core.prompts import LABEL_SPANS
from helpers.core.store import pins_weights
from helpers.experiments.compression import anchor_keep, build_cache, predict_cached, prefix_len
from helpers.study.claims import claim
from helpers.study.profiles import SPAN_TASK, LabelSpanSizes, label_span_runs
from helpers.study.stats import bootstrap_means, paired_differences

__all__ = ["span_anchor_runs", "span_anchor_intervals", "span_anchor_claim"]


@pins_weights
def span_anchor_runs(model, sizes: LabelSpanSizes) -> dict[int, dict]:
    """``{seed: {"kept": {span: positions kept}, "correct": {"ICL" | span: [0/1 per input]}, "label_loyal": {span:
    [0/1]}}}`` on ``sizes.n`` inputs of one demonstration set per seed of ``sizes.task``: full ICL and Hidden_anchor
    keeping each label word's first token or all of its tokens, stored on disk."""
    def run(s):
        prompts, lids, first = s.prompts, s.label_ids, s.prompts[0]
        ref = vanilla_predictions(model, prompts, lids, sizes.batch_size)
        demos = run_prefix(model, first.tokens[:prefix_len(first)])  # one pass, pruned for each anchor
        res = {"kept": {}, "correct": {"ICL": (ref.pred == ref.gold).int().tolist()}, "label_loyal": {}}
        for span in LABEL_SPANS:
            keep = anchor_keep(first, span)
            pred = predict_cached(model, build_cache(model, first, keep, demos=demos), prompts, lids, sizes.batch_size)
            res["kept"][span] = keep
            res["correct"][span] = (pred.pred == pred.gold).int().tolist()
            res["label_loyal"][span] = label_loyalty_rows(pred.pred, ref.pred).tolist()
        return res

    return label_span_runs("span_anchor", model, sizes, run)


def span_anchor_intervals(runs: dict[int, dict]) -> dict:
    """95% intervals (seeds, then inputs): accuracy of full ICL and of Hidden_anchor per anchor (``("accuracy",
    span)``), label loyalty to full ICL per anchor, and ``"all - first"``: the accuracy with all of the label
    tokens kept minus with the first ones, paired per input."""
    cells = {k: {("", s): r["correct"][k] for s, r in runs.items()} for k in ("ICL", *LABEL_SPANS)}
    out = {("accuracy", k): bootstrap_means(v) for k, v in cells.items()}
    for span in LABEL_SPANS:
        out[("label loyalty", span)] = bootstrap_means({("", s): r["label_loyal"][span] for s, r in runs.items()})
    out["all - first"] = bootstrap_means(paired_differences(cells["all"], cells["first"]))
    return out


def span_anchor_claim(ivs: dict, context: str = ""):
    """``10.span_hidden_anchor``: the interval of ``"all - first"`` above 0 "replicates" (dropping the label words'
    later tokens costs accuracy), below 0 "does not replicate", containing 0 "inconclusive"."""
    iv = ivs["all - first"]
    verdict = "replicates" if iv.low > 0 else "does not replicate" if iv.high < 0 else "inconclusive"
    note = (f"accuracy: ICL {ivs[('accuracy', 'ICL')]:.3f}, Hidden_anchor with all label tokens "
            f"{ivs[('accuracy', 'all')]:.3f}, with the first ones {ivs[('accuracy', 'first')]:.3f}")
    return claim("10.span_hidden_anchor", iv, verdict, "95% interval of Hidden_anchor's accuracy with all of the "
                 "label words' tokens kept minus with their first tokens kept, above 0", context=context,
                 tasks=(SPAN_TASK,), note=note)
