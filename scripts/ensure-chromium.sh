#!/usr/bin/env bash
# Make sure a headless Chromium is on this machine, for the plugin's browser test
# (tests/test_airflow_ui.py drives it over the DevTools protocol: mzflow_dev/cdp.py).
#
# Idempotent: does nothing when one of the binaries mzflow_dev/cdp.py looks for is on
# PATH. Otherwise installs Debian's `chromium-headless-shell`, quietly (it needs no
# display). The test fails, naming this script, when there is still none.
set -euo pipefail

for bin in chromium-headless-shell chromium chromium-browser google-chrome; do
    if command -v "$bin" >/dev/null 2>&1; then
        exit 0
    fi
done

if [[ $(id -u) -ne 0 ]]; then
    echo "ensure-chromium: no Chromium on PATH; run this script as root" \
         "(or: sudo apt-get install chromium-headless-shell)" >&2
    exit 1
fi

echo "ensure-chromium: installing Debian's chromium-headless-shell package..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium-headless-shell >/dev/null
