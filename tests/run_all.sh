#!/usr/bin/env bash
# Runs every test suite, each in its own virtualenv (verl 0.9.1, OpenRLHF 0.11.2 and TRL 1.16.0 pin incompatible
# transformers/ray versions), and the release suites: the other releases of each supported range (compat/matrix.toml
# `tested`: verl 0.9.0, OpenRLHF 0.11.0 and 0.11.1, TRL 1.15.0), running the release lane (the version guards, the
# real trainer hooks, two real `microcoder smoke` steps). verl 0.9.0 and OpenRLHF 0.11.0 (its own DeepSpeed) have venvs
# of their own; OpenRLHF 0.11.1 and TRL 1.15.0 differ from the openrlhf-0.11.0 and trl venvs in that one pin and run in
# an overlay of them (compat/venv.sh: the release's own site-packages over the base's), built once the base is ready.
# Venvs are created on first use with CPU torch 2.13.0 and the exact pins in compat/, and cached in $MICROCODER_CACHE
# (default ~/.cache/microcoder-ext) keyed by the constraint file and pyproject.toml; every run re-installs this
# checkout (editable, no deps) into them (an overlay imports its base's, re-pointed only where it is another's).
#
#   bash tests/run_all.sh                 # all suites
#   SUITES=verl bash tests/run_all.sh     # one suite (verl | openrlhf | trl | verl-0.9.0 | openrlhf-0.11.0 | openrlhf-0.11.1 | trl-1.15.0)
#   bash tests/run_all.sh -k mask -x      # extra args go to pytest
#   TEST_JOBS=1 bash tests/run_all.sh     # one lane or venv build at a time (default: 3 per core, at most one per
#                                         # 3 GB of RAM: 6 on 2 cores and 24 GB; all: everything at once)
#   TEST_MEMORY_GB=12 bash tests/run_all.sh   # the real launches' shared memory budget (default: RAM less max(7 GB, 30 %))
#
# A suite runs as one or more lanes, each one pytest process; up to $TEST_JOBS lanes and venv builds run at once
# (a venv build, or the seconds-long check of a cached one, takes a slot as a lane does). Most of a real
# training launch (Ray, the trainer's workers, the vLLM engine) is process start-up that leaves the CPUs partly idle,
# so the verl suite's launches (its end-to-end file and the docs' verl examples), `make demo` and the reward's accuracy
# file are lanes of their own beside the rest of the suite; the tests that time the host run alone at the end. The
# launches of all lanes share one memory budget (tests/conftest.py). A suite's lanes start as soon as its venv is
# ready (on a fresh machine the verl tests run while OpenRLHF's venv builds), the longest lanes first (LANE_ORDER);
# the main suites' venvs and lanes go before the release suites' (a release venv is built early only while a slot
# stays free for each main suite whose venv is still being built). A lane's output goes to $TEST_LOGS/<lane>.log
# (default: a temporary directory, named on start) and is printed whole when the lane ends. The load average is
# sampled every LOAD_SAMPLE_S seconds: each lane's end and the closing summary give the peak load per core while it
# ran, and say "overloaded" above OVERLOADED_PER_CORE. The run fails if any lane fails, if a lane collected no tests
# (pytest exit 5, e.g. a lane's file list that names no test: a lane that runs nothing fails; a lane whose every test
# the command line's -k/-m deselected is only reported), or if no lane ran a test.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITES=${SUITES:-verl openrlhf trl verl-0.9.0 openrlhf-0.11.0 openrlhf-0.11.1 trl-1.15.0}
. "$ROOT/compat/venv.sh"

# default_jobs CORES MEM_MB -> lanes and venv builds at once: 3 per core (a real launch leaves the CPUs partly idle
# while its processes start; at 2 per core the TRL and demo lanes of a cached run on 2 cores waited 39 min for a
# slot), at most one per 3 GB of RAM (a lane's pytest process and its children), at least 1
default_jobs() {
  local by_cpu=$(( $1 * 3 )) by_mem=$(( $2 / 3072 )) n
  n=$(( by_cpu < by_mem ? by_cpu : by_mem ))
  echo $(( n < 1 ? 1 : n ))
}

