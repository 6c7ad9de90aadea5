"""A torch resize-and-normalize image processor for energon-plugins."""
