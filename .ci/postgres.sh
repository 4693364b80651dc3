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
    # One role that must give a password (the first matching line of pg_hba.conf wins): the
    # secrets tests sign in as it with a wrong one. Every other role keeps trust.
    hba="$dir/data/pg_hba.conf"
    as_pg sh -c "printf 'host all longrope_pw 127.0.0.1/32 scram-sha-256\n' | cat - '$hba' > '$hba.new' && mv '$hba.new' '$hba'"
    as_pg "$BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
    "$BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres longrope_test
    "$BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d longrope_test \
        -c "CREATE ROLE longrope_pw LOGIN PASSWORD 'the-right-one'" >/dev/null
    echo "postgresql+psycopg2://postgres@127.0.0.1:$port/longrope_test"
    ;;
stop)
    as_pg "$BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
esac
