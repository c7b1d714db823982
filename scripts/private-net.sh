#!/bin/bash
# Runs a command in a private network namespace with only loopback up, so tests bind
# their servers away from other processes and send nothing off this machine.
# Falls back to running it directly where namespaces are not allowed.
set -euo pipefail
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null \
   && unshare --net true 2>/dev/null; then
  # lo, plus a veth pair so the namespace has a network device besides loopback, as a
  # node does (hardware panels leave lo out)
  exec unshare --net -- sh -c 'ip link set lo up && { ip link add rli0 type veth peer \
    name rli1 && ip link set rli0 up && ip link set rli1 up; } 2>/dev/null; exec "$@"' \
    sh "$@"
fi
echo "note: no private network namespace here (needs root and unshare); running directly" >&2
exec "$@"
