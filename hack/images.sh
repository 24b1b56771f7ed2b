#!/usr/bin/env bash
# The images and chart a cluster installs from (`make images`, docs/operator.md "Install"):
#   make images REGISTRY=registry.example.com/team [VERSION=0.1.0]
# builds each image as its runtime (the Dockerfile's `operator-runtime`/`trainer-runtime` target,
# skipped while current) and the package on it (package.Dockerfile), tagged
#   <REGISTRY>/grappa-operator:<VERSION> and <REGISTRY>/grappa-trainer:<VERSION>,
# pushes both, and packages the chart as dist/grappa-<VERSION>.tgz with that version and
# imageRegistry=<REGISTRY>, so `helm install grappa dist/grappa-<VERSION>.tgz` pulls exactly them.
# Without REGISTRY it only builds (grappa-operator:<VERSION>, ...): what the kind bed does
# (hack/kind/images.sh), with its own context and flags.
#
# Environment (the Makefile passes them): REGISTRY, VERSION (SemVer when pushing: it becomes the
# chart's version), IMAGE_CONTEXT (build context, default the repository), DOCKER_BUILD_FLAGS
# (extra `docker build` flags), DOCKER, HELM (commands), DIST (chart output folder, default dist).
# Nothing is pushed unless both images built, and the chart is written only once both are pushed.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REGISTRY=${REGISTRY:-}
VERSION=${VERSION:-}
CONTEXT=${IMAGE_CONTEXT:-$REPO}
DOCKER=${DOCKER:-docker}
HELM=${HELM:-helm}
DIST=${DIST:-$REPO/dist}
read -r -a BUILD_FLAGS <<<"${DOCKER_BUILD_FLAGS:-}"

log() { printf '[images] %s\n' "$*" >&2; }
die() { printf 'make images: %s\n' "$*" >&2; exit 2; }

[[ -n $VERSION ]] || die "VERSION is empty: the image tag (default: the chart's appVersion)"
[[ $VERSION =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "VERSION=$VERSION is not a valid image tag"
if [[ -n $REGISTRY ]]; then
    [[ $REGISTRY =~ ^[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$ ]] \
        || die "REGISTRY=$REGISTRY is not a registry path like registry.example.com/team (no scheme, no trailing slash, lower-case path)"
    # helm package needs SemVer 2 for the chart's version
    [[ $VERSION =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] \
        || die "VERSION=$VERSION is not SemVer (e.g. 0.1.0): it becomes the packaged chart's version"
    command -v "$HELM" >/dev/null || die "helm not found (HELM=$HELM): needed to package the chart; \`make controlplane\` builds one"
    prefix="$REGISTRY/"
else
    prefix=""
fi

# The runtime's inputs (what the Dockerfile's stages read, and the build flags but labels, which
# change nothing built): when its image carries this key it is current, and its build, which
# sends the whole context (the wheels included), is skipped.
runtime_key() {
    local flag skip=
    (cd "$CONTEXT" && cat Dockerfile pyproject.toml hack/requirements.lock hack/image-requirements.py hack/slim-torch.sh) \
        || return 1
    [[ -d $CONTEXT/wheelhouse ]] && (cd "$CONTEXT" && find -L wheelhouse -type f -printf '%P %s\n' | LC_ALL=C sort)
    for flag in "${BUILD_FLAGS[@]}"; do
        if [[ -n $skip ]]; then skip=; elif [[ $flag == --label ]]; then skip=1; elif [[ $flag != --label=* ]]; then
            printf '%s\n' "$flag"; fi
    done
}

# The package's context: the source alone (package.Dockerfile copies nothing else).
package_context() {
    local dir=$1
    tar -C "$CONTEXT" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
        -cf - package.Dockerfile pyproject.toml README.md trainer operator | tar -C "$dir" -xf -
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
package_context "$work" || die "the package's source (package.Dockerfile, pyproject.toml, README.md, trainer/, operator/) is missing from $CONTEXT"
key=$(set -o pipefail; runtime_key | sha256sum | cut -c1-16) || die "the runtime's inputs (Dockerfile, pyproject.toml, hack/requirements.lock, ...) are missing from $CONTEXT"

images=()
for target in operator trainer; do
    image="${prefix}grappa-$target:$VERSION"
    runtime="${prefix}grappa-$target-runtime:$VERSION"
    start=$SECONDS
    log "$image: its runtime (the Dockerfile's --target $target-runtime), then package.Dockerfile ..."
    if [[ $("$DOCKER" image inspect -f '{{index .Config.Labels "grappa.runtime.key"}}' "$runtime" 2>/dev/null) == "$key" ]]; then
        log "$runtime is current (key $key)"
    else
        # The dependency stage is tagged too, so the classic builder keeps it cached when older
        # images are pruned: a runtime whose Dockerfile changed only below it rebuilds quickly.
        "$DOCKER" build "${BUILD_FLAGS[@]}" --target "deps-$target" -t "${prefix}grappa-deps-$target:$VERSION" "$CONTEXT"
        "$DOCKER" build "${BUILD_FLAGS[@]}" --label "grappa.runtime.key=$key" --target "$target-runtime" -t "$runtime" "$CONTEXT"
    fi
    "$DOCKER" build "${BUILD_FLAGS[@]}" --build-arg "RUNTIME=$runtime" -f "$work/package.Dockerfile" -t "$image" "$work"
    log "$image built in $((SECONDS - start))s"
    images+=("$image")
done

[[ -n $REGISTRY ]] || exit 0

for image in "${images[@]}"; do
    log "pushing $image ..."
    "$DOCKER" push "$image"
done

# The chart as published: its version and appVersion are VERSION (the images' tag, the default
# of image.tag/trainerImage.tag), its imageRegistry is REGISTRY.
cp -r "$REPO/charts/grappa" "$work/grappa"
sed -i "s|^imageRegistry: .*|imageRegistry: $REGISTRY|" "$work/grappa/values.yaml"
grep -qx "imageRegistry: $REGISTRY" "$work/grappa/values.yaml" || die "charts/grappa/values.yaml has no top-level imageRegistry line"
"$HELM" package "$work/grappa" --version "$VERSION" --app-version "$VERSION" -d "$work" >/dev/null
mkdir -p "$DIST"
mv "$work/grappa-$VERSION.tgz" "$DIST/grappa-$VERSION.tgz"
log "chart: $DIST/grappa-$VERSION.tgz"
cat <<EOF
Pushed ${images[*]}
Install:  helm install grappa $DIST/grappa-$VERSION.tgz -n grappa-system --create-namespace
EOF
