#!/usr/bin/env bash
# Makes sure the services the tests talk to answer: PostgreSQL on 127.0.0.1:5432 (an
# administrator `postgres` with trust authentication) and Redis on 127.0.0.1:6379; and that
# `clamd` is installed (the malware scanner's tests start their own throwaway instances of it,
# each with a signature database they generate).
#
# For each one that does not answer: a packaged cluster (Debian's pg_ctlcluster) is started; else,
# where the server binaries are installed, a throwaway instance is started under
# FORGE_TEST_SERVICES_HOME (default /var/tmp/forge-test-services), kept until the machine
# restarts; else it fails, naming the package to install. Idempotent; `cargo test` needs nothing
# more. `.ci/run` calls it.
set -euo pipefail
home="${FORGE_TEST_SERVICES_HOME:-/var/tmp/forge-test-services}"
failed=0

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

wait_for() {
  for _ in $(seq 1 30); do "$1" && return 0; sleep 1; done
  return 1
}

if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
    echo "starting the packaged PostgreSQL cluster"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  else
    bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
    if [ -n "$bin" ] && [ -x "$bin/postgres" ]; then
      echo "starting a throwaway PostgreSQL from $bin in $home/pg"
      mkdir -p "$home"
      [ "$(id -u)" = 0 ] && chown postgres "$home"
      if [ ! -f "$home/pg/PG_VERSION" ]; then
        as_postgres "$bin/initdb" -D "$home/pg" -A trust -U postgres >/dev/null
      fi
      as_postgres "$bin/pg_ctl" -D "$home/pg" -w -l "$home/pg.log" \
        -o "-p 5432 -c listen_addresses=127.0.0.1 -k $home -c fsync=off -c max_connections=200" start >/dev/null
    fi
  fi
  if ! wait_for pg_up; then
    echo "PostgreSQL does not answer on 127.0.0.1:5432 and no server could be started here:" >&2
    echo "  install it (Debian: apt-get install postgresql) and run this script again," >&2
    echo "  or point FORGE_TEST_DATABASE_URL at an administrator URL of a server you have" >&2
    failed=1
  fi
fi
pg_up && echo "PostgreSQL answers on 127.0.0.1:5432"

if ! redis_up; then
  if command -v redis-server >/dev/null; then
    echo "starting a throwaway Redis"
    mkdir -p "$home/redis"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir "$home/redis" --logfile "$home/redis.log" || true
  fi
  if ! wait_for redis_up; then
    echo "Redis does not answer on 127.0.0.1:6379 and no server could be started here:" >&2
    echo "  install it (Debian: apt-get install redis-server) and run this script again" >&2
    failed=1
  fi
fi
redis_up && echo "Redis answers on 127.0.0.1:6379"

clamd_bin() { command -v clamd 2>/dev/null || ls /usr/sbin/clamd 2>/dev/null; }
if [ -z "$(clamd_bin)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing clamd (Debian's clamav-daemon)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q clamav-daemon >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clamav-daemon >/dev/null 2>&1; } \
      || true
  fi
  if [ -z "$(clamd_bin)" ]; then
    echo "clamd is not installed and could not be installed here:" >&2
    echo "  install it (Debian: apt-get install clamav-daemon) and run this script again" >&2
    failed=1
  fi
fi
[ -n "$(clamd_bin)" ] && echo "clamd is installed: $(clamd_bin) (the tests start their own)"
exit "$failed"
