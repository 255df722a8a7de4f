#!/usr/bin/env bash
# Deploys worker-chart-export and the flow around it to Google Cloud: the image, the bucket, the
# secret, service accounts and IAM, three Cloud Run services from the same image (the worker,
# advance_flow, the reaper), two Eventarc triggers with a dead-letter topic, the reaper's Cloud
# Scheduler job, the Firestore index the reaper's query needs, log-based metrics and alert policies.
# Idempotent: existing resources are kept (or updated where gcloud can). See deploy/README.md.
#
# Usage: deploy/deploy.sh [--dry-run] [--print-config] [--help]
#   --dry-run       print every command that would run, in order, one per line, and run nothing
#                   (values only known at run time are shown as <...> placeholders)
#   --print-config  print the resolved configuration as NAME=value lines and exit
# Configuration: environment variables, documented in deploy/README.md, e.g.
#   PROJECT_ID=my-project REGION=europe-west1 FIRESTORE_LOCATION=eur3 \
#   CHARTS_BUCKET=my-charts ./deploy/deploy.sh --dry-run
set -euo pipefail

DRY_RUN=0
PRINT_CONFIG=0
for arg in "$@"; do
  case "${arg}" in
    --dry-run) DRY_RUN=1 ;;
    --print-config) PRINT_CONFIG=1 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: ${arg} (see --help)" >&2; exit 2 ;;
  esac
done

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# --- configuration: everything below reads these ----------------------------------------------
PROJECT_ID="${PROJECT_ID:?set PROJECT_ID}"
REGION="${REGION:?set REGION (Cloud Run, Artifact Registry, bucket and scheduler region)}"
# The Eventarc triggers must live where the Firestore database is (nam5, eur3 or a region).
FIRESTORE_LOCATION="${FIRESTORE_LOCATION:?set FIRESTORE_LOCATION (the Firestore database location)}"
CHARTS_BUCKET="${CHARTS_BUCKET:?set CHARTS_BUCKET (bucket name, without gs://)}"
SERVICE="${SERVICE:-worker-chart-export}"
ADVANCE_SERVICE="${ADVANCE_SERVICE:-${SERVICE}-advance-flow}"
REAPER_SERVICE="${REAPER_SERVICE:-${SERVICE}-reaper}"
AR_REPO="${AR_REPO:-containers}"
IMAGE_TAG="${IMAGE_TAG:-$(git -C "${REPO_ROOT}" rev-parse --short HEAD 2>/dev/null || date +%Y%m%d%H%M%S)}"
# Set IMAGE to deploy an image that is already built (skips Cloud Build).
BUILD_IMAGE=1
[[ -n "${IMAGE:-}" ]] && BUILD_IMAGE=0
IMAGE="${IMAGE:-${REGION}-docker.pkg.dev/${PROJECT_ID}/${AR_REPO}/${SERVICE}:${IMAGE_TAG}}"
SECRET_NAME="${SECRET_NAME:-chart-img-accounts}"
# JSON file [{"id": "...", "apiKey": "..."}]: needed the first time (creates the secret) and to
# rotate keys (adds a version).
ACCOUNTS_FILE="${ACCOUNTS_FILE:-}"
RUNTIME_SA_NAME="${RUNTIME_SA_NAME:-worker-chart-export}"
FLOW_SA_NAME="${FLOW_SA_NAME:-worker-chart-export-flow}"
TRIGGER_SA_NAME="${TRIGGER_SA_NAME:-worker-chart-export-trigger}"
SCHEDULER_SA_NAME="${SCHEDULER_SA_NAME:-worker-chart-export-scheduler}"
TRIGGER_NAME="${TRIGGER_NAME:-${SERVICE}-flow-runs}"
ADVANCE_TRIGGER_NAME="${ADVANCE_TRIGGER_NAME:-${ADVANCE_SERVICE}-trigger}"
DEAD_LETTER_TOPIC="${DEAD_LETTER_TOPIC:-${SERVICE}-dead-letter}"
# Pub/Sub counts every delivery, a 429 at max instances included: leave room for those.
MAX_DELIVERY_ATTEMPTS="${MAX_DELIVERY_ATTEMPTS:-20}"
REAPER_JOB="${REAPER_JOB:-${REAPER_SERVICE}}"
REAPER_SCHEDULE="${REAPER_SCHEDULE:-*/5 * * * *}"
SCHEDULER_LOCATION="${SCHEDULER_LOCATION:-${REGION}}"
APP_ENV="${APP_ENV:-prod}"
# The step budget's source: Cloud Run's request timeout AND the worker's REQUEST_TIMEOUT_SECONDS
# (budget = this - FINALIZE_BUDGET_SECONDS). TIMEOUT_SECONDS is the older name of the same knob.
REQUEST_TIMEOUT_SECONDS="${REQUEST_TIMEOUT_SECONDS:-${TIMEOUT_SECONDS:-300}}"
FINALIZE_BUDGET_SECONDS="${FINALIZE_BUDGET_SECONDS:-30}"
# Scale-out knobs (deploy/README.md, "Throughput"): steps served at once per instance (= gunicorn
# THREADS), and instances. Per-key pacing is shared through Firestore, so instances may grow.
CONCURRENCY="${CONCURRENCY:-4}"
MAX_INSTANCES="${MAX_INSTANCES:-5}"
MIN_INSTANCES="${MIN_INSTANCES:-0}"
CPU="${CPU:-1}"
MEMORY="${MEMORY:-512Mi}"
ADVANCE_CONCURRENCY="${ADVANCE_CONCURRENCY:-8}"
ADVANCE_MAX_INSTANCES="${ADVANCE_MAX_INSTANCES:-5}"
REAPER_TIMEOUT_SECONDS="${REAPER_TIMEOUT_SECONDS:-120}"
# Comma-separated notification channel resource names for the alert policies (optional).
NOTIFICATION_CHANNELS="${NOTIFICATION_CHANNELS:-}"
# Optional: saves a `gcloud projects describe` (needed for the Pub/Sub service agent's address).
PROJECT_NUMBER="${PROJECT_NUMBER:-}"
TEMPLATES_DIR="${TEMPLATES_DIR:-chart-templates}"

