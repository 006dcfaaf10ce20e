#!/usr/bin/env bash
# Starts a throwaway PostgreSQL with the pgvector extension for the tests of the pgvector path,
# unless one already answers. Debian here packages no pgvector, so the server comes from the PyPI
# wheel pgserver 0.1.4, which carries PostgreSQL 16.2 with pgvector 0.6.2 built in: only the wheel
# is downloaded (pip checks it against PyPI's hash) and unpacked; nothing is installed.
#
#   start.sh [PORT]     (default: FORGE_PGVECTOR_PORT, else 55433)
#
# The cluster lives under FORGE_PGVECTOR_HOME (default /var/tmp/forge-pgvector), listens on
# 127.0.0.1 only with trust authentication, and keeps running until `start.sh stop`. PostgreSQL
# refuses to run as root, so as root the cluster is owned and run by the `postgres` user.
set -euo pipefail
home="${FORGE_PGVECTOR_HOME:-/var/tmp/forge-pgvector}"
port="${FORGE_PGVECTOR_PORT:-55433}"
if [ "${1:-}" = stop ]; then
  as=()
  [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
  [ -d "$home/data" ] && "${as[@]}" "$home/pg/pgserver/pginstall/bin/pg_ctl" -D "$home/data" -m fast stop || true
  exit 0
fi
[ -n "${1:-}" ] && port="$1"
bin="$home/pg/pgserver/pginstall/bin"

if [ ! -x "$bin/postgres" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    -d "$work" "pgserver==0.1.4"
  python3 - "$work" <<'PY'
import glob, os, sys, zipfile
work = sys.argv[1]
wheel = glob.glob(f"{work}/pgserver-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist()
             if n.startswith("pgserver/pginstall/") or n.startswith("pgserver.libs/")]
    z.extractall(f"{work}/pg", names)
    for n in names:
        info = z.getinfo(n)
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(f"{work}/pg/{n}", mode)
PY
  mkdir -p "$home"
  rm -rf "$home/pg"
  # Moved in whole, so a half-unpacked copy is never taken for a whole one.
  mv "$work/pg" "$home/pg"
fi

as=()
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$home"
  as=(runuser -u postgres --)
fi
if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
  echo "pgvector PostgreSQL answers on 127.0.0.1:$port"
  exit 0
fi
if [ ! -f "$home/data/PG_VERSION" ]; then
  rm -rf "$home/data"
  "${as[@]}" "$bin/initdb" -D "$home/data" -A trust -U postgres --no-sync >"$home/initdb.log" 2>&1 \
    || { cat "$home/initdb.log" >&2; exit 1; }
fi
"${as[@]}" "$bin/pg_ctl" -D "$home/data" -w -t 60 -l "$home/server.log" \
  -o "-p $port -c listen_addresses=127.0.0.1 -k $home -c fsync=off -c max_connections=200" start >/dev/null \
  || { tail -n 20 "$home/server.log" >&2; exit 1; }
echo "pgvector PostgreSQL answers on 127.0.0.1:$port"
