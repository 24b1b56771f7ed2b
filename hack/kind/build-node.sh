#!/usr/bin/env bash
# The kind node image, built offline, as kind's own `build node-image` would (it pulls, so it is
# assembled here): a kindest/base equivalent from Debian packages plus kind's images/base/files,
# kubelet/kubeadm/kube-proxy from hack/kind/node-module (same release and Go cache as the control
# plane), and every image kubeadm and kind need (control plane, etcd, coredns, pause, local-path
# storage) built locally and pre-imported into the node's containerd. Also installs the kind CLI.
# Skipped when the image's key (versions, these files, the detected quirks) is current.
#   build-node.sh                 # needs dockerd.sh start and images.sh (the python base)
# The same in steps, for a build that runs them beside other work (bed.sh build):
#   build-node.sh current         # true when the node image is current (nothing to do)
#   build-node.sh clean           # a fresh work folder, before base and binaries start
#   build-node.sh base            # the kind base from Debian packages (downloads, disk)
#   build-node.sh binaries        # kubelet, kubeadm, kube-proxy, coredns, local-path, pause, kind (CPU)
#   build-node.sh assemble        # the cluster images and the node image (after base and binaries)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

K8S=$(k8s_version)
NODE_IMAGE=grappa/kind-node:$K8S
# kind v0.33's own image builds local-path-provisioner v0.0.34, which the Go module proxy does not
# serve; v0.0.30 is the newest it has. The manifest stays kind's.
LOCAL_PATH_VERSION=v0.0.30
BASE_PACKAGES=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,jq,procps,containerd,runc,containernetworking-plugins,socat
image_key() { docker image inspect -f '{{index .Config.Labels "grappa.bed.key"}}' "$1" 2>/dev/null || true; }
quirks=$(quirk_no_sys_resource && echo nosysres; quirk_cgroup_v1 && echo cgroupv1; true)
key=$( (echo "$K8S $KIND_VERSION $BASE_PACKAGES $quirks"; cat "$KIND_DIR/build-node.sh" "$KIND_DIR/runtime/runc-node" \
        "$KIND_DIR/node/"* "$KIND_DIR/node-module/go.sum" "$KIND_DIR/node-module/coredns/main.go" "$REPO/hack/build-controlplane.sh"; go env GOVERSION) | sha256sum | cut -c1-16)
work=$BED/node-build

build_quietly() {  # docker build --network none <args>, its output kept for a failure
    local out
    out=$(docker build --network none "$@" 2>&1) || { printf '%s\n' "$out" | tail -30 >&2; die "docker build $* failed"; }
}

kind_cli() {
    [[ -x $BED/bin/kind && $("$BED/bin/kind" version 2>/dev/null) == *"$KIND_VERSION "* ]] && return
    log "kind $KIND_VERSION (go install) ..."
    GOBIN=$BED/bin go install -trimpath "$GO_TEST_ONLY" -ldflags '-s -w' "sigs.k8s.io/kind@$KIND_VERSION"
}

binaries() {  # kubelet, kubeadm, kube-proxy, CoreDNS; the control plane's own from its cache
    local cp_bin ldflags=-s\ -w pkg cmd start
    cp_bin=$(GRAPPA_CACHE=$GRAPPA_CACHE "$REPO/hack/build-controlplane.sh" | tail -1)
    mkdir -p "$work/bin"
    cp "$cp_bin"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,etcd} "$work/bin/"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S -X $pkg.gitMajor=$(cut -d. -f1 <<<"${K8S#v}") -X $pkg.gitMinor=$(cut -d. -f2 <<<"$K8S") -X $pkg.gitTreeState=clean"
    done
    # One `go build` for the four: packages they share (the Kubernetes client among them) compile
    # once, and one binary links while the others still compile (both cores busy to the end).
    start=$SECONDS
    (cd "$KIND_DIR/node-module" && go build -p "${GRAPPA_BUILD_JOBS:-2}" -mod=readonly -trimpath \
        -buildvcs=false "$GO_NO_DWARF" -tags selinux,notest,grpcnotrace -ldflags "$ldflags" -o "$work/bin/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy ./coredns)
    log "built kubelet, kubeadm, kube-proxy, coredns in $((SECONDS - start))s"
}

