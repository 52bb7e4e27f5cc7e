"""The controls as populations: independently trained checkpoints of each (five on 2 layers, eight on 4), so a
check's power counts training runs, not sequence draws from one checkpoint.

One checkpoint per control says how a check behaves on that checkpoint; whether it sees a mechanism that a training
recipe produces is a question about the recipe, and its unit is the training run. Each population below is one
recipe (task, shape, training) trained from its seeds (:attr:`Population.seeds`: :data:`SEEDS`, or
:data:`DEEP_SEEDS` on 4 layers); every checkpoint ships under
``data/control/population/`` with its sha256 written here (a file that differs is refused, as the named controls'
are) and its training curve beside it. ``make control`` retrains them all (scripts/train_control.py).

- ``wide`` (positive): the wide control's recipe, 2 layers x 8 heads, a class -> label mapping drawn afresh for
  every sequence: the answer can only come from the context. Seed 0 is ``data/control/control-wide.safetensors``.
- ``negative``: the same shape, one fixed mapping and training contexts that never show the query's class, so the
  answer sits in the weights. Trained for as many steps as the positive ones need on average
  (:data:`NEGATIVE_STEPS`, no early stop), so that "it does not read its context" is not "it had less training".
- ``deep`` (positive) and ``deep-negative``: the same two recipes on 4 layers x 8 heads, so that "shallow",
  "deep" and "middle and later layers" name different layers (on 2 layers the deep half is one layer). The depth
  checks are measured on these alone, so they have eight seeds: with five, a check that sees the mechanism in
  every one has an exact 95% interval starting at 0.48, below the 0.5 a "sees it" needs; with eight, at 0.63.

A member loads as a control of its kind: it carries the name of the named control of that kind
(:attr:`Population.carries`: ``control-wide`` or ``control-negative``), so every check treats it as it treats that
control, while ``cfg.icl_population`` names its population and ``cfg.icl_control_info`` its seed, shape and
training. Stored results are keyed by the weights (:func:`helpers.core.store.model_fingerprint`), so two members
never share one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from helpers.core.controls.model import CONTROL_PATH, ControlError, ControlTask, control_spec, load_control
from helpers.core.task_data import file_sha256  # the project's one file hasher

__all__ = ["SEEDS", "DEEP_SEEDS", "NEGATIVE_STEPS", "Population", "POPULATIONS", "population", "load_member", "members"]

SEEDS = (0, 1, 2, 3, 4)
DEEP_SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)  # the 4-layer populations (module docstring)
# the negative controls' training length: as long as the positive ones train on average (steps to their stopping
# accuracy, seeds 0-4 of both depths: 1100, 2200, 2000, 2100, 1100 on 2 layers, 1200, 1100, 1100, 1100, 1400 on 4;
# mean 1440), rounded up; no early stop. Seeds 5-7 on 4 layers, trained later, took 800, 900 and 1600: the mean over
# all 13 positive checkpoints, 1362, stays under it
NEGATIVE_STEPS = 1500
POPULATION_DIR = CONTROL_PATH.parent / "population"


@dataclass(frozen=True)
class Population:
    """One training recipe, trained from each of its ``seeds``.

    ``carries``: the named control whose kind and task its members have (:data:`helpers.core.controls.model.CONTROLS`).
    ``shape``: ``(n_layers, n_heads, d_model)``. ``train``: ``train_control``'s keyword arguments besides seed, task
    and shape. ``sha256``: ``{seed: sha256}`` of the shipped checkpoints. ``shipped``: ``{seed: path}`` of members
    that are a named control's own checkpoint."""

    name: str
    carries: str
    shape: tuple[int, int, int]
    train: dict
    about: str
    sha256: dict[int, str] = field(default_factory=dict)
    shipped: dict[int, str] = field(default_factory=dict)
    seeds: tuple[int, ...] = SEEDS

    @property
    def kind(self) -> str:
        return control_spec(self.carries).kind

    @property
    def task(self) -> ControlTask:
        return control_spec(self.carries).task

    def path(self, seed: int) -> Path:
        if seed in self.shipped:
            return CONTROL_PATH.parent / self.shipped[seed]
        return POPULATION_DIR / f"{self.name}-s{seed}.safetensors"


_POSITIVE = {"copy_steps": 1000, "stop_acc": 0.98, "max_seconds": 840.0}
_NEGATIVE = {"copy_steps": 0, "stop_acc": 2.0, "max_steps": NEGATIVE_STEPS, "max_seconds": 840.0}  # 2.0: no early stop