# lane_verdict RC LOG -> ran | deselected | empty | failed: what a lane's pytest exit status RC and log mean. Exit 5
# (nothing collected) is "deselected" when the log shows that the command line's -k/-m deselected the tests the lane
# collected, and "empty" (a failure) when the lane's files hold no test at all
lane_verdict() {
  case "$1" in
    0) echo ran ;;
    5) if grep -Eq '(^|[^0-9])[1-9][0-9]* deselected' "$2"; then echo deselected; else echo empty; fi ;;
    *) echo failed ;;
  esac
}

# peak_load SAMPLES FROM TO -> the highest 1-minute load average sampled between epoch seconds FROM and TO (the
# current one if none was)
peak_load() {
  awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b && ($2 > m || !n) {m = $2; n = 1} END {if (n) print m}' "$1" 2>/dev/null \
    | grep . || cut -d' ' -f1 /proc/loadavg
}

# load_note LOAD CORES -> "peak load 12.4 on 2 cores (6.2 per core, overloaded)"
load_note() {
  awk -v l="$1" -v c="$2" -v o="$OVERLOADED_PER_CORE" \
    'BEGIN {printf "peak load %.1f on %d cores (%.1f per core%s)", l, c, l / c, (l / c > o ? ", overloaded" : "")}'
}

CORES=$(nproc)
TOTAL_MB=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
TEST_JOBS=${TEST_JOBS:-$(default_jobs "$CORES" "$TOTAL_MB")}
LOAD_SAMPLE_S=${LOAD_SAMPLE_S:-5}
# more runnable tasks per core than this and a lane's processes wait for a CPU most of the time
OVERLOADED_PER_CORE=2

case "$TEST_JOBS" in all) ;; ''|*[!0-9]*|0) echo "run_all: TEST_JOBS must be an integer >= 1 or all, got '$TEST_JOBS'" >&2
  exit 2 ;; esac

# The launch-heavy files of the verl suite (their own lane). Every suite's files are listed in lane_files below.
VERL_LAUNCHES="tests/verl/test_smoke_e2e.py tests/verl/test_slurm_smoke.py tests/docs/test_examples_verl.py"
# `make demo` (a 30-step training run with verl's main_ppo): a lane of its own beside the other launches
VERL_DEMO="tests/docs/test_make_demo.py"
# the reward's accuracy on every LeetCodeDataset problem in every encoding (~40,000 judged programs, a fresh process
# per test: the longest CPU-bound file): a lane of its own, started with the launches
VERL_ACCURACY="tests/reward/test_accuracy_formats.py"
# Tests that measure the host while a hostile program runs (the longest stall of a thread of the judging process,
# its wall time): a busy machine stalls threads by itself, so they run alone, after the other lanes (~2 min): every
# file whose tests use the `hostile` fixture of tests/reward/conftest.py
VERL_HOST="tests/reward/test_hostile_judge.py tests/reward/test_hostile_sandbox.py tests/reward/test_no_state_between_tests.py tests/reward/test_shape_rules.py"
SOLO_LANES="verl-host"
# The release lanes of the other releases of each range: the version guards, recipe composition, the real trainer
# hooks, and one real `microcoder smoke` launch (verl: `+recipe=microcoder` with the real vLLM, 3 steps; of the verl
# CPU backend's tests, the guard's and the routing of verl's vLLM rollout: the rest does not depend on the release)
VERL_RELEASE_LANE="tests/core/test_compat.py tests/verl/test_install.py tests/verl/test_trainer_guard.py tests/verl/test_cpu_backend.py::test_guard_passes_on_the_tested_verl_and_names_a_changed_internal tests/verl/test_cpu_backend.py::test_guard_still_passes_where_the_backend_is_active tests/verl/test_cpu_backend.py::test_vllm_rollout_modules_import_and_are_routed_for_the_cpu tests/verl/test_plugin.py tests/verl/test_recipes.py tests/verl/test_launch_guard.py tests/verl/test_trainer_mask.py tests/verl/test_trainer_temperature.py tests/verl/test_smoke_e2e.py::test_mask_zeroes_eligible_advantages_in_the_real_loss tests/verl/test_smoke_e2e.py::test_truncation_is_vllms_length_stop tests/verl/test_smoke_e2e.py::test_staged_temperature_reaches_vllm_and_the_logprobs tests/verl/test_smoke_e2e.py::test_logprob_check_discriminates_a_temperature_mismatch"
OPENRLHF_RELEASE_LANE="tests/core/test_compat.py tests/openrlhf/test_guard.py tests/openrlhf/test_launcher.py tests/openrlhf/test_openrlhf_recipes.py tests/openrlhf/test_advantage_mask.py tests/openrlhf/test_trainer_mask.py tests/openrlhf/test_doctor_openrlhf.py tests/openrlhf/test_smoke_e2e.py::test_mask_zeroes_eligible_advantages_in_the_real_loss tests/openrlhf/test_smoke_e2e.py::test_staged_temperature_switches_sampler_and_logprobs"
TRL_RELEASE_LANE="tests/core/test_compat.py tests/trl/test_trl_guard.py tests/trl/test_trl_trainer.py tests/trl/test_cpu_logprob.py tests/trl/test_smoke_trl.py tests/trl/test_trl_config.py tests/trl/test_doctor_trl.py"

