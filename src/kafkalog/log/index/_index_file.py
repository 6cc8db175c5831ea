"""File handling shared by a segment's index files, ``.index``, ``.timeindex`` and ``.txnindex``
(what Kafka's ``AbstractIndex`` and ``TransactionIndex`` both implement: ``file``,
``deleteIfExists``, ``renameTo``, ``updateParentDir``; spec §2.1, §2.4).
"""

from __future__ import annotations

import os

from kafkalog.log.fsutil import io_error


class IndexFile:
    """Mixin of :class:`~kafkalog.log.index._mmap_index.AbstractIndex` and
    :class:`~kafkalog.log.index.txn_index.TransactionIndex`: the file's path, and renaming or deleting
    the file.

    The class using it keeps the path in ``self._path`` and provides ``close_handler()`` (close the
    file without trimming or writing anything); ``_file_kind`` names the file in the message of an
    I/O error (``"delete index failed: ..."``).
    """

    _file_kind = "index"
    _path: str

    def close_handler(self) -> None:
        """Close the file without trimming or writing anything (each index implements it)."""
        raise NotImplementedError

    @property
    def path(self) -> str:
        """Current file path."""
        return self._path

    @property
    def file(self) -> str:
        return self._path

    def delete_if_exists(self) -> bool:
        """Close the file (``close_handler()``) and delete it; returns whether it existed."""
        self.close_handler()
        try:
            os.unlink(self._path)
            return True
        except FileNotFoundError:
            return False
        except OSError as err:
            raise io_error(err, self._path, f"delete {self._file_kind}") from err

    delete = delete_if_exists

    def rename_to(self, new_path: os.PathLike[str] | str) -> None:
        """Rename the file if it exists on disk (a missing file, such as a ``.txnindex`` that was
        never appended to, is normal) and remember the new path."""
        new_path = os.fspath(new_path)
        try:
            os.replace(self._path, new_path)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise io_error(err, self._path, f"rename to {new_path}") from err
        self._path = new_path

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename ``<name><old_suffix>`` to ``<name><new_suffix>`` (e.g. ``.index`` ->
        ``.index.deleted``; ``old_suffix`` ``""`` appends)."""
        p = self._path
        if old_suffix and p.endswith(old_suffix):
            p = p[: -len(old_suffix)]
        self.rename_to(p + new_suffix)

    def update_parent_dir(self, parent: os.PathLike[str] | str) -> None:
        """Point at the same file name inside another directory (after a directory rename)."""
        self._path = os.path.join(os.fspath(parent), os.path.basename(self._path))