RUNTIME_SA="${RUNTIME_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
FLOW_SA="${FLOW_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
TRIGGER_SA="${TRIGGER_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
SCHEDULER_SA="${SCHEDULER_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
# The worker's environment; deploy/cloudrun.service.yaml lists the same (a test compares them).
WORKER_ENV="APP_ENV=${APP_ENV},CHARTS_API_MODE=real,CHARTS_BUCKET=${CHARTS_BUCKET}"
WORKER_ENV+=",GOOGLE_CLOUD_PROJECT=${PROJECT_ID},REQUEST_TIMEOUT_SECONDS=${REQUEST_TIMEOUT_SECONDS}"
WORKER_ENV+=",FINALIZE_BUDGET_SECONDS=${FINALIZE_BUDGET_SECONDS},THREADS=${CONCURRENCY}"
WORKER_ENV+=",DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA=true"
FLOW_ENV="APP_ENV=${APP_ENV},GOOGLE_CLOUD_PROJECT=${PROJECT_ID}"

if [[ "${PRINT_CONFIG}" == 1 ]]; then
  for name in PROJECT_ID REGION FIRESTORE_LOCATION CHARTS_BUCKET SERVICE ADVANCE_SERVICE \
    REAPER_SERVICE IMAGE SECRET_NAME RUNTIME_SA FLOW_SA TRIGGER_SA SCHEDULER_SA TRIGGER_NAME \
    ADVANCE_TRIGGER_NAME DEAD_LETTER_TOPIC MAX_DELIVERY_ATTEMPTS REAPER_JOB REAPER_SCHEDULE \
    SCHEDULER_LOCATION APP_ENV REQUEST_TIMEOUT_SECONDS FINALIZE_BUDGET_SECONDS CONCURRENCY \
    MAX_INSTANCES MIN_INSTANCES CPU MEMORY ADVANCE_CONCURRENCY ADVANCE_MAX_INSTANCES \
    REAPER_TIMEOUT_SECONDS; do
    printf '%s=%q\n' "${name}" "${!name}"
  done
  exit 0
fi

# Sanity checks that gcloud would only report halfway through.
if ! [[ "${REQUEST_TIMEOUT_SECONDS}" =~ ^[0-9]+$ ]] || ((REQUEST_TIMEOUT_SECONDS > 3600)); then
  echo "REQUEST_TIMEOUT_SECONDS must be 1..3600 (Cloud Run's limit)" >&2
  exit 2
fi
((FINALIZE_BUDGET_SECONDS < REQUEST_TIMEOUT_SECONDS)) \
  || { echo "FINALIZE_BUDGET_SECONDS must be below REQUEST_TIMEOUT_SECONDS" >&2; exit 2; }
((MAX_DELIVERY_ATTEMPTS >= 5 && MAX_DELIVERY_ATTEMPTS <= 100)) \
  || { echo "MAX_DELIVERY_ATTEMPTS must be 5..100 (Pub/Sub's range)" >&2; exit 2; }

