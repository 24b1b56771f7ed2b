#!/usr/bin/env bash
# Host FORWARD guard of the bed: its own chain, first in FORWARD, drops anything entering or
# leaving the bed's bridges for another interface and counts it. The bed asserts the count is 0.
#   guard.sh up | down | drops
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case ${1:-} in
    up)
        iptables -N "$GUARD_CHAIN" 2>/dev/null || iptables -F "$GUARD_CHAIN"
        for br in "$KIND_BRIDGE" "$DOCKER_BRIDGE"; do
            iptables -A "$GUARD_CHAIN" -i "$br" ! -o "$br" -j DROP
            iptables -A "$GUARD_CHAIN" -o "$br" ! -i "$br" -j DROP
        done
        iptables -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null || iptables -I FORWARD 1 -j "$GUARD_CHAIN"
        ;;
    drops)  # packets dropped since `up`
        iptables -L "$GUARD_CHAIN" -v -x -n 2>/dev/null | awk '$3 == "DROP" {n += $1} END {print n + 0}'
        ;;
    down)
        while iptables -C FORWARD -j "$GUARD_CHAIN" 2>/dev/null; do iptables -D FORWARD -j "$GUARD_CHAIN"; done
        iptables -F "$GUARD_CHAIN" 2>/dev/null || true
        iptables -X "$GUARD_CHAIN" 2>/dev/null || true
        ;;
    *) echo "usage: $0 up|down|drops" >&2; exit 2 ;;
esac
