#!/usr/bin/env bash
# Installs Debian's `prometheus` package when /usr/bin/prometheus is missing (the e2e suite's
# Prometheus fixture needs only the server binary; it writes its own config and never starts the
# packaged service). Idempotent and quiet: prints the binary's path on success.
#   hack/install-prometheus.sh            # as root (apt), or with passwordless sudo
# Override the binary with $GRAPPA_PROMETHEUS_BIN (then this script only checks it).
set -euo pipefail

BIN="${GRAPPA_PROMETHEUS_BIN:-/usr/bin/prometheus}"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
if [[ -n "${GRAPPA_PROMETHEUS_BIN:-}" ]]; then
  echo "install-prometheus: GRAPPA_PROMETHEUS_BIN=$BIN is not an executable" >&2
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "install-prometheus: /usr/bin/prometheus missing and not root (no passwordless sudo);" \
         "run: apt-get install prometheus" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The package's postinst tries to start the service; there is no init system in CI containers,
# and policy-rc.d makes invoke-rc.d skip it instead of failing.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
  "${SUDO[@]}" chmod 755 "$policy"
  made_policy=1
fi
status=0
{
  "${SUDO[@]}" apt-get update -qq &&
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus
} >"$log" 2>&1 || status=$?
if [[ $made_policy -eq 1 ]]; then
  "${SUDO[@]}" rm -f "$policy"
fi
if [[ $status -ne 0 || ! -x /usr/bin/prometheus ]]; then
  echo "install-prometheus: apt-get failed (exit $status):" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
echo /usr/bin/prometheus
