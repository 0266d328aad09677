#!/usr/bin/env bash
# Builds the `warren` binary of the version named in test-support/previous-version, for the
# rolling-upgrade test, as $CARGO_TARGET_DIR/debug/warren-previous (its path is printed).
#
# Its workspace's packages are renamed (warren-x -> previous-warren-x, keeping their crate
# names) before the build: cargo derives a workspace crate's unit hash from its package id
# and keeps dep-info paths relative, so the same packages built from another checkout into
# this target dir would replace this tree's artifacts. Renamed, they are built beside them,
# and every dependency (RocksDB above all) is shared.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=$(grep -v '^#' "$root/test-support/previous-version" | head -1 | tr -d '[:space:]')
target=${CARGO_TARGET_DIR:-$root/target}
src=$target/previous-src/$(git -C "$root" rev-parse "$commit^{commit}")

if [ ! -f "$src/.renamed" ]; then
  rm -rf "$src"
  mkdir -p "$src"
  git -C "$root" archive "$commit" | tar -x -C "$src"
  for manifest in "$src"/*/Cargo.toml "$src"/node/guest/Cargo.toml; do
    name=$(sed -n 's/^name = "\(warren-[a-z-]*\)"$/\1/p' "$manifest" | head -1)
    [ -n "$name" ] || continue
    sed -i "0,/^name = \"$name\"\$/s//name = \"previous-$name\"/" "$manifest"
    if [ -f "$(dirname "$manifest")/src/lib.rs" ]; then
      printf '\n[lib]\nname = "%s"\npath = "src/lib.rs"\n' "${name//-/_}" >> "$manifest"
    fi
  done
  sed -i -E 's/^(warren-[a-z-]+) = \{ path = "([^"]+)" \}/\1 = { package = "previous-\1", path = "\2" }/' \
    "$src/Cargo.toml"
  sed -i -E 's/^warren-cli = \{ path = "([^"]+)" \}/warren-cli = { package = "previous-warren-cli", path = "\1" }/' \
    "$src/loadtest/Cargo.toml"
  sed -i 's/^name = "warren"$/name = "warren-previous"/' "$src/cli/Cargo.toml"
  # The web page's npm files, as this tree has them (else its build script runs npm ci).
  if [ -d "$root/web/node_modules" ]; then
    cp -a "$root/web/node_modules" "$src/web/"
  fi
  touch "$src/.renamed"
fi

cargo build --quiet --manifest-path "$src/Cargo.toml" -p previous-warren-cli --bin warren-previous
echo "$target/debug/warren-previous"
