"""Where a data directory lives: a local path, or a URI read through ``pyarrow.fs``.

Readers of a data directory (the Spark source, ``kafkalog.open(..., read_only=True)``) take local
paths and ``file://``, ``s3://``, ``s3a://``, ``gs://`` (``gcs://``), ``abfs://`` / ``abfss://``
and ``hdfs://`` URIs. :func:`resolve` turns one into a :class:`LogFiles`: the few file operations
a reader of Kafka's files needs (list a directory, the size of a file, a whole small file, a byte
range of a big one), each one request against an object store, counted in :attr:`LogFiles.stats`.

Credentials and endpoints come from ``options`` (the keys of :data:`FS_OPTIONS`, the Hadoop-style
names a Spark user already knows) and otherwise from the usual environment of each file system
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_ENDPOINT_URL`` / ``~/.aws``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_ACCOUNT_NAME`` / ``AZURE_STORAGE_ACCOUNT_KEY``,
``HADOOP_HOME`` / ``CLASSPATH`` for HDFS).

Writing needs atomic renames, appends and fsync, which object stores lack:
:func:`kafkalog.log.fsutil.refuse_remote_write` says so and what to use instead.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import unquote, urlsplit

from kafkalog.errors import InvalidConfigError, KafkalogIOError, LogDirError
from kafkalog.log.fsutil import is_remote, local_path, scheme_of
from kafkalog.log.read.view_files import LocalFiles, SegmentBytes, ViewFiles

#: URI schemes a data directory may be read from.
SCHEMES = ("file", "s3", "s3a", "gs", "gcs", "abfs", "abfss", "hdfs")

#: Options that configure the file system of a URI (lower-case keys), Hadoop's names where it has
#: them: ``fs.s3a.endpoint`` (``http://127.0.0.1:9000`` or ``host:port``), ``fs.s3a.access.key``,
#: ``fs.s3a.secret.key``, ``fs.s3a.session.token``, ``fs.s3a.endpoint.region``,
#: ``fs.s3a.path.style.access`` (``true``: path-style URLs, for MinIO/moto/Ceph),
#: ``fs.s3a.connection.ssl.enabled``, ``fs.s3a.connection.request.timeout`` (how long a request may
#: go without receiving data: Hadoop 3.4's default ``60s``; a number of seconds or a duration with
#: ``ms``, ``s``, ``m``, ``h``; ``0``: none); ``fs.gs.endpoint``, ``fs.gs.project.id``,
#: ``fs.gs.access.token``, ``fs.gs.anonymous``; ``fs.azure.account.name``,
#: ``fs.azure.account.key``, ``fs.azure.endpoint``; ``fs.hdfs.user``.
FS_OPTIONS = (
    "fs.s3a.endpoint", "fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token",
    "fs.s3a.endpoint.region", "fs.s3a.path.style.access", "fs.s3a.connection.ssl.enabled",
    "fs.s3a.connection.request.timeout",
    "fs.gs.endpoint", "fs.gs.project.id", "fs.gs.access.token", "fs.gs.anonymous",
    "fs.azure.account.name", "fs.azure.account.key", "fs.azure.endpoint", "fs.hdfs.user",
)


@dataclass
class FileStats:
    """Requests and bytes a :class:`LogFiles` asked its file system for."""
    requests: int = 0
    bytes_read: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, kind: str, nbytes: int = 0) -> None:
        with self._lock:
            self.requests += 1
            self.bytes_read += nbytes
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1


@dataclass(frozen=True)
class Entry:
    """One directory entry: its name, whether it is a directory, its size in bytes."""
    name: str
    is_dir: bool
    size: int


class LogFiles:
    """The file operations a reader of a data directory needs, on one ``pyarrow.fs`` file system.

    Paths are written as the user wrote the data directory (``s3://bucket/logs/orders-0/...``, or a
    local path), so errors name what the user knows; :meth:`fs_path` maps them to the file
    system's own (``bucket/logs/...``). Every method is one request (listings are cached for the
    sizes they report); errors become :class:`KafkalogIOError` / :class:`LogDirError` naming the
    path. The read-only view of the log layer reads object stores through this class.
    """

    def __init__(self, fs: Any, fs_root: str, uri_root: str) -> None:
        self.fs = fs
        self.fs_root = fs_root.rstrip("/")
        self.uri_root = uri_root.rstrip("/")
        self.stats = FileStats()
        self.options: dict[str, str] = {}
        self._sizes: dict[str, int] = {}

    def fs_path(self, path: str) -> str:
        """``path`` (user form) as a path of :attr:`fs`."""
        if path == self.uri_root or path.startswith(self.uri_root + "/"):
            return self.fs_root + path[len(self.uri_root):]
        return path

    def join(self, directory: str, name: str) -> str:
        return directory.rstrip("/") + "/" + name

    def entries(self, path: str) -> list[Entry]:
        """Entries of a directory (a prefix in an object store); LogDirError when it is missing."""
        import pyarrow.fs as pafs
        self.stats.add("list")
        fs_path = self.fs_path(path)
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(fs_path, allow_not_found=True))
            if not infos and self.fs.get_file_info(fs_path).type != pafs.FileType.Directory:
                raise LogDirError("directory does not exist", file=path)
        except OSError as err:
            raise KafkalogIOError(f"cannot list: {err}", file=path) from None
        found = [Entry(i.base_name, i.type == pafs.FileType.Directory,
                       i.size if i.size is not None else 0) for i in infos]
        for e in found:
            if not e.is_dir:
                self._sizes[self.join(path, e.name)] = e.size
        return found

    def list_dir(self, path: str) -> list[str]:
        return [e.name for e in self.entries(path)]

    def is_dir(self, path: str) -> bool:
        import pyarrow.fs as pafs
        self.stats.add("info")
        try:
            return bool(self.fs.get_file_info(self.fs_path(path)).type == pafs.FileType.Directory)
        except OSError as err:
            raise KafkalogIOError(f"cannot stat: {err}", file=path) from None

    def size(self, path: str) -> int | None:
        """Size in bytes (from the last listing of its directory when there was one)."""
        import pyarrow.fs as pafs
        if path in self._sizes:
            return self._sizes[path]
        self.stats.add("info")
        try:
            info = self.fs.get_file_info(self.fs_path(path))
        except OSError as err:
            raise KafkalogIOError(f"cannot stat: {err}", file=path) from None
        return None if info.type == pafs.FileType.NotFound else int(info.size or 0)

    def read_small(self, path: str) -> bytes | None:
        """The whole file (indexes, checkpoints, topic configs), or None when it does not exist."""
        try:
            with self.fs.open_input_stream(self.fs_path(path)) as f:
                data = f.read()
        except FileNotFoundError:
            self.stats.add("get")
            return None
        except OSError as err:
            text = str(err).lower()
            if "not found" in text or "nosuchkey" in text or "does not exist" in text:
                self.stats.add("get")
                return None
            raise KafkalogIOError(f"cannot read: {err}", file=path) from None
        self.stats.add("get", len(data))
        return bytes(data)

    read_whole = read_small

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end of the file): one ranged GET (and
        the HEAD an object store answers the size with)."""
        with self.ranges(path) as read:
            return read(offset, length)

    def open_segment(self, path: str) -> SegmentBytes | None:
        """A ``.log`` file as its size and a reader of byte ranges (nothing is fetched yet);
        None when it no longer exists."""
        size = self.size(path)
        if size is None:
            return None
        return SegmentBytes(path, b"", size=size, ranges=self.ranges(path))

    def ranges(self, path: str) -> RangeReader:
        """A reader of byte ranges of ``path`` over one open handle (object stores: one HEAD,
        then one ranged GET per call); use as a context manager."""
        return RangeReader(self, path)


