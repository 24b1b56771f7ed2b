#!/usr/bin/env bash
# The bed's own dockerd (never the machine's): data root, socket and pid under $BED, no default
# bridge, no iptables/NAT/forwarding, DNS pointed at loopback and pulls sent to a dead loopback
# proxy, so nothing it runs can reach or resolve anything outside the bed.
#   dockerd.sh start | stop
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
pidfile=$BED/run/dockerd.pid

start() {
    if docker info >/dev/null 2>&1; then log "dockerd already running"; return; fi
    command -v dockerd >/dev/null || die "dockerd not found: apt-get install docker.io (see hack/kind/README.md)"
    local runtime=
    if quirk_no_sys_resource; then
        cp "$KIND_DIR/runtime/runc-nosysres" "$BED/bin/runc-nosysres"
        runtime=', "runtimes": {"runc-nosysres": {"path": "'$BED/bin/runc-nosysres'"}}, "default-runtime": "runc-nosysres"'
        log "CAP_SYS_RESOURCE missing from the bounding set: default runtime runc-nosysres"
    fi
    cat >"$BED/run/daemon.json" <<JSON
{
  "data-root": "$BED/docker", "exec-root": "$BED/run/exec", "pidfile": "$pidfile",
  "hosts": ["$DOCKER_HOST"], "bridge": "none", "iptables": false, "ip6tables": false,
  "ip-masq": false, "ip-forward": false, "ipv6": false, "dns": ["127.0.0.1"],
  "default-address-pools": [{"base": "169.254.124.0/22", "size": 24}],
  "storage-driver": "overlay2", "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "features": {"buildkit": false}$runtime
}
JSON
    HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
        setsid dockerd --config-file "$BED/run/daemon.json" >"$BED/logs/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && { log "dockerd up ($DOCKER_HOST)"; return; }; sleep 1; done
    tail -20 "$BED/logs/dockerd.log" >&2
    die "dockerd did not start (log: $BED/logs/dockerd.log)"
}

stop() {
    local pid
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    if docker info >/dev/null 2>&1; then
        docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1 || true
    fi
    kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || { log "dockerd stopped"; return 0; }; sleep 1; done
    log "dockerd $pid ignored SIGTERM for 60 s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
