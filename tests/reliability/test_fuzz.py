"""Hostile input: every decoder (batches, records, codecs, varints, indexes, checkpoint files,
meta.properties, partition.metadata, producer snapshots, segment directories, the CLI's
`produce`/`dump`/`verify` inputs, topic names) raises only KafkalogError subclasses, finishes within
a time bound, allocates no more than the input justifies, and never writes outside its data dir."""
from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import fuzz_targets as ft

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = ft.seeds()
FAST = ["batches", "batches_crc_fixed", "records", "compression", "varint", "indexes", "checkpoints"]
SLOW = ["segment", "cli", "topic_names"]


def _input(name):
    """Raw bytes, or a valid seed of that kind with random edits (gets past CRCs/lengths)."""
    seeds = SEEDS[name]
    edited = st.tuples(st.sampled_from(seeds), st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 255)),
                                                         max_size=8), st.integers(0, 4096)).map(_apply)
    return st.one_of(st.binary(max_size=512), edited)


def _apply(t):
    data, edits, cut = t
    b = bytearray(data)
    for pos, val in edits:
        if b:
            b[pos % len(b)] = val
    return bytes(b[:cut]) if cut < len(b) else bytes(b)


def _bounded(name, data):
    """Run under the per-input time bound, with the traced peak allocation checked: at most
    64 MiB + 64x the input (decompression is capped at 1 MiB by the targets; anything near the
    bound means a length field was trusted)."""
    tracemalloc.start()
    try:
        ft.run_one(name, data, time_limit=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (64 << 20) + 64 * len(data), f"{name}: {peak} bytes allocated for {len(data)} input bytes"


@pytest.mark.parametrize("name", FAST)
def test_decoders_typed_errors_only(name):
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=_input(name))
    def run(data):
        _bounded(name, data)
    run()


@pytest.mark.parametrize("name", SLOW)
def test_file_and_cli_inputs_typed_errors_only(name):
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=_input(name))
    def run(data):
        _bounded(name, data)
    run()


@pytest.mark.parametrize("name", ["../x", "..", ".", "a/b", "/abs", "x" * 250, "t\x00", "é",
                                  "a" * 249 + "/..", "../../../../tmp/evil"])
def test_topic_names_never_escape(name):
    ft.run_one("topic_names", name.encode())


def test_cli_produce_escape_attempts():
    for first in ("../../escape", "..", "a/../../b", "/tmp/x", "ok"):
        ft.run_one("cli", (first + "\n" + '{"key": "k", "value": "v"}\n{"value": 5}\n[1,2]\n{bad\n').encode())


def test_mutation_fuzz_quick():
    """8,000 seeded mutations of valid inputs across all targets."""
    done = ft.mutation_fuzz(8000, seed=99)
    assert sum(done.values()) == 8000 and all(v > 0 for v in done.values())


def test_decompression_bomb_is_bounded():
    """A tiny input that expands hugely: typed error, bounded memory, in a subprocess with an
    address-space limit (RLIMIT_AS) so an unbounded allocation cannot pass unnoticed."""
    code = r"""
import resource, zlib, gzip, io
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from kafkalog.errors import KafkalogError
from kafkalog.record import compression
bomb = gzip.compress(b"\0" * (400 << 20))
for codec, data in ((1, bomb),):
    try:
        compression.decompress(codec, data, magic=2, max_size=1 << 20)
        raise SystemExit("no error")
    except KafkalogError as e:
        print("typed", type(e).__name__)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "typed" in p.stdout


def test_the_targets_leave_nothing_in_the_temporary_directory(tmp_path):
    """Importing the targets writes nothing; the file-system targets' scratch directory is removed
    when the process exits."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import os, tempfile\n"
            "from tests.reliability import fuzz_targets as ft\n"
            "assert os.listdir(tempfile.gettempdir()) == [], 'import wrote'\n"
            "for name in ('segment', 'cli', 'checkpoints', 'topic_names'):\n"
            "    try:\n"
            "        ft.TARGETS[name](bytes(range(64)))\n"
            "    except Exception as e:\n"
            "        if not isinstance(e, ft.KafkalogError): raise\n"
            "print('scratch', os.listdir(tempfile.gettempdir()))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, TMPDIR=str(tmp)))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "kafkalog-fuzz-" in p.stdout, "no target used its scratch directory: the test tests nothing"
    assert os.listdir(tmp) == []


def test_atheris_quick(tmp_path):
    """Coverage-guided: 2,000 atheris runs over all targets (per-input timeout, RSS limit), leaving
    nothing in the temporary directory."""
    pytest.importorskip("atheris")
    tmp, corpus = tmp_path / "tmp", tmp_path / "corpus"
    tmp.mkdir()
    corpus.mkdir()
    p = subprocess.run([sys.executable, "-m", "tests.reliability.atheris_fuzz", "-runs=2000", "-timeout=10",
                        "-rss_limit_mb=2048", "-seed=1", f"-artifact_prefix={tmp_path}/", str(corpus)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp)))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Done 2000 runs" in p.stderr, p.stderr[-3000:]
    assert os.listdir(tmp) == []


@pytest.mark.slow
def test_mutation_fuzz_long():
    n = int(os.environ.get("KAFKALOG_FUZZ", "1000000"))
    done = ft.mutation_fuzz(n, seed=int(os.environ.get("KAFKALOG_SEED", "1")))
    assert sum(done.values()) == n
