#!/bin/bash
# Installs the Debian packages the tests and the demo use, if they are missing:
# prometheus (with promtool), prometheus-pushgateway, prometheus-node-exporter,
# prometheus-alertmanager (with amtool), victoria-metrics (the remote-write test's
# receiver), chromium (headless, for the status page test) and tinyproxy (a real HTTP
# proxy for the sender's proxy test).
set -euo pipefail

packages=()
command -v prometheus >/dev/null || packages+=(prometheus)
command -v promtool >/dev/null || packages+=(prometheus)
command -v prometheus-pushgateway >/dev/null || packages+=(prometheus-pushgateway)
command -v prometheus-node-exporter >/dev/null || packages+=(prometheus-node-exporter)
command -v prometheus-alertmanager >/dev/null || packages+=(prometheus-alertmanager)
command -v amtool >/dev/null || packages+=(prometheus-alertmanager)
command -v victoria-metrics >/dev/null || packages+=(victoria-metrics)  # remote write
command -v chromium >/dev/null || packages+=(chromium)  # the status page's browser test
command -v nft >/dev/null || packages+=(nftables)  # firewall rules in the multi-host test
command -v tinyproxy >/dev/null || packages+=(tinyproxy-bin)  # the sender through a proxy
if [ ${#packages[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "system packages: installing ${packages[*]} (Debian/Ubuntu apt) ..."
if ! command -v apt-get >/dev/null; then
  echo "error: apt-get not found; install ${packages[*]} with your package manager," \
       "or run \`rl-insight server install\` for Prometheus" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "error: installing ${packages[*]} needs root; run as root or install sudo" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${packages[@]}"
# Debian starts these as services on some systems; the project runs its own copies.
for svc in prometheus prometheus-pushgateway prometheus-node-exporter \
           prometheus-alertmanager victoria-metrics; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
    $SUDO systemctl stop "$svc" || true
  fi
done
echo "system packages: done"
