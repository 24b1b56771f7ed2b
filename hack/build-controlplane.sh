#!/usr/bin/env bash
# Builds the local control plane used by the e2e suite from source (no Docker, no downloads of
# prebuilt binaries): kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd; and
# helm (`--helm`) in a folder of its own, since a kind node needs only the others and is built first.
#
# Sources come through the Go module proxy, pinned by the wrapper modules in hack/controlplane/.
# Output goes to a versioned cache folder that is reused while the pins, this script and the Go
# toolchain stay the same:
#   ${GRAPPA_CACHE:-$HOME/.cache/grappa}/controlplane-<k8s>-etcd<ver>-<hash>/bin/
# The last line on stdout is always that bin folder:  BIN=$(hack/build-controlplane.sh | tail -1)
# (`--path` prints it without building; `--helm` builds only helm, into a folder of its own, and
# prints that one's bin/).
# Progress goes to stderr.
#
# Environment:
#   GRAPPA_CACHE        cache root (default: $HOME/.cache/grappa)
#   GRAPPA_BUILD_JOBS   go build -p (default 2: keeps a 2-core / 24 GiB machine usable)
#   GRAPPA_REBUILD=1    ignore an existing stamp and build again
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cp_dir="$here/controlplane"
script="$here/$(basename "${BASH_SOURCE[0]}")"

# helm installs straight from its own module (go install pkg@version), so its pin lives here.
HELM_VERSION=v3.22.0
# helm's Makefile derives these from its k8s.io/client-go (v0.37.x -> 1.37); they are the
# default .Capabilities.KubeVersion for `helm template` and the deprecation lint target.
HELM_K8S_MAJOR=1
HELM_K8S_MINOR=37

export GOTOOLCHAIN=local CGO_ENABLED=0
# Only the wrapper modules decide what is built: no go.work from a parent folder, no GOFLAGS
# from the caller (e.g. -mod=mod would let go.mod drift). GOMODCACHE/GOCACHE stay at Go's
# defaults, so modules and compiled packages persist across runs and checkouts.
export GOWORK=off GOFLAGS=
# Compile flags that cut the cold build's CPU, not what the binaries do: every binary is linked
# with -s -w, which throws the compiler's DWARF away, so none is made; helm only serves the tests,
# so it is also built without optimization and inlining (-N -l), which compile faster.
NO_DWARF=-gcflags=all=-dwarf=false
TEST_ONLY="-gcflags=all=-N -l -dwarf=false"
command -v go >/dev/null || { echo "build-controlplane: go not found in PATH" >&2; exit 1; }

