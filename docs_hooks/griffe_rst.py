"""griffe extension: read our docstrings the way they are written, for mkdocstrings.

The package's docstrings are Google style with reST inline markup (``:class:`X```,
double-backtick literals, ``::`` before a literal block), which mkdocstrings' markdown would
show verbatim, and they document related parameters together (``a, b, c: what they do``),
which griffe's Google parser drops with a warning. This extension rewrites each docstring as
griffe loads it: markup to markdown, a grouped entry to one entry per name. Configured in
``mkdocs.yml`` under the python handler's ``extensions``.
"""

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Attributes|Other Parameters):\s*$")
_NAMES_SO_FAR = re.compile(r"^\w+(?:\s*,\s*\w+)*,$")
_GROUPED = re.compile(r"^(\w+(?:\s*,\s*\w+)+)\s*(?::\s*(.*)|\.?)$")


def rst_to_md(text: str) -> str:
    """Turn reST roles and literals into markdown code spans, ``::`` blocks into ``:`` ones."""
    text = _ROLE.sub(r"`\1`", text)
    text = _LITERAL.sub(r"`\1`", text)
    return re.sub(r"::\n", ":\n", text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_grouped_items(text: str) -> str:
    """Write an ``Args``/``Attributes`` entry naming several items as one entry per name.

    ``a, b: text`` (the names may run over several lines, each ending in a comma) becomes
    ``a: text`` and ``b: text``, continuation lines repeated; a bare ``a, b.`` gets "see above."
    """
    lines = text.splitlines()
    out: list[str] = []
    section: int | None = None  # the indentation of the current section's title
    item: int | None = None  # the indentation of its entries
    i = 0
    while i < len(lines):
        line = lines[i]
        head = _SECTION.match(line)
        if head:
            section, item = len(head.group(1)), None
        elif section is not None and line.strip():
            if _indent(line) <= section:
                section = None
            elif item is None or _indent(line) == item:
                item = _indent(line)
                header, j = line.strip(), i
                while _NAMES_SO_FAR.match(header) and j + 1 < len(lines):
                    j += 1
                    header += " " + lines[j].strip()
                grouped = _GROUPED.match(header)
                if grouped:
                    following = []
                    while j + 1 < len(lines) and lines[j + 1].strip() and _indent(lines[j + 1]) > item:
                        j += 1
                        following.append(lines[j])
                    text_of = grouped.group(2) if grouped.group(2) is not None else "see above."
                    for name in (n.strip() for n in grouped.group(1).split(",")):
                        out += [" " * item + f"{name}: {text_of}", *following]
                    i = j + 1
                    continue
        out.append(line)
        i += 1
    return "\n".join(out)


class ReSTRoles(griffe.Extension):
    """Rewrite every docstring griffe loads with :func:`rst_to_md` and :func:`split_grouped_items`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Convert ``obj``'s docstring as soon as griffe has read it."""
        if obj.docstring is not None:
            obj.docstring.value = split_grouped_items(rst_to_md(obj.docstring.value))
