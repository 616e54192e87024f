#!/usr/bin/env bash
# Runs every test suite, each in its own virtualenv (verl 0.9.1, OpenRLHF 0.11.2 and TRL 1.16.0 pin incompatible
# transformers/ray versions). Venvs are created on first use with CPU torch 2.13.0 and the exact pins in
# compat/, and cached in $MICROCODER_CACHE (default ~/.cache/microcoder-ext) keyed by the constraint file
# and pyproject.toml; every run re-installs this checkout (editable, no deps) into them.
#
#   bash tests/run_all.sh                 # all suites
#   SUITES=verl bash tests/run_all.sh     # one suite (verl | openrlhf | trl)
#   bash tests/run_all.sh -k mask -x      # extra args go to pytest
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITES=${SUITES:-verl openrlhf trl}
. "$ROOT/compat/venv.sh"


# run_pytest PYTHON ARGS... ; pytest exit 5 (nothing collected) is a failure here
run_pytest() {
  local py=$1; shift
  set +e
  (cd "$ROOT" && "$py" -m pytest --durations=20 "$@")  # the slowest tests, for keeping CI inside its budget
  local rc=$?
  set -e
  if [ "$rc" -eq 5 ]; then echo "run_all: pytest collected no tests: failing" >&2; return 1; fi
  return "$rc"
}

status=0
for suite in $SUITES; do
  case "$suite" in
    verl)
      py=$(ensure_venv verl)
      log "suite verl: core + smoke core + reward engine + verl adapter + data/eval + docs tests ($("$py" -c 'import verl; print("verl", verl.__version__)' 2>/dev/null))"
      run_pytest "$py" tests/core tests/smoke tests/reward tests/verl tests/data tests/eval \
        tests/docs/test_docs.py tests/docs/test_examples_verl.py "$@" || status=1
      ;;
    openrlhf)
      # the reward engine's own tests (tests/reward) run in the verl suite; flash_attn is stubbed by
      # tests/openrlhf/conftest.py (compat/cpu_stubs.py)
      py=$(ensure_venv openrlhf)
      log "suite openrlhf: core + OpenRLHF adapter + docs example tests ($("$py" -c 'import openrlhf, importlib.metadata as m; print("openrlhf", m.version("openrlhf"))' 2>/dev/null))"
      run_pytest "$py" tests/core tests/openrlhf tests/docs/test_examples_openrlhf.py "$@" || status=1
      ;;
    trl)
      py=$(ensure_venv trl)
      log "suite trl: core + TRL adapter + docs example tests ($("$py" -c 'import importlib.metadata as m; print("trl", m.version("trl"))' 2>/dev/null))"
      run_pytest "$py" tests/core tests/trl tests/docs/test_examples_trl.py "$@" || status=1
      ;;
    *) echo "run_all: unknown suite '$suite'" >&2; status=1 ;;
  esac
done
exit $status