# the order in which the main suites' lanes take free slots: the longest first (a cached run: the rest of verl 43 min,
# OpenRLHF 38, verl's launches 38, the reward's accuracy 30, TRL 14, `make demo` 13)
LANE_ORDER="verl openrlhf verl-launches verl-accuracy trl verl-demo"

# lanes_of SUITE -> the suite's lane names
lanes_of() {
  case "$1" in
    verl) echo "verl-launches verl-demo verl-accuracy verl verl-host" ;;
    openrlhf) echo "openrlhf" ;;
    trl) echo "trl" ;;
    verl-0.9.0|openrlhf-0.11.0|openrlhf-0.11.1|trl-1.15.0) echo "$1" ;;
    *) echo "run_all: unknown suite '$1'" >&2; return 1 ;;
  esac
}

# lane_files LANE -> pytest paths (and ignores) of that lane
lane_files() {
  case "$1" in
    verl-launches) echo "$VERL_LAUNCHES" ;;
    verl-demo) echo "$VERL_DEMO" ;;
    verl-accuracy) echo "$VERL_ACCURACY" ;;
    verl) echo "tests/core tests/smoke tests/reward tests/verl tests/data tests/eval tests/demo tests/docs/test_docs.py" \
               "--ignore=tests/verl/test_smoke_e2e.py" "--ignore=tests/verl/test_slurm_smoke.py" "--ignore=$VERL_ACCURACY" "--ignore=${VERL_HOST// / --ignore=}" ;;
    verl-host) echo "$VERL_HOST" ;;
    # the reward engine's own tests (tests/reward) run in the verl suite; flash_attn is stubbed by
    # tests/openrlhf/conftest.py (compat/cpu_stubs.py)
    openrlhf) echo "tests/core tests/openrlhf tests/docs/test_examples_openrlhf.py" ;;
    trl) echo "tests/core tests/trl tests/docs/test_examples_trl.py" ;;
    # another release of TRL's range: the guard, the trainer's hooks in TRL's real GRPO step, the fused-head kernel,
    # `microcoder smoke trl` (real steps), the presets and the doctor
    trl-[0-9]*) echo "$TRL_RELEASE_LANE" ;;
    verl-[0-9]*) echo "$VERL_RELEASE_LANE" ;;
    openrlhf-[0-9]*) echo "$OPENRLHF_RELEASE_LANE" ;;
  esac
}

describe() {  # SUITE PYTHON -> one line naming the framework release the suite runs against
  case "$1" in
    verl*) "$2" -c 'import verl; print("verl", verl.__version__)' 2>/dev/null ;;
    openrlhf*) "$2" -c 'import importlib.metadata as m; print("openrlhf", m.version("openrlhf"))' 2>/dev/null ;;
    trl*) "$2" -c 'import importlib.metadata as m; print("trl", m.version("trl"))' 2>/dev/null ;;
  esac
}

