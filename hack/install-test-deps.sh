#!/usr/bin/env bash
# Installs the Debian packages `make test` needs and the machine lacks (idempotent, quiet):
# Docker's engine for the kind bed (the bed runs its own dockerd; the packaged service is never
# started), mmdebstrap for the images made from Debian packages, jq, iptables, gcc, and
# Prometheus for the dashboard test. Needs root or passwordless sudo when something is missing.
set -euo pipefail
declare -A package_of=([dockerd]=docker.io [mmdebstrap]=mmdebstrap [jq]=jq [iptables]=iptables
                       [gcc]=gcc [prometheus]=prometheus [ip]=iproute2)
missing=()
for cmd in "${!package_of[@]}"; do
    command -v "$cmd" >/dev/null || [[ -x /usr/sbin/$cmd || -x /usr/bin/$cmd ]] || missing+=("${package_of[$cmd]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    sudo -n true 2>/dev/null || { echo "install-test-deps: missing ${missing[*]} and not root: apt-get install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo -n)
fi
echo ">> apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Packaged services (docker, prometheus) must not start: policy-rc.d makes invoke-rc.d skip them.
policy=/usr/sbin/policy-rc.d made_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod 755 "$policy"
    made_policy=1
fi
log=$(mktemp)
status=0
{ "${SUDO[@]}" apt-get update -qq && "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 || status=$?
[[ $made_policy -eq 1 ]] && "${SUDO[@]}" rm -f "$policy"
if [[ $status -ne 0 ]]; then
    echo "install-test-deps: apt-get failed (exit $status):" >&2
    tail -n 30 "$log" >&2
fi
rm -f "$log"
exit $status
