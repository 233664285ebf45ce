# A throwaway PostgreSQL cluster for the scripts that test against PostgreSQL (scripts/test, openapi/run):
# sourced, not run. `start_cluster` starts one on a free loopback port in a temporary directory (installing
# Debian's `postgresql` package first when no server binaries exist and this runs as root), exports
# HIVEGATE_TEST_POSTGRES_URL, and removes it on exit. The cluster accepts TLS connections only, with a CA and
# a server certificate for `localhost` made here with openssl, and the URL asks for `sslmode=verify-full`
# (HIVEGATE_TEST_POSTGRES_TLS=1 is exported too: the TLS stories fail rather than skip). A role
# `hivegate_cert` signs in with a client certificate only; HIVEGATE_TEST_POSTGRES_CLIENT_CERT and _KEY name its
# files for the story that connects with it. The sourcing script
# defines `fail MESSAGE...`.

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

# A CA and a server certificate for `localhost` (and 127.0.0.1) it signs, valid for two days, in directory $1:
# ca.crt, server.crt and server.key (readable by the cluster's owner only, as PostgreSQL requires); and a
# client certificate for the role `hivegate_cert` (client.crt, client.key), which may sign in with it only.
make_certificates() {
    local dir="$1"
    command -v openssl >/dev/null || fail "openssl is needed to make the throwaway cluster's TLS certificates"
    mkdir -p "$dir"
    {
        openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -days 2 \
            -subj "/CN=hivegate test CA" -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout "$dir/ca.key" -out "$dir/ca.crt" &&
            openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -subj "/CN=localhost" \
                -keyout "$dir/server.key" -out "$dir/server.csr" &&
            printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=critical,CA:FALSE" \
                "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$dir/server.ext" &&
            openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -set_serial 1 -days 2 \
                -extfile "$dir/server.ext" -out "$dir/server.crt" &&
            openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -subj "/CN=hivegate_cert" \
                -keyout "$dir/client.key" -out "$dir/client.csr" &&
            printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
                "extendedKeyUsage=clientAuth" >"$dir/client.ext" &&
            openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -set_serial 2 -days 2 \
                -extfile "$dir/client.ext" -out "$dir/client.crt"
    } >"$dir/openssl.log" 2>&1 || { cat "$dir/openssl.log" >&2; fail "could not make the TLS certificates"; }
    chmod 600 "$dir/server.key" "$dir/ca.key" "$dir/client.key"
    if [[ "$(id -u)" -eq 0 ]]; then
        chown -R postgres: "$dir"
        # The tests read the client key as root; PostgreSQL never reads it.
        chown root: "$dir/client.key"
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
    make_certificates "$PG_DIR/tls"
    # Only TLS connections are accepted (hostssl), so a client that silently fell back to plain text fails.
    sed -i -E 's/^host([[:space:]])/hostssl\1/' "$PG_DIR/data/pg_hba.conf"
    # The role hivegate_cert signs in with its client certificate only (the first matching line wins).
    sed -i '1i hostssl all hivegate_cert all cert' "$PG_DIR/data/pg_hba.conf"

    # A free port: try random ones until the server starts on one (another process may take a port between
    # the check and the start, so the start itself is the real test).
    local port
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        port=$((20000 + RANDOM % 40000))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue
        fi
        if as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 start \
            -o "-h 127.0.0.1 -p $port -k $PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 -c ssl=on -c ssl_cert_file=$PG_DIR/tls/server.crt -c ssl_key_file=$PG_DIR/tls/server.key -c ssl_ca_file=$PG_DIR/tls/ca.crt" \
            >/dev/null 2>&1; then
            export HIVEGATE_TEST_POSTGRES_URL="postgres://postgres@localhost:$port/postgres?sslmode=verify-full&sslrootcert=$PG_DIR/tls/ca.crt"
            export HIVEGATE_TEST_POSTGRES_TLS=1
            "$PG_BIN/psql" -qX "$HIVEGATE_TEST_POSTGRES_URL" -c "create role hivegate_cert login superuser" >/dev/null ||
                fail "could not create the client certificate's role"
            # The client certificate's files: its TLS story runs only where they are.
            export HIVEGATE_TEST_POSTGRES_CLIENT_CERT="$PG_DIR/tls/client.crt"
            export HIVEGATE_TEST_POSTGRES_CLIENT_KEY="$PG_DIR/tls/client.key"
            echo "${0##*/}: throwaway PostgreSQL ($("$PG_BIN/postgres" --version)) on localhost:$port over TLS (verify-full)" >&2
            return 0
        fi
    done
    cat "$PG_DIR/server.log" >&2 || true
    fail "could not start a throwaway PostgreSQL cluster"
}
