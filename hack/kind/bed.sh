#!/usr/bin/env bash
# Runs a command against a kind cluster built offline, then removes every trace of the bed.
#   hack/kind/bed.sh run -- bash                        # a shell once the cluster is up
#   hack/kind/bed.sh run --early -- python -m pytest tests   # what `make test` does
#   hack/kind/bed.sh build                              # only the cached images (no cluster)
# --early starts the command at once, while everything is built (cold: the images, Kueue, the
# control plane and the node image) and the cluster comes up and loads the images; the command
# must wait for the file $GRAPPA_E2E_CLUSTER_READY itself (tests/conftest.py does, so the unit
# tests run meanwhile) and give up on the .failed file beside it. Kueue is installed last, beside
# the e2e tests: $GRAPPA_E2E_KUEUE_READY (and .failed) says when.
# `run` exports KUBECONFIG, GRAPPA_E2E_USE_KUBECONFIG=1, the image variables and the control plane's
# kubectl/helm for the command. Teardown runs on success, failure, Ctrl-C and SIGTERM, and fails the
# run when the FORWARD guard dropped any packet or anything the bed made is still there.
# Needs root (its own dockerd, iptables). See hack/kind/README.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $(id -u) -eq 0 ]] || die "the offline kind bed needs root (its own dockerd and an iptables guard); see hack/kind/README.md"
for tool in dockerd iptables mmdebstrap jq ip go gcc; do
    command -v "$tool" >/dev/null || die "$tool not found: apt-get install docker.io iptables mmdebstrap jq iproute2 gcc (see hack/kind/README.md)"
done

# The build as a graph of phases, side by side where they use different resources: downloads and
# root filesystems (network, disk) beside the Go builds (CPU, both cores each, so one at a time).
# Every product is cached by version (stamps, image labels, folders keyed by hashes): a warm
# machine finds each phase done at once.
build() {
    phase dockerd "$KIND_DIR/dockerd.sh" start
    "$KIND_DIR/build-node.sh" clean
    job go-fetch fetch_modules
    job rootfs-python "$KIND_DIR/images.sh" base
    job rootfs-kind "$KIND_DIR/build-node.sh" base
    job go-k8s go_k8s
    await rootfs-python
    job images "$KIND_DIR/images.sh" grappa
    await go-k8s
    job go-tools go_tools
    await rootfs-kind go-fetch
    phase node-image "$KIND_DIR/build-node.sh" assemble
    await images
}

# The modules every Go build below reads, fetched while the first build compiles.
fetch_modules() {
    local dir
    for dir in "$REPO/hack/controlplane/kubernetes" "$REPO/hack/controlplane/etcd" "$KIND_DIR/node-module"; do
        (cd "$dir" && go mod download)
    done
}

go_k8s() {  # what the cluster needs, first: the control plane's binaries, then the node's (they
    # share the Go build cache; each build keeps both cores busy, so one at a time)
    phase controlplane "$REPO/hack/build-controlplane.sh" >/dev/null
    phase node-binaries "$KIND_DIR/build-node.sh" binaries
}

go_tools() {  # the Go builds after the cluster's, beside the node image and the cluster's start
    # helm (the e2e tests' and a few unit tests', which wait for $GRAPPA_TOOLS_READY; the unit
    # ones last in their lane: tests/conftest.py LATE), kube-score, then Kueue's manager.
    # the marker only once helm is where the tests look ($GRAPPA_TOOLS_HELM: --helm-path)
    phase helm "$REPO/hack/build-controlplane.sh" --helm >/dev/null \
        && [[ -x $("$REPO/hack/build-controlplane.sh" --helm-path | tail -1)/helm ]] \
        || { log "helm was not built (log: $BED/logs/go-tools.log)"; touch "$BED/run/tools.failed"; return 1; }
    touch "$BED/run/tools.ready"  # kube-score's test builds it itself if it comes first (one lock)
    phase kube-score "$REPO/hack/kube-score.sh" >/dev/null
    phase kueue-binary "$KIND_DIR/kueue.sh" binary
}

# The last Go build, once go-tools is done (after Kueue's manager, so it delays neither the cluster
# nor Kueue, and beside Kueue's image and install): SeaweedFS's weed, the S3 server of the S3 store's
# tests, which wait for $GRAPPA_S3_READY (the unit ones last in their lane: tests/conftest.py S3_LATE).
S3_STARTED=
start_s3() {  # once go-tools has ended, whatever its result (the S3 server needs nothing it makes)
    [[ -z $S3_STARTED ]] || return 0
    S3_STARTED=1
    if [[ -n ${JOB_PID[go-tools]:-} ]]; then wait "${JOB_PID[go-tools]}" || true; fi
    job seaweedfs go_s3
}

