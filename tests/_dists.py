"""Write real (unpacked) distributions with dist-info metadata and entry points, for tests.

This is what ``pip install`` leaves in site-packages: a package directory and a
``NAME-VERSION.dist-info`` folder with ``METADATA`` and ``entry_points.txt``. Putting the folder
on ``sys.path`` makes ``importlib.metadata`` find the distribution and its entry points.
"""

import pathlib
import textwrap


def write_distribution(
    root: pathlib.Path,
    name: str,
    *,
    version: str = "1.0",
    modules: dict[str, str],
    entry_points: dict[str, str],
    group: str = "energon_plugins",
) -> pathlib.Path:
    """Write distribution ``name`` into ``root``; ``modules`` maps dotted module -> source."""
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        parts = module.split(".")
        for depth in range(1, len(parts)):
            package = root.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
        (root.joinpath(*parts[:-1]) / f"{parts[-1]}.py").write_text(textwrap.dedent(source))
    dist_info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{group}]"] + [f"{ep} = {target}" for ep, target in entry_points.items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return root
