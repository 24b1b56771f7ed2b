#!/usr/bin/env bash
# A real Kueue for the bed, from its released source: the Go module proxy refuses sigs.k8s.io/kueue,
# so ../shared/vendor-src holds the release tarball with its vendor/ (it builds offline).
#   kueue.sh build               # manager binary + chart (cached by tarball hash), image grappa-kueue:bed
#   kueue.sh binary | image      # the same in two steps: the Go build (CPU), the image (needs dockerd)
#   kueue.sh install <kubeconfig> # load the image, helm install with GrappaJob as an external framework
#   kueue.sh available           # true when the source is there (the bed then installs Kueue)
# Without the tarball both print why and do nothing; the Kueue e2e test then skips with that reason
# unless GRAPPA_E2E_KUEUE says the bed installed it. Elsewhere the test installs Kueue's release.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
KUEUE_VERSION=v0.19.2
KUEUE_SRC=${GRAPPA_KUEUE_SRC:-$REPO/../shared/vendor-src/kueue-$KUEUE_VERSION.tar.gz}
KUEUE_IMAGE=grappa-kueue:bed
KUEUE_RECIPE=2  # bump when build() changes what it makes

image_key() { docker image inspect -f '{{index .Config.Labels "grappa.bed.key"}}' "$1" 2>/dev/null || true; }
cache_dir() { echo "$GRAPPA_CACHE/kueue-$KUEUE_VERSION-$(printf '%s %s' "$(hash_of "$KUEUE_SRC")" "$KUEUE_RECIPE" | sha256sum | cut -c1-12)"; }

binary() {
    [[ -f $KUEUE_SRC ]] || { log "no Kueue source at $KUEUE_SRC: Kueue is not installed on the bed"; return 0; }
    local dir src
    dir=$(cache_dir)
    if [[ ! -x $dir/manager || ! -d $dir/chart ]]; then
        log "Kueue $KUEUE_VERSION from $KUEUE_SRC (go build, vendored modules) ..."
        src=$BED/run/kueue-src
        rm -rf "$src" "$dir.tmp" && mkdir -p "$src" "$dir.tmp"
        tar -xzf "$KUEUE_SRC" -C "$src" --strip-components=1
        (cd "$src" && GOPROXY=off GOFLAGS=-mod=vendor go build -p "${GRAPPA_BUILD_JOBS:-2}" -trimpath "$GO_TEST_ONLY" \
            -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
            -o "$dir.tmp/manager" ./cmd/kueue) >&2
        cp -r "$src/charts/kueue" "$dir.tmp/chart"
        cp "$src/LICENSE" "$dir.tmp/"
        rm -rf "$src" "$dir" && mv "$dir.tmp" "$dir"
    fi
}

image() {
    [[ -f $KUEUE_SRC ]] || return 0
    local dir key
    dir=$(cache_dir)
    [[ -x $dir/manager ]] || die "no Kueue binary in $dir: run kueue.sh binary first"
    key=$(basename "$dir")
    [[ -z ${GRAPPA_REBUILD:-} && $(image_key "$KUEUE_IMAGE") == "$key" ]] && return 0
    local ctx=$BED/run/kueue-context
    rm -rf "$ctx" && mkdir -p "$ctx" && cp "$dir/manager" "$ctx/manager"
    # A static Go binary needs nothing else; the chart mounts its certificates and configuration.
    printf 'FROM scratch\nCOPY manager /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' >"$ctx/Dockerfile"
    docker build --network none --label "grappa.bed.key=$key" -t "$KUEUE_IMAGE" "$ctx" >"$BED/logs/build-kueue.log" 2>&1 \
        || { tail -20 "$BED/logs/build-kueue.log" >&2; die "docker build of $KUEUE_IMAGE failed"; }
    rm -rf "$ctx"
    log "$KUEUE_IMAGE ready ($key)"
}

# Kueue's configuration: its defaults plus GrappaJob as a framework an external controller manages
# (the operator files the Workloads itself; docs/operator.md, "Queueing with Kueue").
values() {
    cat <<EOF
controllerManager:
  manager:
    image: {repository: ${KUEUE_IMAGE%%:*}, tag: ${KUEUE_IMAGE##*:}, pullPolicy: Never}
    resources: {requests: {cpu: 50m, memory: 128Mi}, limits: {memory: 512Mi}}
managerConfig:
  controllerManagerConfigYaml: |-
    apiVersion: config.kueue.x-k8s.io/v1beta2
    kind: Configuration
    health: {healthProbeBindAddress: ":8081"}
    metrics: {bindAddress: ":8443"}
    webhook: {port: 9443}
    leaderElection: {leaderElect: true, resourceName: c1f6bfd2.kueue.x-k8s.io}
    integrations:
      frameworks: ["batch/job"]
      externalFrameworks: ["GrappaJob.v1alpha1.grappa.dev"]
EOF
}

install() {
    local kubeconfig=$1 dir start=$SECONDS
    [[ -f $KUEUE_SRC ]] || { log "no Kueue source at $KUEUE_SRC: Kueue not installed"; return 0; }
    dir=$(cache_dir)
    kind load docker-image --name "$CLUSTER" "$KUEUE_IMAGE" >&2
    values >"$BED/run/kueue-values.yaml"
    KUBECONFIG=$kubeconfig helm install kueue "$dir/chart" --namespace kueue-system --create-namespace \
        -f "$BED/run/kueue-values.yaml" --wait --timeout 300s >&2
    log "Kueue $KUEUE_VERSION installed in $((SECONDS - start))s"
}

case ${1:-} in
    available) [[ -f $KUEUE_SRC ]] ;;
    build) binary; image ;;
    binary) binary ;;
    image) image ;;
    install) install "${2:?kubeconfig path}" ;;
    *) echo "usage: $0 available | build | binary | image | install <kubeconfig>" >&2; exit 2 ;;
esac
