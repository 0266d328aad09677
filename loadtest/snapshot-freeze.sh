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
target=${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}
profile=${PROFILE:-debug}
W=$target/$profile/warren
export WARREN_GUEST_BIN=${WARREN_GUEST_BIN:-$target/x86_64-unknown-linux-musl/$profile/warren-guest}
export WARREN_RUN_ID=freeze-$$
here=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d)
"$W" dev --data-dir "$D" --listen 127.0.0.1:7090 >"$D/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; "$here"/deploy/remove-run.sh $WARREN_RUN_ID >/dev/null 2>&1 || true; rm -rf "$D"' EXIT
for _ in $(seq 1 120); do
  curl -sf http://127.0.0.1:7090/healthz >/dev/null && break
  sleep 0.5
done
export WARREN_URL=http://127.0.0.1:7090 WARREN_API_KEY=$(cat "$D/api-key")
for mb in ${SIZES:-64 256 512}; do
  "$W" exec "freeze$mb" "head -c ${mb}000000 /dev/urandom > /workspace/big" >/dev/null
  curl -sf -X POST -H "Authorization: Bearer $WARREN_API_KEY" -H 'content-type: application/json' \
    -d '{}' "$WARREN_URL/v1/sandboxes/freeze$mb/snapshots" >/dev/null
done
curl -sf -H "Authorization: Bearer $WARREN_API_KEY" "$WARREN_URL/metrics" |
  grep -E 'warren_snapshot_step_seconds_(sum|count)\{step="(frozen|capture)"\}'
grep 'snapshot written' "$D/log" | sed -E 's/.*(sandbox_id=[^ ]*).*(bytes=[0-9]+).*(ms=[0-9]+).*/\1 \2 \3/'
