"""Giving stages of an Energon dataset chain a subclass of their own class, in place."""

from typing import Any


def replace_stage_class(root: Any, cls: type, replacement: type) -> None:
    """Give every stage of exactly type ``cls`` in ``root``'s chain the class ``replacement``
    (a subclass adding no state, so the stage keeps its state and pickles by the new name).
    Energon wrappers list their inner datasets in ``datasets``."""
    stack = [root]
    while stack:
        stage = stack.pop()
        if stage is None:
            continue
        if type(stage) is cls:
            stage.__class__ = replacement
        stack.extend(getattr(stage, "datasets", None) or ())
