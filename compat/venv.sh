#!/usr/bin/env bash
# Source me. Defines ensure_venv NAME, which prints the python of a cached virtualenv for one framework:
#   verl      verl 0.9.1 (+TransferQueue, hydra) with CPU torch 2.13.0, pins in compat/constraints-verl-0.9.1.txt
# Venvs live in $MICROCODER_CACHE (default ~/.cache/microcoder-ext), keyed by the constraint file and
# the dependencies declared in pyproject.toml, so a changed pin builds a new one; each call re-installs this checkout (editable, no deps).
log() { printf "\n== %s\n" "$*" >&2; }
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
CACHE=${MICROCODER_CACHE:-$HOME/.cache/microcoder-ext}
PYTHON=${PYTHON:-python3}

_venv_spec() {  # NAME -> "constraints extras"
  case "$1" in
    verl) echo "constraints-verl-0.9.1.txt verl,test" ;;
    *) echo "unknown venv '$1'" >&2; return 1 ;;
  esac
}

# _pip VENV ARGS...: quiet pip; its log is printed only when it fails
_pip() {
  local venv=$1; shift
  if ! "$venv/bin/python" -m pip install --help >/dev/null 2>&1; then echo "no pip in $venv" >&2; return 1; fi
  if ! "$venv/bin/python" -m pip "$@" -q >"$venv/pip.log" 2>&1; then
    cat "$venv/pip.log" >&2; echo "pip $* failed (log above)" >&2; return 1
  fi
}

ensure_venv() {
  local name=$1 spec constraints extras
  spec=$(_venv_spec "$name") || return 1
  read -r constraints extras <<<"$spec"
  mkdir -p "$CACHE"
  local key
  # key: the pins and the declared dependencies (not the rest of pyproject.toml)
  key=$({ cat "$ROOT/compat/$constraints"; "$PYTHON" -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; print(p["dependencies"], p["optional-dependencies"])' "$ROOT/pyproject.toml"; } | sha256sum | cut -c1-12)
  local venv="$CACHE/venv-$name-$key"
  if [ ! -f "$venv/.ready" ]; then
    log "creating $venv (first run only: a few minutes)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    _pip "$venv" install --upgrade "pip>=24" "setuptools>=77" wheel || return 1
    # CPU torch first, from the pinned local wheel: an unpinned torch would pull a multi-GB CUDA build
    _pip "$venv" install "torch==2.13.0" -c "$ROOT/compat/$constraints" || return 1
    _pip "$venv" install -c "$ROOT/compat/$constraints" -e "$ROOT[$extras]" || return 1
    touch "$venv/.ready"
  fi
  # point the cached venv at this checkout (fast; no dependency resolution)
  _pip "$venv" install --no-deps --no-build-isolation -e "$ROOT" || return 1
  echo "$venv/bin/python"
}

