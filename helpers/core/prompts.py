"""Demonstration sampling, prompt rendering, and the position record.

:func:`build_prompt` is the one place that turns (task, demonstrations, query)
into tokens. It tokenizes the whole prompt string at once (so BPE merges are
the model's own) and maps every token back to the piece of the template it
came from through the tokenizer's character offsets. Every experiment reads
positions from the returned :class:`Prompt`; none re-derives them by string
search.

Position conventions (all indices are into ``Prompt.tokens``, BOS included):

- ``label_pos[k]`` = p_k, the first token of the k-th demonstration's label
  word (with its leading space); ``label_class[k]`` its class.
- ``format_pos``: the template's own tokens ("Review", ":", "Sentiment", ":",
  and the separators between demonstrations) of the demonstrations *and* the query:
  everything of the template outside ``{text}`` and ``{label}``.
- ``text_spans[k]``: ``(start, end)`` token span of the k-th demonstration's
  text; ``query_span`` the query text's span.
- ``q``: the last position (the colon ending the query: the query ends where the
  template's ``{label}`` would start, before the spaces that lead the label word).
- ``bos``: whether position 0 is BOS (the model family's convention).
- ``demo_end``: one past the demonstrations' last token (their last separator).

Any template works (:class:`helpers.core.tasks.Task`): a demonstration is the pieces
``before{text}between lead+label after`` and demonstrations are joined by the
task's separator; the shipped tasks are ``Review: {text}\nSentiment: {label}``
with separator ``"\n"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Int

from helpers.core.checks import is_int, positive_int, seed_arg
from helpers.core.model_loading import uses_bos
from helpers.core.tasks import Task, get_task, label_token_ids, load_split, task_files

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer

__all__ = [
    "Demo",
    "Prompt",
    "PromptSet",
    "PromptError",
    "sample_demos",
    "check_prompts",
    "prompt_list",
    "check_label_ids",
    "class_draws",
    "demos_from_indices",
    "label_class_onehot",
    "LABEL_SPANS",
    "label_span_arg",
    "sample_test",
    "build_prompt",
    "build_prompts",
    "make_icl_set",
    "example_prompt",
    "pad_batch",
    "PoolSizeWarning",
]

# piece kinds used in Prompt.kinds
TEXT, FORMAT, LABEL, QUERY_TEXT = "text", "format", "label", "query"


class PromptError(ValueError):
    pass


class PoolSizeWarning(UserWarning):
    """More inputs were asked for than a task's test pool holds: all of them are used, and this says so."""


@dataclass(frozen=True)
class Demo:
    text: str
    label: int
    idx: int = -1  # row index in the source split (-1: not from a split)


@dataclass
class Prompt:
    tokens: Int[torch.Tensor, "seq"]
    text: str
    label_pos: list[int]
    label_class: list[int]
    label_spans: list[tuple[int, int]]
    format_pos: list[int]
    text_spans: list[tuple[int, int]]
    query_span: tuple[int, int]
    q: int
    bos: bool
    gold: int | None = None  # the query's label when known
    query: Demo | None = None  # the query row when built from one
    kinds: list[str] = field(default_factory=list)  # per token: bos/text/format/label/query
    demo_end: int | None = None  # one past the demonstrations' last token (None: the token after the last label)
    task: Task | None = None  # the task it was built for (label ids are checked against its label words)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def n_demos(self) -> int:
        return len(self.label_pos)

    @property
    def anchor_pos(self) -> list[int]:
        """Every label-word token plus the demonstrations' formatting tokens and BOS (Hidden_anchor's cache).

        As in the authors' code, the whole "Sentiment: <label>" line stays: all
        tokens of a multi-token label word (prediction still reads the first
        one) and the newline after the last demonstration's label (for any
        template: all formatting of the demonstrations, up to their last separator).
        """
        if self.demo_end is not None:
            demo_format = [p for p in self.format_pos if p < self.demo_end]
        else:
            end = self.label_spans[-1][1] if self.label_spans else -1  # the token after the last label word
            demo_format = [p for p in self.format_pos if p <= end]
        keep = set(demo_format) | {i for a, b in self.label_spans for i in range(a, b)}
        if self.bos:
            keep.add(0)
        return sorted(keep)


