"""A real S3-compatible server on 127.0.0.1 (moto's server mode), counting what clients ask of it.

Tests reach it through ``pyarrow.fs`` exactly as a cluster reaches S3: an endpoint, credentials,
path-style URLs. The server counts requests and the bytes of object bodies it sends (from the
responses themselves), so tests can check how much a read fetched without trusting the reader's
own accounting.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import pytest

pytest.importorskip("moto.server")

from moto.server import (
    DomainDispatcherApplication,
    ThreadedMotoServer,
    create_backend_app,
)


@dataclass
class ServerCounts:
    """Requests seen by the server, and body bytes of the successful GETs of objects."""
    requests: list = field(default_factory=list)   # (method, path, range header)
    get_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.get_bytes = 0

    def gets(self, suffix: str = "") -> list:
        return [r for r in self.requests if r[0] == "GET" and r[1].endswith(suffix)]


class CountingMotoServer(ThreadedMotoServer):
    """moto's threaded S3 server with a WSGI layer that counts requests and GET body bytes."""

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.counts = ServerCounts()

    def _server_entry(self) -> None:
        from werkzeug.serving import make_server
        app = DomainDispatcherApplication(create_backend_app)
        counts = self.counts

        def counting(environ, start_response):
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            with counts.lock:
                counts.requests.append((method, path, environ.get("HTTP_RANGE")))
            body = app(environ, start_response)
            if method != "GET" or path.count("/") < 2:  # object GETs only, not listings
                return body
            chunks = list(body)
            with counts.lock:
                counts.get_bytes += sum(len(c) for c in chunks)
            return chunks

        self._server = make_server(self._ip_address, self._port, counting, True)
        self._server_ready_event.set()
        self._server.serve_forever()


@dataclass
class S3Server:
    endpoint: str          # http://127.0.0.1:PORT
    options: dict          # the kafkalog/Spark options that reach it
    counts: ServerCounts

    def filesystem(self):
        import pyarrow.fs as pafs
        return pafs.S3FileSystem(endpoint_override=self.endpoint.split("://", 1)[1],
                                 scheme="http", access_key="testing", secret_key="testing",
                                 region="us-east-1", allow_bucket_creation=True)

    def upload(self, local_dir, bucket: str, prefix: str) -> str:
        """Copy a local data directory to ``s3://bucket/prefix``; returns that URI."""
        import pyarrow.fs as pafs
        fs = self.filesystem()
        try:
            fs.create_dir(bucket)
        except OSError:
            pass
        pafs.copy_files(os.fspath(local_dir), f"{bucket}/{prefix}",
                        source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
        return f"s3://{bucket}/{prefix}"


def start_server() -> tuple[CountingMotoServer, S3Server]:
    """Start a counting moto server on 127.0.0.1 (stop it with ``server.stop()``)."""
    import logging
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    server = CountingMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    return server, S3Server(endpoint, {"fs.s3a.endpoint": endpoint, "fs.s3a.access.key": "testing",
                                       "fs.s3a.secret.key": "testing"}, server.counts)


@pytest.fixture(scope="session")
def s3_server():
    server, s3 = start_server()
    yield s3
    server.stop()
