#!/usr/bin/env bash
# How long a snapshot of a running sandbox keeps it paused, against the whole snapshot:
#
#   loadtest/snapshot-freeze.sh            (after `make test` or `make dev` built the node;
#                                           SIZES="64 256 512" MB by default)
#
# Starts a node of this build on 127.0.0.1:7090 with a data dir of its own, writes SIZES MB
# of random bytes into one sandbox per size, snapshots each while it runs, and prints the
# node's `warren_snapshot_step_seconds` for `frozen` (the pause) and `capture` (the whole
# snapshot, upload included), and each snapshot's size and time. Stops the node and removes
# its containers (by its run id) and data dir, whatever happens.
set -euo pipefail
profile=${PROFILE:-debug}
. "$(dirname "$0")/dev-node.sh"
start_dev_node freeze 7090
export WARREN_URL=$url WARREN_API_KEY=$key
for mb in ${SIZES:-64 256 512}; do
  "$W" exec "freeze$mb" "head -c ${mb}000000 /dev/urandom > /workspace/big" >/dev/null
  curl -sf -X POST -H "Authorization: Bearer $WARREN_API_KEY" -H 'content-type: application/json' \
    -d '{}' "$WARREN_URL/v1/sandboxes/freeze$mb/snapshots" >/dev/null
done
curl -sf -H "Authorization: Bearer $WARREN_API_KEY" "$WARREN_URL/metrics" |
  grep -E 'warren_snapshot_step_seconds_(sum|count)\{step="(frozen|capture)"\}'
grep 'snapshot written' "$D/log" | sed -E 's/.*(sandbox_id=[^ ]*).*(bytes=[0-9]+).*(ms=[0-9]+).*/\1 \2 \3/'
