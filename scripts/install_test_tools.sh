#!/usr/bin/env bash
# Installs the Debian packages the test command needs, only those missing, with one
# `apt-get update`: shellcheck (every shell script is checked), chromium and chromium-driver
# (the HTML view test drives them through selenium; selenium-manager never downloads a
# browser). Needs root: CI machines are clean Debian images that reach only Debian, PyPI, npm.
# It says what it is about to install, and how much, before apt-get runs; it asks nothing (CI
# is non-interactive). Installing the three yourself beforehand makes it a no-op.
set -euo pipefail
declare -A NEEDS=([shellcheck]=shellcheck [chromium]=chromium [chromium-driver]=chromedriver)  # the commands
declare -A WHY=(
    [shellcheck]="checks every shell script (scripts/*.sh, deploy/*.sh); 1 package, ~20 MB"
    [chromium]="the browser the HTML view test drives; with chromium-driver and their dependencies ~116 packages, ~500 MB"
    [chromium-driver]="chromedriver, selenium's handle on chromium (counted with chromium)"
)
missing=()
for package in shellcheck chromium chromium-driver; do
    command -v "${NEEDS[$package]}" >/dev/null || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing test tools (${missing[*]}) and not root: run 'apt-get install -y ${missing[*]}' as root" >&2
    exit 1
fi
{
    echo "install_test_tools.sh: installing Debian packages the tests need (apt-get install -y ${missing[*]}):"
    for package in "${missing[@]}"; do
        echo "  ${package}: ${WHY[$package]}"
    done
    echo "  (apt-get prints the exact package count and sizes next; figures above are for Debian bookworm)"
} >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
for package in "${missing[@]}"; do
    command -v "${NEEDS[$package]}" >/dev/null \
        || { echo "${NEEDS[$package]} still missing after apt-get install" >&2; exit 1; }
done
