#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (its S3 gateway is the tests' S3 server: tests/s3_server.py) once per
# version from the Go module proxy into ~/.cache/grappa/seaweedfs-<version>/ and prints the
# binary's path. The bed builds it last (hack/kind/bed.sh, $GRAPPA_S3_READY); the fixture calls it
# too and fails, never skips, when it cannot.
#   hack/seaweedfs.sh                  # $SEAWEEDFS_VERSION overrides the pinned version
set -euo pipefail

VERSION="${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
MODULE=github.com/seaweedfs/seaweedfs
CACHE="${GRAPPA_CACHE:-$HOME/.cache/grappa}"
DIR="$CACHE/seaweedfs-$VERSION"
BIN="$DIR/bin/weed"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
if [[ ! -x "$GO" ]]; then
  echo "seaweedfs.sh: no Go toolchain (set GO=/path/to/go)" >&2
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
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
# `go install module@version` refuses a module whose go.mod has a replace directive, and
# SeaweedFS's has one: so the module's source from the proxy (Go's module cache, shared with the
# bed's other Go builds), built in place as its own main module, with its own go.mod and go.sum
# (-mod=readonly: nothing resolved anew). Installed to tmp, then moved: a half-finished build
# never leaves a binary behind. -s -w as upstream's own Makefile builds it (no symbol table, no
# DWARF: a smaller binary and a shorter link), so the compiler makes no DWARF either (less CPU).
# Optimized, unlike the other tools the tests alone run: the peer benchmark's storage machine runs it.
(cd "$tmp" && GOFLAGS=-mod=mod "$GO" mod download -json "$MODULE@$VERSION" >"$tmp/download.json") \
  || { cat "$tmp/download.json" >&2; echo "seaweedfs.sh: $MODULE@$VERSION could not be downloaded" >&2; exit 1; }
src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' "$tmp/download.json")
[[ -f "$src/go.mod" ]] || { cat "$tmp/download.json" >&2; echo "seaweedfs.sh: no source of $MODULE@$VERSION" >&2; exit 1; }
(cd "$src" && GOFLAGS=-mod=readonly "$GO" build -trimpath -gcflags=all=-dwarf=false -ldflags="-s -w" -o "$tmp/bin/weed" ./weed) >&2
mkdir -p "$DIR/bin"
mv "$tmp/bin/weed" "$BIN"
echo "$BIN"