kind_base() {  # kindest/base from Debian packages and kind's own files
    local kind_src
    kind_src=$(cd "$KIND_DIR/node-module" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
    rm -rf "$work/base" && mkdir -p "$work/base"
    cp -r "$kind_src/images/base/files" "$work/base/files" && chmod -R u+w,a+rX "$work/base"
    chmod 0755 "$work/base/files/usr/local/bin/"* "$work/base/files/kind/bin/"*
    log "kind base rootfs from Debian $DEBIAN_SUITE packages (mmdebstrap) ..."
    mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        "$DEBIAN_SUITE" "$work/base/rootfs.tar" >&2
    docker import "$work/base/rootfs.tar" grappa/kind-base-rootfs:bed >/dev/null
    rm -f "$work/base/rootfs.tar"
    # What kind's base Dockerfile does, with Debian's containerd, runc and CNI plugins.
    cat >"$work/base/Dockerfile" <<'DOCKERFILE'
FROM grappa/kind-base-rootfs:bed
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
RUN chmod 755 /kind /kind/bin \
 && mkdir -p /opt/cni/bin && for p in host-local loopback ptp portmap bridge; do ln -sf /usr/lib/cni/$p /opt/cni/bin/$p; done \
 && ln -sf /usr/sbin/runc /usr/local/sbin/runc \
 && for b in containerd containerd-shim-runc-v2 ctr; do ln -sf /usr/bin/$b /usr/local/bin/$b; done \
 && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
          /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
          /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
 && echo ReadKMsg=no >>/etc/systemd/journald.conf \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests \
 && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKERFILE
    build_quietly -t grappa/kind-base:bed "$work/base"
}

one_binary_image() {  # <tag> <binary> [base]: the binary as entrypoint, saved for the node
    local tag=$1 bin=$2 base=${3:-scratch}
    local dir=$work/img/$bin
    rm -rf "$dir" && mkdir -p "$dir" && cp "$work/bin/$bin" "$dir/"
    printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nENTRYPOINT ["/usr/local/bin/%s"]\n' \
        "$base" "$bin" "$bin" "$bin" >"$dir/Dockerfile"
    build_quietly -t "$tag" "$dir"
    echo "$tag" >>"$work/node-images.txt"
}

coredns_pinned() {  # coredns_pinned <the version kubeadm asks for>
    local pinned
    pinned=$(cd "$KIND_DIR/node-module" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
    [[ $pinned == "$1" ]] || die "kubeadm $K8S asks for CoreDNS $1 but hack/kind/node-module pins $pinned:" \
        "cd hack/kind/node-module && go get github.com/coredns/coredns@$1 && go mod tidy"
}

compile_tools() {  # the cluster images' binaries: exactly the tags kubeadm asks for, then kind's storage
    local ref kind_src
    "$work/bin/kubeadm" config images list --kubernetes-version "$K8S" 2>/dev/null >"$work/kubeadm-images.txt"
    for ref in $(cat "$work/kubeadm-images.txt"); do
        case ${ref%%:*} in
            */coredns) coredns_pinned "${ref##*:}" ;;  # built by binaries() from node-module/coredns
            */pause) gcc -Os -static -DVERSION="${ref##*:}" -o "$work/bin/pause" \
                         "$(cd "$KIND_DIR/node-module" && go mod download -json "k8s.io/kubernetes@$K8S" | jq -r .Dir)/build/pause/linux/pause.c"
                     strip "$work/bin/pause" ;;
        esac
    done
    kind_src=$(cd "$KIND_DIR/node-module" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
    python3 "$KIND_DIR/node/storage-manifest.py" "$kind_src/pkg/build/nodeimage/const_storage.go" \
        "$work/default-storage.yaml" >"$work/storage-images.txt"
    GOBIN=$work/bin go install -trimpath "$GO_NO_DWARF" -ldflags '-s -w' "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION"
}

cluster_images() {  # each binary as a one-binary image, tagged as kubeadm and kind name them
    local ref
    : >"$work/node-images.txt"
    for ref in $(cat "$work/kubeadm-images.txt"); do
        case ${ref%%:*} in
            */kube-proxy) one_binary_image "$ref" kube-proxy grappa/kind-base-rootfs:bed ;;  # needs iptables
            */kube-*) one_binary_image "$ref" "$(basename "${ref%%:*}")" ;;
            */etcd) one_binary_image "$ref" etcd ;;
            */coredns) one_binary_image "$ref" coredns ;;
            */pause) one_binary_image "$ref" pause ;;
            *) die "kubeadm wants $ref, which this script does not know how to build" ;;
        esac
    done
    # kind's containerd config names its own pause tag: give it the same image.
    local pause; pause=$(grep -o 'sandbox_image = "[^"]*"' "$work/base/files/etc/containerd/config.toml" | cut -d'"' -f2 || true)
    if [[ -n $pause ]] && ! grep -qx "$pause" "$work/node-images.txt"; then
        docker tag "$(grep /pause: "$work/node-images.txt")" "$pause" && echo "$pause" >>"$work/node-images.txt"
    fi
    # kind's default storage: the provisioner, and its helper (needs only sh, mkdir, rm)
    local provisioner helper
    provisioner=$(sed -n 1p "$work/storage-images.txt") helper=$(sed -n 2p "$work/storage-images.txt")
    one_binary_image "$provisioner" local-path-provisioner
    docker tag python:3.11-slim "$helper" && echo "$helper" >>"$work/node-images.txt"
}

