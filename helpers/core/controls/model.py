"""The positive control: a small HookedTransformer trained here that certainly learns in context.

Both offline models barely use the demonstrations (notebooks 00 and 07), so a method that finds nothing on them
cannot tell "no mechanism" from "the method cannot see it". This module trains a model whose answer can only
come from its context, in a few minutes on two CPU cores, and ships it as a plain token-input
:class:`transformer_lens.HookedTransformer`, so every experiment of the collection (which takes ``model``,
:class:`helpers.core.prompts.Prompt` objects and ``label_ids``) runs on it unchanged.

**The task** (bursty in-context classification with Gaussian items; Chan et al., arXiv 2205.05055; Reddy,
arXiv 2312.03002). There are ``n_classes`` training classes and ``n_heldout`` classes never used in training,
each a centre ``mu_c ~ N(0, I/dim)`` in ``R^dim``; an item of class c is ``(mu_c + noise * eta) / sqrt(1 +
noise**2)`` with ``eta ~ N(0, I/dim)``. A sequence is ``BOS, item, label, item, label, ..., item``: ``n_pairs``
item-label pairs, then the query item. Its context shows ``n_labels`` classes (``n_pairs / n_labels``
exemplars each, shuffled), the query is a fresh item of one of them, and the class -> label assignment is a
fresh random permutation for every sequence. Accuracy above ``1 / n_labels`` can therefore only come from
reading the mapping in the context.

**The model**: attention-only, 2 layers x 2 heads, d_model 64, LayerNorm, learned positions, BOS at position 0
(an attention sink, as in Gemma's convention; positions are counted with it). In training an item enters as
``x @ P`` at ``hook_embed`` (``P`` a learned ``dim x d_model`` projection), so items are fresh vectors every
step. After training the vocabulary is *baked*: token 0 is BOS, tokens ``1..n_labels`` the labels
(``L0..L3``), then one token per row of a seeded exemplar table (``exemplars`` items of every training class
and every held-out class), whose embedding row is ``x @ P``. Evaluating on classes never seen in training is
then only other token ids. The unembedding's item and BOS columns are zero with bias ``-1e4``: the model can
only say a label, so full-vocabulary log-probabilities equal label-restricted ones (and top-k over the
vocabulary lists the labels first; word loyalty's top-5 means little here).

**Prompts**: :func:`control_prompts` builds the project's :class:`Prompt` for each sequence. ``label_pos`` are
the label tokens (2, 4, ..., 2 * n_pairs), ``label_class[k]`` is the *label index* shown there (the index into
``label_ids``, as for the text tasks), ``gold`` the label the query's class carries in this sequence, ``q`` the
query item (the last position), ``text_spans[k]`` the k-th item, ``format_pos`` empty (there is no template),
``kinds`` ``bos/text/label/query``. The items' classes are kept in ``item_class`` of
:class:`ControlPrompts`. ``text`` renders the tokens (``x12.3`` = exemplar 3 of class 12).

**Training recipe** (:mod:`helpers.core.controls.training`: ``train_control``; measured on seeds 0-2, see its
``RECIPE_NOTES``): AdamW lr 1e-3, batch 128, a copy curriculum: for the first ``copy_steps`` steps a share of
queries (falling linearly from 1 to 0) is an exact copy of one of the context items of its class, which gives the second-layer head a matching
signal before the class-matching one. Training stops when the in-context accuracy on fresh sequences reaches
``stop_acc`` or at ``max_steps`` / ``max_seconds``. CPU training is not bitwise reproducible across machines
and thread counts, so reproduction is tested by accuracy, never by weights or time.

**Three named controls** (:data:`CONTROLS`, loaded by name with ``load_model(name)``; ``make control
CONTROL=<name>`` retrains one): ``"control"`` (the 2 x 2 model above, notebook 09's by-hand sections);
``"control-wide"`` (the same task on 2 layers x 8 heads, the positive control of every power measurement: the
heads the answer needs are a small share, so a random head set is a fair comparison); ``"control-negative"``
(2 x 8, the same items and prompt format, but ``mapping="fixed"``: one class -> label assignment,
:func:`fixed_labels`, for all sequences, and ``bursty=False``: training contexts never show the query's class,
so reading them cannot help and the answer is learned in the weights, as Chan et al. find without bursty
contexts). Evaluation prompts (:func:`control_prompts`) are always bursty and follow the task's mapping, so on
the negative control's prompts a model that read the context would be right as well: what it does with a swapped
mapping (:func:`relabel`) and with classes never seen in training tells the two apart.

**Checkpoint**: a safetensors file of the trained parameters (the training model: labels' embeddings,
positions, attention, norms, unembedding, ``P``) plus the exemplar table and the recipe in its metadata
(``save_control`` of :mod:`helpers.core.controls.training`). :func:`load_control` verifies the file's sha256
before reading it (against the sha256 written in :data:`CONTROLS` for a shipped file, else against the
``.sha256`` file written beside it) and bakes the token model. ``load_model(name)`` calls it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float, Int

from helpers.core.paths import cache_dir
from helpers.core.prompts import Prompt
from helpers.core.task_data import file_sha256  # the project's one file hasher

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "CONTROL_NAME",
    "CONTROL_PATH",
    "CONTROL_SHA256",
    "CONTROLS",
    "ControlSpec",
    "control_spec",
    "control_kind",
    "fixed_labels",
    "ControlTask",
    "ControlPrompts",
    "ControlError",
    "class_centres",
    "exemplar_table",
    "draw_sequences",
    "model_config",
    "mix_items",
    "control_prompts",
    "relabel",
    "shuffled_labels",
    "control_task",
    "checkpoint_info",
    "bake",
    "load_control",
    "is_control",
    "item_positions",
]

CONTROL_NAME = "control"
CONTROL_PATH = Path(__file__).resolve().parents[3] / "data" / "control" / "control.safetensors"
# sha256 of the shipped checkpoint (data/control/control.safetensors); load_control refuses any other file there
CONTROL_SHA256 = "032aaa8dddb36af26adbab0ee4654d4335be0c16bed262bc9cabb9b2adfb42c9"


class ControlError(ValueError):
    """The control's checkpoint is missing or altered, or a request does not fit the task."""


