"""A real S3-compatible server for tests: moto's server mode as a separate process on 127.0.0.1.

Nothing is patched in-process: the server speaks the S3 HTTP API, and Energon's storage client
(multi-storage-client) reads from it over HTTP exactly as it reads from a real bucket. The
:class:`LocalS3` handle starts the server, writes a storage-client config file whose credentials
come from the environment (``${AWS_ACCESS_KEY_ID}``, never a literal key), creates buckets,
uploads folders and stops the server::

    with LocalS3.start(tmp_path) as s3:
        s3.create_bucket("data")
        s3.upload_folder(local_dataset, "data", "train")
        with s3.environment():               # MSC_CONFIG and the credentials
            module = EnergonMultiModalDataModule(path=s3.url("data", "train"), ...)

:class:`DelayProxy` sits between the client and the server to delay or cut responses, to test
what a slow or dropped connection does. ``LocalS3.start(root, auth=True)`` starts a server that
checks every request's credentials against its IAM users, as a real store refuses unknown keys
(:meth:`LocalS3.create_access_key` makes one it accepts). ``moto[server]`` and ``boto3`` are dev dependencies
(``pip install energon-plugins[dev]``); importing this module needs neither.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCESS_KEY = "energon-test-access-key"
SECRET_KEY = "energon-test-secret-key-never-printed"
REGION = "us-east-1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the S3 server exited with code {process.returncode} on start")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def msc_config_text(
    profiles: dict[str, tuple[str, str]],
    *,
    retry: dict[str, Any] | None = None,
    read_timeout: float | None = None,
) -> str:
    """The storage client's YAML config: one S3 profile per ``name: (endpoint_url, bucket/prefix)``.

    The credentials are ``${AWS_ACCESS_KEY_ID}`` / ``${AWS_SECRET_ACCESS_KEY}``: the storage
    client expands them from the environment, so no key is ever written to a file.
    """
    import yaml

    body: dict[str, Any] = {}
    for name, (endpoint, base_path) in profiles.items():
        options: dict[str, Any] = {
            "base_path": base_path,
            "endpoint_url": endpoint,
            "region_name": REGION,
        }
        if read_timeout is not None:
            options["read_timeout"] = read_timeout
            options["connect_timeout"] = read_timeout
        profile: dict[str, Any] = {
            "storage_provider": {"type": "s3", "options": options},
            "credentials_provider": {
                "type": "S3Credentials",
                "options": {
                    "access_key": "${AWS_ACCESS_KEY_ID}",
                    "secret_key": "${AWS_SECRET_ACCESS_KEY}",
                },
            },
        }
        if retry is not None:
            profile["retry"] = dict(retry)
        body[name] = profile
    return yaml.safe_dump({"profiles": body}, sort_keys=True)


@dataclass
class LocalS3:
    """A running moto S3 server on 127.0.0.1 and the storage-client profile that reaches it."""

    root: Path
    port: int
    process: subprocess.Popen[bytes]
    profile: str = "s3test"
    config_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.config_path = self.root / "msc_config.yaml"
        self.write_config({self.profile: (self.endpoint, "")})

    @classmethod
    def start(
        cls, root: Path, *, profile: str = "s3test", timeout: float = 30.0, auth: bool = False
    ) -> LocalS3:
        """Start ``moto.server`` on a free port; ``root`` holds its log and the MSC config.

        ``auth``: the server checks the credentials of every request against its IAM users
        (moto's ``INITIAL_NO_AUTH_ACTION_COUNT=0``); it has none, so the test's keys are refused
        (HTTP 403) until :meth:`create_access_key` makes one. Without it any key is accepted.
        """
        root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log = open(root / "moto_server.log", "wb")
        env = {**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"}
        if auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        log.close()
        try:
            _wait_listening(port, process, timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return cls(root=root, port=port, process=process, profile=profile)

    @property
    def endpoint(self) -> str:
        """The server's URL, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def write_config(self, profiles: dict[str, tuple[str, str]], **options: Any) -> Path:
        """Rewrite the MSC config with these profiles (``name: (endpoint, bucket/prefix)``)."""
        self.config_path.write_text(msc_config_text(profiles, **options))
        return self.config_path

    def url(self, bucket: str, key: str = "") -> str:
        """``msc://PROFILE/bucket/key`` for the default profile (its base path is empty)."""
        return f"msc://{self.profile}/{bucket}/{key}".rstrip("/")

    def env(self) -> dict[str, str]:
        """The variables a process needs to reach the server: config path and credentials."""
        return {
            "MSC_CONFIG": str(self.config_path),
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }

    def environment(self, **values: str) -> contextlib.AbstractContextManager[None]:
        """Set :meth:`env` (with ``values`` over it) in ``os.environ`` for the block and restore it
        after (see :func:`storage_environment`)."""
        return storage_environment({**self.env(), **values})

    def _set_auth(self, count: str) -> str:
        """Set the server's ``INITIAL_NO_AUTH_ACTION_COUNT`` (``"0"``: check every request,
        ``"inf"``: none); returns the previous value."""
        import urllib.request

        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(json.loads(answer.read())["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"])

    @contextlib.contextmanager
    def unchecked(self) -> Iterator[None]:
        """Accept any credentials in the block (to set up buckets and users on a server started
        with ``auth``); the server checks them again after it as it did before."""
        previous = self._set_auth("inf")
        try:
            yield
        finally:
            self._set_auth(previous)

    def create_access_key(self, user: str = "reader") -> tuple[str, str]:
        """``(access key id, secret key)`` of a new IAM user ``user`` allowed every action: the
        credentials a server started with ``auth`` accepts."""
        import boto3

        allow = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        with self.unchecked():
            iam = boto3.client(
                "iam",
                endpoint_url=self.endpoint,
                aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY,
                region_name=REGION,
            )
            iam.create_user(UserName=user)
            iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(allow))
            key = iam.create_access_key(UserName=user)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    def client(self) -> Any:
        """A boto3 S3 client on the server (for setting up buckets and objects in tests)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (empty)."""
        self.client().create_bucket(Bucket=bucket)

    def new_bucket(self, stem: str = "data") -> str:
        """Create a bucket with a name no other test uses (``stem-<random>``); returns the name."""
        import uuid

        name = f"{stem}-{uuid.uuid4().hex[:12]}"
        self.create_bucket(name)
        return name

    def upload_folder(self, folder: Path, bucket: str, prefix: str = "") -> int:
        """Upload every file under ``folder`` to ``bucket/prefix/...``; returns the file count."""
        client = self.client()
        count = 0
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(folder).as_posix()]))
            client.upload_file(str(path), bucket, key)
            count += 1
        return count

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key in ``bucket`` under ``prefix``, sorted."""
        paginator = self.client().get_paginator("list_objects_v2")
        found: list[str] = []
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            found.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(found)

    def get(self, bucket: str, key: str) -> bytes:
        """The bytes of one object."""
        return bytes(self.client().get_object(Bucket=bucket, Key=key)["Body"].read())

    def stop(self) -> None:
        """Stop the server process (idempotent)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LocalS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def storage_environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block, restored after; the storage client's cached
    profiles are dropped on the way in and out, so a changed ``MSC_CONFIG`` is read again."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    _forget_storage_clients()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _forget_storage_clients()


