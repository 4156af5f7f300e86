# Run by .ci/run: a peer API tester holds the generated payments server to its
# own spec. Schemathesis (pinned, from PyPI) runs every check, the stateful
# phase included, against `payments-demo serve` on SQLite with the demo's fake
# bank; then the store is checked against what the server answered. With
# IDEM_TEST_MYSQL_URL set, the same checks run with the store on MariaDB.
set -euo pipefail
cd "$(dirname "$0")/.."

st_version="4.32.5"
venv="${IDEM_ST_VENV:-/tmp/idem-schemathesis}"
if [ ! -x "$venv/bin/st" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet "schemathesis==$st_version"
fi

cargo build --locked -q -p payments-demo
work="$(mktemp -d /tmp/idem-st.XXXXXX)"
db="$work/payments.db"
servers=()
trap 'kill "${servers[@]}" 2>/dev/null || true' EXIT

# Starts `payments-demo serve` on the store `$1`, runs every check against
# it, and leaves the HAR report in `$2`.
serve_and_check() {
  local url="$1" har="$2" log
  log="$work/server-$(basename "$har" .har).log"
  # The server picks its port and says which on its first line.
  ./target/debug/payments-demo serve --database-url "$url" \
    --listen 127.0.0.1:0 --fake-bank >"$log" 2>&1 &
  local server=$!
  servers+=("$server")
  local port=""
  for _ in $(seq 1 300); do
    port="$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$log")"
    if [ -n "$port" ]; then break; fi
    if ! kill -0 "$server" 2>/dev/null; then cat "$log"; exit 1; fi
    sleep 0.1
  done
  if [ -z "$port" ]; then echo "the server did not start"; cat "$log"; exit 1; fi
  # The caller's identity is a header, as an API key would be: every
  # generated request carries one, so scoping is exercised without
  # guessing accounts.
  "$venv/bin/st" run fixtures/payments.yaml \
    --url "http://127.0.0.1:$port" \
    --header "X-Account-Id: acct-schemathesis" \
    --checks all \
    --max-examples "${IDEM_ST_EXAMPLES:-40}" \
    --seed "${IDEM_ST_SEED:-7}" \
    --output-sanitize false \
    --report har --report-har-path "$har" \
    --no-color
}

serve_and_check "sqlite://$db?mode=rwc" "$work/run.har"
python3 .ci/schemathesis_store.py "$work/run.har" "$db"

# The same server on MariaDB, when the run has one (.ci/mariadb.sh).
if [ -n "${IDEM_TEST_MYSQL_URL:-}" ]; then
  echo "== the same checks with the key store on MariaDB"
  serve_and_check "$IDEM_TEST_MYSQL_URL" "$work/mariadb.har"
fi
