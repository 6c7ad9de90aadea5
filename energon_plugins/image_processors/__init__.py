"""Built-in image processors."""
