#!/usr/bin/env bash
# Installs make (Debian's package) when it is missing; the rest of the set-up is the
# Makefile's (deploy/host-setup.sh).
set -euo pipefail
command -v make >/dev/null && exit 0
echo "ensure-make: installing make"
if [ "$(id -u)" = 0 ]; then sudo=(); else sudo=(sudo); fi
"${sudo[@]}" apt-get update -q >/dev/null
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q make >/dev/null
