#!/usr/bin/env bash
# CI's packaging steps (issue 36): build the distributions once (.ci/dist.sh: the sdist and the
# manylinux wheels of CPython 3.11, 3.12, 3.13), install each into a fresh virtualenv on a PATH
# without a compiler and smoke-test it (tests/packaging), then run the unit tests (record, log,
# cleaner, client, cli: no Spark, Kafka or JVM) on CPython 3.12 and 3.13, each in a virtualenv with
# its wheel and the `test` extra (so the suite also runs where pyspark and pyarrow are not
# installed: what needs them is skipped, with the reason). Prints how long each step took; measured
# here on two cores shared with other jobs (load ~9): build 395 s, smoke tests 73 s, 3.12 352 s,
# 3.13 341 s (each: venv and `pip install wheel[test]` ~90 s, 973 tests ~250 s); 19.6 min in all,
# 11.7 min of CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/pythons.sh
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
step() { echo "packaging: $1 took $(($SECONDS - $2)) s"; }

t=$SECONDS
.ci/dist.sh "$WORK/dist"
step "building the sdist and 3 wheels" $t

t=$SECONDS
KAFKALOG_DIST_DIR="$WORK/dist" python3 -m pytest -p no:cacheprovider -n 4 tests/packaging
step "installing and smoke-testing each without a compiler" $t

# the wheel's kafkalog, not this tree's src: no PYTHONPATH (pip would take src's egg-info for an
# installed kafkalog and skip the wheel)
unset PYTHONPATH
for v in 3.12 3.13; do
    t=$SECONDS
    "$(python_of $v)" -m venv "$WORK/venv$v"
    wheel=$(ls "$WORK"/dist/kafkalog-*-cp${v/./}-cp${v/./}-manylinux*.whl)
    "$WORK/venv$v/bin/python" -m pip install -q "$wheel[test]"
    "$WORK/venv$v/bin/python" -m pytest -p no:cacheprovider -n 4 --dist loadfile \
        -m "not slow and not spark and not kafka" tests/record tests/log tests/cleaner tests/client tests/cli
    step "the unit tests on CPython $v" $t
done