@dataclass(frozen=True)
class ControlSpec:
    """A named control: what it is, its task and shape, how it is trained and where its checkpoint lives.

    ``kind``: ``"positive"`` (the answer can only come from the context: the mechanism a check looks for is
    there) or ``"negative"`` (the answer is in the weights and the context is not read: it is absent).
    ``shape``: ``(n_layers, n_heads, d_model)``. ``train``: ``train_control``'s keyword arguments besides
    the seed, task and shape. ``sha256``: of the shipped checkpoint (empty until one is shipped)."""

    name: str
    kind: str
    task: ControlTask
    shape: tuple[int, int, int]
    file: str
    sha256: str
    about: str
    train: dict = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return CONTROL_PATH.parent / self.file

    @property
    def n_heads(self) -> int:
        return self.shape[0] * self.shape[1]


@dataclass(frozen=True)
class ControlTask:
    """The synthetic task's sizes (see the module docstring). ``seed`` draws the class centres and exemplar table."""

    n_labels: int = 4
    n_pairs: int = 8
    n_classes: int = 128
    n_heldout: int = 32
    dim: int = 32
    noise: float = 0.5
    exemplars: int = 8
    seed: int = 0
    # "sequence": the class -> label assignment is drawn afresh for every sequence (the positive controls: only the
    # context can tell the answer); "fixed": one assignment for all sequences, :func:`fixed_labels` (the negative
    # control: the answer can sit in the weights)
    mapping: str = "sequence"
    # True: the query's class is among the context's classes (every training sequence can be solved by reading
    # it); False: training contexts never show the query's class, so reading them cannot help (the negative
    # control's training; evaluation prompts of :func:`control_prompts` are always bursty)
    bursty: bool = True

    def __post_init__(self):
        if self.n_pairs % self.n_labels:
            raise ControlError(f"n_pairs ({self.n_pairs}) must be a multiple of n_labels ({self.n_labels})")
        if self.mapping not in ("sequence", "fixed"):
            raise ControlError(f"mapping must be 'sequence' or 'fixed', got {self.mapping!r}")
        if not self.bursty and self.mapping != "fixed":
            raise ControlError("contexts without the query's class (bursty=False) carry no answer under a mapping "
                               "drawn per sequence: use mapping='fixed'")

    @property
    def seq_len(self) -> int:
        return 2 * self.n_pairs + 2  # BOS, pairs, query

    @property
    def d_vocab(self) -> int:
        return 1 + self.n_labels + (self.n_classes + self.n_heldout) * self.exemplars

    @property
    def label_ids(self) -> list[int]:
        return list(range(1, 1 + self.n_labels))

    def item_token(self, cls: int | np.ndarray, ex: int | np.ndarray):
        return 1 + self.n_labels + cls * self.exemplars + ex

    def classes(self, which: str) -> np.ndarray:
        if which == "train":
            return np.arange(self.n_classes)
        if which == "heldout":
            return np.arange(self.n_classes, self.n_classes + self.n_heldout)
        raise ControlError(f"classes must be 'train' or 'heldout', got {which!r}")


