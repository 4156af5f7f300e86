#!/usr/bin/env bash
# Validate idem's SARIF with Microsoft's SARIF validator under GitHub code
# scanning's rules ("Gh;Sarif"), for specs given by relative and by absolute
# path, from the repository root and from a subdirectory: zero results, or
# this fails. The validator is a .NET program shipped inside its npm package
# (a self-contained Linux x64 binary), so npm is all it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

npm install --prefix .ci/node --no-audit --no-fund --loglevel=error @microsoft/sarif-multitool@5.7.0
tool=.ci/node/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool
# The package's install script sets this bit; npm may be told not to run it.
chmod u+x "$tool"
# No ICU needed: the validator reads ASCII rule ids and file paths.
export DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1
"$tool" --version

cargo build -p idem-codegen --bin idem --locked
idem=$root/target/debug/idem
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# exit 0 (clean) and 1 (findings) both write a report; 2 is a failure.
sarif() { "$idem" audit "$1" --format sarif > "$2" || [ $? -eq 1 ]; }
n=0
for spec in fixtures/*.yaml fixtures/rules/*.yaml fixtures/swagger2/api.yaml; do
    n=$((n + 1))
    sarif "$spec" "$out/$n-relative.sarif"
    sarif "$root/$spec" "$out/$n-absolute.sarif"
    (cd idem-codegen && sarif "$root/$spec" "$out/$n-absolute-from-subdir.sarif")
    (cd idem-codegen && sarif "../$spec" "$out/$n-relative-from-subdir.sarif")
done

# idem probe's SARIF, from a run in which a check fails: the tests' orders
# server with a key that ignores the body.
python3 idem-codegen/tests/probe_support/orders_server.py --defect ignore-body > "$out/orders.log" &
orders=$!
trap 'kill "$orders" 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 1 100); do [ -s "$out/orders.log" ] && break; sleep 0.1; done
port=$(awk '{print $3}' "$out/orders.log")
"$idem" probe fixtures/probe.yaml --base-url "http://127.0.0.1:$port" --allow-writes \
    --header 'X-Account-Id: acct-ci' --format sarif > "$out/probe.sarif" || [ $? -eq 1 ]
grep -q '"ruleId": "PROBE002"' "$out/probe.sarif"

"$tool" validate --rule-kind "Gh;Sarif" --output "$out/validation.json" "$out"/*.sarif
node - "$out/validation.json" <<'JS'
const log = JSON.parse(require('fs').readFileSync(process.argv[2], 'utf8'));
const run = log.runs[0];
const ok = (run.invocations || []).every((i) => i.executionSuccessful);
const results = run.results || [];
for (const r of results) {
  const where = r.locations?.[0]?.physicalLocation?.artifactLocation?.uri ?? '';
  console.log(`${r.ruleId} ${r.level ?? ''} ${where}: ${r.message?.id ?? ''} ${JSON.stringify(r.message?.arguments ?? r.message?.text ?? '')}`);
}
console.log(`sarif-multitool: ${results.length} result(s)${ok ? '' : ', and the validator did not run cleanly'}`);
process.exit(results.length === 0 && ok ? 0 : 1);
JS
