#!/usr/bin/env bash
# Runs the README's test command (`./test`) in a bare Debian 12 root made here with
# debootstrap (minbase: no Rust, make, nextest, Node, Chromium or Docker inside), to check
# that the set-up path installs everything itself. The root uses this host's Docker through
# its socket and its data root (a daemon cannot run inside a chroot); everything else it
# installs itself.
# Takes about 40 minutes on 2 cores (Rust, nextest and RocksDB are built from nothing).
#
#   deploy/check-bare-debian.sh [ROOT]     (default /srv/warren-bare; made fresh, removed after)
#
# The host must have debootstrap and a running Docker (deploy/host-setup.sh). The commit
# checked is this checkout's HEAD. Exit status: that of ./test. The log goes to
# ROOT.log beside the root. What this host's network needs is copied in: extra CA
# certificates (/usr/local/share/ca-certificates), /etc/hosts and /etc/pip.conf.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-/srv/warren-bare}
log="$root.log"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
[ ! -e "$root" ] || { echo "$root exists; remove it or name another root" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "no Docker answers on this host" >&2; exit 2; }
[ ! -e /srv/warren ] || { echo "/srv/warren exists on this host; the root's checkout is shown there" >&2; exit 2; }

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[$i]}" 2>/dev/null || umount -l "${mounted[$i]}" 2>/dev/null || true
  done
  [ -z "${made_srv_warren:-}" ] || rmdir /srv/warren 2>/dev/null || true
  # Only once nothing is mounted below it (never follow a bind into the host's /dev or /tmp).
  if ! findmnt -rn -o TARGET | grep -q "^$root\(/\|$\)"; then
    rm -rf --one-file-system "$root"
  else
    echo "left $root in place: something is still mounted below it" >&2
  fi
  if [ -n "${run_id:-}" ]; then "$repo/deploy/remove-run.sh" "$run_id" || true; fi
}
trap cleanup EXIT
bind() { # SRC DST: a bind mount (of a directory or a file) that cleanup undoes
  mount --bind "$1" "$2"
  mounted+=("$2")
}
rbind() { # SRC DST: a recursive bind whose mounts do not propagate back to the host
  mkdir -p "$2"
  mount --rbind "$1" "$2"
  mount --make-rslave "$2"
  mounted+=("$2")
}

started=$(date +%s)
echo "debootstrap bookworm (minbase) into $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
git clone -q "$repo" "$root/srv/warren"
# The root is a mount point of its own (`ip netns exec`, which the network tests use,
# remounts `/`), and the checkout is at the same path for the host's Docker as inside (tests
# hand Docker paths of the build, such as the guest binary).
rbind "$root" "$root"
mkdir -p /srv/warren
made_srv_warren=1
bind "$root/srv/warren" /srv/warren
mkdir -p "$root/proc" && mount -t proc proc "$root/proc" && mounted+=("$root/proc")
rbind /sys "$root/sys"
rbind /dev "$root/dev"
# The tests' files under /tmp and the sandboxes' run dirs must be the same paths for the
# host's Docker as for the nodes inside: share /tmp, and Docker's socket.
bind /tmp "$root/tmp"
touch "$root/run/docker.sock"
bind /run/docker.sock "$root/run/docker.sock"
# The node reads sandboxes' writable layers and sets their host names where Docker keeps
# them: its data root, at the same path.
data_root=$(docker info -f '{{.DockerRootDir}}')
rbind "$data_root" "$root$data_root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/hosts "$root/etc/hosts"
[ ! -f /etc/pip.conf ] || cp /etc/pip.conf "$root/etc/pip.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" sh -c 'apt-get update -q >/dev/null && apt-get install -y -q ca-certificates >/dev/null \
    && update-ca-certificates >/dev/null'
fi
run_id=bare-$$-$started
bundle=/etc/ssl/certs/ca-certificates.crt
echo "running ./test in $root (log: $log)"
set +e
chroot "$root" env -i HOME=/root TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  SSL_CERT_FILE=$bundle NODE_EXTRA_CA_CERTS=$bundle PIP_CERT=$bundle \
  REQUESTS_CA_BUNDLE=$bundle CURL_CA_BUNDLE=$bundle WARREN_RUN_ID="$run_id" \
  bash -c 'cd /srv/warren && ./test' >>"$log" 2>&1
status=$?
set -e
echo "./test exited $status after $(( ($(date +%s) - started) / 60 )) minutes; the log: $log"
grep -E '^\s+(Summary|PASS|FAIL) \[' "$log" | grep -E 'Summary|FAIL' | tail -5 || true
exit $status
