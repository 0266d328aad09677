#!/usr/bin/env bash
# The snapshot benchmark (snapshot, restore, fork 4, wake) with Docker's data root on a
# filesystem of its own, with the baselines writing to the same filesystem:
#
#   loadtest/snapshots-on-fs.sh [xfs|ext4]      (root; no dockerd may be running; default xfs)
#
# xfs:  the copy_file_range a fork copies its source's files with shares blocks (reflink)
#       instead of writing them again: what a fork costs on a copy-on-write filesystem.
# ext4: ext4 as mkfs.ext4 and distribution installers make it, with a journal. (Without a
#       journal, ext4 skips inodes freed in the last minute when it allocates new ones, so
#       creating files right after deleting many is several times slower; see
#       docs/benchmarks.md, "ext4 without a journal".)
#
# It makes the filesystem in a sparse file (WARREN_BENCH_FS_SIZE, default 12G) on a loop
# device, starts its own dockerd on it, imports the sandbox image from the cached rootfs
# (deploy/image/build-local.sh), runs `make bench` with WARREN_BENCH_ONLY=snapshots, and
# removes all of it again, whatever happens.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
fs=${1:-xfs}
case "$fs" in
  xfs | ext4) ;;
  *) echo "usage: $0 [xfs|ext4]" >&2; exit 2 ;;
esac
if pgrep -x dockerd >/dev/null; then
  echo "a dockerd is running; stop it first (this script runs its own on $fs)" >&2
  exit 1
fi
if [ "$fs" = xfs ]; then
  command -v mkfs.xfs >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q xfsprogs >/dev/null
else
  command -v mkfs.ext4 >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q e2fsprogs >/dev/null
fi
work=$(mktemp -d "/var/lib/warren-$fs-bench.XXXXXX")
img="$work/fs.img"
mnt="$work/mnt"
mkdir -p "$mnt"
# Every descendant of a pid (its containerd, say), found through /proc.
descendants() {
  local child
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}
cleanup() {
  if [ -s "$work/dockerd.pid" ]; then
    pid=$(cat "$work/dockerd.pid")
    tree=$(descendants "$pid" || true)
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    for p in $tree; do kill "$p" 2>/dev/null || true; done
  fi
  sleep 1
  umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
truncate -s "${WARREN_BENCH_FS_SIZE:-12G}" "$img"
if [ "$fs" = xfs ]; then
  mkfs.xfs -q -m reflink=1 "$img"
  # pquota: Docker enforces sandboxes' disk limits on overlay2 over XFS only with it (where
  # the kernel has XFS quotas; without, the bench runs with disk limits off, as on ext4).
  mount -o loop,pquota "$img" "$mnt" 2>/dev/null || mount -o loop "$img" "$mnt"
else
  mkfs.ext4 -q -F "$img"
  mount -o loop "$img" "$mnt"
fi
dockerd --userns-remap=default --data-root "$mnt/docker" --pidfile "$work/dockerd.pid" >"$work/dockerd.log" 2>&1 &
for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
docker info >/dev/null 2>&1 || { tail -20 "$work/dockerd.log" >&2; exit 1; }
"$here/deploy/image/build-local.sh"
mkdir -p "$mnt/bench"
cd "$here"
WARREN_BENCH_ONLY=snapshots WARREN_BENCH_WORKDIR="$mnt/bench" make bench
