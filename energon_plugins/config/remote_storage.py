"""Object storage through multi-storage-client: its config, redaction, one wording for every
storage failure, and the reads of the up-front checks.

Energon opens remote paths through multi-storage-client (MSC), configured by MSC's own file
(``MSC_CONFIG``, else the first of MSC's default locations: ``~/.msc_config.yaml``,
``~/.config/msc/config.yaml``, ``/etc/msc_config.yaml`` ...). Its failures arrive as
``ValueError('Profile "x" not found ...')``, ``PermissionError`` (HTTP 403), botocore's
``NoSuchBucket`` or ``EndpointConnectionError``. :func:`describe_storage_error` turns each into
one message that names the URL, the profile, the problem and where MSC's config came from
(:func:`config_source`); :func:`storage_errors` raises it as a
:class:`~energon_plugins.errors.DatasetError` (or the caller's own error: ``convert`` and the
loader-state files use this module too). No message holds a credential: :func:`redact` removes
every value of a secret-looking environment variable or config key, the user part of URLs and
request signatures, and the storage errors are not chained (their objects are dropped). URLs
as text are parsed by :mod:`~energon_plugins.config.remote_urls`.

Import-light: multi-storage-client is imported on the first read (about 0.5 s), never Energon.
"""

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from energon_plugins.config.remote_urls import MSC_PREFIX as MSC_PREFIX
from energon_plugins.config.remote_urls import is_msc as is_msc
from energon_plugins.config.remote_urls import join_url as join_url
from energon_plugins.config.remote_urls import parent_url as parent_url
from energon_plugins.config.remote_urls import profile_of, split_url
from energon_plugins.errors import DatasetError

_SECRET_NAME = re.compile(
    r"secret|token|passw|credential|private|session|access_?key|api_?key|sas_|signature", re.I
)
_URL_USER = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)
_SIGNATURE = re.compile(r"((?:X-Amz-)?(?:Signature|Credential|Security-Token)=)[^&\s\"']+", re.I)
_MIN_SECRET = 4  # shorter values (empty, "none") would blank unrelated words

DENIED_CODES = frozenset(
    {
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "Forbidden",
    }
)
"""Storage error codes that mean the credentials were refused or may not use the path."""
UNREACHABLE = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionRefusedError",
    }
)
"""Exception type names (anywhere in the chain) that mean the endpoint did not answer."""


# --------------------------------------------------------------------------- MSC's config
def _read_config() -> tuple[Mapping[str, Any], str | None]:
    """MSC's config mapping and the file it came from (``({}, None)``: no file)."""
    from multistorageclient.config import StorageClientConfig

    data, path = StorageClientConfig.read_msc_config()
    return (data if isinstance(data, Mapping) else {}), path


def config_source() -> str:
    """Where MSC's config comes from, for a message: ``MSC_CONFIG=/etc/x.yaml``, a default
    location, or that there is none."""
    named = os.environ.get("MSC_CONFIG")
    if named:
        return f"MSC_CONFIG={named}" + ("" if os.path.isfile(named) else " (no such file)")
    try:
        _, path = _read_config()
    except Exception:  # noqa: BLE001 - a malformed file: the check itself reports it
        path = None
    if path:
        return f"{path} (MSC's default location; MSC_CONFIG is unset)"
    return (
        "no MSC config file: MSC_CONFIG is unset and none of MSC's default locations "
        "(~/.msc_config.yaml, ~/.config/msc/config.yaml, /etc/msc_config.yaml) holds one"
    )


def defined_profiles() -> list[str]:
    """The profile names MSC's config defines (empty when it cannot be read)."""
    try:
        data, _ = _read_config()
    except Exception:  # noqa: BLE001
        return []
    profiles = data.get("profiles")
    return sorted(str(name) for name in profiles) if isinstance(profiles, Mapping) else []


def profile_base_path(profile: str) -> str:
    """The ``base_path`` of ``profile``'s storage provider (``""`` when unknown)."""
    try:
        data, _ = _read_config()
        options = data["profiles"][profile]["storage_provider"].get("options") or {}
        return str(options.get("base_path") or "").strip("/")
    except Exception:  # noqa: BLE001 - not known: the message names no bucket
        return ""


# --------------------------------------------------------------------------- secrets
def _config_secrets(node: Any, secret_key: bool = False) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _config_secrets(value, secret_key or bool(_SECRET_NAME.search(str(key))))
    elif isinstance(node, list):
        for value in node:
            yield from _config_secrets(value, secret_key)
    elif secret_key and isinstance(node, (str, int)) and not str(node).startswith("${"):
        yield str(node)


