# Shared settings of the offline kind test bed (sourced by the scripts beside it).
# Everything the bed makes lives under $BED (its own dockerd, data root, logs), is named "grappa-*",
# and is keyed by pinned versions, so a second run reuses the cached images.
set -euo pipefail
KIND_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$KIND_DIR/../.." && pwd)
GRAPPA_CACHE=${GRAPPA_CACHE:-$HOME/.cache/grappa}
BED=${GRAPPA_KIND_BED:-$GRAPPA_CACHE/kind-bed}
KIND_VERSION=v0.33.0
# Debian release the base images are made from (python3.11 is bookworm's Python).
DEBIAN_SUITE=bookworm
CLUSTER=grappa-e2e
# Addresses (see README.md): link-local docker bridge, RFC 2544 space for the kind network.
DOCKER_BRIDGE=grappa-docker0 DOCKER_BIP=169.254.123.1/24
KIND_BRIDGE=grappa-kind0 KIND_SUBNET=198.18.0.0/24 KIND_GATEWAY=198.18.0.1
POD_SUBNET=198.18.128.0/17 SERVICE_SUBNET=198.19.0.0/20
GUARD_CHAIN=GRAPPA-BED-GUARD
# A folder of the host the node mounts read-only at $NODE_SHARE_PATH (kind's extraMounts): what
# the bed builds after the cluster is made shows up in the node without an image load. The
# seaweedfs job links weed into its seaweedfs/ (tests/e2e/test_s3_job.py runs it in a pod).
NODE_SHARE=$BED/node-share NODE_SHARE_PATH=/grappa-bed
export DOCKER_HOST=unix://$BED/run/docker.sock DOCKER_BUILDKIT=0
export GOTOOLCHAIN=local GOWORK=off GOFLAGS= CGO_ENABLED=0
# Compile flags that cut the cold build's CPU (as in hack/build-controlplane.sh): no DWARF, which
# the linker's -s -w drops anyway; the tools only the tests run (Kueue's manager) also without
# optimization and inlining.
GO_NO_DWARF=-gcflags=all=-dwarf=false GO_TEST_ONLY="-gcflags=all=-N -l -dwarf=false"
export PATH=$BED/bin:$PATH
mkdir -p "$BED/bin" "$BED/run" "$BED/logs" "$BED/stamps" "$NODE_SHARE/seaweedfs"

_t0=$SECONDS
log() { printf '[kind-bed %s %4ds] %s\n' "${0##*/}" "$((SECONDS - _t0))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

k8s_version() {  # the release pinned by the control plane's wrapper module
    go mod edit -json "$REPO/hack/controlplane/kubernetes/go.mod" | tr -d ' \t\n' \
        | grep -o '"Path":"k8s.io/kubernetes","Version":"v[^"]*"' | sed 's/.*"Version":"\(v[^"]*\)"/\1/'
}

# This machine's quirks, detected (a normal machine has neither):
#  - the capability bounding set lacks CAP_SYS_RESOURCE (bit 24): privileged containers and negative
#    oom_score_adj fail, so runtime wrappers strip both;
#  - cgroup v1: kubelet >= 1.35 refuses it unless failCgroupV1 is false.
quirk_no_sys_resource() { local b; b=$(awk '/^CapBnd/{print $2}' /proc/self/status); (( (0x$b >> 24 & 1) == 0 )); }
quirk_cgroup_v1() { [[ $(stat -fc %T /sys/fs/cgroup) != cgroup2fs ]]; }

# Phase times of one `make test` (or `bed.sh build`): a line per phase, "name start seconds
# status", start counted from $GRAPPA_T0, the run's start; hack/test.sh prints them at the end.
PHASES_GIVEN=${GRAPPA_PHASES:-}  # set by hack/test.sh, which keeps the whole run's phases
GRAPPA_T0=${GRAPPA_T0:-$(date +%s)}
GRAPPA_PHASES=${GRAPPA_PHASES:-$BED/logs/phases.txt}
export GRAPPA_T0 GRAPPA_PHASES

phase() {  # phase <name> <command...>: runs it in the foreground and records its time
    local start rc=0
    start=$(date +%s)
    "${@:2}" || rc=$?
    printf '%s %s %s %s\n' "$1" "$((start - GRAPPA_T0))" "$(($(date +%s) - start))" \
        "$([[ $rc == 0 ]] && echo ok || echo "failed:$rc")" >>"$GRAPPA_PHASES"
    return $rc
}

# Phases that do not compete for one resource run side by side (downloads and disk-bound root
# filesystems beside the CPU-bound Go builds): `job` starts one in the background, its output in
# $BED/logs/<name>.log; `await` waits for jobs and stops the caller, naming the log, if one failed.
declare -A JOB_PID=()
job() {  # job <name> <command...>
    phase "$1" "${@:2}" >"$BED/logs/$1.log" 2>&1 &
    JOB_PID[$1]=$!
}
await() {  # await <name>...
    local name rc
    for name in "$@"; do
        [[ -n ${JOB_PID[$name]:-} ]] || continue
        rc=0
        wait "${JOB_PID[$name]}" || rc=$?
        unset "JOB_PID[$name]"
        if [[ $rc != 0 ]]; then
            tail -25 "$BED/logs/$name.log" >&2
            die "$name failed (exit $rc; log: $BED/logs/$name.log)"
        fi
    done
}

# stamp <name> <key>: true when the named artefact was built with this key.
stamp_ok() { [[ -z ${GRAPPA_REBUILD:-} && -f $BED/stamps/$1 && $(cat "$BED/stamps/$1") == "$2" ]]; }
stamp_set() { printf '%s' "$2" >"$BED/stamps/$1"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