# The named controls (load them with load_model(name); retrain with `make control CONTROL=<name>`). Every one is an
# attention-only HookedTransformer on the same task family, prompt format and items (same ``ControlTask`` sizes and
# seed: token ``x12.3`` is the same vector in all three); they differ in the mapping and in width.
CONTROLS: dict[str, ControlSpec] = {}
for _spec in (
    ControlSpec("control", "positive", ControlTask(), (2, 2, 64), "control.safetensors", CONTROL_SHA256,
                "the positive control of notebook 09's by-hand sections: 2 layers x 2 heads, a class -> label "
                "mapping drawn afresh for every sequence, so only the context can tell the answer"),
    ControlSpec("control-wide", "positive", ControlTask(), (2, 8, 64), "control-wide.safetensors",
                "576ed92c280ee96c2094455e75abdf91a266d691bce1d9dbe29cd3eca0a05180",
                "the wide positive control: the same task as 'control' on 2 layers x 8 heads, so one head "
                "reads the answer at q among 16 and a random head set is a fair comparison"),
    ControlSpec("control-negative", "negative", ControlTask(mapping="fixed", bursty=False), (2, 8, 64),
                "control-negative.safetensors", "c9268fc9c2c53301168541522b9a1f23f140dfac8eb2551806d6b5c90d1a5d83",
                "the negative control: the wide control's shape and prompt format, but one fixed class -> label "
                "mapping and training contexts that never show the query's class, so the answer is learned in the "
                "weights and the context is not read (in-weights learning; Chan et al., arXiv 2205.05055)",
                train={"copy_steps": 0}),
):
    CONTROLS[_spec.name] = _spec


def control_spec(name: str) -> ControlSpec:
    """The :class:`ControlSpec` of a named control; a clear error naming the known ones otherwise."""
    if name not in CONTROLS:
        raise ControlError(f"unknown control {name!r}; the controls are {sorted(CONTROLS)}")
    return CONTROLS[name]


def class_centres(task: ControlTask) -> Float[np.ndarray, "classes dim"]:
    """Centres of the training classes then the held-out ones, drawn with ``task.seed`` (numpy PCG64)."""
    rng = np.random.default_rng([task.seed, 1])
    return rng.standard_normal((task.n_classes + task.n_heldout, task.dim)).astype(np.float32) / math.sqrt(task.dim)


def fixed_labels(task: ControlTask) -> np.ndarray:
    """The one class -> label index assignment of a ``mapping="fixed"`` task, for training and held-out classes
    alike (``[n_classes + n_heldout]``; each label given to as many training classes, and as many held-out ones,
    as the counts allow), drawn with ``task.seed`` (numpy PCG64 seeded ``[seed, 6]``). Held-out classes get a label
    too, which no training sequence shows: a model that stores the mapping in its weights cannot know it."""
    rng = np.random.default_rng([task.seed, 6])
    train = rng.permutation(np.arange(task.n_classes) % task.n_labels)
    held = rng.permutation(np.arange(task.n_heldout) % task.n_labels)
    return np.concatenate([train, held]).astype(np.int64)


