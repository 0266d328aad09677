#!/usr/bin/env bash
# Removes the containers and networks that warren nodes started with WARREN_RUN_ID=RUN made
# (label warren.run=RUN), and nothing else: other nodes' sandboxes on the same Docker host
# stay. Used by .ci/run on the way out.
#
#   deploy/remove-run.sh RUN
set -euo pipefail
run=${1:?usage: remove-run.sh RUN}
filter="label=warren.run=$run"
ids=$(docker ps -aq --filter "$filter")
[ -z "$ids" ] || docker rm -f $ids >/dev/null
nets=$(docker network ls -q --filter "$filter")
[ -z "$nets" ] || docker network rm $nets >/dev/null