start_build() {  # SUITE: check or build its venv, in the background
  ( py=$(ensure_venv "$1") && echo "$py" >"$LOGS/$1.python" ) 2>"$LOGS/$1.venv.log" &
  BUILD_OF_PID[$!]=$1; BUILD_T0[$1]=$SECONDS
}

built() {  # PID RC: a venv build ended
  local suite=${BUILD_OF_PID[$1]}
  unset "BUILD_OF_PID[$1]"
  if [ "$2" -eq 0 ] && [ -s "$LOGS/$suite.python" ]; then
    PY[$suite]=$(cat "$LOGS/$suite.python"); READY[$suite]=1
    log "suite $suite: $(describe "$suite" "${PY[$suite]}") in $(dirname "$(dirname "${PY[$suite]}")") ($((SECONDS - BUILD_T0[$suite])) s, at $((SECONDS - start)) s)"
  else
    READY[$suite]=0; status=1
    cat "$LOGS/$suite.venv.log" >&2
    echo "run_all: the $suite venv could not be built (log above); its tests do not run" >&2
  fi
}

finish() {  # PID RC: print a finished lane's log and fold its exit code into the run's
  local lane=${LANE_OF_PID[$1]} rc=$2 verdict note
  unset "LANE_OF_PID[$1]"
  note=$(load_note "$(peak_load "$LOAD_SAMPLES" "${LANE_T0[$lane]}" "$SECONDS")" "$CORES")
  log "lane $lane: exit $rc after $((SECONDS - LANE_T0[$lane])) s, $note (log $LOGS/$lane.log)"
  cat "$LOGS/$lane.log"
  verdict=$(lane_verdict "$rc" "$LOGS/$lane.log")
  case "$verdict" in
    ran) collected=1 ;;
    deselected) echo "run_all: lane $lane: the command line's selection deselected every test it collected" >&2 ;;
    empty) status=1
      echo "run_all: lane $lane FAILED: it collected no tests (pytest exit 5; its files: $(lane_files "$lane")):" \
           "a lane that runs nothing fails" >&2 ;;
    *) status=1 ;;
  esac
  SUMMARY+=("$(printf '%-16s exit %s (%s) after %5d s, %s' "$lane" "$rc" "$verdict" "$((SECONDS - LANE_T0[$lane]))" "$note")")
}

start_lane() {  # SUITE LANE [PYTEST ARGS...]: in the background
  local suite=$1 lane=$2 mode; shift 2
  mode=$(venv_install_mode "$suite")
  # a wheel venv (microcoder-ext installed as users install it): PYTHONSAFEPATH=1 keeps this checkout off sys.path in
  # pytest and in every process it starts (launches, Ray and vLLM workers), so all of them import the wheel
  # shellcheck disable=SC2046  # lane_files is a word list
  (cd "$ROOT" && export MICROCODER_TEST_INSTALL="$mode" && if [ "$mode" = wheel ]; then export PYTHONSAFEPATH=1; fi \
   && exec "${PY[$suite]}" -m pytest --durations=20 $(lane_files "$lane") "$@") >"$LOGS/$lane.log" 2>&1 &
  LANE_OF_PID[$!]=$lane; LANE_T0[$lane]=$SECONDS
  log "lane $lane started ($suite venv): $(lane_files "$lane")"
}

wait_any() {  # [TIMEOUT]: the next venv build or lane to end (or nothing after TIMEOUT seconds). Polled: bash's
  # `wait -n` misses a job that ended before it was called (5.2: "no such job"), while `wait PID` still has its status
  local limit=${1:-0} t=0 pid rc running
  while :; do
    running=" $(jobs -rp | tr '\n' ' ') "
    for pid in "${!BUILD_OF_PID[@]}" "${!LANE_OF_PID[@]}"; do
      case "$running" in
        *" $pid "*) ;;
        *) set +e; wait "$pid"; rc=$?; set -e
           if [ -n "${BUILD_OF_PID[$pid]:-}" ]; then built "$pid" "$rc"; else finish "$pid" "$rc"; fi
           return ;;
      esac
    done
    if [ "$limit" -gt 0 ] && [ "$t" -ge "$limit" ]; then return; fi
    sleep 1; t=$((t + 1))
  done
}

