# Shared by scripts/device/*: sourced, not run.

# A CPython 3.12 interpreter: python3.12 on PATH, else pyenv's newest 3.12.
find_python312() {
    local p
    for p in "$(command -v python3.12 2>/dev/null)" /root/.pyenv/versions/3.12.*/bin/python3.12 \
             "$HOME"/.pyenv/versions/3.12.*/bin/python3.12 /usr/bin/python3.12; do
        [[ -n $p && -x $p ]] && "$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' \
            2>/dev/null && { echo "$p"; return 0; }
    done
    return 1
}
