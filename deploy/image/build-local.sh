#!/usr/bin/env bash
# Builds the warren sandbox base image without any container registry:
# debootstrap a Debian rootfs with the packages of packages.txt, then `docker import` it.
# Idempotent: does nothing when the image exists; reuses a cached rootfs tarball when present.
#
#   deploy/image/build-local.sh [IMAGE]        (default: warren/sandbox:<version in VERSION>)
#
# Environment: WARREN_IMAGE_CACHE (default /var/cache/warren) holds the rootfs tarball,
# DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SUITE (default bookworm).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(tr -d '[:space:]' < "$here/VERSION")
image=${1:-warren/sandbox:$version}
cache=${WARREN_IMAGE_CACHE:-/var/cache/warren}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${DEBIAN_SUITE:-bookworm}
tarball="$cache/sandbox-rootfs-$version.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "image $image is present"
  exit 0
fi

if [ ! -s "$tarball" ]; then
  if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  fi
  mkdir -p "$cache"
  rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
  cleanup() {
    for m in dev/pts dev sys proc; do umount "$rootfs/$m" 2>/dev/null || true; done
    # --one-file-system: never follow a bind mount that failed to unmount into the host's /dev.
    rm -rf --one-file-system "$rootfs"
  }
  trap cleanup EXIT
  log="$cache/debootstrap.log"
  echo "debootstrap $suite into $rootfs (this takes a few minutes; log: $log)"
  debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$log" 2>&1 \
    || { tail -30 "$log"; exit 1; }
  # Second stage: apt inside the chroot, as the Dockerfile does; no service may start.
  mount -t proc proc "$rootfs/proc"
  mount -t sysfs sys "$rootfs/sys"
  mount --bind /dev "$rootfs/dev"
  mount --bind /dev/pts "$rootfs/dev/pts"
  printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"
  chmod +x "$rootfs/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  packages=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | tr '\n' ' ')
  # shellcheck disable=SC2086
  chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    "apt-get update -q && apt-get install -y -q --no-install-recommends $packages" >>"$log" 2>&1 \
    || { tail -30 "$log"; exit 1; }
  for m in dev/pts dev sys proc; do umount "$rootfs/$m"; done
  rm -f "$rootfs/usr/sbin/policy-rc.d"
  : > "$rootfs/etc/resolv.conf"
  # Shrink: no package lists, caches, docs or man pages in the image.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/tmp/* "$rootfs"/var/log/*.log
  printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" > "$rootfs/etc/apt/sources.list"
  # Debian's pip refuses system-wide installs (PEP 668); sandboxes are disposable computers, so allow them.
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  mkdir -p "$rootfs/workspace"
  tar -C "$rootfs" --numeric-owner -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
fi

echo "importing $tarball as $image"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV HOME=/root' \
  --change 'ENV MPLBACKEND=Agg' \
  --change 'ENV NODE_PATH=/usr/share/nodejs:/usr/lib/nodejs' \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["/bin/bash"]' \
  "$tarball" "$image" >/dev/null
echo "built $image"
