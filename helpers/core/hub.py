"""Loading a TransformerLens name from the Hugging Face hub, with bounded waits.

Any official TransformerLens name (``gpt2-xl``, ``EleutherAI/gpt-j-6B``, ...) loads from the hub when a network
exists (:func:`load_hub`, called by :func:`helpers.core.models.load_model`). GPT-2 and GPT-J run without BOS, as
the paper's code did. Every hub request has connect and read timeouts, and a hub that never answers raises
:class:`~helpers.core.model_loading.NoNetworkError` after ``ICL_HUB_TIMEOUT`` seconds (default 15; within 30 s
counting huggingface_hub's retry sleep). :func:`hub_offline` keeps the loads of local folders off the hub.
"""

from __future__ import annotations

import contextlib
import os
import time

import torch

from helpers.core.model_loading import NoNetworkError, hooked_from_state, quiet_loading
from helpers.core.offline_models import OFFLINE_MODELS

__all__ = ["HUB_TIMEOUT_DEFAULT", "hub_timeout",
           "hub_offline", "load_hub"]

# Paper's convention: GPT-2 / GPT-J were run without a BOS token.
_NO_BOS_PREFIXES = ("gpt2", "distilgpt2", "EleutherAI/gpt-j", "gpt-j")

# huggingface_hub's HTTP client has no timeout of its own, and some of its calls pass none (transformers asks
# for a model's revision that way before every download): a network that accepts connections but never
# answers would hang load_model for ever. Inside _bounded_hub every request gets connect/read/write timeouts,
# and until the hub has answered once, no request may wait past the bound; once the bound has passed without
# an answer, the hub counts as offline (cached files still load, others fail with NoNetworkError).
# huggingface_hub's retries sleep at most 8 s, so with the default bound of 15 s a silent hub fails within
# about 25 s.

HUB_TIMEOUT_DEFAULT = 15.0  # seconds; ICL_HUB_TIMEOUT overrides
_HUB_TIMEOUT_VARS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")  # huggingface_hub's own settings


def hub_timeout() -> float:
    """Seconds load_model waits for a silent Hugging Face hub: ``$ICL_HUB_TIMEOUT``, default 15.

    A user's own ``HF_HUB_ETAG_TIMEOUT`` / ``HF_HUB_DOWNLOAD_TIMEOUT`` are kept and can only lengthen it.
    """
    env = os.environ.get("ICL_HUB_TIMEOUT", "").strip()
    if not env:
        return HUB_TIMEOUT_DEFAULT
    try:
        value = float(env)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"ICL_HUB_TIMEOUT={env!r}: give a positive number of seconds (default {HUB_TIMEOUT_DEFAULT:g}).")
    return value


def _user_hub_timeouts() -> list[float]:
    out = []
    for var in _HUB_TIMEOUT_VARS:
        try:
            out.append(float(os.environ[var]))
        except (KeyError, ValueError):
            pass
    return out


@contextlib.contextmanager
def _bounded_hub(timeout: float):
    """Hub requests inside have timeouts, and a hub that never answers fails after ``timeout`` seconds.

    Yields a dict whose ``"silent"`` is True once the bound cut the hub off. A user's own client factory
    (``huggingface_hub.set_client_factory``) and timeout variables are kept: the hooks are added to their
    client, and explicit timeouts are only shortened while the hub has not answered.
    """
    from huggingface_hub import constants  # lazy: only when the hub is used
    from huggingface_hub.errors import OfflineModeIsEnabled
    from huggingface_hub.utils import _http

    bound = max([timeout, *_user_hub_timeouts()])
    state = {"t0": time.monotonic(), "answered": False, "silent": False, "bound": bound}

    class HubNoAnswer(OfflineModeIsEnabled):  # offline: the hub's and transformers' own fallbacks apply
        pass

    def on_request(request):
        t = dict(request.extensions.get("timeout") or {})
        for key in ("connect", "read", "write", "pool"):
            if t.get(key) is None:  # no timeout given (None means: wait for ever)
                t[key] = bound
        if not state["answered"]:
            left = bound - (time.monotonic() - state["t0"])
            if left <= 0:
                state["silent"] = True
                raise HubNoAnswer(f"the Hugging Face hub ({request.url.host}) did not answer within {bound:g} s")
            t = {key: min(v, left) for key, v in t.items()}
        request.extensions["timeout"] = t

    def on_response(response):
        state["answered"] = True

    user_factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)

    def factory():
        client = user_factory()
        hooks = client.event_hooks
        client.event_hooks = {"request": [*hooks.get("request", []), on_request],
                              "response": [*hooks.get("response", []), on_response]}
        return client

    saved = {var: getattr(constants, var) for var in _HUB_TIMEOUT_VARS}
    for var in _HUB_TIMEOUT_VARS:
        if not os.environ.get(var):  # the user's own setting wins
            setattr(constants, var, min(saved[var], bound))
    _http.set_client_factory(factory)
    try:
        yield state
    finally:
        _http.set_client_factory(user_factory)
        for var, value in saved.items():
            setattr(constants, var, value)


def load_hub(name: str, device: str, dtype: torch.dtype):
    from huggingface_hub.utils import httpx  # the HTTP library huggingface_hub uses (httpx2 in 2.x)
    from transformer_lens import loading_from_pretrained as loading

    timeout = hub_timeout()
    hub = {"silent": False}
    try:
        with _bounded_hub(timeout) as hub, quiet_loading():
            # the steps of HookedTransformer.from_pretrained_no_processing, with the transformers model loaded
            # straight onto the device (device_map) and no second copy of its weights (hooked_from_state)
            official = loading.get_official_model_name(name)
            cfg = loading.get_pretrained_model_config(official, fold_ln=False, device=device, dtype=dtype)
            state = loading.get_pretrained_state_dict(official, cfg, None, dtype=dtype, device_map=str(device))
            model = hooked_from_state(cfg, state)
            del state
    except (OSError, ConnectionError, TimeoutError, httpx.TransportError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        why = (" (HF_HUB_OFFLINE=1 is set)" if offline else
               f" (no answer within {hub['bound']:g} s; ICL_HUB_TIMEOUT sets this bound)" if hub["silent"] else "")
        raise NoNetworkError(
            f"Could not download {name!r} from the Hugging Face hub{why}: {type(e).__name__}: "
            f"{(str(e).strip().splitlines() or [''])[0][:200]} "
            f"Without a network use an offline model: {sorted(OFFLINE_MODELS)}, or a local model directory."
        ) from e
    if name.startswith(_NO_BOS_PREFIXES):
        model.cfg.default_prepend_bos = False
    return model


@contextlib.contextmanager
def hub_offline():
    """Inside, any request to the Hugging Face hub raises instead of going out (local loads stay local)."""
    from huggingface_hub import constants  # lazy: only when the hub is used

    old = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old

