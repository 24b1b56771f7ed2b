#!/usr/bin/env bash
# Downloads every wheel of hack/requirements.lock (torch included) into a folder keyed by the lock's
# hash and the Python version, once per machine. Both the virtualenv (hack/ensure-venv.sh) and the
# images (hack/kind/images.sh) install from it with `pip install --no-index --find-links`, so torch
# crosses the network once and no `docker build` needs the network at all.
#   dir=$(hack/wheelhouse.sh)      # prints the folder (last line of stdout); progress on stderr
# Environment: PYTHON (default python3), GRAPPA_CACHE (default $HOME/.cache/grappa).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock=$here/requirements.lock
python=${PYTHON:-python3}
cache=${GRAPPA_CACHE:-$HOME/.cache/grappa}
key=$( (printf '%s\n' "$("$python" -c 'import sys; print(sys.version.split()[0])')"; cat "$lock") | sha256sum | cut -c1-16)
dest=$cache/wheelhouse-$key
mkdir -p "$cache"
exec 8>"$dest.lock"
flock 8
if [[ ! -f $dest/.complete ]]; then
    echo ">> downloading the wheels of hack/requirements.lock into $dest (once per lock: torch is ~2.6 GB)" >&2
    t0=$SECONDS
    mkdir -p "$dest"
    # Only wheels: an sdist would need the network again to build. pip skips files already there,
    # so an interrupted download resumes where it stopped.
    "$python" -m pip download --quiet --only-binary=:all: -r "$lock" -d "$dest" >&2
    printf 'seconds=%s\n' "$((SECONDS - t0))" >"$dest/.complete"
    echo ">> wheelhouse ready in $((SECONDS - t0))s ($(du -sh "$dest" | cut -f1))" >&2
fi
echo "$dest"
