"""The controls: small attention-only models trained here whose answer is known, so that a check can be weighed.

- :mod:`helpers.core.controls.model`: what a control is (its task, its sequences and prompts, its config), and its
  shipped checkpoints, loaded after their sha256 is checked;
- :mod:`helpers.core.controls.population`: the populations, several independently trained checkpoints per recipe
  (positive and negative, 2 and 4 layers), which the power runs count as replicates;
- :mod:`helpers.core.controls.training`: how a checkpoint is trained (``make control`` runs it through
  scripts/train_control.py).
"""
