#!/usr/bin/env bash
# The bed's kind cluster: its network made beforehand (RFC 2544 addresses that exist only on the
# bed's own interfaces, no masquerade), the node image from build-node.sh, CoreDNS without an
# upstream, the suite's images loaded (pods use imagePullPolicy: Never). Kueue is installed
# afterwards (bed.sh, kueue.sh install).
#   cluster.sh up <kubeconfig> | down
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

up() {
    local kubeconfig=$1 node_image config=$BED/run/kind-config.yaml start=$SECONDS
    node_image=$("$KIND_DIR/build-node.sh" | tail -1)
    # A run ended without its teardown (a machine reset, SIGKILL) leaves its node container in the
    # data root, and dockerd brings it back: kind would refuse the name.
    if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
        log "removing cluster $CLUSTER left by a run that ended without teardown"
        down
    fi
    docker network inspect kind >/dev/null 2>&1 || docker network create --driver bridge \
        --subnet "$KIND_SUBNET" --gateway "$KIND_GATEWAY" -o com.docker.network.bridge.name="$KIND_BRIDGE" \
        -o com.docker.network.bridge.enable_ip_masquerade=false kind >/dev/null
    {
        printf 'kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n'
        printf 'networking:\n  apiServerAddress: 127.0.0.1\n  podSubnet: %s\n  serviceSubnet: %s\n' "$POD_SUBNET" "$SERVICE_SUBNET"
        # kindnetd is not built here: the node image carries a one-node ptp CNI config instead.
        printf '  disableDefaultCNI: true\n  kubeProxyMode: iptables\n'
        printf 'nodes:\n- role: control-plane\n  image: %s\n' "$node_image"
        # the folder, not the files: they may be made after the cluster (weed, on a cold machine)
        printf '  extraMounts:\n  - hostPath: %s\n    containerPath: %s\n    readOnly: true\n' \
            "$NODE_SHARE" "$NODE_SHARE_PATH"
        # etcd without fsync: a throwaway one-node bed, whose etcd otherwise stalls /readyz
        # ("etcd failed") when the loaded machine's disk is slow. kubeadm v1beta4: a list of args.
        printf 'kubeadmConfigPatches:\n- |\n  kind: ClusterConfiguration\n  etcd:\n    local:\n'
        printf '      extraArgs:\n      - name: unsafe-no-fsync\n        value: "true"\n'
        if quirk_cgroup_v1; then
            printf -- '- |\n  kind: KubeletConfiguration\n  failCgroupV1: false\n'
        fi
    } >"$config"
    log "creating cluster $CLUSTER ($node_image) ..."
    HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=localhost,127.0.0.1,198.18.0.0/15 \
        kind create cluster --name "$CLUSTER" --config "$config" --kubeconfig "$kubeconfig" --wait 180s >&2
    log "cluster up in $((SECONDS - start))s"
    no_upstream_dns "$kubeconfig"
    start=$SECONDS
    load_images grappa-operator:bed grappa-trainer:bed
    log "images loaded in $((SECONDS - start))s"
}

# What `kind load docker-image` does, without its temporary archive: `docker save` streams into the
# node's containerd. kind writes the whole archive (4.4 GB, the trainer's CUDA torch) to disk and
# then reads it back, one after the other; streamed, the two overlap and nothing is written twice.
load_images() {
    local node=$CLUSTER-control-plane snapshotter
    snapshotter=$(docker exec "$node" containerd config dump | sed -n 's/^ *snapshotter = "\(.*\)"$/\1/p' | head -1)
    docker save "$@" | docker exec -i "$node" ctr --namespace=k8s.io images import --all-platforms --digests \
        --snapshotter="${snapshotter:-overlayfs}" - >/dev/null
}

# CoreDNS answers cluster names only: no `forward` to the node's resolver, no loop probe of it.
no_upstream_dns() {
    KUBECONFIG=$1 kubectl -n kube-system get configmap coredns -o json | python3 -c '
import json, re, sys
cm = json.load(sys.stdin)
corefile = re.sub(r"\n\s*forward \. [^\n]*\{[^}]*\}", "", cm["data"]["Corefile"])
cm["data"]["Corefile"] = re.sub(r"\n\s*loop\n", "\n", corefile)
json.dump(cm, sys.stdout)' | KUBECONFIG=$1 kubectl apply -f - >/dev/null
    KUBECONFIG=$1 kubectl -n kube-system rollout restart deployment/coredns >/dev/null
    KUBECONFIG=$1 kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
}

down() {
    docker info >/dev/null 2>&1 || return 0
    kind delete cluster --name "$CLUSTER" >&2 2>/dev/null || true
    docker network rm kind >/dev/null 2>&1 || true
}

case ${1:-} in
    up) up "${2:?kubeconfig path}" ;;
    down) down ;;
    *) echo "usage: $0 up <kubeconfig>|down" >&2; exit 2 ;;
esac
