#!/usr/bin/env bash
# Run by .ci/run: the three published crates package and build from their
# own .crate files (cargo resolves the unpublished workspace crates among
# them, as for a workspace publish), and the `idem` binary installed from the
# packaged idem-codegen runs its main commands on a fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# Cargo unpacks the crates of the temporary registry `cargo package` builds
# into a directory keyed by name and version, and reuses it: on a machine that
# packaged 0.1.0 before, the verify step would build the old sources.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/idem-{runtime,codegen,macros}-0.1.0
cargo package -p idem-runtime -p idem-codegen -p idem-macros --locked
for c in idem-runtime idem-codegen idem-macros; do
  ls -l "target/package/$c-0.1.0.crate"
done
# Install from the unpacked package, as `cargo install idem-codegen` would
# from crates.io, with idem-runtime from its own package (not yet published).
work="$(mktemp -d /tmp/idem-package.XXXXXX)"
trap 'rm -rf "$work"' EXIT
# The packaged idem-codegen needs its templates: the .crate must carry them.
tar -tzf target/package/idem-codegen-0.1.0.crate > "$work/files"
grep -qx 'idem-codegen-0.1.0/templates/idempotency.html' "$work/files"
grep -qx 'idem-codegen-0.1.0/ci/idem.yml' "$work/files"
cargo install --path target/package/idem-codegen-0.1.0 --root "$work/root" --debug \
  --target-dir target/package-install \
  --config "patch.crates-io.idem-runtime.path='$root/target/package/idem-runtime-0.1.0'"
idem="$work/root/bin/idem"
"$idem" --version
"$idem" audit fixtures/payments.yaml --format json > "$work/audit.json"
"$idem" generate fixtures/payments.yaml --out "$work/generated"
"$idem" docs fixtures/payments.yaml --out "$work/docs"
test -s "$work/generated/src/lib.rs"
# Installed from a package, as from crates.io: no checkout beside it, so the
# generated crate depends on the published runtime of its version.
grep -q "^idem-runtime = { version = \"0.1.0\"" "$work/generated/Cargo.toml"
test -s "$work/generated/docs/idempotency.html"
test -s "$work/docs/idempotency.md"
# The audit of a spec with findings still fails, from the installed binary.
if "$idem" audit fixtures/cratebase.yaml > /dev/null; then
  echo "the installed idem passed fixtures/cratebase.yaml" >&2
  exit 1
fi
echo "packaged and installed: $("$idem" --version)"
# The install built every dependency a second time; the tests do not need it.
rm -rf target/package-install