def _pool_order(train, seed: int, exclude: Sequence[int] = ()) -> np.ndarray:
    """Row indices of ``train`` shuffled with ``seed``, ``exclude`` removed."""
    order = np.random.default_rng(seed).permutation(len(train))
    if len(exclude):
        order = order[~np.isin(order, np.asarray(list(exclude)))]
    return order


def class_draws(train, task: str | Task, k_per_class: int, seed: int, exclude: Sequence[int] = ()) -> list[list[int]]:
    """Per class, the first ``k_per_class`` rows of that class in ``train`` shuffled with ``seed``.

    This is the authors' draw (paper A's code): the training pool is shuffled
    with the seed and examples are taken in that order. Draws are nested: the
    first j of a k-draw equal the j-draw with the same seed, so the 1-shot
    demonstrations are part of the 5-shot ones and the re-weighting training
    examples (draws 2..5) are disjoint from them.
    """
    task = get_task(task)
    k_per_class = positive_int("k_per_class", k_per_class)
    labels = np.asarray(train["label"])
    order = _pool_order(train, seed, exclude)
    out = []
    for c in range(task.n_classes):
        rows = order[labels[order] == c][:k_per_class]
        if len(rows) < k_per_class:
            raise PromptError(f"{task.display}: {_pool_name(task)} has {len(rows)} row(s) of class {c} "
                              f"({task.label_words[c]!r}){' left after the excluded rows' if len(exclude) else ''}, "
                              f"and {k_per_class} demonstration(s) per class are needed: add rows of that class to "
                              "the training file, or use fewer demonstrations per class")
        out.append(rows.tolist())
    return out


def _pool_name(task: Task) -> str:
    """The training file a task's demonstrations come from, for a message (its train split's path)."""
    try:
        return f"the training pool {task_files(task)['train']}"
    except Exception:  # a pool built in memory (paper B's binary tasks): no file of its own
        return "the training pool"


def demos_from_indices(train, indices: Sequence[int]) -> list[Demo]:
    rows = train.select(list(indices))
    return [Demo(t, int(lbl), int(i)) for t, lbl, i in zip(rows["text"], rows["label"], indices)]


def sample_demos(
    train, task: str | Task, k_per_class: int, seed: int, exclude: Sequence[int] = ()
) -> list[Demo]:
    """``k_per_class`` demonstrations of every class, in the order of the training pool shuffled with ``seed``.

    The authors' protocol (paper A's code): walk the shuffled pool and take each
    example whose class still has fewer than ``k_per_class``. The class order of
    the demonstrations therefore differs by task and by seed (it is not grouped
    by class, and not the same for every task with the same number of classes).
    Rows in ``exclude`` (indices into ``train``) are never drawn.
    """
    seed = seed_arg(seed)
    chosen = {i for per in class_draws(train, task, k_per_class, seed, exclude) for i in per}
    order = _pool_order(train, seed, exclude)
    return demos_from_indices(train, [int(i) for i in order if i in chosen])


def sample_test(test, n: int, seed: int) -> list[Demo]:
    """The test split shuffled with ``seed``, first ``min(n, len)`` rows."""
    n, seed = positive_int("n_test", n), seed_arg(seed)
    if n > len(test):
        warnings.warn(f"n_test={n} asks for more inputs than the test pool holds ({len(test)}): using all {len(test)}",
                      PoolSizeWarning, stacklevel=3)
    order = np.random.default_rng(seed).permutation(len(test))[: min(n, len(test))].tolist()
    rows = test.select(order)
    return [Demo(t, int(lbl), int(i)) for t, lbl, i in zip(rows["text"], rows["label"], order)]


def _pieces(task: Task, demos: Sequence[Demo], query: str | None):
    """(string, kind, demo index) pieces whose concatenation is the prompt text."""
    before, between, _, after = task.parts
    out: list[tuple[str, str, int]] = []
    for k, d in enumerate(demos):
        # a demonstration without text (Text_anchor) renders "Review:\nSentiment: ...", no space before the newline
        prefix = before if d.text else before.rstrip(" ")
        out += [(prefix, FORMAT, k), (d.text, TEXT, k), (between, FORMAT, k), (task.label_text(d.label), LABEL, k)]
        if after:
            out.append((after, FORMAT, k))
        out.append((task.separator, FORMAT, k))
    if query is not None:
        out += [(before, FORMAT, -1), (query, QUERY_TEXT, -1), (between, FORMAT, -1)]
    elif out:
        out.pop()  # no trailing separator without a query
    return out


