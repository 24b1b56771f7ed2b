#!/usr/bin/env bash
# The images the suite runs, built by the bed's dockerd with no network at all:
#   python:3.11-slim   stand-in made from Debian packages (no registry is reachable), the
#                      Dockerfile's base; grappa-operator:bed and grappa-trainer:bed from the
#                      project's Dockerfile by `make images` (what users run, minus the push),
#                      installing from the host wheelhouse (WHEELS=local).
# Each image carries the key it was built from (label grappa.bed.key) and is skipped when current.
#   images.sh [base|grappa]   # both by default; grappa needs base (its FROM); needs dockerd.sh start
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

image_key() { docker image inspect -f '{{index .Config.Labels "grappa.bed.key"}}' "$1" 2>/dev/null || true; }
PY_PACKAGES=python3,python3-venv,python-is-python3,passwd,ca-certificates
BASE_RECIPE=1  # bump when base_image() changes what it makes

base_image() {
    local key
    key=$(printf '%s %s %s' "$DEBIAN_SUITE" "$PY_PACKAGES" "$BASE_RECIPE" | sha256sum | cut -c1-16)
    [[ -z ${GRAPPA_REBUILD:-} && $(image_key python:3.11-slim) == "$key" ]] && return
    log "python:3.11-slim from Debian $DEBIAN_SUITE packages (mmdebstrap) ..."
    command -v mmdebstrap >/dev/null || die "mmdebstrap not found: apt-get install mmdebstrap"
    local tar=$BED/run/python-rootfs.tar
    mmdebstrap --quiet --variant=minbase --include="$PY_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        "$DEBIAN_SUITE" "$tar" >&2
    docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' --change "LABEL grappa.bed.key=$key" \
        "$tar" python:3.11-slim >/dev/null
    rm -f "$tar"
    log "python:3.11-slim ready"
}

# The build context: only what the Dockerfile reads (files git would commit, in a checkout), plus
# the wheelhouse as hard links.
CONTEXT_PATHS=(Dockerfile package.Dockerfile .dockerignore pyproject.toml README.md hack/requirements.lock hack/image-requirements.py
               hack/slim-torch.sh trainer operator)
context_files() {
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$REPO" ls-files -co --exclude-standard -- "${CONTEXT_PATHS[@]}"
    else
        (cd "$REPO" && find "${CONTEXT_PATHS[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc')
    fi | while IFS= read -r f; do [[ -f $REPO/$f ]] && printf '%s\n' "$f"; done | LC_ALL=C sort
}

grappa_images() {
    local wheels ctx key target
    wheels=$(GRAPPA_CACHE=$GRAPPA_CACHE "$REPO/hack/wheelhouse.sh" | tail -1)
    ctx=$BED/context
    key=$( (cd "$REPO" && context_files | tr '\n' '\0' | xargs -0 sha256sum; echo "$wheels"; image_key python:3.11-slim) \
           | sha256sum | cut -c1-16)
    if [[ -z ${GRAPPA_REBUILD:-} && $(image_key grappa-operator:bed) == "$key" && $(image_key grappa-trainer:bed) == "$key" ]]; then
        return
    fi
    rm -rf "$ctx" "$BED"/logs/build-*.log && mkdir -p "$ctx"
    (cd "$REPO" && context_files | tar -cf - -T - | tar -C "$ctx" -xf -)
    cp -al "$wheels" "$ctx/wheelhouse"
    # The build a user runs (`make images`, hack/images.sh) without REGISTRY, so nothing is pushed;
    # offline: no network, pip reads the wheelhouse linked into the context.
    log "grappa-operator:bed, grappa-trainer:bed: make images (wheels from $wheels) ..."
    make -s -C "$REPO" images REGISTRY= VERSION=bed IMAGE_CONTEXT="$ctx" \
        DOCKER_BUILD_FLAGS="--network none --build-arg WHEELS=local --label grappa.bed.key=$key" \
        >>"$BED/logs/build-images.log" \
        || { tail -30 "$BED/logs/build-images.log" >&2; die "make images failed (log: $BED/logs/build-images.log)"; }
    for target in operator trainer; do
        log "grappa-$target:bed: $(docker image inspect -f '{{.Size}}' "grappa-$target:bed" | numfmt --to=iec)"
    done
    rm -rf "$ctx"
    docker image prune -f >/dev/null  # the previous images, now untagged
}

case ${1:-all} in
    base) base_image ;;
    grappa) grappa_images ;;
    all) base_image; grappa_images ;;
    *) echo "usage: $0 [base|grappa]" >&2; exit 2 ;;
esac