def mix_items(task: ControlTask, centres, eta):
    return (centres + task.noise * eta) / math.sqrt(1 + task.noise**2)


def exemplar_table(task: ControlTask) -> Float[np.ndarray, "classes exemplars dim"]:
    """The baked items: ``task.exemplars`` items of every class (training and held-out), drawn with ``task.seed``."""
    mu = class_centres(task)
    rng = np.random.default_rng([task.seed, 2])
    eta = rng.standard_normal((len(mu), task.exemplars, task.dim)).astype(np.float32) / math.sqrt(task.dim)
    return mix_items(task, mu[:, None, :], eta).astype(np.float32)


def draw_sequences(task: ControlTask, n: int, rng: np.random.Generator, classes: np.ndarray, n_ways: int,
                    pool: int | None, n_label_choices: int | None = None, bursty: bool = True):
    """Class ids ``[n, n_pairs + 1]`` (query last), label index of each pair ``[n, n_pairs]``, gold ``[n]`` and
    exemplar indices ``[n, n_pairs + 1]`` (distinct within a class when ``pool``, the exemplars per class, is
    given; query never a copy of a context exemplar). Under ``task.mapping == "fixed"`` each class shows its
    :func:`fixed_labels` label; ``bursty=False`` draws the query's class outside the context's."""
    if n_ways > task.n_labels or task.n_pairs % n_ways:
        raise ControlError(f"n_ways must divide n_pairs ({task.n_pairs}) and be at most n_labels ({task.n_labels})")
    per = task.n_pairs // n_ways
    def perms(k: int) -> np.ndarray:  # a random permutation of range(k) per row
        return np.argsort(rng.random((n, k)), axis=1)

    among = np.asarray(classes)
    if task.mapping == "sequence":
        cls = among[perms(len(among))[:, :n_ways]]  # [n, ways]
        labels = perms(n_label_choices or task.n_labels)[:, :n_ways]  # a fresh class -> label mapping per sequence
    elif bursty:  # the fixed mapping: one class of each shown label, so the context shows each label once
        fixed = fixed_labels(task)
        labels = perms(n_label_choices or task.n_labels)[:, :n_ways]
        of = [among[fixed[among] == lab] for lab in range(task.n_labels)]
        if any(len(c) == 0 for c in of):
            raise ControlError("a label has no class among these classes under the fixed mapping; use more classes")
        pick = np.stack([c[rng.integers(0, len(c), n)] for c in of], 1)  # [n, labels]: a class of each label
        cls = np.take_along_axis(pick, labels, 1)
    else:  # not bursty (the negative control's training): the query's class is none of the context's
        fixed = fixed_labels(task)
        both = among[perms(len(among))[:, :n_ways + 1]]
        cls, qcls = both[:, :n_ways], both[:, n_ways]
        labels = fixed[cls]
    slot = perms(task.n_pairs) % n_ways  # [n, pairs]: which of the ways each pair shows (per of each)
    qway = rng.integers(0, n_ways, n)
    pair_lab = np.take_along_axis(labels, slot, 1)
    if bursty:
        item_cls = np.concatenate([np.take_along_axis(cls, slot, 1), cls[np.arange(n), qway][:, None]], 1)
        gold = labels[np.arange(n), qway]
    else:
        item_cls = np.concatenate([np.take_along_axis(cls, slot, 1), qcls[:, None]], 1)
        gold = fixed[qcls]
    ex = None
    if pool is not None:
        if pool < per + 1:
            raise ControlError(f"{pool} exemplars per class cannot give {per} context items and a different query")
        ex = np.zeros((n, task.n_pairs + 1), dtype=np.int64)
        for i in range(n):
            for w in range(n_ways):
                draw = rng.permutation(pool)
                at = np.flatnonzero(slot[i] == w)
                ex[i, at] = draw[: len(at)]
                if bursty and w == qway[i]:
                    ex[i, -1] = draw[len(at)]
            if not bursty:
                ex[i, -1] = rng.integers(0, pool)
    return item_cls, pair_lab, gold, ex


