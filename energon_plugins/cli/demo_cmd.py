"""``energon-plugins demo``: the embedded default (what ``make demo`` runs).

Generates the demo dataset and tokenizer offline (cached), builds a datamodule and runs it;
see :func:`energon_plugins.demo.run.run_demo`. ``--prepare-only`` writes just the data and
tokenizer (``DIR/demo.yaml`` and ``DIR/tokenizer``) that ``examples/*.yaml`` point at. From
the first second a status on stderr names the step under way (importing torch, writing the
dataset, building the loader, ...), only where stderr is a terminal.
"""

import click


def prepare_demo_data(directory: str) -> dict[str, str]:
    """Write the demo metadataset and the demo tokenizer into ``directory``; return their paths."""
    from pathlib import Path

    from energon_plugins.synthetic import save_demo_tokenizer, write_demo_datasets

    root = Path(directory).expanduser()
    info = write_demo_datasets(root)
    tokenizer = root / "tokenizer"
    if not (tokenizer / "tokenizer_config.json").is_file():
        save_demo_tokenizer(tokenizer)
    return {"path": str(info.path), "tokenizer": str(tokenizer.resolve())}


@click.command("demo")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the demo data lives (default: $ENERGON_PLUGINS_CACHE or ~/.cache/energon-plugins).",
)
@click.option(
    "--prepare-only",
    is_flag=True,
    help="Only write the demo dataset (CACHE_DIR/demo.yaml) and tokenizer "
    "(CACHE_DIR/tokenizer), e.g. for examples/*.yaml with --cache-dir .cache/demo.",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Run the demo on CONFIG instead of the generated default, e.g. examples/llava.yaml.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the demo's result as JSON.")
def demo_command(cache_dir: str | None, prepare_only: bool, config: str | None, as_json: bool) -> None:
    """Run the embedded demo: a generated dataset, an offline tokenizer, real Energon loaders."""
    from energon_plugins.cli._output import console, print_json, startup_status

    if prepare_only:
        with startup_status("writing the demo dataset and tokenizer...") as status:
            if cache_dir is None:
                from energon_plugins.synthetic import default_cache_dir

                cache_dir = str(default_cache_dir() / "demo")
            status.update(f"writing the demo dataset and tokenizer into {cache_dir}...")
            paths = prepare_demo_data(cache_dir)
        if as_json:
            print_json(paths)
        else:
            click.echo(f"dataset:   {paths['path']}\ntokenizer: {paths['tokenizer']}")
        return

    with startup_status("importing torch, transformers and Energon...") as status:
        from energon_plugins.demo.run import run_demo

        result = run_demo(cache_dir, config=config, console=None if as_json else console(), status=status)
    if as_json:
        print_json(result)
