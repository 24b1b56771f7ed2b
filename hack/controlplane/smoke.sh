#!/usr/bin/env bash
# Smoke test for the binaries from hack/build-controlplane.sh: throwaway certs, etcd,
# kube-apiserver, kube-controller-manager and kube-scheduler as plain processes on 127.0.0.1
# (free ports), then a few kubectl calls through an admin kubeconfig. Everything is stopped and
# the temp dir removed on exit. Nothing listens on or dials anything but loopback; the service
# CIDR is a documentation range (RFC 5737) that no process ever connects to.
#
#   hack/controlplane/smoke.sh [BIN_DIR]     (default: the output of hack/build-controlplane.sh)
#   SMOKE_LOG_DIR=dir  keep the component logs there
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${1:-$("$here/../build-controlplane.sh" | tail -1)}
HELM=${HELM:-$("$here/../build-controlplane.sh" --helm | tail -1)/helm}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/grappa-cp-smoke.XXXXXX")
pids=()
cleanup() {
    local rc=$?
    # Reverse start order, each fully gone before the next: kube-apiserver's graceful shutdown
    # still writes to etcd (endpoint leases) and hangs for minutes if etcd is already gone.
    local i pid
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [[ $rc -ne 0 ]]; then
        for f in "$tmp"/*.log; do [[ -f $f ]] && { echo "--- $f (tail)"; tail -20 "$f"; }; done >&2
    fi
    [[ -n ${SMOKE_LOG_DIR:-} ]] && mkdir -p "$SMOKE_LOG_DIR" && cp "$tmp"/*.log "$SMOKE_LOG_DIR"/ 2>/dev/null
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
t0=$SECONDS
log() { printf '[smoke %3ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }

# Free loopback ports (bind to port 0, read the port back, release).
read -r ETCD_PORT PEER_PORT API_PORT KCM_PORT SCHED_PORT < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')

# --- throwaway PKI (EC P-256: fast to generate) -----------------------------------------------
cd "$tmp"
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${newkey[@]}" -keyout ca.key -out ca.crt -days 1 -subj /CN=grappa-smoke-ca 2>/dev/null
sign() {  # sign <name> <subject> <extensions>
    openssl req "${newkey[@]}" -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    printf '%b' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
sign apiserver /CN=kube-apiserver 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n'
sign admin /O=system:masters/CN=grappa-admin 'extendedKeyUsage=clientAuth\n'
openssl ecparam -name prime256v1 -genkey -noout -out sa.key
openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
cat >admin.kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$tmp/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$tmp/admin.crt", client-key: "$tmp/admin.key"}
contexts:
- name: smoke
  context: {cluster: smoke, user: admin}
current-context: smoke
EOF
export KUBECONFIG=$tmp/admin.kubeconfig
log "certs ready; ports etcd=$ETCD_PORT apiserver=$API_PORT kcm=$KCM_PORT scheduler=$SCHED_PORT"

# --- etcd -------------------------------------------------------------------------------------
"$BIN/etcd" --name=smoke --data-dir="$tmp/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$PEER_PORT" \
    --initial-cluster="smoke=http://127.0.0.1:$PEER_PORT" \
    --unsafe-no-fsync --log-level=warn >etcd.log 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "http://127.0.0.1:$ETCD_PORT/health" >/dev/null
log "etcd ready"

# --- kube-apiserver ---------------------------------------------------------------------------
"$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file=apiserver.crt --tls-private-key-file=apiserver.key \
    --client-ca-file=ca.crt \
    --service-account-issuer="https://127.0.0.1:$API_PORT" \
    --service-account-key-file=sa.pub --service-account-signing-key-file=sa.key \
    --service-cluster-ip-range=192.0.2.0/24 \
    --endpoint-reconciler-type=none \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --profiling=false \
    >apiserver.log 2>&1 &
pids+=($!)

for _ in $(seq 120); do
    "$BIN/kubectl" get --raw /readyz >/dev/null 2>&1 && break
    sleep 0.5
done
"$BIN/kubectl" get --raw /readyz >/dev/null
log "apiserver ready"
echo "GET /version:"
"$BIN/kubectl" get --raw /version
echo

# --- kube-controller-manager and kube-scheduler -----------------------------------------------
"$BIN/kube-controller-manager" --kubeconfig=admin.kubeconfig \
    --authentication-kubeconfig=admin.kubeconfig --authorization-kubeconfig=admin.kubeconfig --authentication-skip-lookup \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file=sa.key --root-ca-file=ca.crt --use-service-account-credentials=true \
    --service-cluster-ip-range=192.0.2.0/24 --profiling=false \
    >controller-manager.log 2>&1 &
pids+=($!)
"$BIN/kube-scheduler" --kubeconfig=admin.kubeconfig \
    --authentication-kubeconfig=admin.kubeconfig --authorization-kubeconfig=admin.kubeconfig --authentication-skip-lookup \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --profiling=false \
    >scheduler.log 2>&1 &
pids+=($!)

"$BIN/kubectl" version
"$BIN/kubectl" create deployment smoke --image=registry.invalid/none:0 >/dev/null
# The controller manager turns the Deployment into a ReplicaSet and a Pod; the scheduler reports
# that there is no node for it. No kubelet exists, so the image is never pulled.
for _ in $(seq 120); do
    "$BIN/kubectl" get events --field-selector reason=FailedScheduling -o name 2>/dev/null | grep -q . && break
    sleep 0.5
done
"$BIN/kubectl" get events --field-selector reason=FailedScheduling -o name | grep -q . \
    || { echo "no FailedScheduling event: controller-manager/scheduler not working" >&2; exit 1; }
"$BIN/kubectl" get deploy,rs,pods -o wide
"$BIN/kubectl" get events --field-selector reason=FailedScheduling -o custom-columns=REASON:.reason,MESSAGE:.message
for p in "$KCM_PORT" "$SCHED_PORT"; do
    curl -fsSk "https://127.0.0.1:$p/healthz" >/dev/null
done
log "controller-manager and scheduler healthy"

# helm against the live apiserver (no chart install; just that it talks to the cluster).
"$HELM" version
"$HELM" list -A >/dev/null
log "OK"
