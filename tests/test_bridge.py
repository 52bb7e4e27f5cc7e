"""TransformerLens 4's bridge beside 3.9's HookedTransformer (helpers.core.backend, docs/transformerlens4.md).

Under 3.9 (make test): the backend is chosen and refused as documented, the committed 3.9 reference is what the
code computes today on the tiny models, the parity table of the docs is rendered from the comparison's file, and
TransformerLens is imported at run time only by the modules that know which backend they run on.
Under 4.x (make test-bridge): every quantity of scripts/bridge_parity.py agrees with the 3.9 reference on the same
weights, and what the bridge cannot do is refused by name, never silently ignored.
"""

import ast
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bridge_parity  # noqa: E402  (scripts/bridge_parity.py)

from helpers.core import backend  # noqa: E402

HOOKED = backend.tl_version().startswith("3.")
needs_bridge = pytest.mark.skipif(HOOKED, reason="TransformerLens 4 only: make test-bridge")
needs_hooked = pytest.mark.skipif(not HOOKED, reason="TransformerLens 3.9 only: make test")

# the modules that import TransformerLens at run time: each knows which backend it runs on (helpers.core.backend),
# or is reached only on 3.9's path (the HookedTransformer loaders, the shared-prefix cache, the attention patches)
SEAM = {"helpers/core/backend.py", "helpers/core/models.py", "helpers/core/model_loading.py",
        "helpers/core/offline_models.py", "helpers/core/hub.py", "helpers/core/controls/model.py",
        "helpers/core/controls/training.py", "helpers/core/prefix.py", "helpers/core/heads.py",
        "helpers/core/tl_patches.py", "helpers/core/accounting.py", "helpers/exercises/tiny.py"}


