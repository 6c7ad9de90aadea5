"""Templates shared by every kind of plugin: pyproject, package init, README frame.

Placeholders are :class:`string.Template` fields (``${name}``); see
:func:`energon_plugins.scaffold.render` for the full list.
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "${distribution}"
dynamic = ["version"]  # ${package}.__version__, the one place it is written
description = "${summary}"
readme = "README.md"
requires-python = ">=3.11"
dependencies = [
    "energon-plugins>=${core_version}",
    "pydantic>=2.7",
]

[project.optional-dependencies]
test = ["pytest>=8"]

# energon-plugins finds the plugin through this entry point. The module holds the hook
# implementations and imports only pydantic, so `energon-plugins list` stays fast.
[project.entry-points.energon_plugins]
${entry_point} = "${package}.plugin"

[tool.setuptools.dynamic]
version = { attr = "${package}.__version__" }

[tool.setuptools.packages.find]
include = ["${package}*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
filterwarnings = [
    # Energon's loader asks for pinned memory; CPU-only torch warns and ignores it.
    "ignore:.*pin_memory.*:UserWarning",
]
"""

PACKAGE_INIT = '''\
"""${distribution}: ${summary}"""

__version__ = "0.1.0"
'''

PLUGIN = '''\
"""Hook implementation of ${distribution} (import-light: pluggy and pydantic only)."""

from energon_plugins import hookimpl

from ${package}.options import ${class_name}Options


@hookimpl
def ${hook}(register):
    """Register ``${name}``; the ${module} module is imported only when it is built."""
    register(
        "${name}",
        "${package}.${module}:${factory}",
        options=${class_name}Options,
        description="${summary}",
    )
'''
"""The hook module of every kind: registers the factory as a ``"module:attr"`` string."""

CONFIG_USAGE = """\
${config_intro}

```yaml
${config_example}
```

Check a config before a run with `energon-plugins validate config.yaml`: a typo in the name or
in an option is reported with the closest valid one."""
"""The README's "Use it" section of a kind selected in a datamodule config (a template's own
``USAGE`` replaces it, as the source formats' convert command does)."""

README = """\
# ${distribution}

${summary}

A plugin for energon-plugins (the Megatron-Energon plugin registry): once installed, the
${kind_text} `${name}` can be selected by name in an energon-plugins config.

## Install

```bash
python -m pip install -e .    # with the python of the environment energon-plugins runs in
energon-plugins list          # shows ${name} (${kind}) from ${distribution}
energon-plugins show ${name}  # its options and their defaults
```

## Use it

${usage}

## Options

${options_table}

## Layout

- `${package}/plugin.py`: the hook implementation. It registers `${name}` with a
  `"module:attr"` string factory and the options model, so listing plugins imports nothing
  heavy.
- `${package}/options.py`: the pydantic options model (`extra="forbid"`: unknown keys are
  errors).
- `${package}/${module}.py`: ${module_text}
- `tests/test_plugin.py`: the energon-plugins conformance check
  (`energon_plugins.testing.${check}`) and a test of this plugin's own behaviour.

## Test

```bash
python -m pip install -e ".[test]"
python -m pytest
```

The fixtures `energon_dataset`, `build_context` and `isolated_registry` come from
energon-plugins' pytest plugin; no `conftest.py` is needed.
"""
