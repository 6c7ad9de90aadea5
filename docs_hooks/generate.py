"""mkdocs hook: replace ``<!-- generated:NAME -->`` placeholders with rendered references.

Configured in ``mkdocs.yml`` under ``hooks:``. Each placeholder names a renderer in
:data:`docs_hooks.references.GENERATORS` (``hooks``, ``config``, ``builtins``); an unknown
name fails the build. The Python API and the CLI reference are not here: mkdocstrings and
mkdocs-click render them from ``:::`` directives in ``docs/reference/``.
"""

import re
import sys
from pathlib import Path

_CLICK_UNSET = "<code>Sentinel.UNSET</code>"
"""How mkdocs-click 0.9 shows an option without a default under click >= 8.3 (mkdocs-click#95)."""

_PLACEHOLDER = re.compile(r"<!--\s*generated:([\w-]+)\s*-->")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from docs_hooks.references import GENERATORS  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    """Expand every generated-reference placeholder in ``markdown``."""

    def expand(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(
                f"{page.file.src_path}: unknown placeholder generated:{name}; "
                f"known: {', '.join(sorted(GENERATORS))}"
            )
        return GENERATORS[name]()

    return _PLACEHOLDER.sub(expand, markdown)


def on_page_content(html, page, config, files):
    """Blank the CLI tables' ``Sentinel.UNSET`` defaults (options that have none).

    mkdocs-click 0.9 prints click >= 8.3's "no default" marker verbatim; the fix upstream
    (mkdocs/mkdocs-click#95) reads ``to_info_dict()``. Remove this once it is released.
    """
    return html.replace(_CLICK_UNSET, "")