def _runtime_tl_imports(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    typing_only = {id(m) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
                   for m in ast.walk(n)}
    return [n.lineno for n in ast.walk(tree) if id(n) not in typing_only and (
        (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("transformer_lens"))
        or (isinstance(n, ast.Import) and any(a.name.startswith("transformer_lens") for a in n.names)))]


def test_transformerlens_is_imported_at_run_time_only_by_the_seam():
    found = {str(f.relative_to(ROOT)): lines for f in sorted((ROOT / "helpers").rglob("*.py"))
             if (lines := _runtime_tl_imports(f))}
    outside = {f: lines for f, lines in found.items() if f not in SEAM}
    assert not outside, (f"TransformerLens imported at run time outside the backend seam: {outside}; import it "
                         "under TYPE_CHECKING for types, or go through helpers.core.backend")


@needs_hooked
def test_backend_follows_the_installed_version_and_refuses_the_other(monkeypatch):
    monkeypatch.delenv("ICL_BACKEND", raising=False)
    assert backend.backend() == "hooked"
    monkeypatch.setenv("ICL_BACKEND", "hooked")
    assert backend.backend() == "hooked"
    monkeypatch.setenv("ICL_BACKEND", "bridge")
    with pytest.raises(backend.BackendError, match="make setup TL=4"):
        backend.backend()
    monkeypatch.setenv("ICL_BACKEND", "tl5")
    with pytest.raises(backend.BackendError, match="use one of"):
        backend.backend()


def test_kv_heads_ungrouped_repeats_each_key_value_head_for_its_query_heads():
    class M:
        class cfg:
            n_heads = 4

    w = torch.arange(2 * 3).reshape(2, 3).float()
    assert torch.equal(backend.kv_heads_ungrouped(M, w), w[[0, 0, 1, 1]])  # TL's order: head h reads h // 2
    assert backend.kv_heads_ungrouped(M, torch.ones(4, 3)).shape == (4, 3)  # not grouped: as it is
    with pytest.raises(backend.BackendError, match="do not divide"):
        backend.kv_heads_ungrouped(M, torch.ones(3, 3))


@needs_hooked
@pytest.mark.parametrize("kind", ["gpt2", "llama-gqa"])
def test_the_committed_reference_is_what_3_9_computes_today(kind, tmp_path):
    """The reference the bridge is compared with is today's code on 3.9 (else: `make bridge-reference`): learned
    positions and grouped-query rotary; make test-bridge compares every model of the reference."""
    ref = torch.load(bridge_parity.REFERENCE, weights_only=True)["models"][kind]
    got = bridge_parity.quantities(bridge_parity.load(kind, tmp_path))
    assert set(got) == set(ref), "the quantities changed: run `make bridge-reference` under TransformerLens 3.9"
    for key, want in ref.items():
        # head scores are differences of two log-probabilities near -log(vocab) ~ -11, where one float32 ulp is
        # 9.5e-7: another CPU's kernels (e.g. AVX-512 or AVX2 sums) move them by a couple of ulps, ~2e-6. A code
        # change moves them by orders more.
        atol = 1e-5 if key.startswith("head_scores/") else 1e-6
        assert torch.allclose(got[key], want, atol=atol, rtol=0, equal_nan=True), (
            f"{kind} {key} differs from tests/data/bridge/reference.pt by "
            f"{(got[key] - want).abs().max():.2e}: the code changed; run `make bridge-reference` (3.9), then "
            "`make test-bridge` (4.3) and `make tables`")


@needs_hooked  # under 4.x the comparison rewrites the file this reads (make test-bridge; then make tables)
def test_the_parity_table_is_rendered_from_the_comparison():
    results = json.loads(bridge_parity.RESULTS.read_text())
    page = (ROOT / "docs" / "transformerlens4.md").read_text()
    assert bridge_parity.table(results) in page, "docs/transformerlens4.md's parity table is stale: `make tables`"
    assert {r["model"] for r in results["rows"]} == set(bridge_parity.TINY + bridge_parity.REAL)
    assert {r["quantity"].split("/")[0] for r in results["rows"]} == set(bridge_parity.QUANTITIES)
    # the comparison was made against the reference committed now
    assert results["reference"]["code"] == torch.load(bridge_parity.REFERENCE, weights_only=True)["code"]


@needs_bridge
def test_every_quantity_agrees_with_the_3_9_reference():
    """scripts/bridge_parity.py compare: writes docs/bridge-parity.json (the docs' table; `make tables`)."""
    assert bridge_parity.main(["compare"]) == 0, "a quantity differs by more than 1e-4: see docs/bridge-parity.json"


@needs_bridge
def test_the_bridge_returns_the_final_residual_stream_and_refuses_what_it_cannot_do(tmp_path):
    from helpers.core.models import load_model
    from helpers.core.prefix import run_prefix

    model = bridge_parity.load("llama-gqa", tmp_path)
    toks = model.to_tokens("a tiny prompt")
    _, cache = model.run_with_cache(toks, names_filter="ln_final.hook_in")
    resid = model(toks, stop_at_layer=model.cfg.n_layers)
    assert resid.shape == (1, toks.shape[1], model.cfg.d_model)
    assert torch.equal(resid, cache["ln_final.hook_in"])  # before the final norm, as HookedTransformer returns it
    with pytest.raises(backend.BackendError, match="past_kv_cache"):
        model(toks, past_kv_cache=object())  # transformers would ignore it: a silent wrong number
    with pytest.raises(backend.BackendError, match="shared-prefix cache"):
        run_prefix(model, toks[0])
    with pytest.raises(backend.BackendError, match="TransformerLens 3.9"):
        load_model("control")


@needs_bridge
@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama-gqa"])
def test_the_bridge_carries_transformers_own_cache_with_explicit_positions(kind, tmp_path):
    """What a shared prefix on the bridge rests on: the demonstrations run once through the wrapped transformers
    model (its ``DynamicCache``), repeated for a batch of ragged, right-padded suffixes, which the bridge runs with
    explicit positions and an attention mask. Each suffix's logits equal its whole prompt's, its hooks fire on the
    suffix rows over every key (prefix included), and a gradient flows back through them."""
    model = bridge_parity.load(kind, tmp_path)
    g = torch.Generator().manual_seed(0)
    prefix, lens = torch.randint(5, model.cfg.d_vocab, (10,), generator=g), [3, 7, 5]
    P, S, B = len(prefix), max(lens), len(lens)
    suffix, mask = torch.zeros(B, S, dtype=torch.long), torch.zeros(B, P + S, dtype=torch.long)
    mask[:, :P] = 1
    for i, n in enumerate(lens):
        suffix[i, :n] = torch.randint(5, model.cfg.d_vocab, (n,), generator=g)
        mask[i, P:P + n] = 1
    positions = torch.arange(P, P + S).expand(B, S)

    def cache():
        c = model.original_model(prefix[None], use_cache=True).past_key_values
        c.batch_repeat_interleave(B)
        return c

    name = "blocks.0.attn.hook_pattern"
    with torch.no_grad():
        got, acts = model.run_with_cache(suffix, past_key_values=cache(), position_ids=positions,
                                         attention_mask=mask, names_filter=name)
        for i, n in enumerate(lens):
            whole, whole_acts = model.run_with_cache(torch.cat([prefix, suffix[i, :n]])[None], names_filter=name)
            torch.testing.assert_close(got[i, :n], whole[0, P:], atol=1e-5, rtol=0)
            torch.testing.assert_close(acts[name][i, :, :n, :P + n], whole_acts[name][0, :, P:], atol=1e-6, rtol=0)
    kept = {}

    def keep(t, hook):
        t.retain_grad()
        kept["pattern"] = t
        return t

    logits = model.run_with_hooks(suffix, past_key_values=cache(), position_ids=positions, attention_mask=mask,
                                  fwd_hooks=[(name, keep)])
    logits[0, lens[0] - 1].sum().backward()
    assert kept["pattern"].grad.shape == (B, model.cfg.n_heads, S, P + S) and kept["pattern"].grad.abs().sum() > 0
