"""Exceptions raised by energon-plugins. Every message names the plugin, field or file at fault."""

from collections.abc import Sequence


class EnergonPluginsError(Exception):
    """Base class of every error this package raises on purpose (a user error, not a bug)."""


class PluginNotFoundError(EnergonPluginsError, LookupError):
    """No installed plugin of the requested kind has the requested name."""


class PluginConflictError(EnergonPluginsError, LookupError):
    """A plain name is claimed by more than one distribution."""


class PluginLoadError(EnergonPluginsError):
    """A plugin could not be imported, registered or built."""


class PluginOptionsError(EnergonPluginsError, ValueError):
    """A plugin's options do not validate against its options model."""


class ConfigError(EnergonPluginsError, ValueError):
    """A datamodule configuration (file, mapping or arguments) is invalid."""


class DatasetError(EnergonPluginsError, ValueError):
    """A dataset path is missing, is not an Energon dataset, or lacks a split."""


class BatchFormatError(EnergonPluginsError, ValueError):
    """A batch format cannot express a batch (names the format, and the task encoder)."""


class ConvertError(EnergonPluginsError, ValueError):
    """``convert`` cannot proceed: unreadable source, bad arguments, a ``--strict`` record
    failure, or an output folder that cannot be resumed."""


class SampleFailedError(EnergonPluginsError, ValueError):
    """The loader stopped on a sample: the message names the sample key, the pipeline stage
    (``cook``, ``encode_sample``, ``pack``, ``batch``, ``encode_batch``, ``batch format``) and
    the reason (the last exception's type and message); ``__cause__`` keeps the full chain.

    ``key`` (the failing sample's key; the first key of a failing batch), ``stage`` and
    ``reason`` hold those parts (``None`` where unknown).
    """

    def __init__(
        self,
        text: str,
        *,
        key: str | None = None,
        stage: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(text)
        self.key = key
        self.stage = stage
        self.reason = reason


class PluginOutputError(EnergonPluginsError, ValueError):
    """A plugin's component returned what its kind's contract does not allow (a task
    encoder's sample, an image processor's output, a packing strategy's selection, a batch
    format's batch). The message names the plugin (kind, registered name and distribution),
    what it returned and what was expected. A plugin bug, not a bad sample: the loader stops
    at once instead of skipping."""


class RemoteStorageError(EnergonPluginsError, OSError):
    """Reading from object storage (an ``msc://`` path) failed after the storage client's own
    retries with backoff: the store did not answer within its timeouts, dropped the connection,
    or refused the request. The message names the object and the storage client's config;
    ``object_key`` holds the object (``bucket/key``), ``operation`` the request (``GET``,
    ``HEAD``, ...) where known. The loader state saved last resumes exactly once the store
    answers again."""

    def __init__(self, text: str, *, object_key: str | None = None, operation: str | None = None) -> None:
        super().__init__(text)
        self.object_key = object_key
        self.operation = operation


class RankTimeoutError(EnergonPluginsError, TimeoutError):
    """Data-parallel ranks did not answer a data-side collective within the data timeout.

    ``ranks`` holds the global ranks that did not answer (every other member of the group
    when the group itself could not be formed), ``timeout`` the seconds waited, ``what`` the
    value being agreed on.
    """

    def __init__(self, text: str, *, ranks: Sequence[int], timeout: float, what: str) -> None:
        super().__init__(text)
        self.ranks = tuple(ranks)
        self.timeout = timeout
        self.what = what
