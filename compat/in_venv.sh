#!/usr/bin/env bash
# Run a command inside a framework's cached test venv, creating it if missing:
#   bash compat/in_venv.sh verl microcoder recipe show microcoder
set -euo pipefail
name=${1:?usage: in_venv.sh verl|openrlhf COMMAND...}; shift
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
py=$(ensure_venv "$name")
export PATH="$(dirname "$py"):$PATH"
exec "$@"
