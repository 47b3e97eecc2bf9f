#!/usr/bin/env bash
# Make sure .venv-dbt holds dbt-materialize, for the dbt example (examples/dbt) and its
# test (tests/test_dbt.py).
#
# dbt gets a venv of its own: its pins (protobuf, networkx, jinja2 …) conflict with
# Airflow's in .venv. dbt-core stays below 1.11, the last line that installs whole from
# the package registry (later ones build a parser from a download of their own).
#
# Idempotent and quick when present: a stamp holds the pins the venv was built with,
# and the venv is (re)built only when they differ or dbt is missing.
# Prints the path of the venv's dbt on stdout.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${MZFLOW_DBT_VENV:-$root/.venv-dbt}
pins="dbt-materialize==1.9.11 dbt-postgres==1.10.2 dbt-core>=1.10,<1.11"
stamp=$venv/.installed

if [[ -x $venv/bin/dbt && -f $stamp && $(cat "$stamp") == "$pins" ]]; then
    echo "$venv/bin/dbt"
    exit 0
fi

echo "ensure-dbt: installing $pins into $venv..." >&2
python=${PYTHON:-python3}
test -x "$venv/bin/python" || "$python" -m venv "$venv"
log=$(mktemp)
# shellcheck disable=SC2086  # the pins are separate words on purpose
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $pins \
        >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "ensure-dbt: installing dbt-materialize failed" >&2
    exit 1
fi
rm -f "$log"
"$venv/bin/dbt" --version >/dev/null
echo "$pins" >"$stamp"
echo "$venv/bin/dbt"
