"""mkdocs hook: replace ``<!-- generated:NAME -->`` placeholders with rendered references.

Configured in ``mkdocs.yml`` under ``hooks:``. Each placeholder names a renderer in
:data:`docs_hooks.render.GENERATORS` (hooks, config, builtins, cli, and the
``missing-verbs:a,b`` / ``missing-modules:x.y`` warnings). A placeholder with an unknown name
fails the build.
"""

import re
import sys
from pathlib import Path

_PLACEHOLDER = re.compile(r"<!--\s*generated:([\w-]+)(?::([\w.,:-]+))?\s*-->")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from docs_hooks.render import GENERATORS  # noqa: E402


def on_page_markdown(markdown, page, config, files):  # noqa: ANN001, ANN201 - mkdocs API
    """Expand every generated-reference placeholder in ``markdown``."""

    def expand(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(
                f"{page.file.src_path}: unknown placeholder generated:{name}; "
                f"known: {', '.join(sorted(GENERATORS))}"
            )
        arg = match.group(2)
        return GENERATORS[name](arg) if arg is not None else GENERATORS[name]()

    return _PLACEHOLDER.sub(expand, markdown)
