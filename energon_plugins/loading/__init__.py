"""The loading layer: the datamodule, the loader wrappers, checkpoints, host-to-device
transfer and the bad-sample policy, on Energon's loaders."""
