"""Local Hugging Face model directories as models: tiny random GPT-2, Llama, GPT-J and GPT-NeoX saved with
``save_pretrained`` load offline through ``load_model(dir)`` / ``ICL_MODEL=dir`` and match transformers."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from helpers.core import model_loading, models, offline_models
from helpers.core.model_loading import LocalModelError
from helpers.core.models import load_model, local_model_name, resolve_name

D_MODEL = 32


def _hf_model(kind: str, vocab: int):
    """A tiny random transformers model: 2 layers, d_model 32, weights large enough for logits of order 1."""
    import transformers as tr

    common = dict(vocab_size=vocab, initializer_range=0.2)
    if kind == "gpt2":  # transformers writes no n_ctx: the loader must take n_positions
        cfg = tr.GPT2Config(n_positions=128, n_embd=D_MODEL, n_layer=2, n_head=4, **common)
        cls = tr.GPT2LMHeadModel
    elif kind == "llama":  # grouped-query attention: 4 query heads read 2 key/value heads
        cfg = tr.LlamaConfig(hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=128, **common)
        cls = tr.LlamaForCausalLM
    elif kind == "gptj":
        cfg = tr.GPTJConfig(n_positions=128, n_embd=D_MODEL, n_layer=2, n_head=4, rotary_dim=4, **common)
        cls = tr.GPTJForCausalLM
    elif kind == "neox":
        cfg = tr.GPTNeoXConfig(hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                               max_position_embeddings=128, **common)
        cls = tr.GPTNeoXForCausalLM
    else:
        raise ValueError(kind)
    torch.manual_seed({"gpt2": 0, "llama": 1, "gptj": 2, "neox": 3}[kind])
    return cls(cfg).eval()


def save_tiny(kind: str, path: Path, tokenizer=None) -> tuple[Path, torch.nn.Module]:
    """Save a tiny random ``kind`` model and a tokenizer (default: the real GPT-2 one) in ``path``."""
    tok = tokenizer or offline_models.gpt2_tokenizer()
    hf = _hf_model(kind, len(tok))
    hf.save_pretrained(path)
    tok.save_pretrained(path)
    return path, hf


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("local-models")
    return {k: save_tiny(k, root / f"tiny-{k}") for k in ("gpt2", "llama", "gptj", "neox")}


def _sequences(vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (3, 16), generator=g)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "gptj", "neox"])
def test_local_directory_matches_transformers(tiny_dirs, kind):
    path, hf = tiny_dirs[kind]
    model = load_model(str(path), device="cpu", verbose=False)
    tokens = _sequences(hf.config.vocab_size)
    with torch.inference_mode():
        want = hf(tokens).logits
        got = model(tokens)
    assert want.abs().max() > 1.0  # logits of order 1: the comparison has something to compare
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert model.cfg.dtype == torch.float32 and model.cfg.n_layers == 2 and model.cfg.d_model == D_MODEL
    assert model.cfg.icl_model_name == local_model_name(path)
    assert not model_loading.uses_bos(model)  # GPT-2 tokenizer adds no BOS; GPT-2 / GPT-J / NeoX never take one


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_local_directory_is_not_processed(tiny_dirs, kind):
    # from_pretrained_no_processing semantics: no LayerNorm folding, no centring, no value-bias folding
    path, hf = tiny_dirs[kind]
    model = load_model(str(path), device="cpu", verbose=False)
    assert not model.cfg.layer_norm_folding
    assert model.cfg.normalization_type == ("LN" if kind == "gpt2" else "RMS")  # not LNPre / RMSPre
    torch.testing.assert_close(model.embed.W_E, hf.get_input_embeddings().weight, atol=0, rtol=0)
    torch.testing.assert_close(model.unembed.W_U, hf.get_output_embeddings().weight.T, atol=0, rtol=0)
    assert model.unembed.W_U.mean(0).abs().max() > 1e-3  # centring the unembedding would make these 0
    if kind == "gpt2":  # GPT-2's value biases stay in the attention layer (folding moves them into b_O)
        torch.testing.assert_close(model.blocks[0].attn.b_V.flatten(), hf.transformer.h[0].attn.c_attn.bias[2 * D_MODEL:],
                                   atol=0, rtol=0)


def test_gpt2_config_without_n_ctx_loads(tiny_dirs):
    path, hf = tiny_dirs["gpt2"]
    saved = json.loads((path / "config.json").read_text())
    assert "n_ctx" not in saved and saved["n_positions"] == 128
    model = load_model(str(path), device="cpu", verbose=False)
    assert model.cfg.n_ctx == 128 and model.W_pos.shape == (128, D_MODEL)


def test_icl_model_selects_a_local_directory(tiny_dirs, monkeypatch, tmp_path):
    from helpers.study.profiles import current_model_name
    from helpers.study.results import model_slug, results_dir

    path, _ = tiny_dirs["llama"]
    monkeypatch.setenv("ICL_MODEL", str(path))
    monkeypatch.setenv("ICL_RESULTS_DIR", str(tmp_path))
    assert current_model_name() == str(path)
    model = load_model(current_model_name(), device="cpu", verbose=False)
    assert model.cfg.icl_model_name == local_model_name(path)
    assert model.cfg.icl_model_name.startswith("local:tiny-llama-")
    # results of this run go to a folder named after the directory and its path
    assert model_slug(current_model_name()) == model.cfg.icl_model_name.replace(":", "-").lower()
    assert results_dir(profile="smoke") == tmp_path / model_slug(str(path)) / "smoke"


def test_two_folders_with_the_same_name_are_distinct_models(tmp_path, monkeypatch):
    from helpers.study.results import model_slug

    a, b = tmp_path / "x" / "model", tmp_path / "y" / "model"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    assert local_model_name(a) != local_model_name(b)
    assert model_slug(str(a)) != model_slug(str(b))
    assert local_model_name(a).startswith("local:model-")
    # the same folder under another spelling is the same model
    monkeypatch.chdir(tmp_path / "x")
    assert local_model_name("./model") == local_model_name(a)
    assert model_slug("./model") == model_slug(str(a))
    (tmp_path / "link").symlink_to(a)
    assert local_model_name(tmp_path / "link") == local_model_name(a)


def _bos_tokenizer():
    """The GPT-2 tokenizer, made to prepend <|endoftext|> as its BOS (as Llama's tokenizers do)."""
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    base = offline_models.gpt2_tokenizer()
    tk = base.backend_tokenizer
    eot = base.bos_token_id
    tk.post_processor = TemplateProcessing(single="<|endoftext|> $A", pair="<|endoftext|> $A $B",
                                           special_tokens=[("<|endoftext|>", eot)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    assert tok("a")["input_ids"][0] == eot
    return tok


def test_bos_follows_the_tokenizer_except_gpt2_gptj_neox(tmp_path):
    tok = _bos_tokenizer()
    llama, _ = save_tiny("llama", tmp_path / "llama-bos", tokenizer=tok)
    gpt2, _ = save_tiny("gpt2", tmp_path / "gpt2-bos", tokenizer=tok)
    assert model_loading.uses_bos(load_model(str(llama), device="cpu", verbose=False))
    assert not model_loading.uses_bos(load_model(str(gpt2), device="cpu", verbose=False))  # the paper's convention


def test_local_loading_never_contacts_the_hub(tiny_dirs, monkeypatch):
    # every hub request fails loudly here; loading a local directory must make none
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    requests = []

    class Refuse(httpx2.BaseTransport):
        def handle_request(self, request):
            requests.append(str(request.url))
            raise httpx2.ConnectError("no network in this test", request=request)

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    old = _http._GLOBAL_CLIENT_FACTORY
    _http.set_client_factory(lambda: httpx2.Client(transport=Refuse()))
    try:
        load_model(str(tiny_dirs["gptj"][0]), device="cpu", verbose=False)
    finally:
        _http.set_client_factory(old)
    assert requests == []


# ------------------------------------------------------------------------------------------------ bad input


def test_missing_directory_says_what_to_do(tmp_path):
    missing = tmp_path / "no-such-model"
    for call in (lambda: resolve_name(str(missing)), lambda: load_model(str(missing), verbose=False)):
        with pytest.raises(LocalModelError, match="does not exist") as e:
            call()
        assert "save_pretrained" in str(e.value)


def test_directory_without_config_says_what_to_do(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(LocalModelError, match="no config.json") as e:
        load_model(str(tmp_path), verbose=False)
    assert "save_pretrained" in str(e.value)


def test_unsupported_architecture_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
    with pytest.raises(LocalModelError, match="BertForMaskedLM") as e:
        load_model(str(tmp_path), verbose=False)
    assert "GPT2LMHeadModel" in str(e.value) and "LlamaForCausalLM" in str(e.value)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(LocalModelError, match="names no architecture"):
        resolve_name(str(tmp_path))


def test_directory_without_tokenizer_says_what_to_do(tmp_path):
    hf = _hf_model("gpt2", 50257)
    hf.save_pretrained(tmp_path)  # transformers would build an empty tokenizer here, without a word
    for call in (lambda: resolve_name(str(tmp_path)), lambda: load_model(str(tmp_path), verbose=False)):
        with pytest.raises(LocalModelError, match=r"no tokenizer files.*tokenizer\.save_pretrained"):
            call()


def test_unknown_name_mentions_local_directories():
    with pytest.raises(model_loading.UnknownModelError, match="local model directory"):
        resolve_name("not-a-model-xyz")


# ------------------------------------------------------------------------------------------------ dtype


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_icl_dtype_sets_the_dtype_and_the_recorded_name(tiny_dirs, monkeypatch, dtype):
    from helpers.core.store import model_fingerprint
    from helpers.study.results import model_slug

    path, _ = tiny_dirs["gpt2"]
    monkeypatch.delenv("ICL_DTYPE", raising=False)
    ref = load_model(str(path), device="cpu", verbose=False)
    ref_slug = model_slug(str(path))
    monkeypatch.setenv("ICL_DTYPE", dtype)
    with pytest.warns(UserWarning, match="slower than float32 on CPUs without native"):
        model = load_model(str(path), device="cpu", verbose=False)
    assert model.cfg.dtype == getattr(torch, dtype)
    assert all(p.dtype == getattr(torch, dtype) for p in model.parameters())
    # results never mix dtypes: the recorded name, the results folder and the weights fingerprint differ
    assert model.cfg.icl_model_name == f"{ref.cfg.icl_model_name}@{dtype}"
    assert model_slug(str(path)) == model_slug(model.cfg.icl_model_name) == f"{ref_slug}-{dtype}"
    assert model_fingerprint(model) != model_fingerprint(ref)
    # an explicit dtype wins over ICL_DTYPE
    assert load_model(str(path), device="cpu", dtype=torch.float32, verbose=False).cfg.dtype == torch.float32


@pytest.mark.parametrize("dtype, rel_tol", [("bfloat16", 0.05), ("float16", 0.01)])
def test_low_precision_stays_close_to_float32(tiny_dirs, monkeypatch, dtype, rel_tol):
    # bfloat16 keeps 8 significant bits, float16 11: logits within rel_tol x their largest magnitude of float32's,
    # and the label word chosen for 32 SST-2 prompts (the paper's prediction) almost always the same
    from helpers.core.predict import predict
    from helpers.core.prompts import make_icl_set

    path, hf = tiny_dirs["llama"]
    out = {}
    for dt in ("float32", dtype):
        monkeypatch.setenv("ICL_DTYPE", dt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = load_model(str(path), device="cpu", verbose=False)
        assert model.cfg.dtype == getattr(torch, dt)
        with torch.inference_mode():
            logits = model(_sequences(hf.config.vocab_size)).float()
        s = make_icl_set(model, "sst2", seed=42, n_test=32)
        out[dt] = logits, predict(model, s.prompts, s.label_ids, batch_size=8, top_k=0).pred
    (ref, ref_pred), (low, low_pred) = out["float32"], out[dtype]
    assert (low - ref).abs().max() <= rel_tol * ref.abs().max()
    assert (low_pred == ref_pred).float().mean() >= 0.9


def test_invalid_dtype_lists_the_allowed_ones(tiny_dirs, monkeypatch):
    path, _ = tiny_dirs["gpt2"]
    monkeypatch.setenv("ICL_DTYPE", "float64")
    with pytest.raises(ValueError, match="ICL_DTYPE='float64'.*float32, bfloat16, float16"):
        load_model(str(path), verbose=False)
    monkeypatch.delenv("ICL_DTYPE")
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        load_model(str(path), dtype="int8", verbose=False)
    assert models.resolve_dtype(None) == torch.float32 and models.resolve_dtype("BFloat16") == torch.bfloat16


# ------------------------------------------------------------------------------- the real offline models


def _hf_vs_tl_dir(path: Path):
    model, hf = load_model(str(path), return_hf=True, device="cpu", verbose=False)
    text = "Review: a gripping, funny film\nSentiment: Positive\nReview: dull and long\nSentiment:"
    ids = model.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if model_loading.uses_bos(model):
        ids = torch.cat([torch.tensor([[model.tokenizer.bos_token_id]]), ids], 1)
    with torch.inference_mode():
        diff = (hf(ids).logits.log_softmax(-1) - model(ids).log_softmax(-1)).abs().max().item()
    return model, diff


@pytest.mark.slow
def test_gemma_directory_loads_with_the_official_gemma_config():
    path = offline_models.dequantised_hf_dir(models.DEFAULT_MODEL, offline_models._gemma_gguf)
    model, diff = _hf_vs_tl_dir(path)
    assert model.cfg.n_layers == 18 and model.cfg.n_key_value_heads == 1 and model.cfg.use_qk_norm
    assert model_loading.uses_bos(model)  # Gemma's tokenizer prepends <bos>
    assert diff < 1e-3, diff


@pytest.mark.slow
def test_smollm2_directory_loads_as_llama():
    path = offline_models.dequantised_hf_dir(offline_models.SMOLLM2, offline_models._smollm2_gguf)
    model, diff = _hf_vs_tl_dir(path)
    assert model.cfg.original_architecture == "LlamaForCausalLM" and model.cfg.n_key_value_heads == 3
    assert not model_loading.uses_bos(model)  # SmolLM2's tokenizer adds none
    assert diff < 1e-3, diff


def _tiny_config(arch: str, vocab: int):
    """A 2-layer random config of every architecture the loader lists (helpers.core.models.LOCAL_ARCHITECTURES)."""
    import transformers as tr

    base = dict(vocab_size=vocab, hidden_size=D_MODEL, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2)
    special = {
        "GPT2LMHeadModel": ("gpt2", dict(vocab_size=vocab, n_positions=128, n_embd=D_MODEL, n_layer=2, n_head=4)),
        "GPTJForCausalLM": ("gptj", dict(vocab_size=vocab, n_positions=128, n_embd=D_MODEL, n_layer=2, n_head=4,
                                         rotary_dim=4)),
        "GPTNeoXForCausalLM": ("gpt_neox", {k: v for k, v in base.items() if k != "num_key_value_heads"}),
        "GPTNeoForCausalLM": ("gpt_neo", dict(vocab_size=vocab, hidden_size=D_MODEL, num_layers=2, num_heads=4,
                                              attention_types=[[["global", "local"], 1]], max_position_embeddings=128,
                                              window_size=16)),
        "OPTForCausalLM": ("opt", dict(vocab_size=vocab, hidden_size=D_MODEL, ffn_dim=64, num_hidden_layers=2,
                                       num_attention_heads=4, max_position_embeddings=128,
                                       word_embed_proj_dim=D_MODEL)),
        "BloomForCausalLM": ("bloom", dict(vocab_size=vocab, hidden_size=D_MODEL, n_layer=2, n_head=4)),
        "LlamaForCausalLM": ("llama", base), "MistralForCausalLM": ("mistral", base),
        "MixtralForCausalLM": ("mixtral", {**base, "num_local_experts": 2, "num_experts_per_tok": 1}),
        "Qwen2ForCausalLM": ("qwen2", base), "Qwen3ForCausalLM": ("qwen3", {**base, "head_dim": 8}),
        "GptOssForCausalLM": ("gpt_oss", {**base, "num_local_experts": 2, "num_experts_per_tok": 1, "head_dim": 8}),
        "ApertusForCausalLM": ("apertus", base),
        "OlmoeForCausalLM": ("olmoe", {**base, "num_experts": 2, "num_experts_per_tok": 1}),
        "Olmo3ForCausalLM": ("olmo3", base),
    }
    model_type, kw = special[arch]
    return tr.AutoConfig.for_model(model_type, **kw)


@pytest.mark.parametrize("arch", models.LOCAL_ARCHITECTURES)
def test_every_supported_architecture_loads_and_matches_transformers(arch, tmp_path):
    """Every architecture the loader (and preflight) accepts is loaded for real from a tiny random folder and gives
    transformers' log-probabilities; one that cannot is taken off the list rather than failing mid-run."""
    import transformers as tr

    tok = offline_models.gpt2_tokenizer()
    torch.manual_seed(0)
    hf = getattr(tr, arch)(_tiny_config(arch, len(tok))).eval()
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_model(str(tmp_path), device="cpu", verbose=False)
    x = _sequences(len(tok))
    with torch.inference_mode():
        ours, ref = model(x).log_softmax(-1), hf(x).logits.log_softmax(-1)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["PhiForCausalLM", "Phi3ForCausalLM"])
def test_architectures_that_do_not_convert_are_refused_with_the_list(arch, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "phi3"}))
    with pytest.raises(LocalModelError, match=f"is a {arch}, which TransformerLens [0-9.]+ cannot load"):
        resolve_name(str(tmp_path))


def test_the_docs_list_the_architectures_the_loader_accepts():
    """docs/your-own.md's list is rendered from the loader's own lists (make tables): every accepted architecture
    has its name there, and nothing is listed that the loader refuses."""
    accepted = set(models.LOCAL_ARCHITECTURES) | set(models.LOCAL_GEMMA_ARCHITECTURES)
    assert set(models.ARCHITECTURE_NAMES) == accepted
    doc = (Path(__file__).resolve().parent.parent / "docs" / "your-own.md").read_text()
    assert f"<!-- record:architectures -->\n{models.architectures_text()}<!-- /record:architectures -->" in doc
    assert "Phi" not in models.architectures_text()