def _check_demos(task: Task, demos, query) -> None:
    """Refuse demonstrations that are not :class:`Demo` objects with a class of ``task`` (a label of -1 would render
    the last label word), and a query that is neither text, a Demo nor None."""
    n = len(task.label_words)
    if isinstance(demos, (str, Demo)) or not isinstance(demos, Sequence):  # a generator would be used up here
        raise PromptError(f"demos must be a list of Demo(text, label), got {type(demos).__name__}: wrap it in a list")
    for i, d in enumerate([*demos, *([query] if isinstance(query, Demo) else [])]):
        what = "the query" if i == len(demos) else f"demonstration {i}"
        if not isinstance(d, Demo):
            fix = f": write Demo({d[0]!r:.40}, {d[1]!r})" if isinstance(d, tuple) and len(d) == 2 else ""
            raise PromptError(f"{what} must be a Demo(text, label) (helpers.core.prompts.Demo), got "
                              f"{type(d).__name__} {d!r:.60}{fix}")
        if isinstance(d.label, bool) or not isinstance(d.label, (int, np.integer)) or not 0 <= d.label < n:
            raise PromptError(f"{what} has label {d.label!r}, but {task.display} has classes 0..{n - 1} "
                              f"({list(task.label_words)}): pass the class index of its label word")
    if query is not None and not isinstance(query, (str, Demo)):
        raise PromptError(f"query must be text, a Demo(text, label) or None, got {type(query).__name__}")


def build_prompt(model_or_tokenizer, task: str | Task, demos: Sequence[Demo], query: str | Demo | None,
                 bos: bool | None = None, label_ids: Sequence[int] | None = None) -> Prompt:
    """Tokens and position record of ``demos`` followed by ``query``.

    ``model_or_tokenizer``: a HookedTransformer (its tokenizer and BOS
    convention are used) or a HF tokenizer (then pass ``bos``).
    """
    task = get_task(task)
    if hasattr(model_or_tokenizer, "tokenizer") and hasattr(model_or_tokenizer, "cfg"):
        tok = model_or_tokenizer.tokenizer
        bos = uses_bos(model_or_tokenizer) if bos is None else bos
    else:
        tok = model_or_tokenizer
        bos = bool(bos)
    gold, qdemo = None, None
    _check_demos(task, demos, query)
    if isinstance(query, Demo):
        qdemo, gold, query = query, query.label, query.text
    pieces = _pieces(task, demos, query)
    text = "".join(p for p, _, _ in pieces)
    # char -> (kind, demo index)
    starts = np.cumsum([0] + [len(p) for p, _, _ in pieces])
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    if label_ids is None:
        label_ids = label_token_ids(tok, task) if demos else []
    elif len(label_ids) != task.n_classes:
        raise PromptError(f"label_ids has {len(label_ids)} id(s), but {task.display} has {task.n_classes} classes; "
                          "pass tasks.label_token_ids(tokenizer, task) or leave label_ids out")
    kinds: list[str] = []
    owner: list[int] = []
    piece_of: list[int] = []
    for s, e in offsets:
        # a token belongs to the piece holding its first non-space char
        # (SentencePiece/BPE put the leading space inside the word token)
        c = s
        while c < e - 1 and text[c] == " ":
            c += 1
        j = int(np.searchsorted(starts, c, side="right") - 1)
        j = min(max(j, 0), len(pieces) - 1)
        piece_of.append(j)
        kinds.append(pieces[j][1])
        owner.append(pieces[j][2])
    shift = 1 if bos else 0
    demo_tok = [i for i, o in enumerate(owner) if o >= 0 and kinds[i] != QUERY_TEXT]
    demo_end = (demo_tok[-1] + 1 + shift) if demo_tok else shift
    tokens_of: dict[tuple[str, int], list[int]] = {}  # (kind, demonstration) -> its token indices, in one pass
    for i, key in enumerate(zip(kinds, owner)):
        tokens_of.setdefault(key, []).append(i)
    label_pos, label_class, label_spans, text_spans = [], [], [], []
    for k, d in enumerate(demos):
        lab = tokens_of.get((LABEL, k), [])
        if not lab:
            raise PromptError(f"demonstration {k}: its label word was merged into another token; "
                              f"prompt text: {text[:120]!r}")
        first = lab[0]
        piece_start = starts[piece_of[first]]
        if offsets[first][0] > piece_start or ids[first] != label_ids[d.label]:
            raise PromptError(
                f"demonstration {k}: in context the label {task.label_text(d.label)!r} starts with token "
                f"{ids[first]} at chars {offsets[first]}, but predictions read token {label_ids[d.label]}. "
                "The tokenizer merges the label with its neighbours; change the template or label word.")
        label_pos.append(first + shift)
        label_class.append(d.label)
        label_spans.append((first + shift, lab[-1] + 1 + shift))
        tx = tokens_of.get((TEXT, k), [])
        text_spans.append((tx[0] + shift, tx[-1] + 1 + shift) if tx else (label_pos[-1], label_pos[-1]))
    qx = [i + shift for i, kd in enumerate(kinds) if kd == QUERY_TEXT]
    format_pos = [i + shift for i, kd in enumerate(kinds) if kd == FORMAT]
    if bos:
        if tok.bos_token_id is None:
            raise PromptError("this model's convention prepends BOS but its tokenizer has no bos_token_id")
        ids = [tok.bos_token_id] + ids
        kinds = ["bos"] + kinds
    tokens = torch.tensor(ids, dtype=torch.long)
    end = len(ids)
    return Prompt(
        tokens=tokens, text=text, label_pos=label_pos, label_class=label_class, label_spans=label_spans,
        format_pos=format_pos, text_spans=text_spans,
        query_span=(qx[0], qx[-1] + 1) if qx else (end, end), q=end - 1, bos=bos, gold=gold, query=qdemo, kinds=kinds,
        demo_end=demo_end, task=task,
    )


