"""TransformerLens 4's bridge against 3.9's HookedTransformer: the same numbers from the same weights.

TransformerLens 3.9 and 4.3 cannot share one environment, so the comparison has two halves:

- ``reference`` (under 3.9, ``make bridge-reference``): every quantity below on each model, written to
  ``tests/data/bridge/reference.pt`` with the versions and the digest of the helpers code that computed it;
- ``compare`` (under 4.x, ``make test-bridge`` runs it through tests/test_bridge.py): the same quantities on a
  bridge of the same weights, each compared with the reference, the table written to
  ``docs/bridge-parity.json`` and rendered into docs/transformerlens4.md (``make tables``).

Models: three tiny random transformers models saved here (GPT-2 with learned positions, Llama with rotary
positions, Llama with grouped-query attention; seed 0, the real GPT-2 tokenizer) and the collection's two offline
models, SmolLM2-135M and Gemma 3 270M (both with grouped-query attention; Gemma with local attention layers and a
final logit soft cap). Quantities, on a few SST-2 prompts of seed 42:

- ``logits_at_q``: the logits at the query position (:func:`helpers.core.predict.logits_at`) of the label words
  and of 1000 vocabulary entries drawn with seed 0 (all of them would make the reference file megabytes);
- ``hook_pattern``: every layer's attention pattern of the first prompt (for SmolLM2 its query row only);
- ``saliency``: §2.1's I_l at the query row of every layer (:func:`helpers.experiments.saliency.saliency_batch`),
  and the three flows (:func:`~helpers.experiments.saliency.saliency_flow`);
- ``isolation``: the label logits with the label words isolated in the first and in the last layer (§2.2);
- ``aucroc_inputs``: the attention of q to each class's label words per layer (§2.3's AUCROC_l inputs);
- ``hidden_anchor``: the Hidden_anchor label logits of the first prompt (§3.3);
- ``reweighting``: the label logits of the first prompt with a fixed random re-weighting beta (§3.1's forward);
- ``head_scores``: every head's gain and drop (paper B's in-context head scores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

REFERENCE = ROOT / "tests" / "data" / "bridge" / "reference.pt"
RESULTS = ROOT / "docs" / "bridge-parity.json"
COLUMNS = 1000
TOLERANCE = 1e-4  # the largest absolute difference called agreement
TINY = ("gpt2", "llama", "llama-gqa")
BRIDGE_ONLY = "phi3"  # a tiny Phi-3: notebooks 00-01 run on it under the bridge (make test-bridge)
REAL = ("HuggingFaceTB/SmolLM2-135M-Instruct", "google/gemma-3-270m")
QUANTITIES = ("logits_at_q", "hook_pattern", "saliency", "isolation", "aucroc_inputs", "hidden_anchor",
              "reweighting", "head_scores")
# the modules whose code computes the quantities: the reference is stale once one of them changes
CODE = ("helpers.core.predict", "helpers.experiments.saliency", "helpers.experiments.isolation",
        "helpers.experiments.aucroc", "helpers.experiments.compression", "helpers.experiments.reweighting",
        "helpers.experiments.incontext_heads")


def tiny_folder(kind: str, root: Path) -> Path:
    """A tiny random transformers model of ``kind`` saved under ``root`` (seed 0), in a folder named by a digest of
    its config, so a changed definition never reuses a folder built from another."""
    import hashlib

    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

    from helpers.core.offline_models import gpt2_tokenizer

    tok = gpt2_tokenizer()
    common = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if kind == "gpt2":
        cls, cfg = GPT2LMHeadModel, GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=64, n_layer=3, n_head=4)
    elif kind in ("llama", "llama-gqa"):
        cls, cfg = LlamaForCausalLM, LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                                 num_attention_heads=4, max_position_embeddings=256,
                                                 num_key_value_heads=4 if kind == "llama" else 2, **common)
    elif kind == BRIDGE_ONLY:  # TransformerLens 3.9 cannot convert it; the bridge runs it (notebooks' prompts fit)
        cls, cfg = Phi3ForCausalLM, Phi3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                               num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                                               pad_token_id=tok.eos_token_id, **common)
    else:
        raise ValueError(f"unknown tiny kind {kind!r}: one of {TINY + (BRIDGE_ONLY,)}")
    out = root / f"{kind}-{hashlib.sha256(cfg.to_json_string().encode()).hexdigest()[:8]}"
    if (out / "config.json").exists():
        return out
    torch.manual_seed(0)
    model = cls(cfg)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
    tok = gpt2_tokenizer()
    common = dict(vocab_size=len(tok), max_position_embeddings=256, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=64, n_layer=3, n_head=4))
    elif kind in ("llama", "llama-gqa"):
        model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                             num_attention_heads=4, num_key_value_heads=4 if kind == "llama" else 2,
                                             **common))
    elif kind == BRIDGE_ONLY:  # TransformerLens 3.9 cannot convert it; the bridge runs it
        model = Phi3ForCausalLM(Phi3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                           num_attention_heads=4, num_key_value_heads=4, pad_token_id=tok.eos_token_id,
                                           **common))
    else:
        raise ValueError(f"unknown tiny kind {kind!r}: one of {TINY + (BRIDGE_ONLY,)}")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def code_digest() -> str:
    """Digest of the helpers code the quantities depend on (:func:`helpers.core.store.dependencies`)."""
    from helpers.core import store

    return store.code_digest(store.dependencies(frozenset(CODE)))


def quantities(model, n: int = 3, seconds: dict | None = None) -> dict[str, torch.Tensor]:
    """Every quantity of the module docstring on ``model``, as float32 CPU tensors keyed ``quantity/part``;
    ``seconds`` (if given) gets the wall time of each quantity. Nothing is read from the results store."""
    from helpers.core.predict import logits_at
    from helpers.core.prompts import make_icl_set, pad_batch
    from helpers.core.tasks import LabelWordWarning
    from helpers.experiments.aucroc import label_attention
    from helpers.experiments.compression import anchor_keep, hidden_anchor_reference
    from helpers.experiments.incontext_heads import head_attribution
    from helpers.experiments.isolation import run_isolation
    from helpers.experiments.reweighting import reweighted_label_logits_reference
    from helpers.experiments.saliency import saliency_batch, saliency_flow

    warnings.simplefilter("ignore", LabelWordWarning)
    big = model.cfg.n_layers * model.cfg.n_heads > 64  # a real model: only the query rows of the patterns
    ps = make_icl_set(model, "sst2", seed=42, n_test=n)
    P, L = ps.prompts, ps.label_ids
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else 0
    tokens, q = pad_batch(P, pad)
    out: dict[str, torch.Tensor] = {}
    seconds = {} if seconds is None else seconds
    clock = timed(seconds)
    with torch.inference_mode(), clock("logits_at_q"):
        cols = torch.randperm(model.cfg.d_vocab, generator=torch.Generator().manual_seed(0))[:COLUMNS]
        cols = torch.cat([torch.tensor(list(L)), cols[~torch.isin(cols, torch.tensor(list(L)))]])
        out["logits_at_q/columns"] = logits_at(model, tokens.to(model.cfg.device), q, vocab=cols)  # those only
    with torch.inference_mode(), clock("hook_pattern"):
        _, cache = model.run_with_cache(P[0].tokens[None].to(model.cfg.device),
                                        names_filter=lambda name: name.endswith("hook_pattern"))
        pat = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"][0] for l in range(model.cfg.n_layers)])
        out["hook_pattern/first_prompt"] = pat[:, :, P[0].q] if big else pat  # a real model: its query rows
    with torch.inference_mode(), clock("isolation"):
        for where in ("first", "last"):
            out[f"isolation/label_{where}_1"] = run_isolation(model, P, L, "label", where, 1, top_k=0).label_logits
    with torch.inference_mode(), clock("aucroc_inputs"):
        att = label_attention(model, P, L)
        out["aucroc_inputs/label_attention"] = att if isinstance(att, torch.Tensor) else att[0]
    with torch.inference_mode(), clock("hidden_anchor"):
        out["hidden_anchor/label_logits"] = hidden_anchor_reference(model, P[0], anchor_keep(P[0]), L)
    with torch.inference_mode(), clock("reweighting"):
        g = torch.Generator().manual_seed(0)
        beta = 0.5 * torch.randn(model.cfg.n_layers, model.cfg.n_heads, len(P[0].label_pos), generator=g)
        out["reweighting/label_logits"] = reweighted_label_logits_reference(model, P[0], beta, L)
    with torch.inference_mode(), clock("head_scores"):
        scores = head_attribution(model, P, L)
        out["head_scores/gain"], out["head_scores/drop"] = scores.gain, scores.drop
    with clock("saliency"):
        sal = saliency_batch(model, P[:2], L)  # [batch, layer, seq, seq]
        out["saliency/I_l_query_row"] = torch.stack([sal[b, :, P[b].q] for b in range(2)])
        out["saliency/flows"] = saliency_flow(model, P, L)
    return {k: v.detach().float().cpu().contiguous() for k, v in out.items()}


def timed(seconds: dict):
    """``clock = timed(seconds)``; ``with clock(name):`` adds the block's wall time to ``seconds[name]``."""

    @contextlib.contextmanager
    def clock(name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0

    return clock


def load(name: str, root: Path):
    from helpers.core.models import load_model

    return load_model(str(tiny_folder(name, root)) if name in TINY else name, device="cpu", verbose=False)


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("transformer_lens", "transformers", "torch")}


