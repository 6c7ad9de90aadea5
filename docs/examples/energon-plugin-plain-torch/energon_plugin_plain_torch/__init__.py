"""A batch format for a hand-written PyTorch training loop."""