def build_prompts(model: HookedTransformer, task, demos, queries: Sequence[Demo], max_len: int | None = None):
    """Prompts for every query with the same demonstrations; over-long ones dropped and counted.

    Returns ``(prompts, n_dropped)``; ``max_len`` defaults to the model's context ``n_ctx``. Every prompt holds the
    same demonstrations' tokens (:func:`helpers.core.prefix.shared_prefix_len`'s premise; a tokenizer may split at most
    the token at the seam with the query differently), and its query adds at least one token. So when the
    demonstrations of one prompt alone pass ``max_len`` (``demo_end > max_len``), every prompt is over-long, and the
    rest are counted as dropped without being built: a demonstration set far too long for the model is refused in
    the time of one prompt, not of every test row.
    """
    task = get_task(task)
    tok = model.tokenizer
    lids = label_token_ids(tok, task)
    max_len = max_len or model.cfg.n_ctx
    prompts, dropped = [], 0
    for n, qd in enumerate(queries):
        p = build_prompt(model, task, demos, qd, label_ids=lids)
        if p.demo_end > max_len:  # the demonstrations alone pass the context, and every prompt holds them
            return prompts, dropped + len(queries) - n
        if len(p) > max_len:
            dropped += 1
            continue
        prompts.append(p)
    return prompts, dropped


@dataclass
class PromptSet:
    """One task x seed x shots setting: the demonstrations, the test rows and their prompts."""

    task: Task
    seed: int
    k_per_class: int
    demos: list[Demo]
    test: list[Demo]
    prompts: list[Prompt]
    n_dropped: int
    label_ids: list[int]

    @property
    def gold(self) -> torch.Tensor:
        return torch.tensor([p.gold for p in self.prompts])


def make_icl_set(model: HookedTransformer, task: str | Task, seed: int, n_test: int, k_per_class: int = 1,
                 demos: Sequence[Demo] | None = None, max_len: int | None = None) -> PromptSet:
    """The paper's setting for one seed: one fixed demonstration set for the whole test sample."""
    task = get_task(task)
    n_test, k_per_class = positive_int("n_test", n_test), positive_int("k_per_class", k_per_class)
    train, test = load_split(task, "train"), load_split(task, "test")
    demos = list(demos) if demos is not None else sample_demos(train, task, k_per_class, seed)
    queries = sample_test(test, n_test, seed)
    prompts, dropped = build_prompts(model, task, demos, queries, max_len=max_len)
    if queries and not prompts:
        raise PromptError(f"{task.display}, seed {seed}: all {len(queries)} prompts are longer than "
                          f"{max_len or model.cfg.n_ctx} tokens (the model's context n_ctx = {model.cfg.n_ctx}); "
                          "use fewer demonstrations per class or a model with a longer context")
    kept = [p.query for p in prompts]  # over-long rows are gone
    return PromptSet(task, seed, k_per_class, demos, kept, prompts, dropped, label_token_ids(model.tokenizer, task))


