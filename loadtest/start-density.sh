#!/usr/bin/env bash
# How a node's rate of new sandboxes falls as it holds more of them, and what an idle one
# costs the host:
#
#   loadtest/start-density.sh        (after `make dev` built the node; TOTAL=400 sandboxes
#                                     in BLOCK=50, 4 at a time; PROFILE=release by default)
#
# Starts a node of this build on 127.0.0.1:7091 with a data dir of its own and no warm
# containers (each create starts its own, so the rate is the start path's, not the pool's),
# creates TOTAL sandboxes (`exec true`, get-or-create) 4 at a time and prints the rate of
# each block of BLOCK; then, with all of them idle for 10 s, the host's busy CPU share and
# the CPU seconds per process name (the guests', Docker's, the node's). Stops the node and
# removes its containers (by its run id) and data dir, whatever happens.
set -euo pipefail
profile=${PROFILE:-release}
total=${TOTAL:-400}
block=${BLOCK:-50}
. "$(dirname "$0")/dev-node.sh"
start_dev_node density 7091 --warm-containers 0 --warm-max 0
export url key
create() {
  curl -s -o /dev/null -w '%{http_code}\n' -m 120 -H "authorization: Bearer $key" \
    -H 'content-type: application/json' -X POST "$url/v1/sandboxes/dens-$1/exec" \
    -d '{"command":"true"}'
}
export -f create
for ((b = 0; b < total; b += block)); do
  s=$(date +%s%N)
  codes=$(seq "$b" $((b + block - 1)) | xargs -P4 -I{} bash -c 'create {}' | sort | uniq -c | tr -s ' \n' ' ')
  ms=$((($(date +%s%N) - s) / 1000000))
  echo "sandboxes $b..$((b + block - 1)): $ms ms, $(awk "BEGIN{printf \"%.2f\", $block*1000/$ms}") a second (status:$codes)"
done

# Idle: per-process CPU over 10 s (processes alive at both ends), and the host's busy share.
cpu_of_processes() {
  for d in /proc/[0-9]*; do cat "$d/stat" 2>/dev/null || true; done |
    awk '{i = index($0, ") "); name = substr($0, index($0, "(") + 1, i - index($0, "(") - 1)
          gsub(/ /, "_", name); split(substr($0, i + 2), f, " "); print $1, name, f[12] + f[13]}' | sort
}
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
sleep 5
cpu_of_processes >"$D/cpu0"
read -r b0 t0 < <(busy)
sleep 10
read -r b1 t1 < <(busy)
cpu_of_processes >"$D/cpu1"
echo "$total idle sandboxes: the host was $(awk "BEGIN{printf \"%.1f\", 100*($b1-$b0)/($t1-$t0)}")% busy over 10 s; CPU seconds by process name:"
join "$D/cpu0" "$D/cpu1" | awk '{d = $5 - $3; n[$2] += d} END {for (k in n) if (n[k] > 0) printf "  %6.2f %s\n", n[k] / 100, k}' | sort -rn | head -8
