"""Corruption: random bit flips, truncations, zero-filled and garbage tails, damaged / deleted /
foreign index files and stray temp files (see corruption.py for the three checks of each trial),
plus an exhaustive pass over every header byte of a v2 and a v1 batch."""
from __future__ import annotations

import os
import random
import shutil

import pytest

from .corruption import Tally, Trial, build_pristine, check_trial, field_of, run_corruptions


def _assert_clean(t: Tally):
    assert not t.failures, "\n".join(t.failures[:20])


def test_random_corruptions(ram_path):
    """400 random corruptions of every kind: verify and recovery detect every one that touches a
    record, recovery keeps exactly the valid prefix, readers never see a corrupt record."""
    t = run_corruptions(str(ram_path), 400, seed=3)
    _assert_clean(t)
    assert t.injected == 400 and t.touching_data > 100
    assert t.detected == t.touching_data == t.verify_detected
    assert set(t.by_kind) >= {"flip", "truncate", "zero_tail", "index_flip", "index_delete", "stray"}


@pytest.mark.parametrize("magic", [2, 1])
def test_every_header_byte(ram_path, magic):
    """One bit flipped in each header byte of a batch in the middle of the log and of the last
    batch of the log; every bit of the fields outside the CRC (baseOffset, length,
    partitionLeaderEpoch, magic). Each must be detected, except partitionLeaderEpoch (harmless:
    no record changes)."""
    p = build_pristine(str(ram_path / "pristine"), seed=5)
    tally = Tally()
    rnd = random.Random(0)
    bs = [b for path in p.segments for b in p.batches[path] if (b.magic == 2) == (magic == 2)]
    assert bs, "no batch of that magic in the pristine log"
    targets = [bs[len(bs) // 2], bs[-1]]
    for b in targets:
        hdr = 61 if magic == 2 else 22
        for rel in range(min(hdr, b.size)):
            fld = field_of(b, rel)
            bits = range(8) if fld in ("baseOffset", "length", "partitionLeaderEpoch", "magic") else [rnd.randrange(8)]
            for bit in bits:
                work = str(ram_path / "work")
                if os.path.exists(work):
                    shutil.rmtree(work)
                shutil.copytree(p.dir, work)
                fpath = os.path.join(work, os.path.basename(b.file))
                with open(fpath, "r+b") as f:
                    f.seek(b.pos + rel)
                    c = f.read(1)[0]
                    f.seek(b.pos + rel)
                    f.write(bytes([c ^ (1 << bit)]))
                harmless = fld == "partitionLeaderEpoch"
                trial = Trial("flip", fpath, f"byte {b.pos + rel} bit {bit} ({fld})",
                              p.leo if harmless else b.base, not harmless, b, fld)
                check_trial(p, work, trial, tally)
    _assert_clean(tally)
    assert tally.touching_data == tally.detected > 0


@pytest.mark.slow
def test_random_corruptions_long(tmp_path):
    n = int(os.environ.get("KAFKALOG_CORRUPTIONS", "10000"))
    t = run_corruptions(str(tmp_path), n, seed=int(os.environ.get("KAFKALOG_SEED", "1")))
    _assert_clean(t)