def reference(models, root: Path) -> dict:
    from helpers.core.backend import backend

    if backend() != "hooked":
        raise SystemExit("bridge_parity reference: run it under TransformerLens 3.9 (`make setup`)")
    ref = {"versions": versions(), "code": code_digest(), "models": {}, "seconds": {}}
    for name in models:
        ref["seconds"][name] = {}
        ref["models"][name] = quantities(load(name, root), seconds=ref["seconds"][name])
        print(f"reference: {name}: {len(ref['models'][name])} tensors")
    return ref


def compare(ref: dict, models, root: Path) -> list[dict]:
    """One row per model and quantity part: the largest absolute and relative differences."""
    rows = []
    for name in models:
        seconds: dict[str, float] = {}
        got = quantities(load(name, root), seconds=seconds)
        for key, want in ref["models"][name].items():
            have = got[key]
            if have.shape != want.shape:
                rows.append(dict(model=name, quantity=key, shape=list(want.shape), max_abs=None, max_rel=None,
                                 agrees=False, note=f"shape {list(have.shape)} against {list(want.shape)}"))
                continue
            diff = (have - want).abs()
            finite = torch.isfinite(want)
            same_inf = bool(torch.equal(~finite, ~torch.isfinite(have)))
            d = diff[finite]
            max_abs = float(d.max()) if d.numel() else 0.0
            scale = float(want[finite].abs().max()) if d.numel() else 0.0
            rows.append(dict(model=name, quantity=key, shape=list(want.shape), max_abs=max_abs,
                             max_rel=max_abs / scale if scale else 0.0, agrees=max_abs <= TOLERANCE and same_inf,
                             note="" if same_inf else "infinite entries differ"))
        for r in rows:
            if r["model"] == name:
                part = r["quantity"].split("/")[0]
                r["seconds_hooked"] = ref["seconds"][name][part]
                r["seconds_bridge"] = seconds[part]
    return rows