def _forget_storage_clients() -> None:
    """Drop the storage client's cached config, so a changed ``MSC_CONFIG`` is read again."""
    try:
        import multistorageclient.shortcuts as shortcuts
    except ImportError:  # pragma: no cover - the storage client comes with Energon
        return
    for name in ("_STORAGE_CLIENT_CACHE", "_PROCESS_ID", "_PATH_MAPPING_CACHE"):
        value = getattr(shortcuts, name, None)
        if isinstance(value, dict):
            value.clear()
    for cached in ("_read_path_mapping",):
        func = getattr(shortcuts, cached, None)
        if func is not None and hasattr(func, "cache_clear"):
            func.cache_clear()


class DelayProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target_port`` that can stall or cut connections.

    ``delay`` seconds are waited before each chunk of a response is passed on; ``drop`` closes
    every connection as soon as it opens. Both can change while the proxy runs, so a test can
    make a healthy connection hang mid-run.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay = 0.0
        self.drop = False
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = int(self._server.getsockname()[1])
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="delay-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The proxy's URL, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.drop:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), 5)
            except OSError:
                client.close()
                continue
            for source, sink, slow in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pipe, args=(source, sink, slow), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, slow: bool) -> None:
        try:
            while not self._closed.is_set():
                chunk = source.recv(65536)
                if not chunk:
                    break
                if slow and self.delay:
                    time.sleep(self.delay)
                if self.drop:
                    break
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        """Stop accepting and close the listening socket."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.close()

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
