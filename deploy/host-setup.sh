#!/usr/bin/env bash
# Prepares a Debian host for building and running warren. Idempotent; each step is skipped
# when already done. Used by `make dev`, `make test` and .ci/run.
#
#   deploy/host-setup.sh [--no-docker] [--no-image] [--test-deps]
#
# Steps: Debian build packages (musl-tools, libclang-dev, pkg-config, iptables, iproute2, git, and
# Node.js with npm, which bundle the web page's xterm.js; with --test-deps also Chromium
# for the browser tests, fonts-dejavu-core for the benchmark report's plots, moto's S3 server for the object-store tests, systemd-analyze
# for the unit file's check, Prometheus with promtool for the monitoring tests, and
# docker-compose for the compose file's test), the
# Rust toolchain (rustup with rustfmt and clippy, when no cargo is found; cargo-nextest with
# --test-deps), the Rust musl target, a running Docker daemon (docker.io installed and dockerd started when
# none answers, with user namespaces: `--userns-remap=default`, so that root in a sandbox
# is an unprivileged user on the host, and crun registered as a runtime; its pid goes to $WARREN_DOCKERD_PIDFILE so a CI run
# can stop what it started), and the sandbox base image (built locally with debootstrap
# when missing). A daemon that already runs without user namespaces is left as it is, with
# a warning: nodes on it refuse to start sandboxes (see docs/security.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
want_docker=1
want_image=1
want_test_deps=0
for a in "$@"; do
  case "$a" in
    --no-docker) want_docker=0; want_image=0 ;;
    --no-image) want_image=0 ;;
    --test-deps) want_test_deps=1 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v make >/dev/null || missing+=(make)
