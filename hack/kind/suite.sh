#!/usr/bin/env bash
# The command `make test` runs on the bed (hack/test.sh): once the virtualenv is complete (its
# lock is held while hack/test.sh makes it beside the bed's build), pytest with the given
# arguments; the tests that need what the bed still builds wait for it themselves (helm and
# kube-score: $GRAPPA_TOOLS_READY; SeaweedFS: $GRAPPA_S3_READY; the cluster; Kueue: tests/kind_bed.py).
#   suite.sh <venv> <pytest arguments...>
set -euo pipefail
venv=$1
shift
PYTHON=${PYTHON:-python3} "$(dirname "${BASH_SOURCE[0]}")/../ensure-venv.sh" "$venv" >&2
exec "$venv/bin/python" -m pytest "$@"
