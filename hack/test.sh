#!/usr/bin/env bash
# `make test`: the whole suite, on a fresh machine as on a warm one, and at its end the time of
# every phase. Phases that use different resources run side by side: the virtualenv and the
# DistDGL peer's environment (downloads, disk) beside the test bed's build (Go builds on both
# cores, root filesystems, images: hack/kind/bed.sh); pytest starts once the virtualenv is there,
# its unit tests beside the build, its e2e tests as soon as the cluster is up (tests/kind_bed.py).
#   hack/test.sh <venv> <pytest arguments...>
# Phase times: $GRAPPA_CACHE/kind-bed/logs/phases.txt (hack/phases.py prints them).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${1:?usage: hack/test.sh <venv> <pytest arguments...>}
shift
export GRAPPA_CACHE=${GRAPPA_CACHE:-$HOME/.cache/grappa}
# Python writes its bytecode (each package's __pycache__, git-ignored). Where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine's does), each of the run's hundreds of Python processes
# compiles the project's modules again: importing a rank's modules took 3.4 CPU-s without their
# bytecode against 2.7 with it, measured here; and each pytest worker rewrote every test module.
unset PYTHONDONTWRITEBYTECODE
export GRAPPA_T0=$(date +%s) GRAPPA_PHASES=$GRAPPA_CACHE/kind-bed/logs/phases.txt
source "$here/kind/lib.sh"  # phase, job, await; $BED and its folders
: >"$GRAPPA_PHASES"

python3 "$here/cpu_sample.py" "$GRAPPA_PHASES" & sampler=$!  # the run's CPU, in rows cpu-*
stop_sampler() { kill -TERM "$sampler" 2>/dev/null && wait "$sampler" || true; }

summary() {  # the whole run as a phase of its own (its status: ok or exit-N), its CPU, the timeline
    local rc=$?
    stop_sampler
    echo "make-test 0 $(($(date +%s) - GRAPPA_T0)) $([[ $rc == 0 ]] && echo ok || echo "exit-$rc")" >>"$GRAPPA_PHASES"
    python3 "$here/phases.py" "$GRAPPA_PHASES" "$GRAPPA_T0"
    local junit=$GRAPPA_CACHE/kind-bed/logs/tests.xml  # the Makefile's --junitxml: this run's, if newer
    if [[ -f $junit && $(stat -c %Y "$junit") -ge $GRAPPA_T0 ]]; then
        python3 "$here/../tests/cpu_use.py" "$junit" 10 >&2 || true
    fi
}
trap summary EXIT

phase deps "$here/install-test-deps.sh"
job venv env PYTHON="${PYTHON:-python3}" "$here/ensure-venv.sh" "$venv"
# The peer smoke test waits for this one itself (peer-env.sh's lock) and says why if it failed.
job peer-env "$here/peer-env.sh"
rc=0
"$here/kind/bed.sh" run --early -- "$here/kind/suite.sh" "$venv" "$@" || rc=$?
stop_sampler
wait || true  # the environments' jobs, long done by now
exit $rc
