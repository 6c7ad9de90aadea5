"""``CountedSkip``: the skip of one sample that the task encoder counts by reason.

It lives below the task encoders so that the stages they call (video decoding and budgets,
...) can raise it without importing a task encoder; ``PluginTaskEncoder.handle_error`` counts
it (:mod:`energon_plugins.encoding.task_encoders.base`, which re-exports it).
"""

from megatron.energon import SkipSample


class CountedSkip(SkipSample):
    """Skip a sample and count it under ``reason`` (e.g. ``too_long``).

    ``deliberate=True``: a policy the user chose asks for the skip (``truncation: drop``), so
    it skips even under ``on_error="raise"``. Otherwise the skip reports a problem with the
    data (no label left, ...), which ``on_error="raise"`` turns into an error naming the
    sample.
    """

    def __init__(self, reason: str, message: str = "", *, deliberate: bool = False) -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.deliberate = deliberate
