#!/usr/bin/env bash
# Creates .venv (if needed) and installs the pinned dependencies plus the project.
# Sourced by demo.sh and test.sh; safe to run again (nothing is asked of the installer while
# .venv/ holds what the locks and pyproject.toml say).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# Every file downloaded must match a hash in its lock (README "Dependencies"); the project itself
# has no hash, so it is installed by a second command, outside hash-checking mode.
pip_install() {
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"
}
# pip installs uv only (its own pinned lock); uv installs the rest: pip took ~55 s on one core for
# requirements.lock (resolving, checking and compiling every file), uv ~2 s. Modules are compiled
# when first imported instead, into .venv/ (test.sh keeps bytecode writing on).
install_with_uv() {
  local uv=(.venv/bin/uv pip install --quiet --python .venv/bin/python --system-certs)
  pip_install --require-hashes -r requirements.uv.lock &&
    UV_HTTP_TIMEOUT="${UV_HTTP_TIMEOUT:-${PIP_DEFAULT_TIMEOUT:-30}}" "${uv[@]}" --require-hashes -r requirements.lock &&
    "${uv[@]}" --no-deps -e .
}
install_with_pip() {
  pip_install --require-hashes -r requirements.lock && pip_install --no-deps -e .
}
# finding every pin already installed costs the installers seconds: as tox does, skip them while
# the inputs of the last install into this .venv/ (its stamp) are unchanged
stamp=.venv/installed-from.sha256
inputs="$(cat requirements.uv.lock requirements.lock pyproject.toml | sha256sum)"
if [[ "$(cat "${stamp}" 2>/dev/null)" != "${inputs}" ]]; then
  # where uv cannot (its wheel or an index out of reach), pip installs the same lock, slower
  install_with_uv || {
    echo "bootstrap: uv could not install requirements.lock (above): pip installs it instead (about a minute)" >&2
    install_with_pip
  }
  echo "${inputs}" >"${stamp}"
fi
# the project is in .venv/, not on PATH: say how to call it (the README writes every command so)
echo "bootstrap: ready; the command is .venv/bin/worker-chart-export (try .venv/bin/worker-chart-export --help)" >&2
