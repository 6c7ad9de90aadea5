"""The pluggy markers of the ``energon_plugins`` project.

Plugin modules decorate their hook implementations with :data:`hookimpl`.
"""

import pluggy

PROJECT_NAME = "energon_plugins"
"""The pluggy project name; also the entry-point group plugins declare."""

ENTRY_POINT_GROUP = PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