node_image() {
    local id
    mkdir -p "$work/node"
    cp "$work/bin"/{kubelet,kubeadm,kubectl} "$KIND_DIR/node/10-grappa-ptp.conflist" "$work/default-storage.yaml" "$work/node/"
    cp "$KIND_DIR/runtime/runc-node" "$work/node/runc-node"
    local wrapper=
    quirk_no_sys_resource && wrapper='&& rm -f /usr/local/sbin/runc && cp /usr/local/bin/runc-node /usr/local/sbin/runc'
    cat >"$work/node/Dockerfile" <<DOCKERFILE
FROM grappa/kind-base:bed
COPY kubelet kubeadm kubectl /usr/bin/
COPY 10-grappa-ptp.conflist /etc/cni/net.d/10-grappa-ptp.conflist
COPY default-storage.yaml /kind/manifests/default-storage.yaml
COPY runc-node /usr/local/bin/runc-node
RUN printf '%s' $K8S >/kind/version $wrapper
DOCKERFILE
    build_quietly -t grappa/kind-node:stage "$work/node"
    # Pre-import the images into the node's containerd, as kind's node-image build does.
    id=$(docker run -d --privileged --network none --entrypoint sleep grappa/kind-node:stage infinity)
    trap 'docker rm -f "$id" >/dev/null 2>&1 || true; trap - RETURN' RETURN  # once, on this return
    docker exec -d "$id" sh -c 'containerd >/tmp/containerd.log 2>&1'
    for _ in $(seq 30); do docker exec "$id" ctr version >/dev/null 2>&1 && break; sleep 1; done
    docker save $(cat "$work/node-images.txt") | docker exec -i "$id" ctr -n k8s.io images import --all-platforms --no-unpack -
    docker exec "$id" sh -c 'kill $(pidof containerd); while pidof containerd >/dev/null; do sleep 0.2; done; rm -f /tmp/containerd.log'
    docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
        --change "LABEL grappa.bed.key=$key" "$id" "$NODE_IMAGE" >/dev/null
}

current() { [[ -z ${GRAPPA_REBUILD:-} && $(image_key "$NODE_IMAGE") == "$key" ]]; }
clean() { rm -rf "$work" && mkdir -p "$work"; }
assemble() {
    cluster_images
    node_image
    docker rmi grappa/kind-node:stage >/dev/null
    docker image prune -f >/dev/null
    rm -rf "$work"
    log "$NODE_IMAGE ready"
}

case ${1:-all} in
    current) current ;;
    clean) current || clean ;;
    base) current || kind_base ;;
    binaries) kind_cli; current || { binaries; compile_tools; } ;;
    assemble) current || assemble ;;
    all) kind_cli
         if ! current; then
             clean; binaries; compile_tools; kind_base; assemble
         fi
         echo "$NODE_IMAGE" ;;
    *) echo "usage: $0 [current|clean|base|binaries|assemble]" >&2; exit 2 ;;
esac