def item_positions(task: ControlTask) -> list[int]:
    """Item positions (the query last) in a sequence with BOS."""
    return list(range(1, task.seq_len, 2))


def label_positions(task: ControlTask) -> list[int]:
    return list(range(2, task.seq_len - 1, 2))


def token_names(task: ControlTask) -> list[str]:
    names = ["<bos>"] + [f"L{i}" for i in range(task.n_labels)]
    for c in range(task.n_classes + task.n_heldout):
        names += [f"x{c}.{e}" for e in range(task.exemplars)]
    return names


def control_tokenizer(task: ControlTask):
    """A word-level tokenizer over the baked vocabulary (``<bos> L0 .. L3 x0.0 ...``), so token views render."""
    from tokenizers import Tokenizer, models, pre_tokenizers  # lazy: only when a tokenizer is first built
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    names = token_names(task)
    key = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    out = cache_dir() / f"control-tokenizer-{key}"  # TransformerLens re-opens tokenizers by their path
    if not (out / "tokenizer.json").exists():
        tk = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token="<bos>"))
        tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<bos>", pad_token="<bos>",
                                      unk_token="<bos>")
        tok.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


@dataclass
class ControlPrompts:
    """Prompts of the control task with what the text tasks do not have: each item's class."""

    prompts: list[Prompt]
    item_class: Int[np.ndarray, "n items"]  # class of every item, query last
    label_ids: list[int]
    classes: str
    n_ways: int
    seed: int

    @property
    def gold(self) -> torch.Tensor:
        return torch.tensor([p.gold for p in self.prompts])


def control_prompts(task: ControlTask, n: int, seed: int, classes: str = "train", n_ways: int | None = None,
                    names: Sequence[str] | None = None) -> ControlPrompts:
    """``n`` sequences of baked tokens as :class:`Prompt` objects, each with its own class -> label mapping.

    ``classes``: ``"train"`` or ``"heldout"`` (classes never seen in training). ``n_ways`` classes per context
    (default ``n_labels``). With ``n_ways`` below ``n_labels`` the labels are the first ``n_ways`` (``n_ways=2``:
    ``L0``/``L1`` assigned at random to two classes, paper B's binary setting; ``label_ids`` has two entries). A
    query is a table exemplar of its class that is not among the context's items.
    """
    n_ways = n_ways or task.n_labels
    rng = np.random.default_rng([seed, 3])
    item_cls, pair_lab, gold, ex = draw_sequences(task, n, rng, task.classes(classes), n_ways, task.exemplars,
                                                   n_label_choices=n_ways)
    names = list(names or token_names(task))
    items, labels = item_positions(task), label_positions(task)
    kinds = ["bos"] + ["text", "label"] * task.n_pairs + ["query"]
    out = []
    for i in range(n):
        ids = np.zeros(task.seq_len, dtype=np.int64)
        ids[items] = task.item_token(item_cls[i], ex[i])
        ids[labels] = 1 + pair_lab[i]
        out.append(Prompt(
            tokens=torch.from_numpy(ids), text=" ".join(names[t] for t in ids[1:]), label_pos=list(labels),
            label_class=[int(c) for c in pair_lab[i]], label_spans=[(p, p + 1) for p in labels], format_pos=[],
            text_spans=[(p, p + 1) for p in items[:-1]], query_span=(items[-1], items[-1] + 1), q=task.seq_len - 1,
            bos=True, gold=int(gold[i]), kinds=list(kinds), demo_end=task.seq_len - 1))
    return ControlPrompts(out, item_cls, task.label_ids[:n_ways], classes, n_ways, seed)


def relabel(cp: ControlPrompts, perm: Sequence[int]) -> ControlPrompts:
    """The same sequences with every label token ``i`` replaced by ``perm[i]`` (indices into ``cp.label_ids``):
    the right answer moves with the mapping (the label-swap control)."""
    perm = list(perm)
    if sorted(perm) != list(range(len(cp.label_ids))):
        raise ControlError(f"perm must be a permutation of 0..{len(cp.label_ids) - 1}, got {perm}")
    out = [replace(_with_labels(p, [perm[c] for c in p.label_class], cp.label_ids), gold=perm[p.gold])
           for p in cp.prompts]
    return replace(cp, prompts=out)


