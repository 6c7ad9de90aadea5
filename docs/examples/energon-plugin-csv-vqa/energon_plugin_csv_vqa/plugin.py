"""Hook implementations: what this distribution registers (imports only the options)."""

from energon_plugin_csv_vqa.options import CsvVqaOptions
from energon_plugins import hookimpl


@hookimpl
def register_source_formats(register):
    """Register ``csv-vqa``."""
    register(
        "csv-vqa",
        "energon_plugin_csv_vqa.reader:build_csv_vqa",  # imported only when convert runs
        options=CsvVqaOptions,
        description="CSV rows of image path, question and answer",
    )
