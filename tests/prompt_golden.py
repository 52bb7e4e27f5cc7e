"""Prompts of the shipped tasks, recorded from the renderer to guard it against change.

``python tests/prompt_golden.py`` rewrites ``tests/data/prompts_golden.json``; only do that when a change
to the shipped prompts is intended. :func:`cases` is what both the recorder and the test build.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "data" / "prompts_golden.json"
SHIPPED = ("sst2", "trec", "agnews", "tweet_emotion")


def tokenizers() -> dict:
    """GPT-2's tokenizer and the two offline models' tokenizers (built from their GGUF files when not cached)."""
    from helpers.core.models import offline_tokenizer
    from helpers.core.offline_models import gpt2_tokenizer

    return {"gpt2": gpt2_tokenizer(), "gemma": offline_tokenizer("google/gemma-3-270m"),
            "smollm2": offline_tokenizer("smollm2")}


def record(p) -> dict:
    return {"text": p.text, "tokens": p.tokens.tolist(), "label_pos": p.label_pos, "label_class": p.label_class,
            "label_spans": [list(s) for s in p.label_spans], "format_pos": p.format_pos,
            "text_spans": [list(s) for s in p.text_spans], "query_span": list(p.query_span), "q": p.q,
            "bos": p.bos, "anchor_pos": p.anchor_pos, "kinds": p.kinds}


def cases(tok) -> dict:
    from helpers.core.prompts import Demo, build_prompt, sample_demos, sample_test
    from helpers.core.tasks import label_token_ids, load_split

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in SHIPPED:
            train, test = load_split(name, "train"), load_split(name, "test")
            out[f"{name}/label_ids"] = label_token_ids(tok, name)
            for seed, k in ((42, 1), (43, 2)):
                demos = sample_demos(train, name, k, seed)
                query = sample_test(test, 1, seed)[0]
                for bos in (False, True):
                    out[f"{name}/{seed}/{k}/bos={bos}"] = record(build_prompt(tok, name, demos, query, bos=bos))
                out[f"{name}/{seed}/{k}/no-query"] = record(build_prompt(tok, name, demos, None, bos=False))
                blank = [Demo("", d.label) for d in demos]  # Text_anchor: demonstrations without their text
                out[f"{name}/{seed}/{k}/blank"] = record(build_prompt(tok, name, blank, query, bos=False))
    return out


def main() -> int:
    sys.path.insert(0, str(ROOT))
    data = {key: cases(tok) for key, tok in tokenizers().items()}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{GOLDEN}: {', '.join(f'{k} ({len(v)} cases)' for k, v in data.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
