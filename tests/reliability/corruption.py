"""Corruption injection: bit flips, truncations, zero-filled and garbage tails, damaged, deleted
and foreign index files, stray ``.swap`` / ``.cleaned`` / ``.deleted`` files.

A *pristine* partition directory (several segments; v2 batches of every codec, some v1 messages) is
written once and closed cleanly. Each trial copies it, injects one corruption and checks:

0. **``kafkalog verify --deep`` detects it** (read-only, exit status 1) -- for every corruption
   that changes a record;
1. **recovery detects it**: a full-scan open (``recovery_point=0``, unclean) returns a
   :class:`~kafkalog.log.loader.RecoveryReport` that is not clean -- for every corruption that
   changes a record (see :func:`classify` for the exact byte map);
   (every other trial's load is handed what a read-ahead read of the directory first, as a data
   directory's load is: ``kafkalog.log.read_ahead``; the others read it themselves);
2. **recovery keeps exactly the valid prefix and says what it removed**: after that open the log
   holds exactly the original records below the first damaged batch (all of them when the damage
   is harmless), and the report names the damaged file and the byte position of that batch;
3. **no corrupt record reaches a reader**: on a second copy opened *trusting* the files (clean
   shutdown: nothing is scanned), reading every record either returns the original record at that
   offset or raises a typed :class:`~kafkalog.errors.KafkalogError`; never a wrong record, never
   an untyped exception, never a silently skipped offset.
"""
from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from click.testing import CliRunner

from kafkalog.cli.main import main as _cli_main
from kafkalog.errors import KafkalogError
from kafkalog.log import fsutil, kernel
from kafkalog.log.log import Log
from kafkalog.record.builder import build_batch

_RUNNER = CliRunner()
CONFIG = {"segment.bytes": 2500, "index.interval.bytes": 120, "segment.index.bytes": 4096}
BASE_TS = 1_700_000_000_000


@dataclass
class Batch:
    file: str
    pos: int
    size: int
    base: int
    last: int
    magic: int


@dataclass
class Pristine:
    dir: str
    records: Dict[int, Tuple[Optional[bytes], bytes]]
    segments: List[str]                         # .log paths, oldest first
    batches: Dict[str, List[Batch]]
    leo: int


def build_pristine(path: str, seed: int = 7, appends: int = 60) -> Pristine:
    rnd = random.Random(seed)
    log = Log.open(path, CONFIG, had_clean_shutdown=True)
    for n in range(appends):
        magic = 1 if rnd.random() < 0.1 else 2
        codec = rnd.choice([0, 0, 1, 2, 3] + ([4] if magic == 2 else []))
        recs = [(f"k{rnd.randrange(9)}".encode(), f"v{n}.{j}.".encode() + bytes(rnd.randrange(256)
                 for _ in range(rnd.randrange(60))), BASE_TS + n * 10 + j, None)
                for j in range(rnd.randint(1, 6))]
        log.append(build_batch(recs, magic=magic, compression=codec))
    records = {r.offset: (r.key, r.value) for r in log.records()}
    segs, batches = [], {}
    nxt = 0
    for s in log.segments:
        segs.append(s.log_path)
        batches[s.log_path] = []
        for h in s.log.iter_headers(0):
            # a legacy compressed wrapper carries its last offset; its first is the previous next
            batches[s.log_path].append(Batch(s.log_path, h.position, h.size, nxt, h.last_offset, h.magic))
            nxt = h.last_offset + 1
    leo = log.log_end_offset
    log.close()
    assert sorted(records) == list(range(leo))
    return Pristine(path, records, segs, batches, leo)


# --- classification: which bytes are covered by which check -------------------------------------

def field_of(b: Batch, rel: int) -> str:
    """Name of the header field (or region) at byte ``rel`` of batch ``b``."""
    if rel < 8:
        return "baseOffset"
    if rel < 12:
        return "length"
    if b.magic >= 2:
        if rel < 16:
            return "partitionLeaderEpoch"
        if rel == 16:
            return "magic"
        if rel < 21:
            return "crc"
        return "crc-covered"          # attributes .. records: CRC-32C
    if rel < 16:
        return "crc"
    return "crc-covered"              # v0/v1: magic .. value: CRC-32


