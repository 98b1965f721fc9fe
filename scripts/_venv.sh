# Sourced by scripts/*: make .venv (Python 3.11+) and install delayd into it.
# Usage: ensure_venv [EXTRAS]   e.g. ensure_venv test
ensure_venv() {
    local root extras py
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    extras="${1:-}"
    VENV="$root/.venv"
    if [ ! -x "$VENV/bin/python" ]; then
        for py in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
            [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
            if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
                "$py" -m venv "$VENV"
                break
            fi
        done
        [ -x "$VENV/bin/python" ] || { echo "error: Python 3.11+ is needed to make $VENV" >&2; return 1; }
        "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    fi
    # Reinstall only when the package metadata changed since the last install (an install with
    # extras, e.g. ./scripts/test's, is one without them too).
    local stamp="$VENV/.delayd-installed${extras:+-$extras}" made installed=""
    local stamps=("$stamp")
    [ -n "$extras" ] || stamps+=("$VENV"/.delayd-installed-*)
    for made in "${stamps[@]}"; do
        if [ -f "$made" ] && [ ! "$root/setup.cfg" -nt "$made" ]; then installed=1; fi
    done
    if [ -z "$installed" ]; then
        "$VENV/bin/python" -m pip install -q -e "$root${extras:+[$extras]}" || return 1
        touch "$stamp"
    fi
    export PATH="$VENV/bin:$PATH"
}
