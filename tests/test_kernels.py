"""Kernel selection is all or nothing per process (``kafkalog._kernels``).

Each case runs a fresh interpreter whose ``PYTHONPATH`` points at the worktree's package, or at a
temporary copy of it with one compiled kernel removed or replaced by a stale build, and checks
what importing the layers' kernel selectors does.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalog
from kafkalog._kernels import KERNELS

PACKAGE = Path(kafkalog.__file__).parent

#: prints, per layer, the selected implementation and the module in use (JSON)
PROBE = """
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import kafkalog.record.kernel as r, kafkalog.cleaner.kernel as c, kafkalog.spark.kernel as s
    import kafkalog.record.header_walk as w, kafkalog.log.kernel as g, kafkalog.client.kernel as k
    import kafkalog.server.requests.request_bounds as b
print(json.dumps({
    "implementations": [m.IMPLEMENTATION for m in (r, w, g, c, k, s, b)],
    "modules": [m.implementation_module.__name__ for m in (r, w, g, c, k, s, b)],
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
}))
"""


def _extension(package_root: Path, module: str) -> Path | None:
    base = package_root.joinpath(*module.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.with_name(base.name + suffix)
        if candidate.is_file():
            return candidate
    return None


BUILT = all(_extension(PACKAGE, pair.compiled) is not None for pair in KERNELS)
needs_build = pytest.mark.skipif(not BUILT, reason="the compiled kernels are not built")


def _run(pythonpath: Path, code: str = PROBE, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "KAFKALOG_PURE_PYTHON"}
    environ.update(env)
    environ["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-c", code], check=False, env=environ,
                          capture_output=True, text=True, timeout=120, cwd=str(pythonpath))


@pytest.fixture()
def package_copy(tmp_path: Path) -> Path:
    """A copy of the kafkalog package (with its built kernels) under ``tmp_path``."""
    shutil.copytree(PACKAGE, tmp_path / "kafkalog",
                    ignore=shutil.ignore_patterns("__pycache__", "*.c"))
    return tmp_path


def test_pure_python_env_selects_every_pure_twin():
    done = _run(PACKAGE.parent, KAFKALOG_PURE_PYTHON="1")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["implementations"] == ["python"] * len(KERNELS)
    assert out["modules"] == [pair.pure for pair in KERNELS]
    assert out["warnings"] == []


@needs_build
def test_a_full_build_selects_every_compiled_kernel():
    done = _run(PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["implementations"] == ["cython"] * len(KERNELS)
    assert out["modules"] == [pair.compiled for pair in KERNELS]


@needs_build
def test_a_partial_build_is_refused_naming_the_missing_kernel(package_copy: Path):
    _extension(package_copy / "kafkalog", "kafkalog.cleaner._kernel").unlink()
    done = _run(package_copy)
    assert done.returncode != 0
    assert "KernelBuildError" in done.stderr
    assert "kafkalog.cleaner._kernel is not built" in done.stderr
    # importing the record layer alone is refused too: the choice is for the whole process
    done = _run(package_copy, "import kafkalog.record.batch")
    assert done.returncode != 0
    assert "kafkalog.cleaner._kernel is not built" in done.stderr
    # ... unless pure Python is asked for
    done = _run(package_copy, KAFKALOG_PURE_PYTHON="1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["implementations"] == ["python"] * len(KERNELS)


@needs_build
def test_a_stale_build_is_refused_naming_the_module_and_symbol(package_copy: Path):
    root = package_copy / "kafkalog"
    # the cleaner's compiled kernel is replaced by a build that lacks its API (Spark's kernel,
    # whose init function has the same name)
    shutil.copyfile(_extension(root, "kafkalog.spark._kernel"),
                    _extension(root, "kafkalog.cleaner._kernel"))
    done = _run(package_copy, "import kafkalog.record.kernel as r; print(r.IMPLEMENTATION)")
    assert done.returncode == 0, done.stderr          # the record kernel itself is fine
    assert done.stdout.strip() == "cython"
    done = _run(package_copy, "import kafkalog.cleaner.kernel")
    assert done.returncode != 0
    assert "KernelBuildError" in done.stderr
    assert "kafkalog.cleaner._kernel lacks 'CLEANER_MD5'" in done.stderr
    assert "kafkalog.cleaner._kernel_py" in done.stderr


def test_no_compiled_kernel_falls_back_to_pure_python_with_a_warning(package_copy: Path):
    root = package_copy / "kafkalog"
    for pair in KERNELS:
        ext = _extension(root, pair.compiled)
        if ext is not None:
            ext.unlink()
    done = _run(package_copy)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["implementations"] == ["python"] * len(KERNELS)
    assert out["modules"] == [pair.pure for pair in KERNELS]
    assert len(out["warnings"]) == 1
    assert out["warnings"][0].startswith("KernelWarning: ")
    assert "not built" in out["warnings"][0]


def test_every_compiled_kernel_exports_its_twins_api():
    """The check a stale build fails, on the kernels of this checkout."""
    if not BUILT:
        pytest.skip("the compiled kernels are not built")
    for pair in KERNELS:
        pure = importlib.import_module(pair.pure)
        compiled = importlib.import_module(pair.compiled)
        missing = [name for name in pure.__all__ if name not in vars(compiled)]
        assert missing == [], (pair.compiled, missing)
        assert compiled.IMPLEMENTATION == "cython" and pure.IMPLEMENTATION == "python"