is_release() { case "$1" in *-[0-9]*) return 0 ;; esac; return 1; }  # SUITE: verl-0.9.0, ...

# sourced (tests/core/test_run_all.py): the functions above, nothing run
if (return 0 2>/dev/null); then return 0; fi

LOGS=${TEST_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/microcoder-tests.XXXXXX")}
mkdir -p "$LOGS"
# The memory budget of the real launches (tests marked memory(gb), tests/conftest.py): each real training launch
# holds several GB (verl's main_ppo ~8, OpenRLHF's train_ppo_ray ~5), so the lanes' launches wait for a share of this
# budget instead of running out of memory together. Default: the machine's RAM less max(7 GB, 30 %) for everything
# else (pytest processes, sandboxed programs): 16 GB of CI's 24 GB, two verl launches at once; a test that starts
# only Ray (marked slow) takes 2 GB of it. A run started by a test shares its parent's budget.
if [ -z "${MICROCODER_TEST_MEMORY_DIR:-}" ]; then
  export MICROCODER_TEST_MEMORY_DIR="$LOGS/memory-budget"
  mkdir -p "$MICROCODER_TEST_MEMORY_DIR"
  rest_mb=$(( TOTAL_MB * 30 / 100 > 7168 ? TOTAL_MB * 30 / 100 : 7168 ))
  export MICROCODER_TEST_MEMORY_GB=${TEST_MEMORY_GB:-$(( (TOTAL_MB - rest_mb) / 1024 ))}
fi
unset TEST_LOGS  # a run_all.sh that a test starts (tests/docs) gets a directory of its own
start=$SECONDS
status=0
collected=0

lanes=() solo=()
for suite in $SUITES; do
  lanes_of "$suite" >/dev/null || exit 2
  for lane in $(lanes_of "$suite"); do
    case " $SOLO_LANES " in *" $lane "*) solo+=("$suite:$lane") ;; *) lanes+=("$suite:$lane") ;; esac
  done
done

