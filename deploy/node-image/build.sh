#!/usr/bin/env bash
# Builds the node's container image, warren/node:<version>, without any container registry:
# a Debian base from debootstrap (what a node calls besides itself: iptables, mount, unshare,
# nsenter, mkfs.ext4, CA certificates), imported once as warren/node-base:<suite>, and the
# node and guest binaries of this build copied on top. Used by the compose file
# (deploy/compose) and the Kubernetes manifests (deploy/kubernetes).
#
#   deploy/node-image/build.sh WARREN_BIN GUEST_BIN [IMAGE]   (default warren/node:<VERSION>)
#
# Environment: WARREN_IMAGE_CACHE (default /var/cache/warren) keeps the base rootfs tarball,
# DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SUITE (default bookworm).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
warren_bin=${1:?usage: build.sh WARREN_BIN GUEST_BIN [IMAGE]}
guest_bin=${2:?usage: build.sh WARREN_BIN GUEST_BIN [IMAGE]}
version=$(tr -d '[:space:]' < "$here/../image/VERSION")
image=${3:-warren/node:$version}
cache=${WARREN_IMAGE_CACHE:-/var/cache/warren}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${DEBIAN_SUITE:-bookworm}
# Bumped whenever what goes into the base changes, so that no stale cached base is used.
base_rev=2
base=warren/node-base:$suite-$base_rev
tarball="$cache/node-rootfs-$suite-$base_rev.tar"
packages=iptables,ca-certificates,e2fsprogs,util-linux,mount

if ! docker image inspect "$base" >/dev/null 2>&1; then
  if [ ! -s "$tarball" ]; then
    if ! command -v debootstrap >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
    fi
    mkdir -p "$cache"
    rootfs=$(mktemp -d "$cache/node-rootfs.XXXXXX")
    trap 'rm -rf --one-file-system "$rootfs"' EXIT
    log="$cache/node-debootstrap.log"
    echo "debootstrap $suite (+ $packages) into $rootfs (a minute or two; log: $log)"
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" >"$log" 2>&1 \
      || { tail -30 "$log"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
    : > "$rootfs/etc/resolv.conf"
    # The node runs as root; no setuid program is of use to it. And on a Docker daemon with
    # user namespaces, a container outside them (the node's: userns_mode host) sees the
    # image's files owned by the remapped root, so a setuid program (mount, umount) would
    # run as that unprivileged uid instead of root.
    find "$rootfs" -xdev -perm -4000 -type f -exec chmod u-s {} +
    tar -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
  fi
  docker import "$tarball" "$base" >/dev/null
fi

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$warren_bin" "$context/warren"
cp "$guest_bin" "$context/warren-guest"
cat > "$context/Dockerfile" <<DOCKERFILE
FROM $base
COPY warren warren-guest /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/warren"]
CMD ["serve", "--config", "/etc/warren/node.toml"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t "$image" "$context" >/dev/null
echo "$image"
