# Sourced by the CI scripts: python_of 3.X prints CPython 3.X's interpreter: python3.X on PATH when it
# runs, else pyenv's newest 3.X (tests/packaging/test_dist.py looks the same way).
python_of() {
    local v=$1 p
    if p=$(command -v "python$v") && "$p" -V >/dev/null 2>&1; then echo "$p"; return; fi
    for p in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v" 2>/dev/null | sort -V -r); do
        echo "$p"; return
    done
    echo "no CPython $v found (python$v on PATH or pyenv)" >&2; return 1
}
