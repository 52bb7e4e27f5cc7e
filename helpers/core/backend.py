"""The one place that knows which TransformerLens runs the collection: 3.9's HookedTransformer or 4.x's bridge.

TransformerLens 4.0 removed ``HookedTransformer``; its ``TransformerBridge`` wraps the transformers model itself
and, in compatibility mode, offers the same hook names (``blocks.{l}.attn.hook_pattern``...), config fields and
``run_with_hooks``. Which one a session uses:

- ``ICL_BACKEND=hooked`` or ``ICL_BACKEND=bridge`` when set (an error if the installed TransformerLens cannot
  provide it: ``make setup`` installs 3.9, ``make setup TL=4`` installs 4.3);
- else the installed version: 3.x gives ``hooked``, 4.x gives ``bridge``.

Every model the collection loads goes through :func:`helpers.core.models.load_model`, which asks
:func:`backend` and, for the bridge, :func:`bridge_from_hf`. The bridge runs the transformers model without
weight processing (``enable_compatibility_mode(no_processing=True)``), the same numbers as 3.9's
``from_pretrained_no_processing``. What the bridge does not have, :func:`require_hooked` refuses by name
(docs/transformerlens4.md lists it).
"""

from __future__ import annotations

import os
from functools import cache
from importlib.metadata import PackageNotFoundError, version

import torch

from helpers.core.model_loading import quiet_loading

__all__ = ["BACKENDS", "BackendError", "tl_version", "backend", "is_bridge", "bridge_from_hf", "bridge_from_hub",
           "bridge_architectures", "require_hooked", "kv_heads_ungrouped", "stop_before_final_norm",
           "Model"]  # noqa: F822  (the module's __getattr__ gives it: this session's TransformerLens class)

BACKENDS = ("hooked", "bridge")


class BackendError(RuntimeError):
    """The installed TransformerLens cannot do what was asked; the message says what to install or set."""


@cache
def tl_version() -> str:
    """The installed TransformerLens version (its distribution is ``transformer-lens``)."""
    try:
        return version("transformer_lens")
    except PackageNotFoundError as e:
        raise BackendError("TransformerLens is not installed: run `make setup` (3.9) or `make setup TL=4` (4.3)") from e


def _major() -> int:
    return int(tl_version().split(".")[0])


def backend() -> str:
    """``hooked`` (TransformerLens 3.x's HookedTransformer) or ``bridge`` (4.x's TransformerBridge)."""
    asked = os.environ.get("ICL_BACKEND", "").strip().lower()
    have = "hooked" if _major() < 4 else "bridge"
    if not asked:
        return have
    if asked not in BACKENDS:
        raise BackendError(f"ICL_BACKEND={asked!r}: use one of {BACKENDS} (or leave it unset: the installed "
                           f"TransformerLens {tl_version()} gives {have!r})")
    if asked != have:
        how = "make setup TL=4" if asked == "bridge" else "make setup"
        raise BackendError(f"ICL_BACKEND={asked!r} needs TransformerLens {'4.x' if asked == 'bridge' else '3.9'}, "
                           f"but {tl_version()} is installed: run `{how}`, or unset ICL_BACKEND")
    return asked


def is_bridge(model) -> bool:
    """Whether ``model`` is a TransformerLens 4 bridge (not a HookedTransformer)."""
    return type(model).__name__ == "TransformerBridge" or hasattr(model, "original_model")


def bridge_from_hf(hf, tokenizer, name: str, device: str | None = None, dtype: torch.dtype = torch.float32):
    """A TransformerBridge around the loaded transformers model ``hf``, in compatibility mode without weight
    processing: the hook names and config fields of HookedTransformer, the transformers model's own numbers."""
    from transformer_lens import TransformerBridge  # lazy: TransformerLens takes seconds to import

    with quiet_loading():
        model = TransformerBridge.boot_transformers(name, hf_model=hf, tokenizer=tokenizer, dtype=dtype,
                                                    device=device)
        model.enable_compatibility_mode(disable_warnings=True, no_processing=True)
    model.eval()
    stop_before_final_norm(model)
    return model


def bridge_from_hub(name: str, device: str | None = None, dtype: torch.dtype = torch.float32):
    """A hub model through TransformerLens 4's own loader, set up as :func:`bridge_from_hf` sets one up."""
    from transformer_lens import TransformerBridge  # lazy: TransformerLens takes seconds to import

    model = TransformerBridge.boot_transformers(name, device=device, dtype=dtype)
    model.enable_compatibility_mode(disable_warnings=True, no_processing=True)
    model.eval()
    stop_before_final_norm(model)
    return model


def stop_before_final_norm(model) -> None:
    """Make ``model(x, stop_at_layer=n_layers)`` return the final residual stream, as HookedTransformer does.

    The bridge stops *before* block ``stop_at_layer``; no block has the index ``n_layers``, so it would run to the
    end and return logits. Here that one case raises the bridge's own stop at the final norm's input instead, so
    the unembedding (262k columns for Gemma) is never computed."""
    from transformer_lens.model_bridge.exceptions import StopAtLayerException

    forward = model.forward
    n = model.cfg.n_layers

    def stop(module, args):
        raise StopAtLayerException(args[0])

    def forward_to_final_norm(*args, stop_at_layer=None, **kwargs):
        if "past_kv_cache" in kwargs:  # the bridge would pass it on to transformers, which ignores it
            raise BackendError("past_kv_cache (a HookedTransformer key/value cache) is not read by a TransformerLens "
                               "4 bridge; run whole prompts there (helpers.core.backend)")
        if stop_at_layer is None or stop_at_layer != n:
            return forward(*args, stop_at_layer=stop_at_layer, **kwargs)
        handle = model.ln_final.register_forward_pre_hook(stop)
        try:
            return forward(*args, **kwargs)
        except StopAtLayerException as e:  # raised outside the bridge's own stop handling
            return e.layer_output
        finally:
            handle.remove()

    model.forward = forward_to_final_norm


def bridge_architectures() -> tuple[str, ...]:
    """The causal language-model classes (``config.json``'s ``architectures``) TransformerLens 4 bridges."""
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    return tuple(sorted(a for a in SUPPORTED_ARCHITECTURES if a.endswith(("ForCausalLM", "LMHeadModel"))))


def require_hooked(model, what: str) -> None:
    """Refuse ``what`` on a bridge, with what to do instead."""
    if is_bridge(model):
        raise BackendError(f"{what} needs TransformerLens 3.9's HookedTransformer; this model is a TransformerLens "
                           f"{tl_version()} bridge. Run it under `make setup` (3.9), or see docs/transformerlens4.md "
                           "for what the bridge runs.")


def kv_heads_ungrouped(model, w: torch.Tensor) -> torch.Tensor:
    """A key or value weight ``[head, ...]`` with one entry per query head: HookedTransformer 3.9 repeats the
    grouped key and value heads in ``W_K``/``W_V``; the bridge keeps one per key-value head."""
    n, g = model.cfg.n_heads, w.shape[0]
    if g == n:
        return w
    if n % g:
        raise BackendError(f"{g} key-value heads do not divide {n} query heads")
    return w.repeat_interleave(n // g, dim=0)


def __getattr__(name: str):
    """``Model``: TransformerLens' model class of this session (:func:`backend`), ``HookedTransformer`` under 3.9,
    ``TransformerBridge`` under 4.x: what the notebooks' functions take (imported on first use: seconds)."""
    if name == "Model":
        if backend() == "hooked":
            from transformer_lens import HookedTransformer

            return HookedTransformer
        from transformer_lens import TransformerBridge

        return TransformerBridge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
