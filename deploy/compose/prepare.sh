#!/usr/bin/env bash
# Writes what deploy/compose/compose.yaml runs on into DIR: the three nodes' settings (n1 in
# region-1 bootstraps, n2 in region-2 and n3 in region-3 join it), the cluster's API key and
# join token (made once, kept on reruns), the shared object store directory, and .env for
# docker-compose --env-file.
#
#   deploy/compose/prepare.sh DIR [HOST_ADDR]   (HOST_ADDR: the address the nodes listen on
#                                                and advertise; default 127.0.0.1)
#
# Environment: WARREN_NODE_IMAGE (default warren/node:<VERSION>), WARREN_COMPOSE_PORT_BASE
# (default 7070: APIs on base+1..3, QUIC peers on base+331..333), WARREN_RUN_ID (labels).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: prepare.sh DIR [HOST_ADDR]}
addr=${2:-127.0.0.1}
version=$(tr -d '[:space:]' < "$here/../image/VERSION")
image=${WARREN_NODE_IMAGE:-warren/node:$version}
base=${WARREN_COMPOSE_PORT_BASE:-7070}
mkdir -p "$dir/objects"
dir=$(cd "$dir" && pwd)
umask 077

secret() { # FILE PREFIX: a random secret, kept when the file exists
  [ -s "$1" ] || printf '%s%s\n' "$2" "$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')" > "$1"
  tr -d '[:space:]' < "$1"
}
secret "$dir/api-key" wk_ >/dev/null
token=$(secret "$dir/join-token" wj_)

# The node's iptables must be the variant the host's Docker uses (nf_tables or legacy).
iptables=/usr/sbin/iptables
ip6tables=/usr/sbin/ip6tables
if iptables -V 2>/dev/null | grep -q legacy; then
  iptables=/usr/sbin/iptables-legacy
  ip6tables=/usr/sbin/ip6tables-legacy
fi

for i in 1 2 3; do
  join=""
  [ "$i" = 1 ] || join="join = \"http://$addr:$((base + 1))\""
  cat > "$dir/n$i.toml" <<TOML
# Node n$i of the compose cluster (every key: docs/cluster.md, "Starting one").
name = "n$i"
region = "region-$i"
data_dir = "$dir/n$i"
listen = "$addr:$((base + i))"
peer_listen = "$addr:$((base + 330 + i))"
$join
join_token = "$token"
api_key_file = "$dir/api-key"
object_store = "$dir/objects"
iptables = "$iptables"
ip6tables = "$ip6tables"
TOML
done
cat > "$dir/.env" <<ENV
WARREN_COMPOSE_DIR=$dir
WARREN_HOST_ADDR=$addr
WARREN_NODE_IMAGE=$image
WARREN_RUN_ID=${WARREN_RUN_ID:-}
WARREN_N1_API=$addr:$((base + 1))
WARREN_N2_API=$addr:$((base + 2))
WARREN_N3_API=$addr:$((base + 3))
ENV
echo "prepared $dir: WARREN_URL=http://$addr:$((base + 1)) WARREN_API_KEY=\$(cat $dir/api-key)"