def example_prompt(model: HookedTransformer, task: str | Task, seed: int = 42, k_per_class: int = 1,
                   max_len: int | None = None) -> Prompt:
    """One prompt to look at or compute by hand: ``k_per_class`` demonstrations per class drawn with ``seed``
    (:func:`sample_demos`) and the first test row, in the order :func:`sample_test` shuffles them with ``seed``,
    whose prompt fits ``max_len`` (default: the model's context ``n_ctx``). Rows whose prompt is longer are
    skipped, as :func:`build_prompts` and :func:`make_icl_set` drop them; when the first row fits, it is
    ``sample_test(test, 1, seed)[0]``."""
    task = get_task(task)
    max_len = max_len or model.cfg.n_ctx
    demos = sample_demos(load_split(task, "train"), task, k_per_class, seed)
    test = load_split(task, "test")
    lids = label_token_ids(model.tokenizer, task)
    for query in sample_test(test, len(test), seed):
        p = build_prompt(model, task, demos, query, label_ids=lids)
        if len(p) <= max_len:
            return p
    raise PromptError(f"{task.display}, seed {seed}: every test row's prompt is longer than {max_len} tokens (the "
                      f"model's context n_ctx = {model.cfg.n_ctx}); use fewer demonstrations per class, shorter "
                      "texts or a model with a longer context")


def prompt_list(prompts, what: str = "run") -> list:
    """``prompts`` as a list of :class:`Prompt`; a string, one prompt, or anything else
    raises :class:`PromptError`."""
    hint = "pass a list of Prompt objects (make_icl_set(...).prompts, or [build_prompt(...)])"
    if isinstance(prompts, Prompt):
        raise PromptError(f"prompts to {what} must be a list, got one Prompt: wrap it in a list, [prompt]")
    if isinstance(prompts, (str, bytes)):
        raise PromptError(f"prompts to {what} must be Prompt objects, got the string {prompts[:60]!r}: {hint}")
    if not isinstance(prompts, Sequence):
        raise PromptError(f"prompts to {what} must be a list, got {type(prompts).__name__}: {hint}")
    bad = next((p for p in prompts if not isinstance(p, Prompt)), None)
    if bad is not None:
        raise PromptError(f"prompts to {what} must be Prompt objects, got {type(bad).__name__} "
                          f"{str(bad)[:60]!r}: {hint}")
    return list(prompts)


def _ids(n: int) -> str:
    return f"{n} id" if n == 1 else f"{n} ids"


