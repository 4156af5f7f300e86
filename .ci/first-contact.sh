#!/usr/bin/env bash
# Run by .ci/run: the README's "Your own API, in ten minutes", as written, from
# this clone. idem is installed into a temporary root as the README installs
# it; then, in a scratch workspace of its own, the audit, the workflow and the
# generation run on fixtures/transfers.yaml with no flag the section does not
# give, and `cargo check` with warnings denied builds the generated crate and
# a caller crate made of the README's own snippets (its [dependencies] and its
# src/main.rs, which pages with `.next().await`).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/idem-first-contact.XXXXXX)
cleanup() {
  rm -rf "$work" "$root/target/first-contact"
}
trap cleanup EXIT
started=$(date +%s)

# 1. Install, as the README does (`git clone …` then `cargo install --locked
#    --path idem/idem-codegen`), from a clone of this repository: its
#    `origin` is this checkout, which the generated crate then fetches the
#    runtime from (as a file:// URL), at this commit.
git clone --quiet "$root" "$work/idem"
cargo install --locked --path "$work/idem/idem-codegen" --root "$work/root" \
  --target-dir "$root/target/first-contact/install"
idem="$work/root/bin/idem"
"$idem" --version
installed=$(date +%s)

# 2. A scratch workspace: the user's repository, outside this one.
ws="$work/ws"
mkdir -p "$ws/app/src"
cp fixtures/transfers.yaml "$ws/openapi.yaml"
# The README's snippets, by their markers: the TOML block before the Rust one.
awk '/^<!-- first-contact: src\/main.rs -->$/ { want = 1; next }
     want && /^```rust$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' README.md > "$ws/app/src/main.rs"
awk '/^```toml$/ { inside = 1; block = ""; next }
     inside && /^```$/ { inside = 0; last = block; next }
     inside { block = block $0 "\n" }
     /^<!-- first-contact: src\/main.rs -->$/ { printf "%s", last; exit }' README.md > "$work/dependencies.toml"
test -s "$ws/app/src/main.rs"
grep -q '^\[dependencies\]$' "$work/dependencies.toml"
grep -q 'next().await' "$ws/app/src/main.rs"
{
  printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2024"\npublish = false\n\n'
  cat "$work/dependencies.toml"
} > "$ws/app/Cargo.toml"
printf '[workspace]\nresolver = "3"\nmembers = ["crates/api", "app"]\n' > "$ws/Cargo.toml"

cd "$ws"
# 3. The section's commands, exactly.
"$idem" audit openapi.yaml
"$idem" suggest openapi.yaml --out idempotency.overlay.yaml
grep -q '^overlay: 1.0.0$' idempotency.overlay.yaml
"$idem" audit openapi.yaml --overlay idempotency.overlay.yaml
"$idem" workflow --spec openapi.yaml --overlay idempotency.overlay.yaml \
    --out .github/workflows/idem.yml
grep -q '^  IDEM_SPEC: openapi.yaml$' .github/workflows/idem.yml
grep -q '^  IDEM_OVERLAY: idempotency.overlay.yaml$' .github/workflows/idem.yml
"$idem" generate openapi.yaml --overlay idempotency.overlay.yaml --out crates/api 2> "$work/generated"
cat "$work/generated"
# The origin is a path on this machine: generate says teammates cannot fetch it.
grep -q 'note: idem-runtime comes from file://' "$work/generated"
# Installed from a clone: the crate depends on the runtime at the clone's
# commit, in its origin, which any clone of the user's repository can fetch.
rev=$(git -C "$work/idem" rev-parse HEAD)
grep -q "^idem-runtime = { git = \"file://$(realpath "$root")\", rev = \"$rev\"" crates/api/Cargo.toml
# A runtime path that is not one is refused, and nothing is written.
status=0
"$idem" generate openapi.yaml --out refused --runtime-path does/not/exist 2> "$work/refused" || status=$?
test "$status" -eq 2
grep -q 'error: --runtime-path does/not/exist: no such directory' "$work/refused"
test ! -e refused
generated=$(date +%s)

# 4. Both crates build, warnings denied.
RUSTFLAGS="-D warnings" CARGO_TARGET_DIR="$root/target/first-contact/check" cargo check --workspace
checked=$(date +%s)
# The caller turns on the client alone: neither axum nor sqlx is built for it.
cargo tree -p app -e normal --prefix none > "$work/caller-tree"
if grep -Eq '^(axum|sqlx) ' "$work/caller-tree"; then
  echo "the client-only caller depends on axum or sqlx:" >&2
  grep -E '^(axum|sqlx)' "$work/caller-tree" >&2
  exit 1
fi
echo "first contact: the caller depends on $(sort -u "$work/caller-tree" | wc -l) crates"

# 5. The generated crate is committed, and a teammate's clone builds it:
#    nothing in it points into this machine's checkout of idem.
git init --quiet
git add -A
git -c user.name=ci -c user.email=ci@example.invalid commit --quiet -m "generated API crate"
git clone --quiet "$ws" "$work/teammate"
if grep -rq "$work/idem" "$work/teammate/crates/api/Cargo.toml"; then
  echo "the committed crate points into the clone idem was installed from" >&2
  exit 1
fi
(cd "$work/teammate" && RUSTFLAGS="-D warnings" CARGO_TARGET_DIR="$root/target/first-contact/check" cargo check --workspace)
teammate=$(date +%s)

echo "first contact: installed in $((installed - started)) s, generated in $((generated - installed)) s, checked in $((checked - generated)) s, and in a teammate's clone in $((teammate - checked)) s"
