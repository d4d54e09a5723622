#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests and benchmarks (issue 4).
#
#   eval "$(.ci/postgres.sh start)"   # starts it (or reuses a running one) and exports
#                                     # EFFECT_TOOL_PG_URL in the calling shell
#   .ci/postgres.sh url               # prints the URL of the running server
#   .ci/postgres.sh ca                # prints the path of its TLS CA certificate (PEM)
#   .ci/postgres.sh stop              # stops it and removes its data folder
#
# `start` prints only `export` lines on stdout (progress goes to stderr), so `eval "$(...)"` is
# the way to use it: `EFFECT_TOOL_PG_URL` (the plain URL, as always) and `EFFECT_TOOL_PG_CA`.
# PostgreSQL refuses to run as root: the server runs as the `postgres` user (runuser), in a
# temporary data folder, listening on 127.0.0.1 on a free port, with `trust` authentication,
# and a database `effect_tool_test`. If the server binaries are missing, `start` installs them
# with apt-get first.
#
# TLS: the server also takes TLS (`ssl = on`), with a certificate for `localhost` and 127.0.0.1
# signed by a throwaway CA made with the `openssl` CLI at start; `EFFECT_TOOL_PG_CA` is that
# CA's PEM file (for `sslmode=verify-full&sslrootcert=...`). A URL without `sslmode` still
# connects: `prefer` takes TLS, `sslmode=disable` stays plain. The role `effect_tool_tls_only`
# (superuser, like `postgres`) is refused over plain TCP (`hostnossl ... reject` in pg_hba.conf),
# for tests that must see TLS really in use.
#
# Client certificates: the role `effect_tool_mtls` must show a certificate signed by the same CA
# and naming it (`hostssl ... trust clientcert=verify-full`; refused over plain TCP and without a
# certificate); `$DIR/tls/client.crt` and `client.key` (mode 0600) are one, beside the CA file.
# The role `effect_tool_plain_only` is refused over TLS (`hostssl ... reject`), for the test of
# `sslmode=prefer` falling back to plain TCP after the TLS attempt fails, as libpq does.
#
# Settings: EFFECT_TOOL_PG_DIR (default /tmp/effect-tool-pg), EFFECT_TOOL_PG_PORT (default: the
# first free port from 25329, below the kernel's ephemeral range 32768-60999, where a client
# connection of another test may hold a port without listening on it).
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

ca() { echo "$DIR/tls/ca.crt"; }

exports() {
    echo "export EFFECT_TOOL_PG_URL=$(url)"
    if [[ -f "$(ca)" ]]; then echo "export EFFECT_TOOL_PG_CA=$(ca)"; fi
}

# A throwaway CA and a server certificate for localhost / 127.0.0.1 signed by it (ECDSA P-256),
# in $DIR/tls; the server's copy of its key goes into the data folder, mode 0600, owned by the
# server's user (PostgreSQL refuses a key others can read).
make_tls() {
    local t="$DIR/tls" data="$DIR/data"
    if ! command -v openssl >/dev/null 2>&1; then
        log "the openssl CLI is missing: installing it with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >&2
    fi
    mkdir -p "$t"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=effect-tool throwaway test CA" -keyout "$t/ca.key" -out "$t/ca.crt" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        >"$t/openssl.log" 2>&1 || { cat "$t/openssl.log" >&2; exit 1; }
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
        -keyout "$t/server.key" -out "$t/server.csr" >>"$t/openssl.log" 2>&1 ||
        { cat "$t/openssl.log" >&2; exit 1; }
    printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$t/server.ext"
    openssl x509 -req -in "$t/server.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" -CAcreateserial \
        -days 3650 -extfile "$t/server.ext" -out "$t/server.crt" >>"$t/openssl.log" 2>&1 ||
        { cat "$t/openssl.log" >&2; exit 1; }
    # A client certificate for the role effect_tool_mtls (its CN is the role's name).
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=effect_tool_mtls" \
        -keyout "$t/client.key" -out "$t/client.csr" >>"$t/openssl.log" 2>&1 ||
        { cat "$t/openssl.log" >&2; exit 1; }
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
        "extendedKeyUsage=clientAuth" >"$t/client.ext"
    openssl x509 -req -in "$t/client.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" -CAcreateserial \
        -days 3650 -extfile "$t/client.ext" -out "$t/client.crt" >>"$t/openssl.log" 2>&1 ||
        { cat "$t/openssl.log" >&2; exit 1; }
    chmod 0600 "$t/client.key"
    chmod 0644 "$t/ca.crt" "$t/client.crt"
    cp "$t/server.crt" "$t/server.key" "$t/ca.crt" "$data/"
    chown postgres: "$data/server.crt" "$data/server.key" "$data/ca.crt" 2>/dev/null || true
    chmod 0600 "$data/server.key"
    printf '%s\n' "ssl = on" "ssl_cert_file = 'server.crt'" "ssl_key_file = 'server.key'" "ssl_ca_file = 'ca.crt'" \
        >>"$data/postgresql.conf"
    # First match wins: the TLS-only role is refused over plain TCP before the `trust` rules;
    # the mTLS role needs TLS and a certificate naming it; the plain-only role is refused over TLS.
    {
        echo "hostnossl all effect_tool_tls_only 0.0.0.0/0 reject"
        echo "hostssl all effect_tool_mtls 0.0.0.0/0 trust clientcert=verify-full"
        echo "host all effect_tool_mtls 0.0.0.0/0 reject"
        echo "hostssl all effect_tool_plain_only 0.0.0.0/0 reject"
        cat "$data/pg_hba.conf"
    } >"$t/pg_hba.conf"
    cat "$t/pg_hba.conf" >"$data/pg_hba.conf"
}

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
        exports
        return
    fi
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    rm -rf "$DIR"
    mkdir -p "$DIR"
    chown postgres: "$DIR" 2>/dev/null || true
    port="${EFFECT_TOOL_PG_PORT:-}"
    if [[ -z "$port" ]]; then
        port=25329
        while ! port_free "$port"; do port=$((port + 1)); done
    fi
    echo "$port" >"$DIR/port"
    log "initdb in $DIR/data ($bin)"
    as_postgres "$bin/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 ||
        { cat "$DIR/initdb.log" >&2; exit 1; }
    log "TLS: a throwaway CA and a certificate for localhost in $DIR/tls"
    make_tls
    mkdir -p "$DIR/sock" && chown postgres: "$DIR/sock" 2>/dev/null || true
    log "starting on 127.0.0.1:$port"
    as_postgres "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $DIR/sock -c max_connections=400" start >&2 ||
        { cat "$DIR/server.log" >&2; exit 1; }
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$DB"
    as_postgres "$bin/createuser" -h 127.0.0.1 -p "$port" -U postgres --superuser effect_tool_tls_only
    as_postgres "$bin/createuser" -h 127.0.0.1 -p "$port" -U postgres --superuser effect_tool_mtls
    as_postgres "$bin/createuser" -h 127.0.0.1 -p "$port" -U postgres --superuser effect_tool_plain_only
    exports
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
    ca) running && [[ -f "$(ca)" ]] && ca || { log "no server with TLS running in $DIR"; exit 1; } ;;
    *) echo "usage: $0 start|stop|url|ca" >&2; exit 2 ;;
esac
