"""Exceptions raised by energon-plugins. Every message names the plugin, field or file at fault."""


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
