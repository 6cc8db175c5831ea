"""A load handed what a read-ahead read of its directory (``kafkalog.log.read_ahead``: the listing,
small files whole, a large file's end) ends exactly as a load that reads the directory itself:
the same log (end, start, recovery point, segments, every record or the same typed error), the same
recovery report, the same files left on disk. Checked on random damage of every kind
(``corruption.inject``: flips, truncations, zero-filled and garbage tails, damaged and missing
indexes, stray ``.swap`` / ``.cleaned`` / ``.deleted`` files), each load trusting the files (a clean
shutdown) and recovering them (an unclean one); with the compiled read-ahead (these segments are
read whole) and with its twin made to keep only a file's last 700 bytes (every segment's end read
from the read-ahead, its start from the disk)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from typing import Any, Dict, List, Tuple

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log import _kernel_py, fsutil
from kafkalog.log import kernel as log_kernel
from kafkalog.log.log import Log

from .corruption import CONFIG, KINDS, build_pristine, inject


def _files(d: str) -> List[Tuple[str, int, str]]:
    return sorted((name, os.path.getsize(os.path.join(d, name)),
                   hashlib.sha1(open(os.path.join(d, name), "rb").read()).hexdigest())
                  for name in os.listdir(d) if os.path.isfile(os.path.join(d, name)))


def _outcome(d: str, read_ahead: Any, **kwargs: Any) -> Dict[str, Any]:
    """Everything a load of ``d`` decides, with the directory's path taken out."""
    if read_ahead is None:
        opened = lambda: Log.open(d, CONFIG, **kwargs)  # noqa: E731
    else:
        found = read_ahead([d])[0]
        assert found is not None

        def opened() -> Log:
            with fsutil.preread(d, *found):
                return Log.open(d, CONFIG, **kwargs)
    try:
        log = opened()
    except KafkalogError as e:
        return {"error": type(e).__name__, "message": str(e).replace(d, "DIR"), "files": _files(d)}
    try:
        out: Dict[str, Any] = {
            "end": log.log_end_offset, "start": log.log_start_offset,
            "recovery_point": log.recovery_point,
            "segments": [(s.base_offset, s.size) for s in log.segments],
            "report": repr(log.recovery_report.to_json()).replace(d, "DIR")}
        records: List[Any] = []
        try:
            records.extend((r.offset, r.key, r.value) for r in log.records(log.log_start_offset))
        except KafkalogError as e:
            records.append((type(e).__name__, str(e).replace(d, "DIR")))
        out["records"] = records
    finally:
        try:
            log.close()
        except KafkalogError as e:
            out["close"] = type(e).__name__
    out["files"] = _files(d)
    return out


@pytest.fixture
def twin_keeping_700_bytes(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_kernel_py, "_RA_WHOLE", 700)
    monkeypatch.setattr(_kernel_py, "_RA_TAIL", 700)
    return _kernel_py.read_ahead


@pytest.mark.parametrize("which", ["kernel", "twin-700"])
def test_a_load_handed_a_read_ahead_ends_as_one_that_reads_itself(ram_path, which: str,
                                                                  twin_keeping_700_bytes: Any) -> None:
    read_ahead = log_kernel.read_ahead if which == "kernel" else twin_keeping_700_bytes
    pristine = build_pristine(str(ram_path / "pristine"), seed=11)
    rnd = random.Random(5)
    kinds = list(KINDS) * 8 + [None] * 40           # every kind, then random ones
    compared = 0
    for i, kind in enumerate(kinds):
        work = str(ram_path / "work")
        inject(pristine, work, rnd, kind)
        for mode in ({"recovery_point": pristine.leo, "had_clean_shutdown": True},
                     {"recovery_point": 0, "had_clean_shutdown": False}):
            mine, theirs = str(ram_path / f"a{i}"), str(ram_path / f"b{i}")
            for d in (mine, theirs):
                shutil.copytree(work, d)
            itself = _outcome(mine, None, **mode)
            handed = _outcome(theirs, read_ahead, **mode)
            assert handed == itself, f"trial {i} ({kind or 'random'}, {mode})"
            compared += 1
            shutil.rmtree(mine)
            shutil.rmtree(theirs)
    assert compared == 2 * len(kinds)


@pytest.mark.parametrize("which", ["kernel", "twin-700"])
def test_a_swap_completed_by_the_load_is_read_from_the_disk(ram_path, which: str,
                                                           twin_keeping_700_bytes: Any) -> None:
    """An interrupted cleaning's ``.log.swap`` (fewer batches than the segment it replaces) is
    renamed over the segment by the load: what the read-ahead read of the old segment is not used."""
    read_ahead = log_kernel.read_ahead if which == "kernel" else twin_keeping_700_bytes
    pristine = build_pristine(str(ram_path / "pristine"), seed=11)
    outcomes = []
    for seg in pristine.segments[:-1]:
        batches = pristine.batches[seg]
        if len(batches) < 2:
            continue
        keep = batches[len(batches) // 2]             # the batches before it, cleaned of the rest
        results = []
        for name, handed in (("itself", None), ("handed", read_ahead)):
            d = str(ram_path / name)
            shutil.copytree(pristine.dir, d)
            target = os.path.join(d, os.path.basename(seg))
            with open(target, "rb") as f:
                cleaned = f.read(keep.pos)
            with open(target + ".swap", "wb") as f:
                f.write(cleaned)
            results.append(_outcome(d, handed, recovery_point=pristine.leo, had_clean_shutdown=True))
            shutil.rmtree(d)
        assert results[1] == results[0], os.path.basename(seg)
        sizes = {n: size for n, size, _h in results[0]["files"]}
        assert sizes[os.path.basename(seg)] == keep.pos          # the swap replaced the segment
        outcomes.append(results[0])
    assert len(outcomes) >= 3
