"""The host layer: hook specifications, kinds, the registry and how plugins are loaded.

Nothing here imports torch, transformers or Energon.
"""
