"""The embedded demo: a generated dataset, an offline tokenizer, and the demo run."""