def _config_file() -> str | None:
    """The file MSC reads its config from (found without validating it), if any."""
    named = os.environ.get("MSC_CONFIG")
    if named:
        return named if os.path.isfile(named) else None
    try:
        from multistorageclient.config import _find_config_file_paths  # its own search order
    except ImportError:  # pragma: no cover - another MSC version: no default file is read here
        return None
    return next((path for path in _find_config_file_paths() if os.path.isfile(path)), None)


_SECRET_LINE = re.compile(r"^[ \t-]*[\"']?([\w-]+)[\"']?[ \t]*[:=][ \t]*[\"']?([^\"'\s,}\]]+)", re.M)


def _file_secrets() -> Iterator[str]:
    """Secret-looking values of MSC's config file, read as plain YAML (even one MSC refuses),
    else line by line."""
    path = _config_file()
    if path is None:
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    try:
        import yaml

        yield from _config_secrets(yaml.safe_load(text))
    except Exception:  # noqa: BLE001 - not YAML: every value of a secret-looking key
        for key, value in _SECRET_LINE.findall(text):
            if _SECRET_NAME.search(key):
                yield value.rstrip(":")


def secret_values() -> set[str]:
    """Values that must never be printed: those of environment variables with a secret-looking
    name (``AWS_SECRET_ACCESS_KEY``, ``*_TOKEN``, ``*PASSWORD*`` ...) and, in MSC's config file,
    of such keys and of everything under ``credentials_provider``."""
    found = {value for name, value in os.environ.items() if _SECRET_NAME.search(name)}
    with contextlib.suppress(Exception):
        found.update(_file_secrets())
    return {value for value in found if len(value.strip()) >= _MIN_SECRET}


