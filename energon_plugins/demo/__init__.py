"""The embedded demo: the demo run and the data for example configs.

The datasets and offline tokenizers it uses come from :mod:`energon_plugins.synthetic`.
"""
