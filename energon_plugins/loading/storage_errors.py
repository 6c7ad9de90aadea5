"""A failed read from object storage becomes one :class:`~energon_plugins.errors.RemoteStorageError`.

Energon reads ``msc://`` datasets through the multi-storage client, which already retries a
failed request with exponential backoff (the profile's ``retry: {attempts, delay,
backoff_multiplier}``) under the provider's timeouts (``read_timeout``, ``connect_timeout``).
When the retries are spent it raises its own error (``RetryableError``, ``RuntimeError``,
``PermissionError``, ``FileNotFoundError``) whose message names the request and the object
(``Failed to GET object(s) at bucket/key ...``); through a worker process torch re-raises it as
sixty lines of traceback text. :func:`storage_failure` recognises both forms and gives the
training loop one message: what was read, why it failed, where the retries and timeouts are
configured, and that the last saved loader state resumes exactly. Credentials never appear:
the storage client's messages carry the bucket, key, endpoint and request ids only, and the
message here quotes nothing else.
"""

from __future__ import annotations

import os
import re

from energon_plugins.errors import RemoteStorageError

_OBJECT_PATTERNS = (
    re.compile(r"(?P<op>[A-Z]+) object\(s\) at (?P<object>\S+?)(?:\.|,)?(?:\s|$)"),
    re.compile(r"for (?P<op>[A-Z]+) operation on (?P<object>\S+?)(?:\.|,)?(?:\s|$)"),
    re.compile(r"Object (?P<object>\S+?) does not exist"),
    re.compile(r"Multipart upload failed for (?P<object>\S+?):"),
)
_ERROR_TYPE = re.compile(r"error[_ ]type: (\w+)")
_ENDPOINT_ERROR = re.compile(r"endpoint URL: \"[^\"]*\"")
_STORAGE_MODULES = ("multistorageclient", "botocore", "boto3", "urllib3")
_WORKER_TEXT = re.compile(r"^Caught (\w+) in DataLoader worker process \d+\.\nOriginal Traceback")


_OURS = re.compile(r"^reading object storage failed: (?:(?P<op>[A-Z]+) )?(?P<object>\S+?): ")


def _from_worker(text: str) -> RemoteStorageError:
    """A worker's :class:`RemoteStorageError` as torch re-raised it, with its fields back."""
    message = _last_exception_line(text).split(": ", 1)[-1]
    found = _OURS.match(message)
    fields = found.groupdict() if found else {}
    return RemoteStorageError(message, object_key=fields.get("object"), operation=fields.get("op"))


def _last_exception_line(text: str) -> str:
    """The exception line that ends a formatted traceback (the whole text if it is not one)."""
    lines = [line for line in text.rstrip("\n").split("\n") if line.strip()]
    for line in reversed(lines):
        if not line.startswith((" ", "\t")):
            return line
    return text


def _from_storage_client(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) comes from the storage stack."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__module__.split(".")[0] in _STORAGE_MODULES:
            return True
        current = current.__cause__ or current.__context__
    return False


def storage_failure(exc: BaseException) -> RemoteStorageError | None:
    """The :class:`RemoteStorageError` to raise instead of ``exc`` (``from exc``), or ``None``
    when ``exc`` is not a failed object-storage request (in this process or a worker's)."""
    text = str(exc)
    worker = _WORKER_TEXT.match(text)
    if isinstance(exc, RemoteStorageError):
        return None if worker is None else _from_worker(text)
    if worker is not None:
        if not any(f"{module}." in text for module in _STORAGE_MODULES[:2]):
            return None
        message = _last_exception_line(text)
        kind = worker.group(1)
    else:
        if not _from_storage_client(exc):
            return None
        message = text
        kind = type(exc).__name__
    found = None
    for pattern in _OBJECT_PATTERNS:
        found = pattern.search(message)
        if found is not None:
            break
    if found is None:
        return None
    groups = found.groupdict()
    object_key = groups["object"]
    operation = groups.get("op")
    error_type = _ERROR_TYPE.search(message)
    reason = error_type.group(1) if error_type else kind
    if "does not exist" in message:
        reason = "the object does not exist"
    elif "Permission denied" in message or kind == "PermissionError":
        reason = "permission denied (check the profile's credentials)"
    request = f"{operation} {object_key}" if operation else object_key
    config = os.environ.get("MSC_CONFIG") or "the storage client's default config file"
    text_out = (  # the first words are what _OURS reads back from a worker's text
        f"reading object storage failed: {request}: {reason}, after the storage client's "
        "retries with backoff. Retries and timeouts are the profile's 'retry' (attempts, delay, "
        f"backoff_multiplier) and 'read_timeout' / 'connect_timeout' options in {config}. "
        "Once the store answers again, the loader state saved last resumes exactly"
    )
    return RemoteStorageError(
        _ENDPOINT_ERROR.sub("endpoint URL", text_out), object_key=object_key, operation=operation
    )
