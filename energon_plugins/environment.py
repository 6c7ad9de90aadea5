"""The environment variables energon-plugins reads, and the check that catches their typos.

Every variable the project reads starts with ``ENERGON_PLUGINS_`` and is listed in
:data:`VARIABLES`; a variable with that prefix that is not listed is almost always a typo
(``ENERGON_PLUGINS_DISABLED``), which would otherwise be ignored without a word.
"""

import os
from collections.abc import Mapping

from energon_plugins._suggest import did_you_mean

PREFIX = "ENERGON_PLUGINS_"

VARIABLES: dict[str, str] = {
    "ENERGON_PLUGINS_LOAD": "load only these third-party plugin distributions (comma-separated; "
    "set but empty: none)",
    "ENERGON_PLUGINS_DISABLE": "skip these plugin distributions (comma-separated)",
    "ENERGON_PLUGINS_CACHE": "where `energon-plugins demo` keeps its generated data",
    "ENERGON_PLUGINS_STORAGE_METRICS": "1 keeps multi-storage-client's metrics wrapper on local reads",
    "ENERGON_PLUGINS_DATA_TIMEOUT": "seconds a data-side collective (the validation length agreement) "
    "waits for every data-parallel rank before naming the ones that did not answer (default 120)",
}
"""Every variable energon-plugins reads, with what it does."""


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One message per ``ENERGON_PLUGINS_*`` variable in ``environ`` that is not in
    :data:`VARIABLES`, with the closest known name."""
    environ = os.environ if environ is None else environ
    return [
        f"environment variable {name} is not one energon-plugins reads"
        f"{did_you_mean(name, VARIABLES)}; known: {', '.join(VARIABLES)}"
        for name in sorted(environ)
        if name.startswith(PREFIX) and name not in VARIABLES
    ]