def table(results: dict | None = None) -> str:
    """The parity table of docs/transformerlens4.md (its ``record:bridge`` block) from ``docs/bridge-parity.json``
    (written by ``compare``): per model, each quantity's largest absolute difference, and the versions compared."""
    if results is None:
        if not RESULTS.exists():
            return "No comparison has been run yet: `make test-bridge` writes it.\n"
        results = json.loads(RESULTS.read_text())
    ref, br = results["reference"]["versions"], results["bridge"]["versions"]
    models = list(dict.fromkeys(r["model"] for r in results["rows"]))
    quantities = list(dict.fromkeys(r["quantity"] for r in results["rows"]))
    cell = {(r["model"], r["quantity"]): r for r in results["rows"]}

    def fmt(r) -> str:
        if r is None:
            return "not compared"
        if r["max_abs"] is None:
            return f"**differs** ({r['note']})"
        text = "0" if r["max_abs"] == 0 else f"{r['max_abs']:.1e}"
        return text if r["agrees"] else f"**{text}** ({r['note'] or 'over the tolerance'})"

    short = {m: m.split("/")[-1] if "/" in m else f"tiny {m}" for m in models}
    lines = [f"Largest absolute difference between TransformerLens {br['transformer_lens']} (bridge) and "
             f"{ref['transformer_lens']} (HookedTransformer) on the same weights and inputs (transformers "
             f"{br['transformers']}, torch {br['torch']}); agreement means at most {results['tolerance']:g}. "
             f"{sum(r['agrees'] for r in results['rows'])} of {len(results['rows'])} agree.",
             "", "| quantity | " + " | ".join(short[m] for m in models) + " |",
             "|---|" + "---:|" * len(models)]
    lines += [f"| `{q}` | " + " | ".join(fmt(cell.get((m, q))) for m in models) + " |" for q in quantities]
    timed = [r for r in results["rows"] if "seconds_bridge" in r]
    if timed:  # each quantity's time once per model (its parts share it)
        per = {m: {r["quantity"].split("/")[0]: (r["seconds_hooked"], r["seconds_bridge"]) for r in timed
                   if r["model"] == m} for m in models}
        lines += ["", f"Seconds for all {len(QUANTITIES)} quantities, each model on its own (the reference run "
                  "under 3.9 and the comparison under 4.3, on the machine and threads that made this file): "
                  "the bridge runs whole prompts where 3.9 runs the shared demonstrations once.", "",
                  "| model | HookedTransformer 3.9 | bridge 4.3 | bridge / 3.9 |", "|---|---:|---:|---:|"]
        for m in models:
            h, b = sum(v[0] for v in per[m].values()), sum(v[1] for v in per[m].values())
            lines.append(f"| {short[m]} | {h:.1f} | {b:.1f} | {b / h:.1f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=("reference", "compare", "folder"),
                    help="folder: build the tiny model --kind and print its path")
    ap.add_argument("--kind", default=BRIDGE_ONLY)
    ap.add_argument("--models", nargs="*", default=list(TINY + REAL))
    ap.add_argument("--root", type=Path, default=ROOT / ".cache" / "bridge-models")
    a = ap.parse_args(argv)
    os.environ["ICL_RECOMPUTE"] = "1"  # every quantity computed here, none read from the results store
    if a.cmd == "folder":
        print(tiny_folder(a.kind, a.root))
        return 0
    if a.cmd == "reference":
        ref = reference(a.models, a.root)
        REFERENCE.parent.mkdir(parents=True, exist_ok=True)
        torch.save(ref, REFERENCE)
        print(f"reference: wrote {REFERENCE.relative_to(ROOT)} ({REFERENCE.stat().st_size / 1e6:.2f} MB)")
        return 0
    ref = torch.load(REFERENCE, weights_only=True)
    rows = compare(ref, a.models, a.root)
    RESULTS.write_text(json.dumps({"reference": {"versions": ref["versions"], "code": ref["code"]},
                                   "bridge": {"versions": versions(), "code": code_digest()},
                                   "tolerance": TOLERANCE, "rows": rows}, indent=1) + "\n")
    bad = [r for r in rows if not r["agrees"]]
    for r in rows:
        print(f"{'ok  ' if r['agrees'] else 'DIFF'} {r['model']:40s} {r['quantity']:32s} max|diff| {r['max_abs']}")
    print(f"compare: {len(rows) - len(bad)} of {len(rows)} agree within {TOLERANCE:g}; wrote {RESULTS.relative_to(ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
