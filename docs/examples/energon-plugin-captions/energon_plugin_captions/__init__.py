"""A captioning task encoder for energon-plugins."""
