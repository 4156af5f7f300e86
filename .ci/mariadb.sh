# Sourced by .ci/run: makes a private MariaDB server available to the tests
# and exports IDEM_TEST_MYSQL_URL. Installs the server from Debian packages
# only when no mariadbd is on the machine.
maria_bin=""
for b in /usr/sbin/mariadbd /usr/sbin/mysqld; do
  [ -x "$b" ] && { maria_bin="$b"; break; }
done
if [ -z "$maria_bin" ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server galera-4 rsync >/dev/null
  maria_bin=/usr/sbin/mariadbd
fi
maria_port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
maria_port="${IDEM_MYSQL_PORT:-33069}"
maria_dir="$(mktemp -d /tmp/idem-maria.XXXXXX)"
maria_user_opt=""
if [ "$(id -u)" = 0 ]; then
  id mysql >/dev/null 2>&1 || useradd --system --no-create-home mysql
  chown mysql "$maria_dir"
  maria_user_opt="--user=mysql"
fi
mariadb-install-db $maria_user_opt --datadir="$maria_dir/data" \
  --auth-root-authentication-method=normal --skip-test-db >/dev/null
# A port nothing listens on can still be taken, as the local end of some
# connection (the kernel's ephemeral range starts at 32768): the next one
# is tried when the server cannot bind.
for _ in 1 2 3 4 5; do
  while maria_port_busy "$maria_port"; do maria_port=$((maria_port + 1)); done
  : > "$maria_dir/mariadb.err"
  "$maria_bin" --no-defaults $maria_user_opt --datadir="$maria_dir/data" \
    --port="$maria_port" --bind-address=127.0.0.1 --socket="$maria_dir/sock" \
    --pid-file="$maria_dir/pid" --log-error="$maria_dir/mariadb.err" --skip-log-bin \
    --innodb-flush-log-at-trx-commit=2 --max-connections=500 2>>"$maria_dir/startup.log" &
  for _ in $(seq 1 100); do
    mariadb --no-defaults --socket="$maria_dir/sock" -u root -e "SELECT 1" >/dev/null 2>&1 && break
    grep -q "Address already in use" "$maria_dir/mariadb.err" 2>/dev/null && break
    sleep 0.2
  done
  grep -q "Address already in use" "$maria_dir/mariadb.err" 2>/dev/null || break
  wait "$!" 2>/dev/null || true
  maria_port=$((maria_port + 1))
done
mariadb --no-defaults --socket="$maria_dir/sock" -u root -e \
  "CREATE USER IF NOT EXISTS 'idem'@'%'; GRANT ALL ON *.* TO 'idem'@'%'; CREATE DATABASE IF NOT EXISTS idem_test;" \
  || { cat "$maria_dir/mariadb.err" >&2; echo "MariaDB did not start" >&2; exit 1; }
# Stopped on exit, after whatever the exit trap already does.
maria_stop() { kill "$(cat "$maria_dir/pid" 2>/dev/null)" 2>/dev/null || true; }
maria_prev_trap="$(trap -p EXIT)"
if [ -n "$maria_prev_trap" ]; then
  eval "set -- $maria_prev_trap"
  trap "maria_stop; $3" EXIT
else
  trap maria_stop EXIT
fi
export IDEM_TEST_MYSQL_URL="mysql://idem@127.0.0.1:$maria_port/idem_test"
echo "MariaDB from $maria_bin on port $maria_port"
