"""A CSV source format for energon-plugins convert."""