go_s3() {
    local weed
    weed=$("$REPO/hack/seaweedfs.sh" | tail -1) && [[ -x $weed ]] && share_weed "$weed" \
        || { log "SeaweedFS was not built (log: $BED/logs/seaweedfs.log)"; touch "$BED/run/s3.failed"; return 1; }
    touch "$BED/run/s3.ready"
}

# weed in the node too ($NODE_SHARE, mounted at $NODE_SHARE_PATH): a hard link (the same disk as
# the cache), else a copy; renamed into place, so the node never sees half a file.
share_weed() {
    local dest=$NODE_SHARE/seaweedfs/weed
    [[ $1 -ef $dest ]] && return 0
    ln -f "$1" "$dest.tmp" 2>/dev/null || cp -f "$1" "$dest.tmp"
    mv -f "$dest.tmp" "$dest"
}

kueue_image() {
    await go-tools
    start_s3
    phase kueue-image "$KIND_DIR/kueue.sh" image
}

# Everything the e2e tests need, in the background of the command (--early): the build, then the
# cluster with the images loaded ($BED/run/cluster.ready, or .failed naming the log), then Kueue
# (kueue.ready/.failed). In its own session, so teardown can stop it, kind and builds included.
bring_up() {  # bring_up <kubeconfig>
    local kubeconfig=$1
    # kubectl and helm for cluster.sh and kueue.sh, once built (the command gets the same PATH)
    PATH=$("$REPO/hack/build-controlplane.sh" --path | tail -1):$("$REPO/hack/build-controlplane.sh" --helm-path | tail -1):$PATH
    # whatever ends this early leaves the markers the tests wait on saying so
    trap 'for m in tools cluster kueue s3; do [[ -e $BED/run/$m.ready ]] || touch "$BED/run/$m.failed"; done' EXIT
    build
    phase cluster "$KIND_DIR/cluster.sh" up "$kubeconfig" >"$BED/logs/cluster.log" 2>&1 \
        || { tail -20 "$BED/logs/cluster.log" >&2; die "the cluster did not come up (log: $BED/logs/cluster.log)"; }
    touch "$BED/run/cluster.ready"
    log "cluster ready"
    if "$KIND_DIR/kueue.sh" available; then
        kueue_image
        phase kueue-install "$KIND_DIR/kueue.sh" install "$kubeconfig" >"$BED/logs/kueue-install.log" 2>&1 \
            || { tail -20 "$BED/logs/kueue-install.log" >&2; die "Kueue was not installed (log: $BED/logs/kueue-install.log)"; }
    fi
    touch "$BED/run/kueue.ready"
    log "Kueue ready"
    start_s3  # (started already, unless the bed has no Kueue)
    await seaweedfs
    log "SeaweedFS ready"
}

start_bring_up() {
    rm -f "$BED"/run/{tools,cluster,kueue,s3}.{ready,failed} "$BED/run/bring-up.pid"
    setsid "$0" bring-up "$1" >"$BED/logs/bring-up.log" 2>&1 &
    echo $! >"$BED/run/bring-up.pid"
}

stop_bring_up() {
    local pid
    pid=$(cat "$BED/run/bring-up.pid" 2>/dev/null) || return 0
    rm -f "$BED/run/bring-up.pid"
    kill -0 "$pid" 2>/dev/null || return 0
    log "stopping the build and cluster start still under way"
    kill -TERM -- "-$pid" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
}

teardown() {
    local status=0 drops
    trap '' INT TERM
    log "teardown ..."
    stop_bring_up
    rm -f "$BED"/run/{tools,cluster,kueue,s3}.{ready,failed}
    "$KIND_DIR/cluster.sh" down || status=1
    "$KIND_DIR/dockerd.sh" stop || status=1
    for br in "$KIND_BRIDGE" "$DOCKER_BRIDGE"; do
        ip link show "$br" >/dev/null 2>&1 && ip link del "$br"
    done
    drops=$("$KIND_DIR/guard.sh" drops)
    "$KIND_DIR/guard.sh" down
    iptables -P FORWARD "$forward_policy"
    rm -f "$BED/run/kubeconfig"
    if [[ $drops != 0 ]]; then
        log "FAILED: the FORWARD guard dropped $drops packet(s) leaving the bed's bridges (see $BED/logs)"
        status=1
    else
        log "guard: 0 packets dropped"
    fi
    python3 "$KIND_DIR/hoststate.py" compare "$BED/run/hoststate-before.json" || { log "FAILED: the bed left the above behind"; status=1; }
    return $status
}

