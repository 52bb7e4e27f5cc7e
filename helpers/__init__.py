"""helpers: the tested logic behind the notebooks, in five layers (docs/contributing.md has the rules).

- ``helpers.core``: loading models, TransformerLens' faster equal attention, tasks and prompts, batched prediction
  and the shared-demonstration engine, device sizing, the on-disk store and the run grid, seed streams, the
  controls (``helpers.core.controls``). Imports nothing from the other layers.
- ``helpers.experiments``: one method of the papers per module, the method only (functions of a model and prompts
  that return tensors). Imports ``core``; never another method's module.
- ``helpers.study``: run profiles and settings, the papers' numbers, intervals, claims and reports, figures, and
  :mod:`helpers.study.notebook` (what a notebook asks of its kernel). Imports ``core``.
- ``helpers.protocols``: one module per method with the protocol that runs it (sizes, stored runs over tasks x
  seeds, intervals, verdict criteria, claims), and the power runs on the controls. Imports the layers above.
- ``helpers.exercises``: the notebooks' graded exercises and the tiny random models they run on. Imports any lower
  layer; nothing imports it.

Importing any of them changes no setting (no warning filter, environment variable or display formatter:
tests/test_layers.py); a notebook asks for those with :func:`helpers.study.notebook.start`.
"""

__version__ = "0.1.0"