command -v g++ >/dev/null || missing+=(build-essential)
command -v musl-gcc >/dev/null || missing+=(musl-tools)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v iptables >/dev/null || missing+=(iptables)
# `ip`: the tests' network namespaces, and a look at sandboxes' links.
command -v ip >/dev/null || missing+=(iproute2)
command -v git >/dev/null || missing+=(git)
command -v curl >/dev/null || missing+=(curl)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ "$want_test_deps" = 1 ]; then
  command -v chromium >/dev/null || missing+=(chromium)
  # The font the benchmark report's plots are drawn with (and its test).
  [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  # `systemd-analyze verify` checks deploy/systemd's unit.
  command -v systemd-analyze >/dev/null || missing+=(systemd)
  # A real Prometheus scrapes a test cluster; promtool checks deploy/prometheus's rules.
  command -v promtool >/dev/null || missing+=(prometheus)
  # The compose file's test brings up a 3-region cluster with it (deploy/compose).
  command -v docker-compose >/dev/null || missing+=(docker-compose)
fi
[ -e /usr/lib/llvm-14/lib/libclang.so ] || ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || missing+=(libclang-dev)
if [ "$want_docker" = 1 ]; then
  command -v dockerd >/dev/null || missing+=(docker.io)
  # An OCI runtime nodes may be set to (oci_runtime = "crun") and the startpath benchmark
  # measures; registered with the dockerd started here. WARREN_CRUN=0 skips it.
  [ "${WARREN_CRUN:-1}" = 0 ] || command -v crun >/dev/null || missing+=(crun)
fi
if [ "$want_image" = 1 ]; then
  command -v debootstrap >/dev/null || missing+=(debootstrap)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "host-setup: installing ${missing[*]}"
  as_root apt-get update -q >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

# moto's S3 server for the object-store tests, in its own virtualenv (Debian's Python
# refuses system-wide pip installs).
moto_venv=${WARREN_TOOLS_DIR:-/var/cache/warren/tools}/moto
if [ "$want_test_deps" = 1 ] && ! command -v moto_server >/dev/null && [ ! -x "$moto_venv/bin/moto_server" ]; then
  echo "host-setup: installing moto[server] into $moto_venv"
  as_root mkdir -p "$(dirname "$moto_venv")"
  as_root python3 -m venv "$moto_venv"
  as_root "$moto_venv/bin/pip" install -q "moto[server]"
fi
# kubernetes-validate (the Kubernetes API's schemas, offline) checks deploy/kubernetes.
kv_venv=${WARREN_TOOLS_DIR:-/var/cache/warren/tools}/kubernetes-validate
if [ "$want_test_deps" = 1 ] && [ ! -x "$kv_venv/bin/kubernetes-validate" ]; then
  echo "host-setup: installing kubernetes-validate into $kv_venv"
  as_root mkdir -p "$(dirname "$kv_venv")"
  as_root python3 -m venv "$kv_venv"
  as_root "$kv_venv/bin/pip" install -q "kubernetes-validate==1.37.0"
fi

# A toolchain installed by an earlier run is in ~/.cargo/bin, which a fresh shell's PATH may
# lack (the Makefile puts it first on every line's PATH, too).
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
# The SDKs' test dependencies: the TypeScript SDK's packages (`npm ci`, from its lock file)
# and a virtualenv inside the checkout for the Python SDK (httpx, websockets, pytest, and
# schemathesis, which cli/tests/e2e/schemathesis.rs runs against a live node).
sdk_dir=${WARREN_SDK_DIR:-$here/../sdk}
ts=$sdk_dir/typescript
if [ "$want_test_deps" = 1 ] && [ -f "$ts/package-lock.json" ] \
    && { [ ! -e "$ts/node_modules/.package-lock.json" ] || [ "$ts/package-lock.json" -nt "$ts/node_modules/.package-lock.json" ]; }; then
  echo "host-setup: installing the TypeScript SDK's packages (npm ci)"
  (cd "$ts" && npm ci --no-audit --no-fund --loglevel=error)
fi
py=$sdk_dir/python
if [ "$want_test_deps" = 1 ] && [ -f "$py/pyproject.toml" ] \
    && { [ ! -e "$py/.venv/installed" ] || [ "$py/pyproject.toml" -nt "$py/.venv/installed" ]; }; then
  echo "host-setup: making the Python SDK's virtualenv (sdk/python/.venv)"
  python3 -m venv "$py/.venv"
  "$py/.venv/bin/pip" install -q -e "$py[test]"
  touch "$py/.venv/installed"
fi

if ! command -v cargo >/dev/null; then
  # rustup-init itself, from the Rust distribution server: what the script at sh.rustup.rs
  # downloads too, and the host a network that lets Rust's toolchains through allows anyway.
  init_url="https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init"
  echo "host-setup: no Rust toolchain; installing rustup ($init_url)"
  # Named rustup-init: rustup decides what to be from the name it is run by.
  init_dir=$(mktemp -d)
  curl --proto '=https' --tlsv1.2 -sSf -o "$init_dir/rustup-init" "$init_url"
  chmod +x "$init_dir/rustup-init"
  "$init_dir/rustup-init" -y --profile minimal --component rustfmt,clippy
  rm -rf "$init_dir"
  export PATH="$HOME/.cargo/bin:$PATH"
fi
# `make verify` needs both; a minimal rustup profile has neither.
if command -v rustup >/dev/null; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
if [ "$want_test_deps" = 1 ] && ! command -v cargo-nextest >/dev/null; then
  echo "host-setup: installing cargo-nextest (the test runner; builds from crates.io)"
  cargo install cargo-nextest --locked
fi
if ! rustup target list --installed 2>/dev/null | grep -q x86_64-unknown-linux-musl; then
  echo "host-setup: adding the x86_64-unknown-linux-musl target (static guest agent)"
  rustup target add x86_64-unknown-linux-musl
fi

# Starts dockerd in the background and waits until it answers; false if it exited (or never
# answered) instead.
start_dockerd() {
  local log=$1 pidfile=$2 pid runtimes=""
  if [ "${WARREN_CRUN:-1}" != 0 ] && command -v crun >/dev/null \
    && ! grep -qs '"crun"' /etc/docker/daemon.json; then
    runtimes="--add-runtime crun=$(command -v crun)"
  fi
  as_root sh -c "nohup dockerd --userns-remap=default $runtimes >'$log' 2>&1 & echo \$! > '$pidfile'"
  pid=$(cat "$pidfile")
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  docker info >/dev/null 2>&1
}

# A dockerd killed while it was creating a network (a machine stopped under a running test
# suite) can leave a network record without its address pool; Docker 20.10 then panics in
# libnetwork's reservePools on every start. The network store of the user-namespaced data
# root (the one this script starts dockerd with) is moved aside, not deleted, and only when
# WARREN_DOCKER_REPAIR_NETWORKS=1 says so (.ci/run does: CI owns its machine's Docker).
repair_network_store() {
  local log=$1 start root store
  grep -q 'libnetwork.(\*controller).reservePools' "$log" || return 1
  start=$(awk -F: '$1 == "dockremap" { print $2; exit }' /etc/subuid 2>/dev/null)
  root=/var/lib/docker/${start:-100000}.${start:-100000}
  store=$root/network/files/local-kv.db
  if [ "${WARREN_DOCKER_REPAIR_NETWORKS:-0}" != 1 ]; then
    echo "host-setup: dockerd crashed restoring its network store ($store):" >&2
    echo "  a network record lost its address pool. Move that file aside and start again" >&2
    echo "  (its user-defined networks are forgotten), or rerun with WARREN_DOCKER_REPAIR_NETWORKS=1." >&2
    return 1
  fi
  [ -f "$store" ] || return 1
  echo "host-setup: dockerd crashed restoring its network store; moving $store aside" >&2
  as_root mv "$store" "$store.broken-$(date +%s)"
}

if [ "$want_docker" = 1 ] && ! docker info >/dev/null 2>&1; then
  echo "host-setup: starting dockerd (with user namespaces; crun registered when installed)"
  log=${WARREN_DOCKERD_LOG:-/var/log/warren-dockerd.log}
  pidfile=${WARREN_DOCKERD_PIDFILE:-/run/warren-dockerd.pid}
  if ! start_dockerd "$log" "$pidfile"; then
    if repair_network_store "$log" && start_dockerd "$log" "$pidfile"; then
      :
    else
      echo "dockerd did not start; see $log" >&2
      grep -m1 -A3 '^panic:' "$log" >&2 || tail -20 "$log" >&2
      exit 1
    fi
  fi
fi
if [ "$want_docker" = 1 ] && ! docker info --format '{{.SecurityOptions}}' 2>/dev/null | grep -q 'name=userns'; then
  echo "host-setup: WARNING: this Docker daemon runs containers without user namespaces;" >&2
  echo "  warren nodes on it refuse to start sandboxes (root in a sandbox would be root here)." >&2
  echo "  Restart dockerd with --userns-remap=default (or \"userns-remap\": \"default\" in" >&2
  echo "  /etc/docker/daemon.json); on a development machine, --allow-host-root runs them anyway." >&2
fi

if [ "$want_image" = 1 ]; then
  "$here/image/build-local.sh"
fi