class RangeReader:
    """``reader(offset, length)``: byte ranges of one file through one open handle (calls may
    come from several threads at once: a prefetching scan)."""

    def __init__(self, files: LogFiles, path: str) -> None:
        self.files = files
        self.path = path
        self._handle: Any = None
        self._lock = threading.Lock()

    def _opened(self) -> Any:
        with self._lock:
            if self._handle is None:
                self._handle = self.files.fs.open_input_file(self.files.fs_path(self.path))
            return self._handle

    def __call__(self, position: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            data = self._opened().read_at(length, position)
        except OSError as err:
            raise KafkalogIOError(f"cannot read {length} bytes: {err}", file=self.path,
                                  position=position) from None
        self.files.stats.add("range", len(data))
        return bytes(data)

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _opt(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _opt(options, name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise InvalidConfigError(f"option '{name}' must be 'true' or 'false', got {value!r}")
    return value.lower() == "true"


#: ``fs.s3a.connection.request.timeout`` when not given (Hadoop 3.4's default; the AWS SDK's own,
#: 3 s without a byte, fails large ranged GETs from a busy S3-compatible server)
DEFAULT_S3_REQUEST_TIMEOUT = "60s"
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(options: Mapping[str, str], name: str, default: str) -> float:
    """A Hadoop duration option in seconds (a plain number is seconds)."""
    text = (_opt(options, name) or default).lower()
    number, unit = text, "s"
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            number, unit = text[:-len(suffix)].strip(), suffix
            break
    try:
        value = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        value = -1.0
    if value < 0:
        raise InvalidConfigError(f"option '{name}' must be a duration (60s, 500ms, 2m, or a "
                                 f"number of seconds), got {text!r}")
    return value


def _s3(parts: Any, options: Mapping[str, str]) -> tuple[Any, str]:
    import pyarrow.fs as pafs
    timeout = _seconds(options, "fs.s3a.connection.request.timeout", DEFAULT_S3_REQUEST_TIMEOUT)
    kwargs: dict[str, Any] = {"request_timeout": timeout or 86400.0}   # 0: no timeout
    endpoint = _opt(options, "fs.s3a.endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") \
        or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        if "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
            kwargs["scheme"] = scheme
        kwargs["endpoint_override"] = endpoint.rstrip("/")
    if not _flag(options, "fs.s3a.connection.ssl.enabled", True):
        kwargs["scheme"] = "http"
    for key, arg in (("fs.s3a.access.key", "access_key"), ("fs.s3a.secret.key", "secret_key"),
                     ("fs.s3a.session.token", "session_token"),
                     ("fs.s3a.endpoint.region", "region")):
        value = _opt(options, key)
        if value is not None:
            kwargs[arg] = value
    if "region" not in kwargs and endpoint:
        kwargs["region"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") \
            or "us-east-1"  # a custom endpoint: no region lookup against AWS
    if not _flag(options, "fs.s3a.path.style.access", True) and endpoint:
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs), f"{parts.netloc}{unquote(parts.path)}"


def _gcs(parts: Any, options: Mapping[str, str]) -> tuple[Any, str]:
    import pyarrow.fs as pafs
    kwargs: dict[str, Any] = {}
    endpoint = _opt(options, "fs.gs.endpoint")
    if endpoint:
        if "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
            kwargs["scheme"] = scheme
        kwargs["endpoint_override"] = endpoint.rstrip("/")
    if _opt(options, "fs.gs.project.id"):
        kwargs["project_id"] = _opt(options, "fs.gs.project.id")
    if _opt(options, "fs.gs.access.token"):
        import datetime
        kwargs["access_token"] = _opt(options, "fs.gs.access.token")
        kwargs["credential_token_expiration"] = (datetime.datetime.now(datetime.UTC)
                                                 + datetime.timedelta(hours=1))
    if _flag(options, "fs.gs.anonymous", False):
        kwargs["anonymous"] = True
    return pafs.GcsFileSystem(**kwargs), f"{parts.netloc}{unquote(parts.path)}"


def _azure(parts: Any, options: Mapping[str, str]) -> tuple[Any, str]:
    import pyarrow.fs as pafs
    container, _, host = parts.netloc.partition("@")
    account = _opt(options, "fs.azure.account.name") or (host.split(".", 1)[0] if host else None) \
        or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
    if not account:
        raise InvalidConfigError(f"{parts.geturl()}: no Azure storage account (use "
                                 "abfss://container@account.dfs.core.windows.net/path or the "
                                 "option fs.azure.account.name)")
    kwargs: dict[str, Any] = {"account_name": account}
    key = _opt(options, "fs.azure.account.key") or os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if key:
        kwargs["account_key"] = key
    endpoint = _opt(options, "fs.azure.endpoint")
    if endpoint:
        if "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
            kwargs["dfs_storage_scheme"] = kwargs["blob_storage_scheme"] = scheme
        kwargs["dfs_storage_authority"] = kwargs["blob_storage_authority"] = endpoint.rstrip("/")
    return pafs.AzureFileSystem(**kwargs), f"{container}{unquote(parts.path)}"


def _hdfs(parts: Any, options: Mapping[str, str]) -> tuple[Any, str]:
    import pyarrow.fs as pafs
    host = parts.hostname or "default"
    kwargs: dict[str, Any] = {"port": parts.port or 0}
    if _opt(options, "fs.hdfs.user"):
        kwargs["user"] = _opt(options, "fs.hdfs.user")
    return pafs.HadoopFileSystem(host, **kwargs), unquote(parts.path)


def resolve(path: str | os.PathLike[str], options: Mapping[str, str] | None = None) -> LogFiles:
    """The :class:`LogFiles` of a local path or URI; ``options`` (lower-case keys) may hold
    :data:`FS_OPTIONS`. Unknown schemes are refused."""
    import pyarrow.fs as pafs
    text = os.fspath(path)
    options = {str(k).lower(): str(v) for k, v in (options or {}).items()}
    scheme = scheme_of(text)
    if scheme is None or scheme == "file":
        root = os.path.abspath(local_path(text))
        return LogFiles(pafs.LocalFileSystem(), root, root)
    parts = urlsplit(text)
    makers = {"s3": _s3, "s3a": _s3, "gs": _gcs, "gcs": _gcs, "abfs": _azure, "abfss": _azure,
              "hdfs": _hdfs}
    if scheme not in makers:
        raise InvalidConfigError(f"{text}: unsupported URI scheme {scheme!r} (use a local path "
                                 f"or one of {', '.join(s + '://' for s in SCHEMES)})")
    try:
        fs, root = makers[scheme](parts, options)
    except (OSError, ValueError) as err:
        raise InvalidConfigError(f"{text}: cannot set up the {scheme}:// file system: {err}") \
            from None
    return LogFiles(fs, root.rstrip("/"), text.rstrip("/"))


_REMOTE: dict[tuple[str, str], LogFiles] = {}
_REMOTE_LOCK = threading.Lock()
_LOCAL = LocalFiles()


def files_for(path: str | os.PathLike[str], options: Mapping[str, str] | None = None) -> ViewFiles:
    """The file access of a data directory for the read-only view: local files (memory maps)
    for a local path or ``file://``, else the :class:`LogFiles` of the URI's file system, one
    per scheme and authority (bucket, container, name node) in a process. ``options`` with
    :data:`FS_OPTIONS` (re)configure it; without them the one configured before (or the
    environment) is used, which is how executors and later calls of a read find the
    configuration its options gave."""
    text = os.fspath(path)
    if not is_remote(text):
        return _LOCAL
    parts = urlsplit(text)
    key = (parts.scheme.lower(), parts.netloc)
    fs_options = {k: v for k, v in {str(k).lower(): str(v) for k, v in (options or {}).items()}
                  .items() if k in FS_OPTIONS}
    with _REMOTE_LOCK:
        files = _REMOTE.get(key)
        if files is None or (fs_options and fs_options != files.options):
            root = f"{parts.scheme}://{parts.netloc}"
            files = resolve(root + "/", fs_options)
            files.uri_root = root
            files.options = fs_options
            _REMOTE[key] = files
        return files
