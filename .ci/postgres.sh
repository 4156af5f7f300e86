# Sourced by .ci/run: makes a private PostgreSQL cluster available to the tests
# and exports IDEM_TEST_DATABASE_URL. Installs the server from Debian packages
# only when no initdb/pg_ctl is on the machine.
pg_bin=""
for d in /usr/lib/postgresql/*/bin; do
  [ -x "$d/initdb" ] && pg_bin="$d"
done
if [ -z "$pg_bin" ] && command -v initdb >/dev/null 2>&1; then
  pg_bin="$(dirname "$(command -v initdb)")"
fi
if [ -z "$pg_bin" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && pg_bin="$d"
  done
fi
[ -n "$pg_bin" ] || { echo "PostgreSQL could not be installed" >&2; exit 1; }

# The first free port from IDEM_PG_PORT (default 54329): a cluster left
# running by an earlier run, or another service, must not make this one fail.
pg_port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pg_port="${IDEM_PG_PORT:-54329}"
while pg_port_busy "$pg_port"; do pg_port=$((pg_port + 1)); done
pg_dir="$(mktemp -d /tmp/idem-pg.XXXXXX)"
pg_user=postgres
if [ "$(id -u)" = 0 ]; then
  id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home "$pg_user"
  chown "$pg_user" "$pg_dir"
  as_pg() { su "$pg_user" -s /bin/sh -c "$*"; }
else
  pg_user="$(id -un)"
  as_pg() { sh -c "$*"; }
fi
as_pg "'$pg_bin/initdb' -D '$pg_dir/data' -U postgres --auth=trust -E UTF8 >/dev/null"
# A port that looked free can still be taken (a loopback connection's local
# port in TIME_WAIT): the next few are tried before giving up.
pg_started=""
for _ in 1 2 3 4 5; do
  if as_pg "'$pg_bin/pg_ctl' -D '$pg_dir/data' -l '$pg_dir/log' -o \"-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c shared_preload_libraries=pg_stat_statements\" -w start >/dev/null"; then
    pg_started=1
    break
  fi
  pg_port=$((pg_port + 1))
  while pg_port_busy "$pg_port"; do pg_port=$((pg_port + 1)); done
done
if [ -z "$pg_started" ]; then
  cat "$pg_dir/log" >&2
  echo "PostgreSQL did not start" >&2
  exit 1
fi
trap "as_pg \"'$pg_bin/pg_ctl' -D '$pg_dir/data' -m immediate stop\" >/dev/null 2>&1 || true" EXIT
export IDEM_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
echo "PostgreSQL from $pg_bin on port $pg_port"
