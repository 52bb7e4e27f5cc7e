"""The in-context-learning setting (notebook 00; arXiv 2305.14160 §2 and Table 1's vanilla rows): the
label-restricted prediction of one prompt, the reference notebook 00's exercise is checked against
(:mod:`helpers.exercises.setting`). The method itself is :func:`helpers.core.predict.predict`; its runs over tasks
and seeds and the claims of notebooks 00 and 08 are :mod:`helpers.protocols.setting`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float

from helpers.core.predict import predict
from helpers.core.prompts import Prompt

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer  # the type of 3.9's models; a 4.x bridge takes its place

__all__ = ["label_logits_reference"]


def label_logits_reference(model: HookedTransformer, prompt: Prompt,
                           label_ids: Sequence[int]) -> Float[torch.Tensor, classes]:  # noqa: F821
    """The label words' first-token logits at q of one prompt, as every experiment computes them
    (:func:`helpers.core.predict.predict`: batched, unembedding at q only)."""
    return predict(model, [prompt], list(label_ids), batch_size=1, top_k=0).label_logits[0]
