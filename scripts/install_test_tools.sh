#!/usr/bin/env bash
# Installs the Debian packages the test command needs, only those missing, with one
# `apt-get update`: shellcheck (every shell script is checked), chromium and chromium-driver
# (the HTML view test drives them through selenium; selenium-manager never downloads a
# browser). Needs root: CI machines are clean Debian images that reach only Debian, PyPI, npm.
set -euo pipefail
declare -A NEEDS=([shellcheck]=/usr/bin/shellcheck [chromium]=/usr/bin/chromium [chromium-driver]=/usr/bin/chromedriver)
missing=()
for package in "${!NEEDS[@]}"; do
    [ -x "${NEEDS[$package]}" ] || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing test tools (${missing[*]}) and not root: run 'apt-get install -y ${missing[*]}' as root" >&2
    exit 1
fi
echo "installing Debian packages for the tests: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
for package in "${missing[@]}"; do
    [ -x "${NEEDS[$package]}" ] || { echo "${NEEDS[$package]} still missing after apt-get install" >&2; exit 1; }
done
