"""The positive control (helpers/core/controls/model.py, helpers/experiments/positive_control.py): its prompts, its
checkpoint, what it does, and the attention helper of notebook 09 on tiny models of three architectures."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from helpers.core.controls.model import (
    CONTROL_PATH,
    CONTROL_SHA256,
    ControlError,
    ControlTask,
    control_prompts,
    load_control,
    relabel,
)
from helpers.core.task_data import file_sha256
from helpers.experiments.positive_control import SHIFT, circuit_attention, circuit_attention_reference, label_swap

TASK = ControlTask()


@pytest.fixture(scope="module")
def control():
    return load_control()


@pytest.fixture(scope="module")
def cp():
    return control_prompts(TASK, 64, seed=5)


# ------------------------------------------------------------------ prompts


def test_prompt_positions_and_classes(cp):
    L = TASK.n_labels
    for i, p in enumerate(cp.prompts):
        assert len(p) == TASK.seq_len == 2 * TASK.n_pairs + 2 and p.bos and int(p.tokens[0]) == 0
        assert p.q == len(p) - 1 and p.label_pos == list(range(2, 2 * TASK.n_pairs + 1, 2))
        assert p.kinds[0] == "bos" and p.kinds[-1] == "query"
        assert [p.kinds[j] for j in p.label_pos] == ["label"] * TASK.n_pairs
        assert [s for s, _ in p.text_spans] == [j - 1 for j in p.label_pos]  # each item just before its label
        # label_class indexes label_ids, and the tokens carry it
        assert [int(p.tokens[j]) for j in p.label_pos] == [cp.label_ids[c] for c in p.label_class]
        items = p.tokens[[s for s, _ in p.text_spans] + [p.q]]
        assert bool((items > L).all())
        # one label per class in the context; the gold label is the query's class's label
        mapping = {}
        for k, c in enumerate(cp.item_class[i, :-1]):
            assert mapping.setdefault(int(c), p.label_class[k]) == p.label_class[k]
        assert len(mapping) == L and len(set(mapping.values())) == L
        assert p.gold == mapping[int(cp.item_class[i, -1])]
        # the query is another exemplar of its class, never a copy of a context item
        assert int(p.tokens[p.q]) not in p.tokens[:p.q].tolist()
        assert p.text.split(" ")[-1] == f"x{cp.item_class[i, -1]}.{(int(p.tokens[p.q]) - 1 - L) % TASK.exemplars}"


def test_fresh_mapping_per_sequence_and_reproducible(cp):
    maps = {tuple(sorted(zip(cp.item_class[i, :-1].tolist(), p.label_class))) for i, p in enumerate(cp.prompts)}
    assert len(maps) == len(cp.prompts)  # every sequence its own classes and mapping
    golds = np.bincount([p.gold for p in cp.prompts], minlength=TASK.n_labels)
    assert (golds > 0).all()
    again = control_prompts(TASK, 64, seed=5)
    assert all(torch.equal(a.tokens, b.tokens) for a, b in zip(cp.prompts, again.prompts))
    other = control_prompts(TASK, 64, seed=6)
    assert not all(torch.equal(a.tokens, b.tokens) for a, b in zip(cp.prompts, other.prompts))


def test_heldout_classes_are_other_tokens():
    held = control_prompts(TASK, 32, seed=1, classes="heldout")
    assert (held.item_class >= TASK.n_classes).all()
    first = TASK.item_token(TASK.n_classes, 0)
    for p in held.prompts:
        assert all(int(p.tokens[s]) >= first for s, _ in p.text_spans)
    with pytest.raises(ControlError):
        control_prompts(TASK, 2, seed=1, classes="test")


def test_binary_prompts_use_the_first_two_labels():
    b = control_prompts(TASK, 32, seed=2, n_ways=2)
    assert b.label_ids == TASK.label_ids[:2]
    assert all(set(p.label_class) == {0, 1} for p in b.prompts)
    assert {p.label_class[0] for p in b.prompts} == {0, 1}  # the assignment is drawn per sequence


def test_relabel_moves_the_answer(cp):
    perm = SHIFT(TASK.n_labels)
    sw = relabel(cp, perm)
    for p, s in zip(cp.prompts, sw.prompts):
        assert s.gold == perm[p.gold] and s.label_class == [perm[c] for c in p.label_class]
        assert [int(s.tokens[j]) for j in s.label_pos] == [cp.label_ids[c] for c in s.label_class]
        keep = [j for j in range(len(p)) if j not in p.label_pos]
        assert torch.equal(s.tokens[keep], p.tokens[keep])
        assert s.text.split(" ")[1::2] == [f"L{c}" for c in s.label_class]
    with pytest.raises(ControlError):
        relabel(cp, [0, 0, 1, 2])


# ------------------------------------------------------------------ checkpoint


def test_shipped_checkpoint_sha256_and_size():
    assert CONTROL_PATH.exists(), "the repository ships data/control/control.safetensors"
    assert CONTROL_SHA256 and file_sha256(CONTROL_PATH) == CONTROL_SHA256
    assert CONTROL_PATH.stat().st_size < 1_000_000


def test_edited_checkpoint_is_refused(tmp_path):
    path = tmp_path / "control.safetensors"
    shutil.copy(CONTROL_PATH, path)
    path.with_suffix(".sha256").write_text(f"{CONTROL_SHA256}  control.safetensors\n")
    load_control(path)  # intact: loads
    data = bytearray(path.read_bytes())
    data[-5] ^= 1  # one bit of one weight
    path.write_bytes(bytes(data))
    with pytest.raises(ControlError, match="sha256 .* does not match .* edited or damaged"):
        load_control(path)
    path.with_suffix(".sha256").unlink()
    with pytest.raises(ControlError, match="cannot be verified"):
        load_control(path)


def test_load_model_control(control):
    from helpers.core.models import load_model

    m = load_model("control", verbose=False)
    assert m.cfg.icl_model_name == "control" and m.cfg.n_layers == 2 and m.cfg.attn_only
    assert torch.equal(m.W_E, control.W_E)


# ------------------------------------------------------------------ what the control does


def test_control_learns_in_context(control):
    """The shipped model: in-context accuracy, classes never seen in training, and the label-swap control."""
    from helpers.core.predict import predict

    for classes in ("train", "heldout"):
        c = control_prompts(TASK, 256, seed=11, classes=classes)
        acc = float((predict(control, c.prompts, c.label_ids, batch_size=256, top_k=0).pred == c.gold).float().mean())
        assert acc >= 0.9, (classes, acc)
    r = label_swap(control, control_prompts(TASK, 256, seed=12))
    assert r["follows"].mean() >= 0.9 and r["swap_averaged"].mean() >= 0.9 and r["same"].mean() <= 0.1


def test_only_labels_can_be_said(control, cp):
    from helpers.core.predict import predict

    pred = predict(control, cp.prompts[:8], cp.label_ids, batch_size=8, top_k=5)
    assert set(pred.topk[:, :4].flatten().tolist()) <= set(cp.label_ids)  # the four most likely tokens are labels


RETRAIN_STEPS = 300  # the shipped wide control's first three evaluations (it reaches its stopping accuracy at 1,100)
RETRAIN_LOSS_TOL = 0.005  # cross-entropy at an evaluation step: another CPU's kernels may move it in the 5th decimal
RETRAIN_ACC_TOL = 0.01  # accuracy on 1,024 fresh sequences: about ten answers


@pytest.mark.slow
def test_retraining_follows_the_shipped_training_curve():
    """Retrain the wide control from its shipped seed and recipe for its first 300 steps: the training loop (fresh
    batches, the copy curriculum, AdamW, the evaluation on 1,024 fresh sequences every 100 steps) gives the shipped
    curve's loss within 0.005 and its accuracy within 0.01 at each of steps 100, 200 and 300.

    On one thread of the machine that trained it the run is bitwise the shipped one (``make control`` compares the
    whole checkpoints' tensors); another CPU may pick other kernels and end a few bits away, hence the tolerances.
    Training to the stopping accuracy (1,100 steps here) is what ``make control`` does; this checks the loop in a
    quarter of the time."""
    import csv

    from helpers.core.controls.model import checkpoint_info, control_spec
    from helpers.core.controls.training import train_control

    spec = control_spec("control-wide")
    info = checkpoint_info(spec.path)
    recipe = {k: v for k, v in info["recipe"].items() if k not in ("seed", "optimizer", "shape", "task")}
    recipe |= {"max_steps": RETRAIN_STEPS, "stop_acc": 2.0}  # 2.0: no early stop
    result = train_control(seed=info["recipe"]["seed"], task=spec.task, shape=spec.shape, progress=False, **recipe)
    with open(spec.path.with_name(spec.path.stem + "_curve.csv")) as f:
        shipped = {int(r["step"]): r for r in csv.DictReader(f)}
    assert [r["step"] for r in result.curve] == [100, 200, 300]
    for row in result.curve:
        want = shipped[row["step"]]
        assert abs(row["loss"] - float(want["loss"])) <= RETRAIN_LOSS_TOL, (row, want)
        assert abs(row["accuracy"] - float(want["accuracy"])) <= RETRAIN_ACC_TOL, (row, want)


# ------------------------------------------------------------------ notebook 09's attention helper (tiny models)


def _uniform(model):
    """The tiny model with every query weight and bias zero: attention is uniform over the causal positions."""
    import copy

    m = copy.deepcopy(model)
    for b in m.blocks:
        b.attn.W_Q.data.zero_()
        b.attn.b_Q.data.zero_()
    return m


def test_circuit_attention_by_hand_on_uniform_attention(tiny_model):
    c = control_prompts(TASK, 4, seed=3)
    got = circuit_attention(_uniform(tiny_model), c)
    p = c.prompts[0]
    prev = np.mean([1 / (j + 1) for j in p.label_pos])  # row j spreads 1/(j+1) over positions 0..j
    assert torch.allclose(got[0, :, :, 0], torch.full_like(got[0, :, :, 0], prev), atol=1e-5)
    for i in range(4):
        n_match = int((c.item_class[i, :-1] == c.item_class[i, -1]).sum())
        assert torch.allclose(got[i, :, :, 1], torch.full_like(got[i, :, :, 1], n_match / (c.prompts[i].q + 1)),
                              atol=1e-5)


def test_circuit_attention_batched_equals_one_by_one(tiny_model):
    c = control_prompts(TASK, 5, seed=4)
    batched = circuit_attention(tiny_model, c, batch_size=2)
    for i, p in enumerate(c.prompts):
        torch.testing.assert_close(batched[i], circuit_attention_reference(tiny_model, p, c.item_class[i]),
                                   atol=1e-5, rtol=1e-4)


def _circuit_by_hand(model, prompt, item_class, back=1, reduce0="mean", every_label=False, reduce1="sum"):
    """Notebook 09's by-hand circuit scores, with the mistakes a reader might make as options."""
    _, cache = model.run_with_cache(prompt.tokens[None])
    pos = torch.tensor(prompt.label_pos)
    match = torch.as_tensor(item_class[:-1] == item_class[-1], dtype=torch.float32)
    match = torch.ones_like(match) if every_label else match
    out = []
    for layer in range(model.cfg.n_layers):
        pattern = cache["pattern", layer][0].float()
        to_item = getattr(pattern[:, pos, pos - back], reduce0)(-1)
        to_match = getattr(pattern[:, prompt.q, pos] * match, reduce1)(-1)
        out.append(torch.stack([to_item, to_match], -1))
    return torch.stack(out)


def test_check_circuit_attention_passes_the_solution_and_names_each_mistake(capsys):
    from helpers.exercises.grading import CheckFailed
    from helpers.exercises.positive_control import check_circuit_attention

    check_circuit_attention(_circuit_by_hand)
    assert "matches circuit_attention" in capsys.readouterr().out
    for kw, says in ((dict(back=0), "reads the label position itself"), (dict(reduce0="sum"), "summed over label"),
                     (dict(every_label=True), "sums over every label position"), (dict(reduce1="mean"), "is a mean")):
        with pytest.raises(CheckFailed, match=says):
            check_circuit_attention(lambda m, p, ic, kw=kw: _circuit_by_hand(m, p, ic, **kw))
    with pytest.raises(CheckFailed, match="swapped"):
        check_circuit_attention(lambda m, p, ic: _circuit_by_hand(m, p, ic).flip(-1))
    with pytest.raises(CheckFailed, match="shape"):
        check_circuit_attention(lambda m, p, ic: _circuit_by_hand(m, p, ic)[..., 0])


def test_shared_context_equals_full_prompts(tiny_model):
    """Control prompts that share their context (only the query differs) take the shared-prefix path, whose
    predictions equal the full prompts' (the context ends at demo_end: there is no separator token)."""
    from dataclasses import replace

    from helpers.core.predict import predict
    from helpers.core.prefix import shared_prefix_len
    from helpers.core.prefix_runs import predict_shared

    base = control_prompts(TASK, 1, seed=8)
    p = base.prompts[0]
    queries = [TASK.item_token(c, e) for c in base.item_class[0, :3] for e in (0, 1)]
    prompts = [replace(p, tokens=torch.cat([p.tokens[:-1], torch.tensor([t])])) for t in queries]
    assert shared_prefix_len(prompts) == p.q
    full = predict(tiny_model, prompts, base.label_ids, batch_size=3)
    shared = predict_shared(tiny_model, prompts, base.label_ids, batch_size=3)
    torch.testing.assert_close(shared.label_logits, full.label_logits, atol=1e-4, rtol=1e-4)


def test_hidden_anchor_keeping_everything_is_icl(tiny_model):
    """Keeping every context position in the cache gives the full prompt's prediction (identity case)."""
    from helpers.core.predict import predict
    from helpers.core.prefix import run_prefix
    from helpers.core.prefix_runs import predict_shared

    c = control_prompts(TASK, 3, seed=9)
    full = predict(tiny_model, c.prompts, c.label_ids, batch_size=3)
    for i, p in enumerate(c.prompts):
        cache = run_prefix(tiny_model, p.tokens[:p.q])
        got = predict_shared(tiny_model, [p], c.label_ids, batch_size=1, cache=cache)
        torch.testing.assert_close(got.label_logits[0], full.label_logits[i], atol=1e-4, rtol=1e-4)


def test_label_isolation_without_shared_prefix_is_per_prompt(tiny_model):
    """Label isolation on prompts with different contexts (shared=False) equals isolating each prompt alone."""
    from helpers.experiments.isolation import run_isolation

    c = control_prompts(TASK, 4, seed=13)
    batched = run_isolation(tiny_model, c.prompts, c.label_ids, "label", "first", 1, batch_size=4, shared=False)
    for i, p in enumerate(c.prompts):
        one = run_isolation(tiny_model, [p], c.label_ids, "label", "first", 1, batch_size=1, shared=False)
        torch.testing.assert_close(one.label_logits[0], batched.label_logits[i], atol=1e-4, rtol=1e-4)


def test_hidden_anchor_on_the_control(control):
    """BOS and the label tokens alone carry the context (the items were copied into them); items alone do not."""
    from helpers.experiments.positive_control import hidden_anchor_accuracy

    r = hidden_anchor_accuracy(control, control_prompts(TASK, 64, seed=14), seed=0)
    assert r["hidden_anchor"].mean() >= 0.9 and r["hidden_random"].mean() <= 0.6
    assert r["hidden_anchor_loyal"].mean() >= 0.9


def test_label_swap_gives_the_plain_run_and_hidden_anchor_reuses_it(control):
    """label_swap's ``pred``/``correct`` are the plain run's (so notebook 09 runs each sequence once for both), and
    hidden_anchor_accuracy given those predictions equals its own full run."""
    from helpers.experiments.positive_control import hidden_anchor_accuracy, label_swap
    from helpers.protocols.positive_control import accuracy_cells

    cp = control_prompts(TASK, 32, seed=15)
    sw = label_swap(control, cp)
    np.testing.assert_array_equal(sw["correct"], accuracy_cells(control, {0: cp})[("control", 0)])
    given, own = hidden_anchor_accuracy(control, cp, seed=0, full=sw["pred"]), hidden_anchor_accuracy(control, cp, seed=0)
    for k in own:
        np.testing.assert_array_equal(given[k], own[k])


def test_train_control_script_refuses_bad_arguments():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "train_control.py"
    for args, says in ((["--seed", "-1"], "must be"), (["--max-seconds", "0"], "must be"),
                       (["--control", "control-narrow"], "unknown control")):
        r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_make_control_starts_the_longest_jobs_first():
    """The populations' jobs are ordered by their expected work (steps x layers), longest first, so no long job
    starts last: the 4-layer fixed-length negatives come before every 2-layer member."""
    import importlib.util
    from pathlib import Path

    from helpers.core.controls.population import NEGATIVE_STEPS

    spec = importlib.util.spec_from_file_location(
        "train_control", Path(__file__).resolve().parent.parent / "scripts" / "train_control.py")
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    assert tc.expected_cost("deep-negative", 0) == 4 * NEGATIVE_STEPS
    assert tc.expected_cost("negative", 1) == 2 * NEGATIVE_STEPS
    assert tc.expected_cost("deep-negative", 5) > max(tc.expected_cost("wide", s) for s in range(1, 5))


# ------------------------------------------------------------------ the named controls: wide positive, negative


def test_fixed_mapping_prompts_show_each_class_its_one_label():
    from helpers.core.controls.model import fixed_labels

    task = ControlTask(mapping="fixed", bursty=False)
    fixed = fixed_labels(task)
    assert len(fixed) == task.n_classes + task.n_heldout
    assert np.bincount(fixed[: task.n_classes], minlength=task.n_labels).tolist() == [task.n_classes // 4] * 4
    for classes in ("train", "heldout"):
        cp = control_prompts(task, 64, seed=3, classes=classes)  # evaluation prompts: bursty, with the fixed labels
        for i, p in enumerate(cp.prompts):
            items = cp.item_class[i]
            assert [fixed[c] for c in items[:-1]] == p.label_class
            assert p.gold == fixed[items[-1]] and items[-1] in items[:-1]
            assert sorted(set(p.label_class)) == list(range(task.n_labels))  # every label once, by one class
    two = control_prompts(task, 32, seed=3, n_ways=2)
    assert all(set(p.label_class) == {0, 1} for p in two.prompts)


def test_training_contexts_of_the_negative_control_never_show_the_query_class():
    from helpers.core.controls.model import class_centres, fixed_labels
    from helpers.core.controls.training import sample_vectors

    task = ControlTask(mapping="fixed", bursty=False)
    gen = np.random.default_rng(0)
    x, tokens, gold = sample_vectors(task, torch.from_numpy(class_centres(task)), 64, gen, copy_prob=1.0)
    assert x.shape == (64, task.n_pairs + 1, task.dim) and tokens.shape == (64, task.seq_len)
    # the labels shown are each context class's fixed label; gold the query class's, which the context does not show
    from helpers.core.controls.model import draw_sequences

    item_cls, pair_lab, gold2, _ = draw_sequences(task, 64, np.random.default_rng(1), task.classes("train"), 4, None,
                                                   bursty=False)
    fixed = fixed_labels(task)
    assert (fixed[item_cls[:, :-1]] == pair_lab).all() and (fixed[item_cls[:, -1]] == gold2).all()
    assert not (item_cls[:, :-1] == item_cls[:, -1:]).any()
    with pytest.raises(ControlError, match="use mapping='fixed'"):
        ControlTask(bursty=False)
    with pytest.raises(ControlError, match="mapping must be"):
        ControlTask(mapping="per sequence")


@pytest.mark.parametrize("name", ["control", "control-wide", "control-negative"])
def test_every_named_control_ships_verified_and_loads_by_name(name):
    from helpers.core.controls.model import CONTROLS, control_kind, is_control
    from helpers.core.models import load_model

    spec = CONTROLS[name]
    assert spec.path.exists() and spec.sha256 and file_sha256(spec.path) == spec.sha256
    assert spec.path.with_suffix(".sha256").read_text().split()[0] == spec.sha256
    m = load_model(name, verbose=False)
    assert m.cfg.icl_model_name == name and is_control(m) and control_kind(m) == spec.kind
    assert (m.cfg.n_layers, m.cfg.n_heads, m.cfg.d_model) == spec.shape and m.cfg.attn_only
    info = m.cfg.icl_control_info
    assert info["name"] == name if "name" in info else name == "control"
    with pytest.raises(ControlError, match="unknown control"):
        load_control("control-narrow")


def _accuracies(model, classes="train", n=256):
    from helpers.core.controls.model import control_task
    from helpers.experiments.positive_control import label_swap

    cp = control_prompts(control_task(model), n, seed=11, classes=classes)
    return label_swap(model, cp)


def test_negative_control_answers_from_its_weights_and_ignores_a_swapped_mapping():
    """Its own facts: high accuracy with the training mapping; a swapped mapping in the context does not move its
    answer; classes never seen in training near chance."""
    neg = load_control("control-negative")
    train = _accuracies(neg)
    assert train["correct"].mean() >= 0.9
    assert train["follows"].mean() <= 0.1 and train["same"].mean() >= 0.9  # the answer stays where the weights put it
    held = _accuracies(neg, "heldout")
    assert held["correct"].mean() <= 0.40  # chance is 0.25: nothing in its weights knows these classes' labels


def test_wide_positive_control_reads_the_mapping_from_its_context():
    wide = load_control("control-wide")
    for classes in ("train", "heldout"):
        run = _accuracies(wide, classes)
        assert run["correct"].mean() >= 0.9 and run["follows"].mean() >= 0.9


def test_text_anchor_prompts_keep_bos_the_labels_and_the_query(control, cp):
    from helpers.experiments.positive_control import text_anchor_loyalty, text_anchor_prompts

    for p, t in zip(cp.prompts[:8], text_anchor_prompts(cp)[:8]):
        assert t.tokens.tolist() == [0] + [int(p.tokens[j]) for j in p.label_pos] + [int(p.tokens[p.q])]
        assert t.q == len(t) - 1 and t.label_class == p.label_class and t.gold == p.gold
        assert t.text.split(" ") == [w for j, w in enumerate(p.text.split(" "), 1) if j in p.label_pos or j == p.q]
    loyal = text_anchor_loyalty(control, cp)
    assert loyal.shape == (len(cp.prompts),) and set(np.unique(loyal)) <= {0.0, 1.0}
    # the positive control reads the mapping from item-label pairs: without the items its answer is a guess
    assert loyal.mean() < 0.6


def test_a_retrained_checkpoint_is_compared_by_its_tensors_not_its_bytes(tmp_path):
    """Two runs of the same seed and recipe write files whose sha256 differ (each records its own training seconds)
    but whose tensors are equal: ``compare_checkpoints`` says "equal"; one changed weight, another seed or a missing
    file is named."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from helpers.core.controls.training import compare_checkpoints, save_control, train_control

    paths = []
    for i, seed in enumerate((0, 0, 1)):
        result = train_control(seed=seed, task=TASK, shape=(1, 2, 16), max_steps=3, eval_every=3, eval_n=8,
                               progress=False)
        result.seconds += i  # as two runs' clocks would differ
        paths.append(tmp_path / f"run{i}.safetensors")
        save_control(result, paths[-1])
    assert file_sha256(paths[0]) != file_sha256(paths[1])
    assert compare_checkpoints(paths[1], paths[0]) == "equal"
    assert compare_checkpoints(paths[2], paths[0]).startswith("differs: another recipe")
    tensors = load_file(str(paths[1]))
    tensors["proj"][0, 0] += 1e-3
    with safe_open(str(paths[1]), "pt") as f:
        save_file(tensors, str(tmp_path / "edited.safetensors"), metadata=f.metadata())
    said = compare_checkpoints(tmp_path / "edited.safetensors", paths[0])
    assert said.startswith("differs: 1 of ") and "0.001 apart" in said, said
    assert compare_checkpoints(paths[0], tmp_path / "absent.safetensors").startswith("no shipped checkpoint at")
