"""The encoding layer: task encoders, image processors, packing and batch formats.

Turns Energon samples into tokens, pixels and collated batches. Modules import torch,
transformers and Energon where they need them; nothing is imported at package import.
"""
