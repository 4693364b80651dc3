#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests, on 127.0.0.1 (Debian's server binaries).
#   .ci/postgres.sh start DIR PORT   prints the database URL
#   .ci/postgres.sh stop DIR
set -euo pipefail
cmd=$1
dir=$2
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$BIN" ]; then
    echo "no PostgreSQL server binaries (apt-get install postgresql)" >&2
    exit 1
fi
as_pg() {  # initdb and the server refuse to run as root
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case $cmd in
start)
    port=$3
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
    as_pg "$BIN/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
    as_pg "$BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    "$BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres longrope_test
    echo "postgresql+psycopg2://postgres@127.0.0.1:$port/longrope_test"
    ;;
stop)
    as_pg "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
esac
