"""Checks that build what a config describes: the layer above loading.

:mod:`~energon_plugins.checks.preflight` builds the components and reads a first batch
(``validate`` by default reads a small sample, ``--deep`` a whole batch);
:mod:`~energon_plugins.checks.sample_read` encodes a bounded sample of the training data and
reports truncation and skips against ``seq_length``. The structural checks of a config (no
component built) are :mod:`energon_plugins.config.validate`.
"""
