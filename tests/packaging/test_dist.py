"""What ``pip install kafkalog`` installs works on a machine without a compiler (issue 36, item 9).

Each distribution that ``.ci/dist.sh`` built (``KAFKALOG_DIST_DIR``: a manylinux wheel per CPython
3.11, 3.12, 3.13, and the sdist) goes into a fresh virtualenv of its Python, installed and run with
``PATH`` holding only that virtualenv's ``bin`` (no gcc, no cc): the wheels bring their compiled
kernels; the sdist builds without them (a warning) and runs the pure-Python twins. The install pulls
kafkalog's base dependencies only (no pyspark, no test tools). Then, from the outside: ``import
kafkalog``, ``kafkalog --help``, ``kafkalog serve`` answering a Kafka ApiVersions request over a
socket, and the pytest plugin's ``kafka_broker`` fixture in a test module of its own.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.kafka44 import free_port

DIST = os.environ.get("KAFKALOG_DIST_DIR", "")
pytestmark = pytest.mark.skipif(
    not DIST, reason="KAFKALOG_DIST_DIR is not set: no built distributions to install (.ci/packaging.sh "
                     "builds them with .ci/dist.sh and runs these tests)")

#: (the distribution, the CPython that installs it); the sdist goes into 3.12's venv
CASES = {"cp311": ("*-cp311-cp311-manylinux*.whl", "3.11"), "cp312": ("*-cp312-cp312-manylinux*.whl", "3.12"),
         "cp313": ("*-cp313-cp313-manylinux*.whl", "3.13"), "sdist": ("kafkalog-*.tar.gz", "3.12")}

#: kafka's ApiVersions v0 request (api key 18), correlation id 7, client id "smoke"
API_VERSIONS_V0 = textwrap.dedent('''
    import socket, struct
    def api_versions(port):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            body = struct.pack(">hhih", 18, 0, 7, 5) + b"smoke"
            s.sendall(struct.pack(">i", len(body)) + body)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = s.recv(65536)
                assert chunk, "connection closed before the response"
                data += chunk
        corr, error, n = struct.unpack(">ihi", data[4:14])
        keys = [struct.unpack(">hhh", data[14 + 6 * i:20 + 6 * i])[0] for i in range(n)]
        return corr, error, keys
''')

#: in the venv: kafkalog's base requirements, transitively, against what is installed
INSTALLED = textwrap.dedent('''
    import json
    from importlib.metadata import distribution, distributions
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    need, todo = set(), ["kafkalog"]
    while todo:
        name = todo.pop()
        if name not in need:
            need.add(name)
            for r in distribution(name).requires or []:
                req = Requirement(r)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(canonicalize_name(req.name))
    installed = {canonicalize_name(d.metadata["Name"]) for d in distributions()} - {"pip", "setuptools"}
    print(json.dumps({"unneeded": sorted(installed - need), "installed": sorted(installed)}))
''')

PLUGIN_TEST = API_VERSIONS_V0 + textwrap.dedent('''
    def test_the_fixture_serves_kafka(kafka_broker, kafka_topic):
        corr, error, keys = api_versions(kafka_broker.port)
        assert (corr, error) == (7, 0) and {0, 1, 3, 18} <= set(keys)
        assert kafka_topic in kafka_broker.topics()
        assert kafka_broker.values(kafka_topic) == []
''')


def _python(minor: str) -> str:
    """CPython ``minor``: ``pythonX.Y`` on PATH when it runs, else pyenv's newest X.Y (as .ci/dist.sh)."""
    found = shutil.which(f"python{minor}")
    if found and subprocess.run([found, "-V"], capture_output=True).returncode == 0:
        return found
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    versions = sorted(glob.glob(f"{root}/versions/{minor}.*/bin/python{minor}"),
                      key=lambda p: [int(x) for x in Path(p).parts[-3].split(".")])
    if not versions:
        pytest.fail(f"no CPython {minor} (python{minor} on PATH or pyenv) to install the distribution")
    return versions[-1]


def _env(venv: Path) -> dict[str, str]:
    """The environment of a user of ``venv`` on a machine without a compiler: PATH is its bin."""
    drop = {"PYTHONPATH", "PYTHONHOME", "KAFKALOG_PURE_PYTHON", "CC", "CXX", "LDSHARED", "VIRTUAL_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PATH=str(venv / "bin"), VIRTUAL_ENV=str(venv))
    for compiler in ("gcc", "cc", "c++", "clang", "x86_64-linux-gnu-gcc"):
        assert shutil.which(compiler, path=env["PATH"]) is None, compiler
    return env


def _run(args, env, cwd, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("case", list(CASES))
def test_the_distribution_installs_and_runs_without_a_compiler(case, tmp_path):
    pattern, minor = CASES[case]
    found = glob.glob(os.path.join(DIST, pattern))
    assert len(found) == 1, f"{pattern} in {DIST}: {found}"
    venv = tmp_path / "venv"
    subprocess.run([_python(minor), "-m", "venv", str(venv)], check=True, capture_output=True)
    env, py = _env(venv), venv / "bin" / "python"
    work = tmp_path / "work"
    work.mkdir()

    # only binaries for the dependencies (none may need a compiler); kafkalog itself from the sdist
    from_source = ["--no-binary", "kafkalog"] if case == "sdist" else []
    install = _run([py, "-m", "pip", "install", "-v", "--only-binary", ":all:", *from_source, found[0]], env, work)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    if case == "sdist":
        assert "WARNING: a compiled kafkalog kernel was not built" in install.stdout + install.stderr

    listed = _run([py, "-c", INSTALLED], env, work)
    assert listed.returncode == 0, listed.stderr
    deps = json.loads(listed.stdout)
    assert deps["unneeded"] == [], deps
    assert not {"pyspark", "pyarrow", "pytest", "hypothesis", "kafka-python", "confluent-kafka"} & set(
        deps["installed"]), deps

    kernels = _run([py, "-W", "ignore", "-c", "import kafkalog, kafkalog._kernels as k; print(k.IMPLEMENTATION)"],
                   env, work)
    assert kernels.stdout.strip() == ("python" if case == "sdist" else "cython"), kernels.stderr

    helped = _run([venv / "bin" / "kafkalog", "--help"], env, work)
    assert helped.returncode == 0 and "Usage:" in helped.stdout and "serve" in helped.stdout, helped.stderr

    port = free_port()
    serve = subprocess.Popen([str(venv / "bin" / "kafkalog"), "serve", str(work / "data"), "--port", str(port)],
                             env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        namespace: dict = {}
        exec(API_VERSIONS_V0, namespace)
        deadline = time.monotonic() + 60
        while True:
            try:
                corr, error, keys = namespace["api_versions"](port)
                break
            except OSError:
                assert serve.poll() is None and time.monotonic() < deadline, serve.communicate(timeout=30)
                time.sleep(0.2)
        assert (corr, error) == (7, 0) and {0, 1, 3, 18} <= set(keys), (corr, error, keys)
    finally:
        serve.terminate()
        serve.communicate(timeout=60)

    # the pytest plugin: installing kafkalog (and pytest) is the whole set-up
    pytest_install = _run([py, "-m", "pip", "install", "-q", "--only-binary", ":all:", "pytest"], env, work)
    assert pytest_install.returncode == 0, pytest_install.stderr[-3000:]
    (work / "test_plugin.py").write_text(PLUGIN_TEST)
    ran = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plugin.py"], env, work)
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