# sha256 of the shipped checkpoints under data/control/population/ (make control prints them; a file that differs is
# refused)
_SHA256: dict[str, dict[int, str]] = {
    "wide": {
        1: "15f9595a6e8fee555e9cbcf20375ec3f810a43ce0524b73daae3af1e53969818",
        2: "7bfc01751b6f31fd30b6b71585d67cb8d4728ec833e81ab31a2b157adc4def59",
        3: "a93c45552cd5d49dba3662fd38ceb412490381a66f29f7ee04293e7f7dc33b2e",
        4: "6f6abf79e6a34b0eade5eb83d64413404ce8f1362d0c8ae07ec85f94a28831e2",
    },
    "negative": {
        0: "679f96586737bd0f25a476b2aab7140d0c84e58ed282731e7fe31d4625b094e3",
        1: "09ca70de569698cadea9584e390d93a7f018421fc7e23a31eb962f15396836d3",
        2: "d6efe20874effbfdc78369b14fbc79285c414d38e6ef1d628f9760b63d5ca719",
        3: "6b1a8022cab7b809d31215e1d5ee28e6fdbdb7371d830da13c050fc5ef57cd39",
        4: "8ee7efe36567c5782906241a59c6bbe63181c444fca1d357fe3467a5c270c1d2",
    },
    "deep": {
        0: "055952f47d5b655499d271835140044a69e044515a336f6d8336149813758282",
        1: "8ce567cf24891d1592646de8cb9255b7e8d050b05f8f1138842f241f416c2076",
        2: "97d13db06da526209620bdb40d8500f1a629ede5439d797b2bf17fdc858ebac7",
        3: "4e3d1c5145c182c78224d39d0ed5cb16a8d890d325fdf5f3ae6ee77127cae645",
        4: "6c1cb888e30d110e3f702950a1274e0a1ad3d8ce89c493437ad12821dc9c3bd2",
        5: "94bf069e7768c6aeaba844727bf3dbf439367e2408bc0a699cdd04ca9a467b10",
        6: "0e3bf686a18f1ad529a4546fd4de982fe391f53361b99238e8de335f3b7833a2",
        7: "bd62dbd6cdf1cde2379dc2abf1f9de8735ccdc5fd290056a5fffd92f55fb09b5",
    },
    "deep-negative": {
        0: "48710226d4a102704c6d0cb78dc5481a85460c10131ff39a509166204b17350f",
        1: "a901880d63a22237a807d6503694d4cd0fee3f23e4139f1e372105918a01f6c5",
        2: "d26a84c531c0c39a9022f8dcaf2858aa1acf8b5e79589ec25696e12624f02a82",
        3: "7d80e4d94a373148f82b744362101df80345948a5844f2e2f7caf715324c645e",
        4: "f0df81c3772dcbcebba7e909a2aa55ce623368b408b3938d0d856c34520681b9",
        5: "7928d22100c27d97c38a76b8b0d7bf575bd1f5ffeec148a844e162eccc7b9de8",
        6: "b838dc7cbd86b994b3c7c358ddd2537882df260dd240f86692a3a7b13e61f709",
        7: "684075a62ec93f259666d118837ab5a809b4965faa241027f0ad109149304506",
    },
}

POPULATIONS: dict[str, Population] = {p.name: replace(p, sha256=_SHA256.get(p.name, {})) for p in (
    Population("wide", "control-wide", (2, 8, 64), _POSITIVE,
               "positive: the answer can only come from the context (2 layers x 8 heads)",
               shipped={0: "control-wide.safetensors"}),
    Population("negative", "control-negative", (2, 8, 64), _NEGATIVE,
               "negative: the answer sits in the weights, the context is not read (2 layers x 8 heads)"),
    Population("deep", "control-wide", (4, 8, 64), _POSITIVE,
               "positive on 4 layers x 8 heads, so that shallow, deep and middle layers differ", seeds=DEEP_SEEDS),
    Population("deep-negative", "control-negative", (4, 8, 64), _NEGATIVE,
               "negative on 4 layers x 8 heads", seeds=DEEP_SEEDS),
)}


def population(name: str) -> Population:
    """The :class:`Population` called ``name``; a clear error naming the known ones otherwise."""
    if name not in POPULATIONS:
        raise ControlError(f"unknown control population {name!r}; the populations are {sorted(POPULATIONS)}")
    return POPULATIONS[name]


def load_member(name: str, seed: int):
    """Population ``name``'s checkpoint trained from ``seed``, loaded as a control of its kind, after checking its
    sha256 against the one written here (a clear error when it differs or when no checkpoint is shipped)."""
    pop = population(name)
    if seed not in pop.seeds:
        raise ControlError(f"population {name!r} has the seeds {list(pop.seeds)}, not {seed!r}")
    path = pop.path(seed)
    if not path.exists():
        raise ControlError(f"no checkpoint of population {name!r}, seed {seed}, at {path}: `make control` trains "
                           "the populations (scripts/train_control.py --populations)")
    if seed not in pop.shipped:
        want = pop.sha256.get(seed)
        if want is None:
            raise ControlError(f"{path}: population {name!r}, seed {seed}, has no sha256 written in "
                               "helpers/core/controls/population.py, so it cannot be verified")
        got = file_sha256(path)
        if got != want:
            raise ControlError(f"{path}: sha256 {got} does not match the expected {want}: restore it (git checkout "
                               "data/control) or retrain the populations with `make control`")
    model = load_control(path)
    if model.cfg.icl_model_name != pop.carries or [model.cfg.n_layers, model.cfg.n_heads] != list(pop.shape[:2]):
        raise ControlError(f"{path} holds {model.cfg.icl_model_name} of {model.cfg.n_layers} layers x "
                           f"{model.cfg.n_heads} heads, not a member of population {name!r}")
    model.cfg.icl_population = name
    return model


def members(name: str, seeds=None) -> list:
    """Every checkpoint of population ``name`` (:func:`load_member`; ``seeds``: default all of its own), in seed
    order."""
    return [load_member(name, s) for s in (population(name).seeds if seeds is None else seeds)]
