#!/usr/bin/env bash
# Installs the servers countersign's tests and demo run for real: redis-server and Chromium.
# Uses Debian's packages; needs root (as on CI) or sudo, and says what to install otherwise.
set -euo pipefail
# `system-deps.sh` installs both; `system-deps.sh redis` only what the demo needs.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ "${1:-all}" != "redis" ]; then
  [ -x /usr/bin/chromium ] || missing+=(chromium)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  apt=(apt-get)
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  apt=(sudo apt-get)
else
  echo "countersign needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (Debian packages) ..."
export DEBIAN_FRONTEND=noninteractive
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
