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
echo ">> creating virtualenv $venv (first run only: downloads torch, a few minutes)"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --progress-bar off -r "$(dirname "$0")/requirements.lock"
touch "$venv/.ready"