@dataclass
class Trial:
    kind: str
    file: str
    detail: str
    keep_below: int                   # offsets below this must survive recovery, none at/above
    must_detect: bool
    damaged_batch: Optional[Batch] = None
    field: str = ""


def _batch_at(p: Pristine, path: str, pos: int) -> Optional[Batch]:
    for b in p.batches[path]:
        if b.pos <= pos < b.pos + b.size:
            return b
    return None


def _first_offset_at_or_after(p: Pristine, path: str, pos: int) -> int:
    for b in p.batches[path]:
        if b.pos >= pos:
            return b.base
    i = p.segments.index(path)
    if i + 1 < len(p.segments):
        return p.batches[p.segments[i + 1]][0].base
    return p.leo


# --- injection -------------------------------------------------------------------------------------

KINDS = ["flip", "flip", "flip", "truncate", "zero_tail", "garbage_tail", "index_flip",
         "index_truncate", "index_delete", "index_foreign", "stray"]


def inject(p: Pristine, work: str, rnd: random.Random, kind: Optional[str] = None) -> Trial:
    """Copy the pristine directory to ``work`` and damage it; return the expectation."""
    if os.path.exists(work):
        shutil.rmtree(work)
    shutil.copytree(p.dir, work)
    kind = kind or rnd.choice(KINDS)
    si = rnd.randrange(len(p.segments))
    src = p.segments[si]
    path = os.path.join(work, os.path.basename(src))
    size = os.path.getsize(path)
    last_seg = si == len(p.segments) - 1
    if kind == "flip":
        pos = rnd.randrange(size)
        bit = rnd.randrange(8)
        with open(path, "r+b") as f:
            f.seek(pos)
            c = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([c ^ (1 << bit)]))
        b = _batch_at(p, src, pos)
        fld = field_of(b, pos - b.pos)
        if fld == "partitionLeaderEpoch":
            return Trial(kind, path, f"byte {pos} bit {bit} ({fld})", p.leo, False, b, fld)
        return Trial(kind, path, f"byte {pos} bit {bit} ({fld})", b.base, True, b, fld)
    if kind == "truncate":
        pos = rnd.randrange(size)
        os.truncate(path, pos)
        b = _batch_at(p, src, pos)
        boundary = b.pos == pos
        keep = b.base
        # a cut at a batch boundary of the last segment is the state of a crash just before that
        # append: indistinguishable, nothing to detect
        return Trial(kind, path, f"cut at byte {pos} of {size}", keep,
                     not (boundary and last_seg), b, "boundary" if boundary else "inside batch")
    if kind == "zero_tail":
        if rnd.random() < 0.5:
            pos = rnd.randrange(size)
            with open(path, "r+b") as f:
                f.seek(pos)
                old = f.read()
                f.seek(pos)
                f.write(bytes(size - pos))
            changed = next((pos + i for i, c in enumerate(old) if c), None)
            if changed is None:         # those bytes were zeros already: nothing changed
                return Trial(kind, path, f"zeros from byte {pos} (no change)", p.leo, False, None, "no-op")
            b = _batch_at(p, src, changed)
            return Trial(kind, path, f"zeros from byte {pos} of {size}", b.base, True, b, "zeros")
        extra = rnd.randrange(1, 5000)
        with open(path, "ab") as f:
            f.write(bytes(extra))
        # zeros after the last batch (a preallocated / torn tail): data intact
        # zeros after the last batch (a preallocated / torn tail): the records are intact, but in a
        # segment other than the last one recovery stops there and later segments go (prefix rule)
        return Trial(kind, path, f"{extra} zero bytes appended", _first_offset_at_or_after(p, src, size),
                     False, None, "appended zeros")
    if kind == "garbage_tail":
        extra = rnd.randrange(1, 300)
        with open(path, "ab") as f:
            f.write(bytes(rnd.randrange(256) for _ in range(extra)))
        return Trial(kind, path, f"{extra} random bytes appended", _first_offset_at_or_after(p, src, size),
                     not last_seg, None, "appended garbage")
    base = path[:-4]
    if kind in ("index_flip", "index_truncate", "index_delete", "index_foreign"):
        suffix = rnd.choice([".index", ".timeindex"])
        ip = base + suffix
        isz = os.path.getsize(ip)
        if kind == "index_flip" and isz:
            pos = rnd.randrange(isz)
            with open(ip, "r+b") as f:
                f.seek(pos)
                c = f.read(1)[0]
                f.seek(pos)
                f.write(bytes([c ^ (1 << rnd.randrange(8))]))
            detail = f"{suffix} byte {pos}"
        elif kind == "index_truncate":
            os.truncate(ip, rnd.randrange(isz + 1) if isz else 0)
            detail = f"{suffix} truncated"
        elif kind == "index_foreign" and len(p.segments) > 1:
            other = p.segments[(si + rnd.randrange(1, len(p.segments))) % len(p.segments)]
            shutil.copyfile(os.path.join(work, os.path.basename(other))[:-4] + suffix, ip)
            detail = f"{suffix} from {os.path.basename(other)}"
        else:
            os.unlink(ip)
            detail = f"{suffix} deleted"
        return Trial(kind, ip, detail, p.leo, False, None, "index")
    # stray temp files of an interrupted cleaning / deletion
    choice = rnd.randrange(4)
    if choice == 0:
        stray = base + ".log.cleaned"
        shutil.copyfile(path, stray)
        with open(stray, "ab") as f:
            f.write(b"\x00" * 7)
    elif choice == 1:
        stray = base + ".log.deleted"
        shutil.copyfile(path, stray)
    elif choice == 2:
        stray = base + ".index.deleted"
        shutil.copyfile(base + ".index", stray)
    else:
        # a completed cleaning whose swap was not yet renamed: identical content
        stray = base + ".log.swap"
        shutil.copyfile(path, stray)
    return Trial("stray", stray, os.path.basename(stray), p.leo, False, None, "stray")


