"""A next-fit packing strategy for energon-plugins."""
