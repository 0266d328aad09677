# Sourced by the loadtest scripts: `start_dev_node NAME PORT [FLAG...]` starts a `warren dev`
# node of this build (`$profile`: debug or release, set before) on 127.0.0.1:PORT with a data
# dir of its own and the run id NAME-<pid>, waits until it answers, and on the script's exit
# stops it, removes its containers (by its run id) and deletes its data dir, whatever
# happened. It sets W (the binary), D (the data dir), url and key.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$here/target}

start_dev_node() {
  local name=$1 port=$2
  shift 2
  W=$target/$profile/warren
  export WARREN_GUEST_BIN=${WARREN_GUEST_BIN:-$target/x86_64-unknown-linux-musl/$profile/warren-guest}
  export WARREN_RUN_ID=$name-$$
  D=$(mktemp -d)
  "$W" dev --data-dir "$D" --listen "127.0.0.1:$port" "$@" >"$D/log" 2>&1 &
  dev_pid=$!
  trap 'kill $dev_pid 2>/dev/null; wait $dev_pid 2>/dev/null; "$here"/deploy/remove-run.sh $WARREN_RUN_ID >/dev/null 2>&1 || true; rm -rf "$D"' EXIT
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.5
  done
  url=http://127.0.0.1:$port
  key=$(cat "$D/api-key")
}