def _with_labels(p: Prompt, cls: Sequence[int], label_ids: Sequence[int]) -> Prompt:
    """``p`` with label index ``cls[k]`` shown at its k-th label position (tokens, ``label_class`` and text)."""
    ids = torch.tensor(list(label_ids))
    tokens = p.tokens.clone()
    tokens[p.label_pos] = ids[list(cls)]
    text = p.text.split(" ")
    for k, pos in enumerate(p.label_pos):  # text has no BOS: token j is word j - 1
        text[pos - 1] = f"L{int(ids[cls[k]]) - 1}"
    return replace(p, tokens=tokens, label_class=list(cls), text=" ".join(text), kinds=list(p.kinds))


def shuffled_labels(cp: ControlPrompts, seed: int) -> ControlPrompts:
    """The same sequences with each one's label tokens permuted among its demonstrations (``numpy`` PCG64 seeded
    ``[seed, 5]``, one permutation per sequence, redrawn until at least one label moves): the items stay, the
    mapping from class to label is broken, and ``gold`` stays the label the query's class carried before
    (function vectors' corrupted prompts, Todd et al., arXiv 2310.15213)."""
    rng = np.random.default_rng([seed, 5])
    out = []
    for p in cp.prompts:
        labels = list(p.label_class)
        cls = labels
        if len(set(labels)) > 1:
            while cls == labels:
                cls = [labels[i] for i in rng.permutation(len(labels))]
        out.append(_with_labels(p, cls, cp.label_ids))
    return replace(cp, prompts=out)


# ----------------------------------------------------------------- model, training


def model_config(task: ControlTask, d_vocab: int, seed: int, n_layers: int = 2, n_heads: int = 2, d_model: int = 64):
    from transformer_lens import HookedTransformerConfig  # lazy: TransformerLens takes seconds to import

    return HookedTransformerConfig(
        n_layers=n_layers, d_model=d_model, d_head=d_model // n_heads, n_heads=n_heads, n_ctx=task.seq_len,
        d_vocab=d_vocab, attn_only=True, normalization_type="LN", positional_embedding_type="standard",
        act_fn="relu", seed=seed, dtype=torch.float32, device="cpu", default_prepend_bos=True,
    )


# ----------------------------------------------------------------- baking, checkpoint


def bake(state: dict[str, torch.Tensor], task: ControlTask, table: np.ndarray | None = None, seed: int = 0,
         shape: Sequence[int] = (2, 2, 64), name: str = CONTROL_NAME):
    """The token model: a plain :class:`HookedTransformer` whose item tokens embed as ``table @ P``, named
    ``name`` (``cfg.icl_model_name``, the key of its stored results)."""
    from transformer_lens import HookedTransformer  # lazy: TransformerLens takes seconds to import

    table = exemplar_table(task) if table is None else table
    model = HookedTransformer(model_config(task, task.d_vocab, seed, *shape), tokenizer=control_tokenizer(task),
                              default_padding_side="right")
    sd = {k: v for k, v in state.items() if k != "proj"}
    W_E = torch.zeros(task.d_vocab, model.cfg.d_model)
    W_E[: 1 + task.n_labels] = sd["embed.W_E"][: 1 + task.n_labels]
    W_E[1 + task.n_labels:] = torch.from_numpy(table.reshape(-1, task.dim)) @ state["proj"]
    W_U = torch.zeros(model.cfg.d_model, task.d_vocab)
    b_U = torch.full((task.d_vocab,), -1e4)
    W_U[:, task.label_ids] = sd["unembed.W_U"][:, task.label_ids]
    b_U[task.label_ids] = sd["unembed.b_U"][task.label_ids]
    sd.update({"embed.W_E": W_E, "unembed.W_U": W_U, "unembed.b_U": b_U})
    model.load_state_dict(sd, strict=False)
    model.cfg.default_prepend_bos = True
    model.cfg.icl_model_name = name
    model.cfg.icl_control_task = asdict(task)
    model.eval()
    return model


