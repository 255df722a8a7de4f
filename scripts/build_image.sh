#!/usr/bin/env bash
# Builds the Dockerfile without a Docker daemon (buildah, vfs storage, chroot isolation), then
# starts the image, posts one CloudEvent to it the way Eventarc does (binary mode,
# application/protobuf) and expects 200. Prints the image size and the cold start (process start
# to the first answered event).
#
# Usage: bash scripts/build_image.sh [--no-smoke]
#   IMAGE       tag to build                 (default localhost/worker-chart-export:dev)
#   BASE_IMAGE  the Dockerfile's FROM        (default: built here from Debian packages, see below)
#   PORT        port of the smoke container  (default 18080)
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
for arg in "$@"; do
  case "${arg}" in
    --no-smoke) SMOKE=0 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
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
need buildah buildah

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

if [[ "${BASE_IMAGE}" == "${LOCAL_BASE}" ]] && ! "${BUILDAH[@]}" images --quiet "${LOCAL_BASE}" >/dev/null 2>&1; then
  build_base
fi

echo "== image ${IMAGE} FROM ${BASE_IMAGE}" >&2
start=$(date +%s)
"${BUILDAH[@]}" bud --isolation chroot --network host --layers \
  --build-arg "BASE_IMAGE=${BASE_IMAGE}" -f Dockerfile -t "${IMAGE}" . >&2
echo "built in $(( $(date +%s) - start )) s" >&2
echo "image size: $("${BUILDAH[@]}" images --noheading --format '{{.Size}}' "${IMAGE}")"
[[ "${SMOKE}" == 1 ]] || exit 0

echo "== smoke: serve the image on 127.0.0.1:${PORT}, post one CloudEvent" >&2
ctr="$("${BUILDAH[@]}" from "${IMAGE}")"
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n "${serve_pid:-}" ]]; then kill "${serve_pid}" 2>/dev/null || true; wait "${serve_pid}" 2>/dev/null || true; fi
  "${BUILDAH[@]}" rm "${ctr}" >/dev/null 2>&1 || true
}
trap cleanup EXIT
log="$(mktemp)"
t0=$(date +%s.%N)
# The image's own CMD and user, with the settings Cloud Run would give (no Firestore is needed:
# the event carries no READY step, so the no-op path answers without one).
# A throwaway account (real mode refuses to start without one), made up for this run so no
# key-like value sits in the repository; no call is ever made with it.
smoke_accounts="[{\"id\": \"smoke\", \"apiKey\": \"throwaway-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')\"}]"
"${BUILDAH[@]}" run --isolation chroot --network host \
  --env PORT="${PORT}" --env APP_ENV=smoke --env GOOGLE_CLOUD_PROJECT=demo-smoke \
  --env CHARTS_API_MODE=real --env CHARTS_BUCKET=smoke-bucket \
  --env CHART_IMG_ACCOUNTS_JSON="${smoke_accounts}" \
  "${ctr}" -- worker-chart-export serve >"${log}" 2>&1 &
serve_pid=$!
PYTHON="${PYTHON:-.venv/bin/python}"
# Builds the event exactly as tests/e2e does and retries until the server answers.
if "${PYTHON}" - "${PORT}" "${t0}" <<'PY'
import sys, time
from urllib import request, error

sys.path.insert(0, "src")
from worker_chart_export.testing import binary_update_event  # noqa: E402

port, t0 = int(sys.argv[1]), float(sys.argv[2])
run_id = "smoke1"
doc = {"runId": run_id, "flowKey": "smoke", "status": "RUNNING",
       "steps": {"charts": {"stepType": "CHART_EXPORT", "status": "PENDING", "dependsOn": []}}}
body, headers = binary_update_event("demo-smoke", run_id, doc, "smoke-1")
deadline = time.time() + 60
while True:
    try:
        with request.urlopen(request.Request(f"http://127.0.0.1:{port}/", data=body, headers=headers), timeout=10) as r:
            status = r.status
        break
    except error.HTTPError as e:
        status = e.code
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("the container did not answer within 60 s")
        time.sleep(0.05)
print(f"event answered: HTTP {status}")
print(f"cold start (process start to first answered event): {time.time() - t0:.2f} s")
sys.exit(0 if status == 200 else 1)
PY
then status=0; else status=$?; fi
echo "--- container log" >&2
cat "${log}" >&2
exit "${status}"