# --- how commands run -----------------------------------------------------------------------------
# run: a command that changes something. exists: a read-only probe (describe); in a dry run it is
# printed with a leading "? " and taken as "absent", so the create that follows is printed too.
# capture: a read-only look-up whose output is used; a dry run prints it and yields a placeholder.
exec 3>&1
print_cmd() { local IFS=' '; printf '%s%s\n' "$1" "$(shift; printf '%q ' "$@" | sed 's/ $//')" >&3; }
run() {
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "" "$@"; else "$@"; fi
}
exists() {
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "? " "$@"; return 1; fi
  "$@" >/dev/null 2>&1
}
capture() {
  local placeholder="$1"
  shift
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "" "$@"; printf '%s' "${placeholder}"; else "$@"; fi
}
section() { if [[ "${DRY_RUN}" == 1 ]]; then echo "# == $*"; else echo "== $*"; fi; }

cd "${REPO_ROOT}"
run gcloud config set project "${PROJECT_ID}"

section "APIs"
run gcloud services enable run.googleapis.com eventarc.googleapis.com \
  eventarcpublishing.googleapis.com firestore.googleapis.com storage.googleapis.com \
  secretmanager.googleapis.com artifactregistry.googleapis.com cloudbuild.googleapis.com \
  pubsub.googleapis.com logging.googleapis.com monitoring.googleapis.com \
  cloudscheduler.googleapis.com

section "service accounts"
for sa in "${RUNTIME_SA_NAME}" "${FLOW_SA_NAME}" "${TRIGGER_SA_NAME}" "${SCHEDULER_SA_NAME}"; do
  exists gcloud iam service-accounts describe "${sa}@${PROJECT_ID}.iam.gserviceaccount.com" \
    || run gcloud iam service-accounts create "${sa}"
done

if [[ "${BUILD_IMAGE}" == 1 ]]; then
  section "image ${IMAGE}"
  exists gcloud artifacts repositories describe "${AR_REPO}" --location="${REGION}" \
    || run gcloud artifacts repositories create "${AR_REPO}" --repository-format=docker \
      --location="${REGION}"
  # Cloud Build builds the Dockerfile remotely: no local Docker needed.
  run gcloud builds submit --tag "${IMAGE}" .
fi

section "bucket gs://${CHARTS_BUCKET} (public read, uniform bucket-level access: contract §13.6)"
exists gcloud storage buckets describe "gs://${CHARTS_BUCKET}" \
  || run gcloud storage buckets create "gs://${CHARTS_BUCKET}" --location="${REGION}" \
    --uniform-bucket-level-access --no-public-access-prevention
run gcloud storage buckets add-iam-policy-binding "gs://${CHARTS_BUCKET}" \
  --member=allUsers --role=roles/storage.objectViewer
# objectUser = create + delete + get, on this bucket only: overwriting manifest.json needs
# delete, which objectCreator lacks. No project-wide storage role anywhere.
run gcloud storage buckets add-iam-policy-binding "gs://${CHARTS_BUCKET}" \
  --member="serviceAccount:${RUNTIME_SA}" --role=roles/storage.objectUser

section "secret ${SECRET_NAME}"
if ! exists gcloud secrets describe "${SECRET_NAME}"; then
  if [[ -z "${ACCOUNTS_FILE}" && "${DRY_RUN}" == 0 ]]; then
    echo "secret ${SECRET_NAME} does not exist: set ACCOUNTS_FILE to create it" >&2
    exit 1
  fi
  run gcloud secrets create "${SECRET_NAME}" --replication-policy=automatic \
    --data-file="${ACCOUNTS_FILE:-<ACCOUNTS_FILE>}"
elif [[ -n "${ACCOUNTS_FILE}" ]]; then
  run gcloud secrets versions add "${SECRET_NAME}" --data-file="${ACCOUNTS_FILE}"
fi
run gcloud secrets add-iam-policy-binding "${SECRET_NAME}" \
  --member="serviceAccount:${RUNTIME_SA}" --role=roles/secretmanager.secretAccessor

section "Firestore access (claim/finalize, usage transactions, advance_flow, reaper)"
# Firestore has no narrower IAM scope than the project's database.
for sa in "${RUNTIME_SA}" "${FLOW_SA}"; do
  run gcloud projects add-iam-policy-binding "${PROJECT_ID}" \
    --member="serviceAccount:${sa}" --role=roles/datastore.user --condition=None
done

section "Firestore index for the reaper's query (deploy/firestore.indexes.json)"
# step_leases where expiresAt <= now, ordered by it: a single-field index, kept explicit so
# an exemption elsewhere cannot drop it.
run gcloud firestore indexes fields update expiresAt --database="(default)" \
  --collection-group=step_leases --index=order=ASCENDING --async

