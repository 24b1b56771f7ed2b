#!/usr/bin/env bash
# The command `make test` runs on the bed (hack/test.sh): once the virtualenv is complete (its
# lock is held while hack/test.sh makes it beside the bed's build) and the bed has built what the
# unit tests run (helm, kube-score: $GRAPPA_TOOLS_READY), pytest with the given arguments; its e2e
# tests wait for the cluster themselves (tests/kind_bed.py).
#   suite.sh <venv> <pytest arguments...>
set -euo pipefail
venv=$1
shift
PYTHON=${PYTHON:-python3} "$(dirname "${BASH_SOURCE[0]}")/../ensure-venv.sh" "$venv" >&2
if [[ -n ${GRAPPA_TOOLS_READY:-} ]]; then
    failed=${GRAPPA_TOOLS_READY%.ready}.failed
    until [[ -e $GRAPPA_TOOLS_READY ]]; do
        [[ -e $failed ]] && { echo "suite.sh: the bed could not build helm and kube-score (see its logs)" >&2; exit 1; }
        sleep 2
    done
fi
exec "$venv/bin/python" -m pytest "$@"
