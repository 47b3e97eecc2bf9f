#!/usr/bin/env bash
# Make sure PostgreSQL's server binaries (initdb, pg_ctl) are on this machine, so the
# PostgreSQL-backed catalog tests (tests/test_catalog_postgres.py) can run.
#
# Idempotent: does nothing when /usr/lib/postgresql/*/bin already has both binaries.
# Otherwise installs Debian's `postgresql` package, quietly. It never starts a server
# (and keeps the package's post-install from starting one): each test run starts its
# own throwaway server in a temporary directory (mzflow_dev/pg_server.py).
set -euo pipefail

have_binaries() {
    local bin
    for bin in /usr/lib/postgresql/*/bin; do
        if [[ -x "$bin/initdb" && -x "$bin/pg_ctl" ]]; then
            return 0
        fi
    done
    return 1
}

if have_binaries; then
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "ensure-postgres: initdb/pg_ctl not found under /usr/lib/postgresql/*/bin;" \
         "run this script as root (or: sudo apt-get install postgresql)" >&2
    exit 1
fi

echo "ensure-postgres: installing Debian's postgresql package..." >&2

# Debian's maintainer scripts start the cluster they create unless policy-rc.d says no.
# Install a temporary "deny all" policy if none exists, and remove it afterwards.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql; } \
        >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "ensure-postgres: installing postgresql failed" >&2
    exit 1
fi
rm -f "$log"

if ! have_binaries; then
    echo "ensure-postgres: postgresql installed, but initdb/pg_ctl are still missing" \
         "under /usr/lib/postgresql/*/bin" >&2
    exit 1
fi
echo "ensure-postgres: done ($(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1))" >&2