def redact(text: str) -> str:
    """``text`` without credentials: every :func:`secret_values` value, the ``user:password@``
    part of URLs and request signatures replaced by ``***``."""
    for secret in sorted(secret_values(), key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_USER.sub(lambda m: f"{m.group('scheme')}***@", text)
    return _SIGNATURE.sub(r"\1***", text)


# --------------------------------------------------------------------------- errors
def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _error_fields(exc: BaseException) -> Mapping[str, Any]:
    """The ``Error`` mapping of a botocore error in the chain (``{}`` when there is none)."""
    for link in _chain(exc):
        response = getattr(link, "response", None)
        if isinstance(response, Mapping) and isinstance(response.get("Error"), Mapping):
            return response["Error"]
    return {}


def error_code(exc: BaseException) -> str | None:
    """The storage error code (``NoSuchBucket``, ``403`` ...) of a botocore error in the chain."""
    code = _error_fields(exc).get("Code")
    return str(code) if code else None


def _bucket(url: str, exc: BaseException) -> str | None:
    """The bucket a ``NoSuchBucket`` error names, else the first part of the profile's path."""
    named = _error_fields(exc).get("BucketName")
    if named:
        return str(named)
    if not is_msc(url):
        return None
    profile, inner = split_url(url)
    full = "/".join(part for part in (profile_base_path(profile), inner) if part)
    return full.split("/")[0] or None


def where(url: str) -> str:
    """``(profile 'p', storage config: MSC_CONFIG=...)``: the tail of every remote message."""
    return f"(profile {profile_of(url)!r}, storage config: {config_source()})"


def describe_storage_error(url: str, what: str, exc: BaseException) -> str:
    """What a storage-client error on ``what`` at ``url`` means, naming the URL, the profile and
    where MSC's config came from; credentials removed (:func:`redact`)."""
    profile = profile_of(url)
    text = redact(" ".join(str(exc).split()))[:300] or type(exc).__name__
    code = error_code(exc)
    names = {type(link).__name__ for link in _chain(exc)}
    if isinstance(exc, ValueError) and f'Profile "{profile}" not found' in str(exc):
        known = defined_profiles()
        listed = f"; it defines {', '.join(known)}{_suggest(profile, known)}" if known else ""
        return (
            f"{url}: the storage profile {profile!r} is not defined in multi-storage-client's "
            f"config ({config_source()}{listed}); define it there or point MSC_CONFIG at the "
            "file that does"
        )
    if "malformed MSC config file" in str(exc) or "Failed to validate the config" in str(exc):
        return f"{url}: multi-storage-client's config cannot be read ({text}) {where(url)}"
    if code == "NoSuchBucket":
        bucket = _bucket(url, exc)
        named = f"the bucket {bucket!r}" if bucket else "the bucket of this path"
        return f"{url}: {named} does not exist (reading {what}) {where(url)}"
    if isinstance(exc, PermissionError) or code in DENIED_CODES:
        return (
            f"{url}: access denied to {what} (HTTP 403): the storage refused the credentials "
            f"of profile {profile!r}, or they may not use this path; check the profile's "
            f"credentials (its credentials_provider and the variables it reads) {where(url)}"
        )
    if names & {"NoCredentialsError", "PartialCredentialsError"}:
        return f"{url}: profile {profile!r} found no credentials ({text}) {where(url)}"
    if names & UNREACHABLE:
        return f"{url}: cannot reach the storage endpoint of profile {profile!r} ({text}) {where(url)}"
    if isinstance(exc, FileNotFoundError):
        return f"{url}: {what} does not exist {where(url)}"
    return f"{url}: cannot use {what} ({type(exc).__name__}: {text}) {where(url)}"


def _suggest(profile: str, known: list[str]) -> str:
    from energon_plugins._suggest import did_you_mean

    return did_you_mean(profile, known).replace(" (", "; ").rstrip(")")


@contextlib.contextmanager
def storage_errors(
    url: str,
    what: str,
    error: Callable[[str], Exception] = DatasetError,
    keep: tuple[type[BaseException], ...] = (DatasetError,),
) -> Iterator[None]:
    """Turn a storage-client error in the block into ``error(message)`` (a :class:`DatasetError`
    unless a caller names its own; see :func:`describe_storage_error`); the ``keep`` errors pass
    unchanged. The original is not chained (it may quote the config)."""
    try:
        yield
    except keep:
        raise
    except Exception as exc:  # noqa: BLE001 - every storage failure becomes one message
        message = redact(describe_storage_error(url, what, exc))
    else:
        return
    raise error(message) from None


# --------------------------------------------------------------------------- reads
def storage_client(url: str, shown: str | None = None) -> tuple[Any, str]:
    """``(storage client, path inside the profile)`` of ``url``: the profile must be defined in
    MSC's config (the message, starting with ``shown`` or ``url``, lists the ones it defines)."""
    import multistorageclient as msc

    with storage_errors(shown or url, "the storage profile"):
        return msc.resolve_storage_client(url)


_client = storage_client


def is_file(url: str, what: str = "this path", shown: str | None = None) -> bool:
    """Whether an object is stored at ``url`` (``shown``: the URL a message names, when not
    ``url`` itself, such as the dataset a ``.nv-meta`` file belongs to)."""
    client, inner = _client(url, shown)
    with storage_errors(shown or url, what):
        return bool(client.is_file(inner))


def read_text(url: str, what: str, shown: str | None = None) -> str | None:
    """The text of the object at ``url`` (``None`` when there is none; ``shown`` as for
    :func:`is_file`)."""
    client, inner = _client(url, shown)
    with storage_errors(shown or url, what):
        try:
            return bytes(client.read(inner)).decode("utf-8")
        except FileNotFoundError:
            return None


def read_tail(url: str, size: int, count: int) -> bytes | None:
    """The last ``count`` bytes of the object at ``url`` of ``size`` bytes (a ranged read)."""
    from multistorageclient.types import Range

    if size < count:
        return None
    client, inner = _client(url)
    with storage_errors(url, "a shard index"):
        try:
            return bytes(client.read(inner, byte_range=Range(offset=size - count, size=count)))
        except FileNotFoundError:
            return None


def folder_sizes(url: str) -> dict[str, int]:
    """``{name: size}`` of the objects directly in the folder ``url`` (one listing)."""
    client, inner = _client(url)
    prefix = f"{inner}/" if inner else ""
    sizes = {}
    with storage_errors(url, "the dataset folder"):
        for item in client.list(prefix):
            name = str(item.key).lstrip("/")
            if inner and name.startswith(prefix):
                name = name[len(prefix) :]
            elif inner and name.startswith(f"/{prefix}"):
                name = name[len(prefix) + 1 :]
            if name and "/" not in name:
                sizes[name] = int(item.content_length or 0)
    return sizes


def first_names(url: str, limit: int = 20) -> list[str]:
    """Up to ``limit`` names stored under ``url`` (a listing; raises for a missing bucket)."""
    client, inner = _client(url)
    found: list[str] = []
    with storage_errors(url, "the dataset folder"):
        for item in client.list(f"{inner}/" if inner else ""):
            found.append(str(item.key))
            if len(found) >= limit:
                break
    return found
