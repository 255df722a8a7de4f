#!/usr/bin/env bash
# Installs the Debian packages the test command needs, only those missing, with one
# `apt-get update`: shellcheck (every shell script is checked), chromium and chromium-driver
# (the HTML view test drives them through selenium; selenium-manager never downloads a
# browser). Needs root: CI machines are clean Debian images that reach only Debian, PyPI, npm.
#
# Only what is needed: `apt-get install --no-install-recommends --no-upgrade` takes the named
# packages and what they depend on, nothing they merely recommend (on this project's machines
# 27 packages instead of 117 and 15 upgrades: no udev, avahi, cups or printer tools), and
# upgrades no package it names that is already installed. Before apt-get installs anything it simulates the
# install and prints every package it would add, and any installed package a new one needs
# in a newer version (apt would upgrade those; none on bookworm when this was written).
# It asks nothing (CI is non-interactive). Installing the packages yourself beforehand makes
# it a no-op. SKIP_BROWSER_TEST=1: chromium is not wanted; neither chromium package is
# installed, and scripts/test.sh leaves the browser test out.
set -euo pipefail
declare -A COMMAND=([shellcheck]=shellcheck [chromium]=chromium [chromium-driver]=chromedriver)
declare -A WHY=(
    [shellcheck]="checks every shell script (scripts/*.sh, deploy/*.sh); 1 package, ~3 MB download, ~19 MB on disk"
    [chromium]="the browser the HTML view test (tests/integration/test_view_chromium.py) drives; with chromium-driver and their dependencies 26 packages on this project's machines (~133 MB download, ~430 MB on disk), 166 on a bare Debian"
    [chromium-driver]="chromedriver, selenium's handle on chromium (counted with chromium)"
)
APT_FLAGS=(-y -q --no-install-recommends --no-upgrade)
wanted=(shellcheck)
[[ "${SKIP_BROWSER_TEST:-}" == 1 ]] || wanted+=(chromium chromium-driver)
missing=()
for package in "${wanted[@]}"; do
    command -v "${COMMAND[$package]}" >/dev/null || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
browser_note=""
if [[ " ${missing[*]} " == *" chromium"* ]]; then
    browser_note="(chromium not wanted: SKIP_BROWSER_TEST=1 bash scripts/test.sh installs neither chromium package and leaves the browser test out)"
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing test tools (${missing[*]}) and not root: run 'apt-get install ${APT_FLAGS[*]} ${missing[*]}' as root" >&2
    if [[ -n "${browser_note}" ]]; then echo "${browser_note}" >&2; fi
    exit 1
fi
{
    echo "install_test_tools.sh: Debian packages the tests need, missing here (apt-get install ${APT_FLAGS[*]} ${missing[*]}):"
    for package in "${missing[@]}"; do
        echo "  ${package}: ${WHY[$package]}"
    done
    echo "  only these and what they depend on: no recommended package, no upgrade of an installed one (figures for Debian bookworm)"
    if [[ -n "${browser_note}" ]]; then echo "  ${browser_note}"; fi
} >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# The simulation's "Inst name (version ...)" lines are new packages; "Inst name [installed] (...)"
# lines are upgrades a new package needs.
plan="$(apt-get install -s "${APT_FLAGS[@]}" "${missing[@]}")"
added=()
upgraded=()
while read -r verb name version _; do
    [[ "${verb}" == Inst ]] || continue
    if [[ "${version}" == \[* ]]; then upgraded+=("${name}"); else added+=("${name}"); fi
done <<<"${plan}"
{
    echo "install_test_tools.sh: installing ${#added[@]} package(s): ${added[*]}"
    if ((${#upgraded[@]} == 0)); then
        echo "install_test_tools.sh: upgrading: none"
    else
        echo "install_test_tools.sh: upgrading ${#upgraded[@]} installed package(s) a new one needs in a newer version: ${upgraded[*]}"
    fi
} >&2
apt-get install "${APT_FLAGS[@]}" "${missing[@]}"
for package in "${missing[@]}"; do
    command -v "${COMMAND[$package]}" >/dev/null \
        || { echo "${COMMAND[$package]} still missing after apt-get install" >&2; exit 1; }
done
