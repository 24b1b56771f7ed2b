#!/usr/bin/env bash
# The images and chart a cluster installs from (`make images`, docs/operator.md "Install"):
#   make images REGISTRY=registry.example.com/team [VERSION=0.1.0]
# builds the Dockerfile's `operator` and `trainer` targets as
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

images=()
for target in operator trainer; do
    image="${prefix}grappa-$target:$VERSION"
    start=$SECONDS
    log "$image from the Dockerfile (--target $target) ..."
    # The dependency stage is tagged too, so the classic builder keeps it cached when older
    # images are pruned: a source change then rebuilds only the last layer.
    for stage in "deps-$target" "$target"; do
        "$DOCKER" build "${BUILD_FLAGS[@]}" --target "$stage" -t "${prefix}grappa-$stage:$VERSION" \
            "$CONTEXT"
    done
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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
