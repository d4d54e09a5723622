#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests and benchmarks (issue 4).
#
#   eval "$(.ci/postgres.sh start)"   # starts it (or reuses a running one) and exports
#                                     # EFFECT_TOOL_PG_URL in the calling shell
#   .ci/postgres.sh url               # prints the URL of the running server
#   .ci/postgres.sh stop              # stops it and removes its data folder
#
# `start` prints only `export EFFECT_TOOL_PG_URL=...` on stdout (progress goes to stderr), so
# `eval "$(...)"` is the way to use it. PostgreSQL refuses to run as root: the server runs as
# the `postgres` user (runuser), in a temporary data folder, listening on 127.0.0.1 on a free
# port, with `trust` authentication, and a database `effect_tool_test`. If the server binaries
# are missing, `start` installs them with apt-get first.
#
# Settings: EFFECT_TOOL_PG_DIR (default /tmp/effect-tool-pg), EFFECT_TOOL_PG_PORT (default: the
# first free port from 54329).
set -euo pipefail

DIR="${EFFECT_TOOL_PG_DIR:-/tmp/effect-tool-pg}"
DB=effect_tool_test

log() { echo "postgres.sh: $*" >&2; }

bindir() {
    local d
    d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then echo "$d"; fi
}

as_postgres() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

url() { echo "postgres://postgres@127.0.0.1:$(cat "$DIR/port")/$DB"; }

running() {
    local bin
    bin="$(bindir)"
    [[ -n "$bin" && -f "$DIR/port" && -d "$DIR/data" ]] && as_postgres "$bin/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1
}

start() {
    local bin port
    bin="$(bindir)"
    if [[ -z "$bin" ]]; then
        log "PostgreSQL server binaries not found: installing them with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq postgresql >&2
        bin="$(bindir)"
        [[ -n "$bin" ]] || { log "PostgreSQL is still missing after apt-get install"; exit 1; }
    fi
    if running; then
        log "reusing the server already running in $DIR"
        echo "export EFFECT_TOOL_PG_URL=$(url)"
        return
    fi
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    rm -rf "$DIR"
    mkdir -p "$DIR"
    chown postgres: "$DIR" 2>/dev/null || true
    port="${EFFECT_TOOL_PG_PORT:-}"
    if [[ -z "$port" ]]; then
        port=54329
        while ! port_free "$port"; do port=$((port + 1)); done
    fi
    echo "$port" >"$DIR/port"
    log "initdb in $DIR/data ($bin)"
    as_postgres "$bin/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 ||
        { cat "$DIR/initdb.log" >&2; exit 1; }
    mkdir -p "$DIR/sock" && chown postgres: "$DIR/sock" 2>/dev/null || true
    log "starting on 127.0.0.1:$port"
    as_postgres "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $DIR/sock -c max_connections=400" start >&2 ||
        { cat "$DIR/server.log" >&2; exit 1; }
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$DB"
    echo "export EFFECT_TOOL_PG_URL=$(url)"
}

stop() {
    local bin
    bin="$(bindir)"
    if [[ -n "$bin" && -d "$DIR/data" ]]; then
        as_postgres "$bin/pg_ctl" -D "$DIR/data" -m fast -w stop >&2 || true
    fi
    rm -rf "$DIR"
    log "stopped and removed $DIR"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) running && url || { log "no server running in $DIR"; exit 1; } ;;
    *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