run() {  # run [--early] <command...>
    local kubeconfig=$BED/run/kubeconfig child=0 rc=0 cp_bin helm_bin early=0 start
    [[ $1 == --early ]] && { early=1; shift; }
    forward_policy=$(iptables -S FORWARD | awk '$1 == "-P" {print $3}')
    python3 "$KIND_DIR/hoststate.py" snapshot >"$BED/run/hoststate-before.json"
    [[ -n $PHASES_GIVEN ]] || : >"$GRAPPA_PHASES"
    on_signal() {
        log "interrupted: stopping the command, then the bed"
        if [[ $child != 0 ]]; then  # pytest turns SIGTERM into an interrupt: its finalisers run
            kill -TERM -- "-$child" 2>/dev/null || true
            for _ in $(seq 30); do kill -0 "$child" 2>/dev/null || break; sleep 1; done
            kill -KILL -- "-$child" 2>/dev/null || true
        fi
        exit 130
    }
    trap on_signal INT TERM
    trap 'teardown || exit 1' EXIT
    "$KIND_DIR/guard.sh" up
    start_bring_up "$kubeconfig"
    if [[ $early == 0 ]]; then
        log "waiting for the build and the cluster ..."
        until [[ -e $BED/run/cluster.ready ]]; do
            [[ -e $BED/run/cluster.failed ]] && die "the build or the cluster failed (log: $BED/logs/bring-up.log)"
            sleep 2
        done
    fi
    cp_bin=$("$REPO/hack/build-controlplane.sh" --path | tail -1)  # kubectl and helm, once built
    helm_bin=$("$REPO/hack/build-controlplane.sh" --helm-path | tail -1)
    export PATH=$cp_bin:$helm_bin:$PATH GRAPPA_TOOLS_HELM=$helm_bin/helm
    export KUBECONFIG=$kubeconfig GRAPPA_E2E_USE_KUBECONFIG=1 GRAPPA_CONTROLPLANE_BIN=$cp_bin \
        GRAPPA_E2E_CLUSTER_READY=$BED/run/cluster.ready GRAPPA_E2E_KUEUE_READY=$BED/run/kueue.ready \
        GRAPPA_TOOLS_READY=$BED/run/tools.ready GRAPPA_S3_READY=$BED/run/s3.ready \
        GRAPPA_E2E_OPERATOR_IMAGE=grappa-operator:bed GRAPPA_E2E_TRAINER_IMAGE=grappa-trainer:bed \
        GRAPPA_E2E_PULL_POLICY=Never GRAPPA_E2E_KIND_CLUSTER=$CLUSTER \
        GRAPPA_E2E_NODE_WEED=$NODE_SHARE_PATH/seaweedfs/weed
    # the bed installs Kueue when its source is there: its test must then run, not skip.
    if "$KIND_DIR/kueue.sh" available; then export GRAPPA_E2E_KUEUE=installed; fi
    start=$(date +%s)
    # Its own process group, so an interrupt reaches every process it started.
    setsid "$@" &
    child=$!
    wait "$child" || rc=$?
    child=0
    log "phase command: $(($(date +%s) - start))s (exit $rc)"
    printf 'command %s %s %s\n' "$((start - GRAPPA_T0))" "$(($(date +%s) - start))" \
        "$([[ $rc == 0 ]] && echo ok || echo "failed:$rc")" >>"$GRAPPA_PHASES"
    return $rc
}

case ${1:-} in
    build) trap '"$KIND_DIR/dockerd.sh" stop' EXIT; build; kueue_image; await seaweedfs ;;
    bring-up) bring_up "${2:?kubeconfig path}" ;;  # started by run (start_bring_up)
    run) shift; opt=()
         [[ ${1:-} == --early ]] && { opt=(--early); shift; }
         [[ ${1:-} == -- ]] || die "usage: $0 run [--early] -- <command...>"; shift; run "${opt[@]}" "$@" ;;
    *) echo "usage: $0 build | run [--early] -- <command...>" >&2; exit 2 ;;
esac
