"""The notebooks' exercises: the checks that grade a reader's by-hand functions, and what they run on.

One module per method, named as in :mod:`helpers.experiments` (setting, saliency, isolation, aucroc,
reweighting, compression, diagnosis, incontext_heads, two_towers, positive_control), holds the ``check_*``
functions of that method's exercises and the typical wrong versions each check names when a result matches one.
A check runs the reader's function and the experiment's own reference on the tiny random models of
:mod:`helpers.exercises.tiny`; :mod:`helpers.exercises.grading` holds what a check raises (``CheckFailed``,
``YourFunctionRaised``) and how it grades (``grader``, ``likely_mistake``, ``compare_to_reference``).

This is the top layer: it imports ``core``, ``study`` and ``experiments``; none of them imports it
(tests/test_layers.py).
"""