section "Cloud Run service ${SERVICE} (the worker)"
run gcloud run deploy "${SERVICE}" \
  --image="${IMAGE}" \
  --region="${REGION}" \
  --service-account="${RUNTIME_SA}" \
  --no-allow-unauthenticated \
  --ingress=all \
  --concurrency="${CONCURRENCY}" \
  --max-instances="${MAX_INSTANCES}" \
  --min-instances="${MIN_INSTANCES}" \
  --timeout="${REQUEST_TIMEOUT_SECONDS}" \
  --cpu="${CPU}" --memory="${MEMORY}" \
  --cpu-boost \
  --execution-environment=gen2 \
  --set-secrets="CHART_IMG_ACCOUNTS_JSON=${SECRET_NAME}:latest" \
  --set-env-vars="${WORKER_ENV}"

section "Cloud Run service ${ADVANCE_SERVICE} (advance_flow, CloudEvent)"
run gcloud run deploy "${ADVANCE_SERVICE}" \
  --image="${IMAGE}" \
  --region="${REGION}" \
  --service-account="${FLOW_SA}" \
  --no-allow-unauthenticated \
  --ingress=all \
  --command=worker-chart-export \
  --args=serve,--target=advance_flow \
  --concurrency="${ADVANCE_CONCURRENCY}" \
  --max-instances="${ADVANCE_MAX_INSTANCES}" \
  --timeout=60 \
  --cpu=1 --memory=512Mi \
  --cpu-boost \
  --execution-environment=gen2 \
  --set-env-vars="${FLOW_ENV}"

section "Cloud Run service ${REAPER_SERVICE} (reap_expired_leases, HTTP)"
run gcloud run deploy "${REAPER_SERVICE}" \
  --image="${IMAGE}" \
  --region="${REGION}" \
  --service-account="${FLOW_SA}" \
  --no-allow-unauthenticated \
  --ingress=all \
  --command=worker-chart-export \
  --args=serve,--target=reap_expired_leases \
  --concurrency=1 \
  --max-instances=1 \
  --timeout="${REAPER_TIMEOUT_SECONDS}" \
  --cpu=1 --memory=512Mi \
  --execution-environment=gen2 \
  --set-env-vars="${FLOW_ENV}"

section "Eventarc triggers (${FIRESTORE_LOCATION})"
# The trigger identity may invoke the two event-driven services and nothing else.
for svc in "${SERVICE}" "${ADVANCE_SERVICE}"; do
  run gcloud run services add-iam-policy-binding "${svc}" --region="${REGION}" \
    --member="serviceAccount:${TRIGGER_SA}" --role=roles/run.invoker
done
run gcloud projects add-iam-policy-binding "${PROJECT_ID}" \
  --member="serviceAccount:${TRIGGER_SA}" --role=roles/eventarc.eventReceiver --condition=None
if [[ -z "${PROJECT_NUMBER}" ]]; then
  PROJECT_NUMBER="$(capture "<PROJECT_NUMBER>" gcloud projects describe "${PROJECT_ID}" \
    --format=value\(projectNumber\))"
fi
PUBSUB_AGENT="service-${PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
# Projects created before 8 April 2021 need this for Pub/Sub to mint the trigger's OIDC tokens;
# granted on the trigger account only (not project-wide), harmless where it is not needed.
run gcloud iam service-accounts add-iam-policy-binding "${TRIGGER_SA}" \
  --member="serviceAccount:${PUBSUB_AGENT}" --role=roles/iam.serviceAccountTokenCreator

create_trigger() { # name service
  exists gcloud eventarc triggers describe "$1" --location="${FIRESTORE_LOCATION}" \
    || run gcloud eventarc triggers create "$1" \
      --location="${FIRESTORE_LOCATION}" \
      --destination-run-service="$2" \
      --destination-run-region="${REGION}" \
      --event-filters="type=google.cloud.firestore.document.v1.updated" \
      --event-filters="database=(default)" \
      --event-filters-path-pattern="document=flow_runs/{runId}" \
      --event-data-content-type="application/protobuf" \
      --service-account="${TRIGGER_SA}"
}
create_trigger "${TRIGGER_NAME}" "${SERVICE}"
create_trigger "${ADVANCE_TRIGGER_NAME}" "${ADVANCE_SERVICE}"

section "dead-letter topic ${DEAD_LETTER_TOPIC} on the triggers' subscriptions"
# Eventarc retries a failing delivery for 24 h, then drops it: a crashing defect must leave a
# trace. The hold subscription keeps dead letters for 7 days to inspect or replay.
exists gcloud pubsub topics describe "${DEAD_LETTER_TOPIC}" \
  || run gcloud pubsub topics create "${DEAD_LETTER_TOPIC}"
