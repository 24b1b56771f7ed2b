#!/usr/bin/env bash
# Builds kube-score (static checks of rendered manifests) once per version from the Go module
# proxy into ~/.cache/grappa/kube-score-<version>/ and prints the binary's path. The chart test
# (tests/operator/test_op_kube_score.py) calls it and skips when it fails (no network, no Go).
#   hack/kube-score.sh                 # $KUBE_SCORE_VERSION overrides the pinned version
set -euo pipefail

VERSION="${KUBE_SCORE_VERSION:-v1.20.0}"
CACHE="${GRAPPA_CACHE:-$HOME/.cache/grappa}"
DIR="$CACHE/kube-score-$VERSION"
BIN="$DIR/bin/kube-score"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
if [[ ! -x "$GO" ]]; then
  echo "kube-score.sh: no Go toolchain (set GO=/path/to/go)" >&2
  exit 1
fi
mkdir -p "$DIR"
exec 9>"$DIR.lock"  # one build at a time (make test builds it while the unit tests start)
flock 9
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
rm -rf "$DIR"/.build.*  # left by a killed build (we hold the lock)
tmp=$(mktemp -d "$DIR/.build.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
# Go's own module and build caches, shared with the bed's other Go builds (a cache of its own
# compiled the standard library and the YAML and Kubernetes packages again, cold); a
# half-finished build never leaves a binary behind (installed to tmp, then moved).
GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod GOBIN="$tmp/bin" CGO_ENABLED=0 \
  "$GO" install -trimpath "-gcflags=all=-N -l -dwarf=false" -ldflags="-s -w" "github.com/zegl/kube-score/cmd/kube-score@$VERSION" >&2
mkdir -p "$DIR/bin"
mv "$tmp/bin/kube-score" "$BIN"
echo "$BIN"
