#!/usr/bin/env bash
# Creates the virtualenv at $1 from hack/requirements.lock unless it is already complete.
# A lock serialises concurrent `make` runs; `.ready` is written last, so a half-built
# environment (interrupted download) is rebuilt, never used.
set -euo pipefail
venv=$1
python=${PYTHON:-python3}
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
[ -f "$venv/.ready" ] && exit 0
# Wheels come from the shared wheelhouse (downloaded once per lock; the images use it too).
wheels=$(PYTHON=$python "$(dirname "$0")/wheelhouse.sh" | tail -1)
echo ">> creating virtualenv $venv from $wheels"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --progress-bar off --no-index --find-links "$wheels" -r "$(dirname "$0")/requirements.lock"
touch "$venv/.ready"