def _expected_sha(path: Path) -> str:
    for spec in CONTROLS.values():  # a shipped checkpoint is held to the sha256 written here, not to its side file
        if path.resolve() == spec.path.resolve() and spec.sha256:
            return spec.sha256
    side = path.with_suffix(".sha256")
    if not side.exists():
        raise ControlError(f"{path}: no {side.name} beside it, so its sha256 cannot be verified; "
                           "retrain with `make control` (it writes both)")
    return side.read_text().split()[0]


def checkpoint_info(path: str | Path = CONTROL_PATH) -> dict:
    """The task, recipe and training record stored in a checkpoint (read after its sha256 is verified)."""
    from safetensors import safe_open  # lazy: only when a checkpoint is read or written

    path = _verified(Path(path))
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        return {k: json.loads(v) for k, v in (meta or {}).items()}
    except Exception as e:  # safetensors' own error types vary by version; a damaged file is what they say
        raise ControlError(f"{path} is not a readable control checkpoint ({type(e).__name__}: {e}). Its sha256 file "
                           "matches it, so it was written with this damage or the two were replaced together: "
                           "restore both (git checkout data/control) or retrain with `make control`.") from e


def _verified(path: Path) -> Path:
    if not path.exists():
        raise ControlError(f"no control checkpoint at {path}; the repository ships data/control/control.safetensors, "
                           "and `make control` retrains one")
    want, got = _expected_sha(path), file_sha256(path)
    if got != want:
        raise ControlError(f"{path}: sha256 {got} does not match the expected {want}: the checkpoint was edited or "
                           "damaged. Restore it (git checkout data/control) or retrain with `make control`.")
    return path


def load_control(which: str | Path = CONTROL_NAME) -> HookedTransformer:
    """A control as a baked token model, after verifying the checkpoint's sha256 (a clear error if it differs).

    ``which``: a name of :data:`CONTROLS` (``"control"``, ``"control-wide"``, ``"control-negative"``: the shipped
    checkpoint under ``data/control/``) or the path of a checkpoint written by ``controls.training.save_control``
    (e.g. by ``make control``), which keeps the name stored in it."""
    from safetensors.torch import load_file  # lazy: only when a checkpoint is read or written

    if not isinstance(which, (str, Path)):
        raise ControlError(f"which must be a control's name ({', '.join(CONTROLS)}) or a checkpoint's path, got "
                           f"{which!r} ({type(which).__name__})")
    path = control_spec(which).path if isinstance(which, str) and which in CONTROLS else Path(which)
    if isinstance(which, str) and not path.suffix and not path.exists():
        control_spec(which)  # a name that is not a control: say which names are
    path = _verified(path)
    info = checkpoint_info(path)
    try:
        tensors = load_file(str(path))
    except Exception as e:  # as in checkpoint_info: a file that passed its sha256 check yet does not read
        raise ControlError(f"{path}: its tensors do not read ({type(e).__name__}: {e}); restore the checkpoint and its "
                           "sha256 file (git checkout data/control) or retrain with `make control`") from e
    table = tensors.pop("exemplar_table").numpy()
    task = ControlTask(**info["task"])
    model = bake(tensors, task, table, seed=info["recipe"]["seed"], shape=info["recipe"].get("shape", (2, 2, 64)),
                 name=info.get("name", CONTROL_NAME))
    model.cfg.icl_control_info = info
    return model


def is_control(model) -> bool:
    """Whether ``model`` is one of the controls (:data:`CONTROLS`), positive or negative."""
    return getattr(model.cfg, "icl_model_name", None) in CONTROLS


def control_kind(model) -> str:
    """``"positive"`` or ``"negative"``: whether the mechanism the checks look for is there in this control."""
    return control_spec(model.cfg.icl_model_name).kind if is_control(model) else ""


def control_task(model) -> ControlTask:
    """The task a loaded control was trained on."""
    if not is_control(model):
        raise ControlError("this model is not a control (load one with load_model('control'), 'control-wide' or "
                           "'control-negative')")
    return ControlTask(**model.cfg.icl_control_task)
