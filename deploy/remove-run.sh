#!/usr/bin/env bash
# Removes the containers and networks that warren nodes started with WARREN_RUN_ID=RUN made
# (label warren.run=RUN), and nothing else: other nodes' sandboxes on the same Docker host
# stay. Used by .ci/run on the way out.
#
# A node killed just before may still have a container or network creation in flight at the
# engine, which lands after a first look: so it looks again, until a look finds nothing
# (at most 5 passes, a second apart).
#
#   deploy/remove-run.sh RUN
set -euo pipefail
run=${1:?usage: remove-run.sh RUN}
filter="label=warren.run=$run"
for pass in 1 2 3 4 5; do
  ids=$(docker ps -aq --filter "$filter")
  [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
  nets=$(docker network ls -q --filter "$filter")
  [ -z "$nets" ] || docker network rm $nets >/dev/null 2>&1 || true
  [ -n "$ids$nets" ] || exit 0
  [ "$pass" = 5 ] || sleep 1
done
left=$(docker ps -aq --filter "$filter")$(docker network ls -q --filter "$filter")
[ -z "$left" ] || { echo "remove-run: left after 5 passes: $left" >&2; exit 1; }