# --- checks ---------------------------------------------------------------------------------------

@dataclass
class Tally:
    injected: int = 0
    touching_data: int = 0
    detected: int = 0
    verify_detected: int = 0
    legacy_offset_reader_unchecked: int = 0
    undetected: List[str] = field(default_factory=list)
    wrong_prefix: List[str] = field(default_factory=list)
    reader_failures: List[str] = field(default_factory=list)
    untyped: List[str] = field(default_factory=list)
    by_kind: Dict[str, int] = field(default_factory=dict)

    @property
    def failures(self) -> List[str]:
        return self.undetected + self.wrong_prefix + self.reader_failures + self.untyped


def _open(work: str, read_ahead_first: bool, **kwargs: object) -> Log:
    """``Log.open`` of ``work``; with ``read_ahead_first``, handed what a read-ahead read of the
    directory first, as a data directory's load is (:mod:`kafkalog.log.read_ahead`)."""
    if not read_ahead_first:
        return Log.open(work, CONFIG, **kwargs)  # type: ignore[arg-type]
    found = kernel.read_ahead([work])[0]
    assert found is not None, f"the read-ahead could not list {work}"
    with fsutil.preread(work, *found):
        return Log.open(work, CONFIG, **kwargs)  # type: ignore[arg-type]


def check_trial(p: Pristine, work: str, trial: Trial, tally: Tally) -> None:
    tally.injected += 1
    tally.by_kind[trial.kind] = tally.by_kind.get(trial.kind, 0) + 1
    what = f"{trial.kind} {os.path.basename(trial.file)} {trial.detail} [{trial.field}]"
    # 0: `kafkalog verify --deep` (read-only) exits 1 on every corruption that touches data
    res = _RUNNER.invoke(_cli_main, ["verify", "--no-progress", "--quiet", "--deep", work])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tally.untyped.append(f"{what}: kafkalog verify raised {type(res.exception).__name__}: "
                             f"{res.exception}")
    elif trial.must_detect:
        if res.exit_code == 1:
            tally.verify_detected += 1
        else:
            tally.undetected.append(f"{what}: kafkalog verify exit {res.exit_code}")
    reader_dir = work + ".reader"
    if os.path.exists(reader_dir):
        shutil.rmtree(reader_dir)
    shutil.copytree(work, reader_dir)
    # 1 + 2: verify = full-scan recovery; every other trial's load is handed what a read-ahead
    # read of the directory first (as a data directory's load is), the others read it themselves
    try:
        log = _open(work, tally.injected % 2 == 0, recovery_point=0, had_clean_shutdown=False)
    except KafkalogError as e:
        tally.untyped.append(f"{what}: the log does not open after recovery: {e!r}")
        return
    except Exception as e:
        tally.untyped.append(f"{what}: untyped {type(e).__name__}: {e}")
        return
    try:
        rep = log.recovery_report
        detected = bool(rep.truncations or rep.corruptions or rep.deleted_segments or rep.rebuilt_indexes)
        if trial.must_detect:
            tally.touching_data += 1
            if detected:
                tally.detected += 1
            else:
                tally.undetected.append(f"{what}: not detected")
        try:
            got = {r.offset: (r.key, r.value) for r in log.records()}
        except Exception as e:
            tally.wrong_prefix.append(f"{what}: reading after recovery raised {e!r}")
            got = None
        if got is not None:
            want = {o: kv for o, kv in p.records.items() if o < trial.keep_below}
            if got != want:
                extra = sorted(set(got) - set(want))[:5]
                missing = sorted(set(want) - set(got))[:5]
                wrong = [o for o in got if o in want and got[o] != want[o]][:5]
                tally.wrong_prefix.append(f"{what}: recovery kept {len(got)} records, expected the "
                                          f"{len(want)} below offset {trial.keep_below} (extra "
                                          f"{extra}, missing {missing}, wrong {wrong})")
            elif trial.must_detect and trial.damaged_batch is not None and detected:
                named = [t for t in rep.truncations + rep.corruptions
                         if os.path.basename(t.get("file", "")) == os.path.basename(trial.file)]
                if not named and not rep.deleted_segments:
                    tally.wrong_prefix.append(f"{what}: the report does not name the damaged file: "
                                              f"{rep.to_json()}")
    finally:
        log.close()
    # 3: a reader trusting the damaged files (its load handed a read-ahead's reads in the trials
    # whose recovery was not)
    _check_reader(p, reader_dir, trial, what, tally, read_ahead_first=tally.injected % 2 == 1)
    shutil.rmtree(reader_dir, ignore_errors=True)


