"""What the project's own wrapper stages share around Energon's pipeline."""

from typing import Any


class TransparentRestore:
    """Restore for a wrapper stage that Energon's own pipeline does not have.

    A state saved without this stage (Energon's plain ``get_savable_loader(get_train_dataset(
    ...))``, as Megatron-Bridge's own datamodule builds it) restores the inner dataset, and the
    stage starts afresh; a state that has the stage restores as usual. Mixed in before
    Energon's ``BaseWrapperDataset``.
    """

    def restore_state(self, state: Any) -> None:
        """Restore ``state``, passing a state without this stage down to the inner dataset."""
        if state is not None and state.get("__class__") != type(self).__name__:
            self.reset_state_own()  # type: ignore[attr-defined]
            self.dataset.restore_state(state)  # type: ignore[attr-defined]
            return
        super().restore_state(state)  # type: ignore[misc]
