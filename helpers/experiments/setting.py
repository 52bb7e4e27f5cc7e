"""The in-context-learning setting (notebook 00; arXiv 2305.14160 §2 and Table 1's vanilla rows):
vanilla ICL accuracy for every (task, seed), cached on disk."""

from __future__ import annotations

from collections.abc import Sequence

from tqdm.auto import tqdm

from helpers.core.predict import shots_for
from helpers.core.prefix import vanilla_predictions
from helpers.core.prompts import make_icl_set
from helpers.core.store import cached

__all__ = ["vanilla_accuracy", "shots_for"]


def vanilla_accuracy(model, tasks: Sequence[str], seeds: Sequence[int], n_test: int, k_per_class: int = 1,
                     batch_size: int = 16, profile: str = "", progress: bool = True):
    """Vanilla ICL accuracy for every (task, seed): a ``pandas.DataFrame`` row per run.

    Columns: task, seed, shots (per class), n (inputs scored), dropped (over-long), accuracy, and per
    input ``idx`` (test row) and ``correct`` (0/1), for intervals (:mod:`helpers.study.stats`).
    Results are cached on disk (helpers.core.store.cached).
    """
    import pandas as pd


    rows = []
    name = getattr(model.cfg, "icl_model_name", model.cfg.model_name)
    for task in tqdm(tasks, desc=f"{k_per_class}-shot", disable=not progress):
        k = shots_for(task, k_per_class)
        for seed in seeds:
            def run():
                s = make_icl_set(model, task, seed, n_test, k)
                r = vanilla_predictions(model, s.prompts, s.label_ids, batch_size=batch_size, top_k=0)
                return {"n": len(r), "dropped": s.n_dropped, "accuracy": r.accuracy,
                        "pred": r.pred.tolist(), "gold": r.gold.tolist(), "idx": [p.query.idx for p in s.prompts]}
            out = cached("vanilla_accuracy", {"model": name, "task": task, "seed": seed, "n_test": n_test,
                                              "k": k, "profile": profile}, run, model=model)
            rows.append({"task": task, "seed": seed, "shots": k, "n": out["n"], "dropped": out["dropped"],
                         "accuracy": out["accuracy"], "idx": out["idx"],
                         "correct": [int(a == b) for a, b in zip(out["pred"], out["gold"])]})
    return pd.DataFrame(rows)
