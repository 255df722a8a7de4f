#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver when missing: the HTML view test
# (tests/integration/test_view_chromium.py) drives them through selenium. The test never lets
# selenium-manager download a browser, so the packages must be here. Needs root (CI machines
# are clean Debian images that reach only Debian, PyPI and npm).
set -euo pipefail
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
if [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "chromium/chromedriver missing and not root: run 'apt-get install -y chromium chromium-driver' as root" >&2
    exit 1
fi
echo "installing chromium and chromium-driver (Debian packages) for the HTML view test" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q chromium chromium-driver
for binary in "$CHROMIUM" "$CHROMEDRIVER"; do
    [ -x "$binary" ] || { echo "$binary still missing after apt-get install" >&2; exit 1; }
done
