# A throwaway PostgreSQL cluster for the scripts that test against PostgreSQL (scripts/test, openapi/run):
# sourced, not run. `start_cluster` starts one on a free loopback port in a temporary directory (installing
# Debian's `postgresql` package first when no server binaries exist and this runs as root), exports
# HIVEGATE_TEST_POSTGRES_URL, and removes it on exit. The sourcing script defines `fail MESSAGE...`.

# The newest PostgreSQL server binaries (Debian's layout first, then PATH), or nothing.
find_pg_bin() {
    local dir found=""
    while read -r dir; do
        if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
            found="$dir"
        fi
    done < <(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V || true)
    if [[ -z "$found" ]] && command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        found="$(dirname "$(command -v initdb)")"
    fi
    echo "$found"
}

# Runs a command as the cluster's owner: PostgreSQL refuses to run as root.
as_owner() {
    if [[ "$(id -u)" -ne 0 ]]; then
        "$@"
    elif command -v runuser >/dev/null; then
        runuser -u postgres -- "$@"
    else
        su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
}

PG_DIR=""
PG_BIN=""

stop_cluster() {
    if [[ -n "$PG_DIR" && -d "$PG_DIR" ]]; then
        if [[ -f "$PG_DIR/data/postmaster.pid" ]]; then
            as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
        fi
        rm -rf "$PG_DIR"
    fi
}

start_cluster() {
    PG_BIN="$(find_pg_bin)"
    if [[ -z "$PG_BIN" ]]; then
        if [[ "$(id -u)" -ne 0 ]]; then
            fail "no PostgreSQL server binaries (initdb, pg_ctl) found and not root, so they cannot be installed;" \
                "install PostgreSQL or set HIVEGATE_TEST_POSTGRES_URL"
        fi
        echo "${0##*/}: installing PostgreSQL (apt-get install postgresql)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        PG_BIN="$(find_pg_bin)"
        [[ -n "$PG_BIN" ]] || fail "PostgreSQL was installed but initdb/pg_ctl are still not found"
    fi
    if [[ "$(id -u)" -eq 0 ]] && ! id -u postgres >/dev/null 2>&1; then
        fail "running as root but there is no 'postgres' user to own the throwaway cluster"
    fi

    PG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/hivegate-test-pg.XXXXXX")"
    trap stop_cluster EXIT
    if [[ "$(id -u)" -eq 0 ]]; then
        chown postgres: "$PG_DIR"
    fi

    as_owner "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --no-sync >"$PG_DIR/initdb.log" 2>&1 ||
        { cat "$PG_DIR/initdb.log" >&2; fail "initdb failed"; }

    # A free port: try random ones until the server starts on one (another process may take a port between
    # the check and the start, so the start itself is the real test).
    local port
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$((20000 + RANDOM % 40000))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue
        fi
        if as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start \
            -o "-h 127.0.0.1 -p $port -k $PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
            >/dev/null 2>&1; then
            export HIVEGATE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
            echo "${0##*/}: throwaway PostgreSQL ($("$PG_BIN/postgres" --version)) on 127.0.0.1:$port" >&2
            return 0
        fi
    done
    cat "$PG_DIR/server.log" >&2 || true
    fail "could not start a throwaway PostgreSQL cluster"
}