def _check_reader(p: Pristine, path: str, trial: Trial, what: str, tally: Tally,
                  read_ahead_first: bool = False) -> None:
    try:
        log = _open(path, read_ahead_first, recovery_point=p.leo, had_clean_shutdown=True)
    except KafkalogError:
        return
    except Exception as e:
        tally.untyped.append(f"{what}: trusting open raised untyped {type(e).__name__}: {e}")
        return
    try:
        starts = sorted({log.log_start_offset} | {random.Random(trial.detail).randrange(p.leo)
                                                   for _ in range(3)})
        for start in starts:
            expect = start
            try:
                for r in log.records(start):
                    if r.offset != expect:
                        b = trial.damaged_batch
                        if trial.field == "baseOffset" and b is not None and b.magic < 2:
                            # documented limit: readers do not require legacy (v0/v1) offsets to
                            # be contiguous (pre-0.11 compaction and overflow splits leave gaps);
                            # verify and recovery of a never-compacted log do
                            tally.legacy_offset_reader_unchecked += 1
                            break
                        tally.reader_failures.append(f"{what}: reader from {start} got offset "
                                                     f"{r.offset}, expected {expect} (offsets skipped)")
                        break
                    if p.records.get(r.offset) != (r.key, r.value):
                        tally.reader_failures.append(f"{what}: reader got a corrupt record at "
                                                     f"offset {r.offset}")
                        break
                    expect += 1
                else:
                    if expect < min(trial.keep_below, log.log_end_offset) and trial.must_detect:
                        tally.reader_failures.append(f"{what}: reader from {start} stopped silently at "
                                                     f"{expect} (log end offset {log.log_end_offset})")
            except KafkalogError:
                pass
            except Exception as e:
                tally.untyped.append(f"{what}: reader raised untyped {type(e).__name__}: {e}")
    finally:
        try:
            log.close()
        except KafkalogError:
            pass


def run_corruptions(root: str, count: int, seed: int = 0, progress=None) -> Tally:
    os.makedirs(root, exist_ok=True)
    rnd = random.Random(seed)
    tally = Tally()
    pristine = None
    for i in range(count):
        if i % 500 == 0:
            pdir = os.path.join(root, "pristine")
            if os.path.exists(pdir):
                shutil.rmtree(pdir)
            pristine = build_pristine(pdir, seed=seed * 7919 + i)
        work = os.path.join(root, "work")
        trial = inject(pristine, work, rnd)
        check_trial(pristine, work, trial, tally)
        if progress is not None:
            progress(i, tally)
    return tally
