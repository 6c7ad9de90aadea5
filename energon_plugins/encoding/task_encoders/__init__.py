"""Task encoders: the base class plugins subclass, and the built-in `multimodal`."""