exists gcloud pubsub subscriptions describe "${DEAD_LETTER_TOPIC}-hold" \
  || run gcloud pubsub subscriptions create "${DEAD_LETTER_TOPIC}-hold" \
    --topic="${DEAD_LETTER_TOPIC}" --message-retention-duration=7d --expiration-period=never
run gcloud pubsub topics add-iam-policy-binding "${DEAD_LETTER_TOPIC}" \
  --member="serviceAccount:${PUBSUB_AGENT}" --role=roles/pubsub.publisher
for trigger in "${TRIGGER_NAME}" "${ADVANCE_TRIGGER_NAME}"; do
  subscription="$(capture "<subscription of ${trigger}>" gcloud eventarc triggers describe \
    "${trigger}" --location="${FIRESTORE_LOCATION}" \
    --format=value\(transport.pubsub.subscription\))"
  run gcloud pubsub subscriptions update "${subscription}" \
    --dead-letter-topic="${DEAD_LETTER_TOPIC}" --max-delivery-attempts="${MAX_DELIVERY_ATTEMPTS}"
  run gcloud pubsub subscriptions add-iam-policy-binding "${subscription}" \
    --member="serviceAccount:${PUBSUB_AGENT}" --role=roles/pubsub.subscriber
done

section "reaper schedule ${REAPER_JOB} (${REAPER_SCHEDULE}), Cloud Scheduler -> HTTP with OIDC"
run gcloud run services add-iam-policy-binding "${REAPER_SERVICE}" --region="${REGION}" \
  --member="serviceAccount:${SCHEDULER_SA}" --role=roles/run.invoker
reaper_url="$(capture "<url of ${REAPER_SERVICE}>" gcloud run services describe \
  "${REAPER_SERVICE}" --region="${REGION}" --format=value\(status.url\))"
scheduler_verb=create
exists gcloud scheduler jobs describe "${REAPER_JOB}" --location="${SCHEDULER_LOCATION}" \
  && scheduler_verb=update
run gcloud scheduler jobs "${scheduler_verb}" http "${REAPER_JOB}" \
  --location="${SCHEDULER_LOCATION}" \
  --schedule="${REAPER_SCHEDULE}" \
  --time-zone=Etc/UTC \
  --uri="${reaper_url}" \
  --http-method=POST \
  --oidc-service-account-email="${SCHEDULER_SA}" \
  --oidc-token-audience="${reaper_url}" \
  --attempt-deadline="${REAPER_TIMEOUT_SECONDS}s"

section "log-based metrics and alert policies (deploy/monitoring/)"
for metric in chart_img_accounts_exhausted chart_export_steps_failed; do
  config="deploy/monitoring/${metric}.metric.json"
  if exists gcloud logging metrics describe "${metric}"; then
    run gcloud logging metrics update "${metric}" --config-from-file="${config}"
  else
    run gcloud logging metrics create "${metric}" --config-from-file="${config}"
  fi
  policy="deploy/monitoring/${metric}.policy.json"
  display_name="$(sed -n 's/^  "displayName": "\(.*\)",$/\1/p' "${policy}")"
  existing="$(capture "" gcloud monitoring policies list \
    --filter="displayName=\"${display_name}\"" --format=value\(name\))"
  channels=()
  [[ -n "${NOTIFICATION_CHANNELS}" ]] && channels=(--notification-channels="${NOTIFICATION_CHANNELS}")
  if [[ -n "${existing}" ]]; then
    run gcloud monitoring policies update "${existing}" --policy-from-file="${policy}" "${channels[@]}"
  else
    run gcloud monitoring policies create --policy-from-file="${policy}" "${channels[@]}"
  fi
done

section "chart templates -> Firestore chart_templates/"
if [[ "${DRY_RUN}" == 1 ]] || command -v worker-chart-export >/dev/null 2>&1; then
  run env GOOGLE_CLOUD_PROJECT="${PROJECT_ID}" worker-chart-export templates sync --dir "${TEMPLATES_DIR}"
else
  echo "worker-chart-export is not installed here: run" \
    "'GOOGLE_CLOUD_PROJECT=${PROJECT_ID} worker-chart-export templates sync --dir ${TEMPLATES_DIR}'" \
    "from a checkout (pip install -e .) with Application Default Credentials" >&2
fi

section "done: ${SERVICE} (${IMAGE}) <- ${TRIGGER_NAME}; artifacts in gs://${CHARTS_BUCKET}/charts/"
