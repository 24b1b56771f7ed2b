#!/usr/bin/env bash
# Creates the DistDGL peer's virtualenv (bench/distdgl/requirements.lock) unless it is complete,
# and prints its python (last line of stdout). Keyed like ours by the lock's hash and the Python
# version; the wheels (~2.6 GB: torch 2.1 comes with its CUDA wheels) are downloaded once into a
# wheelhouse beside it. Nothing in the product imports DGL: only bench/distdgl_job.py runs this.
#   py=$(hack/peer-env.sh | tail -1)
# Environment: PYTHON (default python3), GRAPPA_CACHE (default $HOME/.cache/grappa).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock=$here/../bench/distdgl/requirements.lock
python=${PYTHON:-python3}
cache=${GRAPPA_CACHE:-$HOME/.cache/grappa}
key=$( (printf '%s\n' "$("$python" -c 'import sys; print(sys.version.split()[0])')"; cat "$lock") | sha256sum | cut -c1-16)
venv=$cache/peer-dgl-$key
wheels=$cache/peer-wheels-$key
mkdir -p "$cache"
exec 9>"$venv.lock"
flock 9
if [[ ! -f $venv/.ready ]]; then
    t0=$SECONDS
    if [[ ! -f $wheels/.complete ]]; then
        echo ">> downloading the DistDGL peer's wheels into $wheels (once per lock, ~2.6 GB)" >&2
        mkdir -p "$wheels"
        "$python" -m pip download --quiet --only-binary=:all: -r "$lock" -d "$wheels" >&2
        touch "$wheels/.complete"
    fi
    echo ">> creating the DistDGL peer's virtualenv $venv" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --progress-bar off --no-index --find-links "$wheels" -r "$lock" >&2
    "$venv/bin/python" -c 'import dgl.distributed' >&2
    touch "$venv/.ready"
    echo ">> DistDGL peer environment ready in $((SECONDS - t0))s" >&2
fi
echo "$venv/bin/python"