if [ "$TEST_JOBS" = all ]; then TEST_JOBS=$(( ${#lanes[@]} + $(wc -w <<<"$SUITES") )); fi
declare -A PY=() READY=() BUILD_OF_PID=() BUILD_T0=() LANE_OF_PID=() LANE_T0=()
SUMMARY=()

# the load average, every LOAD_SAMPLE_S seconds ("SECONDS LOAD1" lines), for the lanes' and the run's peak load
LOAD_SAMPLES="$LOGS/load.samples"
( while :; do echo "$SECONDS $(cut -d' ' -f1 /proc/loadavg)"; sleep "$LOAD_SAMPLE_S"; done ) >>"$LOAD_SAMPLES" &
SAMPLER=$!
trap 'kill "$SAMPLER" 2>/dev/null || true' EXIT
log "${#lanes[@]} lane(s) and $(wc -w <<<"$SUITES") venv(s), up to $TEST_JOBS at once ($CORES cores, $((TOTAL_MB / 1024)) GB), then ${#solo[@]} lane(s) alone; live logs in $LOGS/<lane>.log; real launches share ${MICROCODER_TEST_MEMORY_GB} GB"


# 1.-2. the venvs and the lanes, up to TEST_JOBS at once (a venv check or build takes a slot as a lane does), then the
# solo lanes one by one. In order: the main suites' venvs, their lanes (LANE_ORDER: the longest first), the release
# suites' venvs, their lanes. A lane takes a free slot ahead of an earlier one only while the earlier one's venv is
# being built (a check of a cached venv takes seconds; a build, minutes); a release lane starts only once every main
# lane has; a release venv is built only while no main lane with its venv ready waits for a slot and a slot stays free
# for each main suite whose venv is not ready yet (on a fresh machine a release venv can be built while the main ones
# are, but must not take the slot of a main lane)
pending=()
for suite in $SUITES; do is_release "$suite" || pending+=("venv:$suite"); done
for lane in $LANE_ORDER; do
  for entry in "${lanes[@]}"; do if [ "${entry#*:}" = "$lane" ]; then pending+=("$entry"); fi; done
done
for entry in "${lanes[@]}"; do  # a main lane LANE_ORDER does not name: after those it names
  case " $LANE_ORDER " in *" ${entry#*:} "*) ;; *) if ! is_release "${entry%%:*}"; then pending+=("$entry"); fi ;; esac
done
for suite in $SUITES; do if is_release "$suite"; then pending+=("venv:$suite"); fi; done
for entry in "${lanes[@]}"; do if is_release "${entry%%:*}"; then pending+=("$entry"); fi; done
while [ "${#pending[@]}" -gt 0 ] || [ "${#LANE_OF_PID[@]}" -gt 0 ] || [ "${#BUILD_OF_PID[@]}" -gt 0 ]; do
  rest=() held=0 main_waiting=0 main_ready_waiting=0 main_unready=0
  for suite in $SUITES; do
    if ! is_release "$suite" && [ -z "${READY[$suite]:-}" ]; then main_unready=$((main_unready + 1)); fi
  done
  for entry in "${pending[@]}"; do
    suite=${entry#venv:}; suite=${suite%%:*}
    release=0 free=$(( TEST_JOBS - ${#LANE_OF_PID[@]} - ${#BUILD_OF_PID[@]} ))
    if is_release "$suite"; then release=1; fi
    case "$entry" in
      venv:*)
        base=$(venv_base "$suite")  # an overlay venv is built over its base's, once that is ready
        if [ -n "$base" ] && [ "${READY[$base]:-}" != 1 ] && [[ " $SUITES " == *" $base "* ]]; then
          if [ "${READY[$base]:-}" = 0 ]; then
            READY[$suite]=0; status=1
            echo "run_all: the $suite venv is an overlay of the $base venv, which could not be built: its tests do not run" >&2
          else rest+=("$entry"); fi
          continue
        fi
        if [ "$free" -gt $(( release * main_unready )) ] && [ $(( release * main_ready_waiting )) -eq 0 ]; then
          start_build "$suite"
        else rest+=("$entry"); fi
        continue ;;
    esac
    if [ "$release" -eq 1 ] && [ "$main_waiting" -eq 1 ]; then rest+=("$entry"); continue; fi
    case "${READY[$suite]:-}" in
      1) if [ "$free" -gt 0 ] && [ "$held" -eq 0 ]; then start_lane "$suite" "${entry#*:}" "$@"
         else rest+=("$entry"); main_waiting=$((main_waiting | !release)); main_ready_waiting=$((main_ready_waiting | !release)); fi ;;
      0) ;;  # its venv failed: reported above
      *) rest+=("$entry"); main_waiting=$((main_waiting | !release))
         if [ -n "${BUILD_T0[$suite]:-}" ] && [ $((SECONDS - BUILD_T0[$suite])) -lt 60 ]; then held=1; fi ;;
    esac
  done
  pending=("${rest[@]}")
  if [ "${#LANE_OF_PID[@]}" -eq 0 ] && [ "${#BUILD_OF_PID[@]}" -eq 0 ]; then break; fi
  wait_any $((5 * held))  # held: an earlier lane's venv is still being checked, look again in 5 s
done
for entry in "${solo[@]}"; do
  if [ "${READY[${entry%%:*}]:-}" = 1 ]; then start_lane "${entry%%:*}" "${entry#*:}" "$@"; wait_any; fi
done

if [ "$collected" -eq 0 ]; then echo "run_all: no lane ran a test: failing" >&2; status=1; fi
log "run_all: exit $status after $((SECONDS - start)) s, $(load_note "$(peak_load "$LOAD_SAMPLES" 0 "$SECONDS")" "$CORES"); lanes:
$(printf '  %s\n' "${SUMMARY[@]}")"
exit $status
