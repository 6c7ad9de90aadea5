"""Registers the built-in source formats ``llava-json``, ``sharegpt`` and ``hf-parquet``."""

from energon_plugins.host._markers import hookimpl

_MODULE = "energon_plugins.convert.formats"
_OPTIONS = f"{_MODULE}.options"  # options named as strings: listing imports no pydantic


@hookimpl
def register_source_formats(register):
    """Register the readers ``energon-plugins convert --from NAME`` uses."""
    register(
        "llava-json",
        f"{_MODULE}.json_records:build_llava_json",
        options=f"{_OPTIONS}:LlavaJsonOptions",
        description="LLaVA instruction JSON / JSONL: image or images, conversations from/value",
    )
    register(
        "sharegpt",
        f"{_MODULE}.json_records:build_sharegpt",
        options=f"{_OPTIONS}:ShareGPTOptions",
        description="ShareGPT JSON / JSONL: messages or conversations, optional images",
    )
    register(
        "hf-parquet",
        f"{_MODULE}.hf_parquet:build_hf_parquet",
        options=f"{_OPTIONS}:HFParquetOptions",
        description="A local folder of Hugging Face parquet files with embedded image bytes",
        aliases=("parquet",),
    )
