#!/usr/bin/env bash
# Runs a command against a kind cluster built offline, then removes every trace of the bed.
#   hack/kind/bed.sh run -- bash                        # a shell once the cluster is up
#   hack/kind/bed.sh run --early -- python -m pytest tests   # what `make test` does
#   hack/kind/bed.sh build                              # only the cached images (no cluster)
# --early starts the command while the cluster comes up and the images load; the command must
# wait for the file $GRAPPA_E2E_CLUSTER_READY itself (tests/e2e/conftest.py does, so the unit
# tests run meanwhile) and give up on the .failed file beside it.
# `run` exports KUBECONFIG, GRAPPA_E2E_USE_KUBECONFIG=1, the image variables and the control plane's
# kubectl/helm for the command. Teardown runs on success, failure, Ctrl-C and SIGTERM, and fails the
# run when the FORWARD guard dropped any packet or anything the bed made is still there.
# Needs root (its own dockerd, iptables). See hack/kind/README.md.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $(id -u) -eq 0 ]] || die "the offline kind bed needs root (its own dockerd and an iptables guard); see hack/kind/README.md"
for tool in dockerd iptables mmdebstrap jq ip go gcc; do
    command -v "$tool" >/dev/null || die "$tool not found: apt-get install docker.io iptables mmdebstrap jq iproute2 gcc (see hack/kind/README.md)"
done

phase() {  # phase <name> <command...>: runs and records the phase's seconds
    local start=$SECONDS
    "${@:2}"
    log "phase $1: $((SECONDS - start))s"
    printf '%s %s\n' "$1" "$((SECONDS - start))" >>"$BED/logs/phases.txt"
}

build() {
    phase dockerd "$KIND_DIR/dockerd.sh" start
    phase images "$KIND_DIR/images.sh"
    phase kueue "$KIND_DIR/kueue.sh" build
    phase node-image "$KIND_DIR/build-node.sh" >/dev/null
}

# The cluster comes up and the images load (minutes) in the background while the command starts:
# the suite's unit tests run meanwhile, and its e2e fixture waits for $BED/run/cluster.ready (or
# fails on cluster.failed, naming the log). cluster.sh runs in its own session so teardown can stop
# a start still under way, kind included.
start_cluster() {
    rm -f "$BED/run/cluster.ready" "$BED/run/cluster.failed" "$BED/run/cluster.pid"
    (
        start=$SECONDS
        setsid "$KIND_DIR/cluster.sh" up "$1" >"$BED/logs/cluster.log" 2>&1 &
        echo $! >"$BED/run/cluster.pid"
        if wait $!; then
            log "phase cluster: $((SECONDS - start))s (beside the command)"
            printf 'cluster %s\n' "$((SECONDS - start))" >>"$BED/logs/phases.txt"
            touch "$BED/run/cluster.ready"
        else
            tail -20 "$BED/logs/cluster.log" >&2
            log "the cluster did not come up (log: $BED/logs/cluster.log)"
            touch "$BED/run/cluster.failed"
        fi
    ) &
    cluster_waiter=$!
}

stop_cluster_start() {
    local pid
    pid=$(cat "$BED/run/cluster.pid" 2>/dev/null) || return 0
    rm -f "$BED/run/cluster.pid" "$BED/run/cluster.ready" "$BED/run/cluster.failed"
    kill -0 "$pid" 2>/dev/null || return 0
    log "stopping the cluster start still under way"
    kill "$cluster_waiter" 2>/dev/null || true
    kill -TERM -- "-$pid" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
}

teardown() {
    local status=0 drops
    trap '' INT TERM
    log "teardown ..."
    stop_cluster_start
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
    local kubeconfig=$BED/run/kubeconfig child=0 rc=0 cp_bin early=0
    [[ $1 == --early ]] && { early=1; shift; }
    forward_policy=$(iptables -S FORWARD | awk '$1 == "-P" {print $3}')
    python3 "$KIND_DIR/hoststate.py" snapshot >"$BED/run/hoststate-before.json"
    : >"$BED/logs/phases.txt"
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
    build
    cp_bin=$(phase controlplane "$REPO/hack/build-controlplane.sh" | tail -1)
    export PATH=$cp_bin:$PATH
    start_cluster "$kubeconfig"
    if [[ $early == 0 ]]; then
        log "waiting for the cluster ..."
        until [[ -e $BED/run/cluster.ready ]]; do
            [[ -e $BED/run/cluster.failed ]] && die "the cluster did not come up (log: $BED/logs/cluster.log)"
            sleep 2
        done
    fi
    export KUBECONFIG=$kubeconfig GRAPPA_E2E_USE_KUBECONFIG=1 GRAPPA_CONTROLPLANE_BIN=$cp_bin \
        GRAPPA_E2E_CLUSTER_READY=$BED/run/cluster.ready \
        GRAPPA_E2E_OPERATOR_IMAGE=grappa-operator:bed GRAPPA_E2E_TRAINER_IMAGE=grappa-trainer:bed \
        GRAPPA_E2E_PULL_POLICY=Never GRAPPA_E2E_KIND_CLUSTER=$CLUSTER
    # cluster.sh installs Kueue when it was built: its test must then run, not skip.
    if "$KIND_DIR/kueue.sh" available; then export GRAPPA_E2E_KUEUE=installed; fi
    local start=$SECONDS
    # Its own process group, so an interrupt reaches every process it started.
    setsid "$@" &
    child=$!
    wait "$child" || rc=$?
    child=0
    log "phase command: $((SECONDS - start))s (exit $rc)"
    printf 'command %s\n' "$((SECONDS - start))" >>"$BED/logs/phases.txt"
    return $rc
}

case ${1:-} in
    build) trap '"$KIND_DIR/dockerd.sh" stop' EXIT; build ;;
    run) shift; opt=()
         [[ ${1:-} == --early ]] && { opt=(--early); shift; }
         [[ ${1:-} == -- ]] || die "usage: $0 run [--early] -- <command...>"; shift; run "${opt[@]}" "$@" ;;
    *) echo "usage: $0 build | run [--early] -- <command...>" >&2; exit 2 ;;
esac
