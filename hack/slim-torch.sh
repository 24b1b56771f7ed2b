#!/bin/sh
# Makes a CPU-only trainer environment of PyPI's torch, which is the CUDA build (the trainer image
# runs on CPU: docs/operator.md). Removes triton (the GPU kernel compiler torch.compile uses on
# CUDA) and every NVIDIA library torch's own libraries do not link against: what `import torch`
# loads is found by ldd from torch/lib, so what is kept is exactly what loading needs (about 2 of
# the 3 GB; the rest, cuDNN's engines, cuSOLVER's multi-GPU parts, ..., is only dlopen()ed by
# CUDA kernels). The image's test runs torch, a training job and inference on it.
#   slim-torch.sh <site-packages folder>
set -eu
site=${1:?usage: slim-torch.sh <site-packages>}
[ -d "$site/torch/lib" ] || { echo "slim-torch: no torch in $site" >&2; exit 2; }
keep=$(mktemp)
for lib in "$site"/torch/lib/*.so* "$site"/torch/_C*.so; do ldd "$lib"; done \
    | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | xargs -r realpath | sort -u >"$keep"
before=$(du -sm "$site" | cut -f1)
find "$site/nvidia" -name '*.so*' \( -type f -o -type l \) | while read -r f; do
    grep -qxF "$(realpath "$f")" "$keep" || rm -f "$f"
done
rm -rf "$site/triton"
rm -f "$keep"
echo "slim-torch: $before MB -> $(du -sm "$site" | cut -f1) MB" >&2