# Version of a required module, read from a wrapper's go.mod (no network, no module loading).
modver() { go mod edit -json "$1/go.mod" | tr -d ' \t\n' | grep -o "\"Path\":\"$2\",\"Version\":\"v[^\"]*\"" | head -1 | sed 's/.*"Version":"\(v[^"]*\)"/\1/'; }
K8S_VERSION=$(modver "$cp_dir/kubernetes" k8s.io/kubernetes)
ETCD_VERSION=$(modver "$cp_dir/etcd" go.etcd.io/etcd/server/v3)
[[ $K8S_VERSION =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "build-controlplane: cannot read k8s.io/kubernetes version" >&2; exit 1; }
K8S_MAJOR=${BASH_REMATCH[1]} K8S_MINOR=${BASH_REMATCH[2]}
[[ -n $ETCD_VERSION ]] || { echo "build-controlplane: cannot read etcd version" >&2; exit 1; }

key=$(cat "$cp_dir/kubernetes/go.mod" "$cp_dir/kubernetes/go.sum" \
          "$cp_dir/etcd/go.mod" "$cp_dir/etcd/go.sum" "$script" <(go env GOVERSION GOOS GOARCH) \
      | sha256sum | cut -c1-12)
cache=${GRAPPA_CACHE:-$HOME/.cache/grappa}
dest="$cache/controlplane-$K8S_VERSION-etcd${ETCD_VERSION#v}-$key"
# helm has a folder of its own, built first by `make test` (the chart tests need it early) and
# copied into the control plane's bin/ as well.
helm_dest="$cache/helm-$HELM_VERSION-$( (printf '%s %s %s' "$HELM_K8S_MAJOR" "$HELM_K8S_MINOR" "$HELM_VERSION"; go env GOVERSION GOOS GOARCH) | sha256sum | cut -c1-12)"

# --path, --helm-path: where the binaries are (or will be), without building them
if [[ ${1:-} == --helm-path ]]; then
    echo "$helm_dest/bin"
    exit 0
fi
if [[ ${1:-} == --path || (${1:-} != --helm && -f $dest/.stamp && -z ${GRAPPA_REBUILD:-}) ]]; then
    echo "$dest/bin"
    exit 0
fi

jobs=${GRAPPA_BUILD_JOBS:-2}
t0=$SECONDS
log() { printf '[build-controlplane %4ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
# Commit date and hash of a pinned release, from the proxy's .info file (the hash is there only
# when the proxy recorded the origin). The date is used as buildDate, so builds are reproducible.
modfield() {  # modfield <dir> <module@version> <Time|Hash>
    local info
    info=$(cd "$1" && go mod download -json "$2" | sed -n 's/^\s*"Info": *"\(.*\)",*$/\1/p')
    [[ -f $info ]] && tr -d ' \t\n' <"$info" | grep -o "\"$3\":\"[^\"]*\"" | head -1 | cut -d'"' -f4 || true
}

build_helm() {  # prints helm's bin folder, building it once per version
    if [[ -x $helm_dest/bin/helm && -z ${GRAPPA_REBUILD:-} ]]; then echo "$helm_dest/bin"; return; fi
    mkdir -p "$cache"
    exec 8>"$cache/.helm.lock"
    flock 8
    if [[ ! -x $helm_dest/bin/helm || -n ${GRAPPA_REBUILD:-} ]]; then
        local htmp helm_pkg=helm.sh/helm/v${HELM_VERSION:1:1} helm_commit start=$SECONDS
        rm -rf "$cache"/.helm-build.*  # left by a killed build (we hold the lock)
        htmp=$(mktemp -d "$cache/.helm-build.XXXXXX")
        helm_commit=$(modfield "$htmp" "$helm_pkg@$HELM_VERSION" Hash)
        log "building helm ..."
        (cd "$htmp" && GOBIN="$htmp/bin" go install -p "$jobs" -trimpath -buildvcs=false "$TEST_ONLY" -ldflags "-s -w \
            -X $helm_pkg/internal/version.version=$HELM_VERSION -X $helm_pkg/internal/version.gitTreeState=clean \
            -X $helm_pkg/internal/version.gitCommit=$helm_commit \
            -X $helm_pkg/pkg/lint/rules.k8sVersionMajor=$HELM_K8S_MAJOR \
            -X $helm_pkg/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR \
            -X $helm_pkg/pkg/chartutil.k8sVersionMajor=$HELM_K8S_MAJOR \
            -X $helm_pkg/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR" \
            "$helm_pkg/cmd/helm@$HELM_VERSION")
        "$htmp/bin/helm" version >/dev/null || { log "helm does not run"; rm -rf "$htmp"; exit 1; }
        rm -rf "$helm_dest" && mkdir -p "$helm_dest" && mv "$htmp/bin" "$helm_dest/bin" && rm -rf "$htmp"
        log "built helm in $((SECONDS - start))s"
    fi
    exec 8>&-
    echo "$helm_dest/bin"
}

# --helm: only helm, in its own folder (prints its bin/)
if [[ ${1:-} == --helm ]]; then
    build_helm
    exit 0
fi

mkdir -p "$cache"
# One build at a time per cache (parallel test workers may all call this).
exec 9>"$cache/.controlplane.lock"
flock 9
if [[ -f $dest/.stamp && -z ${GRAPPA_REBUILD:-} ]]; then  # built by whoever held the lock
    echo "$dest/bin"
    exit 0
fi

rm -rf "$cache"/.controlplane-build.*  # left by a killed build (we hold the lock)
tmp=$(mktemp -d "$cache/.controlplane-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"

gobuild() {  # gobuild <module dir> <output name, or "" for several packages> <go build args...>
    local dir=$1 name=$2 start=$SECONDS
    shift 2
    log "building ${name:-${*: -4}} ..."
    (cd "$dir" && go build -p "$jobs" -mod=readonly -trimpath -buildvcs=false "$NO_DWARF" \
        -o "$tmp/bin/$name" "$@")
    log "built ${name:-them} in $((SECONDS - start))s ($(du -ch "$tmp/bin/"* | tail -1 | cut -f1) in bin/)"
}

log "k8s $K8S_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, $(go env GOVERSION), -p $jobs -> $dest"

k8s_date=$(modfield "$cp_dir/kubernetes" "k8s.io/kubernetes@$K8S_VERSION" Time)
k8s_commit=$(modfield "$cp_dir/kubernetes" "k8s.io/kubernetes@$K8S_VERSION" Hash)
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR -X $pkg.gitMinor=$K8S_MINOR"
    k8s_ldflags+=" -X $pkg.gitCommit=$k8s_commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=${k8s_date:-1970-01-01T00:00:00Z}"
done
# Same tags as the upstream release build (hack/lib/golang.sh). One `go build` for the four: the
# packages they share compile once and one binary links while the others still compile.
gobuild "$cp_dir/kubernetes" "" -tags selinux,notest,grpcnotrace -ldflags "$k8s_ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

gobuild "$cp_dir/etcd" etcd \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" go.etcd.io/etcd/server/v3

for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd; do
    "$tmp/bin/$b" --version >/dev/null 2>&1 || "$tmp/bin/$b" version --client >/dev/null 2>&1 \
        || "$tmp/bin/$b" version >/dev/null 2>&1 || { log "$b does not run"; exit 1; }
done

cat >"$tmp/.stamp" <<EOF
kubernetes=$K8S_VERSION
etcd=$ETCD_VERSION
go=$(go env GOVERSION)
key=$key
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
seconds=$((SECONDS - t0))
EOF
chmod 755 "$tmp"
rm -rf "$dest"  # an unstamped leftover, or GRAPPA_REBUILD
mv "$tmp" "$dest"
trap - EXIT
log "done in $((SECONDS - t0))s"
echo "$dest/bin"