def check_label_ids(tokenizer, prompts: Sequence, label_ids) -> list[int]:
    """``label_ids`` as a list of ints: one per class, and exactly the first tokens of the prompts' label words.

    A prompt built by :func:`build_prompt` knows its task, so the ids must equal
    :func:`~helpers.core.tasks.label_token_ids` of that task; a prompt without one is checked against its
    demonstrations (each label position holds the id of its class).
    """
    fix = "pass tasks.label_token_ids(model.tokenizer, task), or the prompt set's .label_ids"
    if isinstance(label_ids, (str, bytes, Mapping)) or not hasattr(label_ids, "__iter__"):
        raise PromptError(f"label_ids must be a list of token ids, one per class, got {label_ids!r}; {fix}")
    if hasattr(label_ids, "tolist"):
        label_ids = label_ids.tolist()
    ids = list(label_ids)
    if not ids:
        raise PromptError(f"label_ids is empty: it needs one token id per class; {fix}")
    bad = next((i for i in ids if not is_int(i)), None)
    if bad is not None:
        raise PromptError(f"label_ids must be integer token ids, got {bad!r} ({type(bad).__name__}); {fix}")
    ids = [int(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise PromptError(f"label_ids {ids} repeat an id: the classes could not be told apart; {fix}")
    tasks = {p.task for p in prompts if getattr(p, "task", None) is not None}
    for task in tasks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the multi-token warning was given when the prompts were built
            want = label_token_ids(tokenizer, task)
        if len(ids) != len(want):
            raise PromptError(f"label_ids has {_ids(len(ids))}, but {task.display} has {len(want)} classes "
                              f"({', '.join(task.label_words)}); {fix}")
        if ids != want:
            raise PromptError(f"label_ids {ids} are not the first tokens of {task.display}'s label words "
                              f"{list(task.label_words)} ({want}, in class order); {fix}")
    for i, p in enumerate(prompts):
        classes = list(p.label_class) + ([p.gold] if p.gold is not None else [])
        if classes and max(classes) >= len(ids):
            raise PromptError(f"label_ids has {_ids(len(ids))}, but prompt {i} has class {max(classes)}; {fix}")
        for pos, c in zip(p.label_pos, p.label_class):
            if int(p.tokens[pos]) != ids[c]:
                raise PromptError(f"prompt {i}: the label word of class {c} at position {pos} is token "
                                  f"{int(p.tokens[pos])}, but label_ids gives {ids[c]} for that class; {fix}")
    return ids


def check_prompts(model: HookedTransformer, prompts: Sequence[Prompt], what: str = "run",
                  label_ids: Sequence[int] | None = None) -> None:
    """Refuse what is not a list of prompts, an empty one, a prompt longer than the model's context, and (when
    given) ``label_ids`` that are not one id per class of the prompts' label words
    (:func:`check_label_ids`), with a message that says what to do. The public functions
    that take prompts call it once, where the call comes in."""
    prompts = prompt_list(prompts, what)
    if not len(prompts):
        raise PromptError(f"no prompts to {what}: pass at least one (a prompt set whose prompts were all "
                          "dropped as longer than the context has none; see PromptSet.n_dropped)")
    n_ctx = model.cfg.n_ctx
    for i, p in enumerate(prompts):
        if len(p) > n_ctx:
            raise PromptError(f"prompt {i} is {len(p)} tokens, longer than the model's context (n_ctx = {n_ctx}); "
                              "use fewer or shorter demonstrations, or build_prompts / make_icl_set, which drop "
                              "over-long prompts and count them")
    if label_ids is not None:
        check_label_ids(model.tokenizer, prompts, label_ids)


def pad_batch(prompts: Sequence[Prompt], pad_id: int = 0) -> tuple[Int[torch.Tensor, "batch seq"], torch.Tensor]:
    """Right-pad prompts into one tensor; returns ``(tokens, q_index)``.

    Right padding needs no attention mask under causal attention: real positions
    never see the pads, and rotary / learned positions stay those of the
    unpadded prompt.
    """
    T = max(len(p) for p in prompts)
    out = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    for i, p in enumerate(prompts):
        out[i, : len(p)] = p.tokens
    q = torch.tensor([p.q for p in prompts], dtype=torch.long)
    return out, q


LABEL_SPANS = ("first", "all")  # a label word's first token (paper A's code), or every token of it


def label_span_arg(span: str) -> str:
    """``span`` checked: ``"first"`` (each label word's first token) or ``"all"`` (every token of it)."""
    if span not in LABEL_SPANS:
        raise ValueError(f"span must be 'first' (a label word's first token, as in paper A's code) or 'all' (every "
                         f"token of the label word), got {span!r}")
    return span


def label_class_onehot(prompts: Sequence[Prompt], T: int, C: int, span: str = "first") -> torch.Tensor:
    """``[prompt, T, class]`` map from a key position (a prompt position below ``T``) to the class of the
    demonstration label there (rows of other positions are zero): each label word's first token (``span="first"``)
    or every token of it (``"all"``)."""
    label_span_arg(span)
    onehot = torch.zeros(len(prompts), T, C)
    for b, p in enumerate(prompts):
        if max(p.label_class, default=-1) >= C:
            raise ValueError("a demonstration's class is outside label_ids")
        if span == "first":
            onehot[b, p.label_pos, p.label_class] = 1.0
        else:
            for (start, end), c in zip(p.label_spans, p.label_class):
                onehot[b, start:end, c] = 1.0
    return onehot
