#!/usr/bin/env bash
# Deploys worker-chart-export to Cloud Run with its bucket, secret, IAM and Eventarc trigger.
# Idempotent where gcloud allows it: existing resources are kept. See deploy/README.md.
# Usage:  PROJECT_ID=my-project REGION=europe-west1 FIRESTORE_LOCATION=eur3 \
#         CHARTS_BUCKET=my-charts-bucket ./deploy/deploy.sh
set -euo pipefail

# --- configuration: everything below reads these --------------------------------------
PROJECT_ID="${PROJECT_ID:?set PROJECT_ID}"
REGION="${REGION:?set REGION (Cloud Run / Artifact Registry / bucket region)}"
# Location of the Firestore database: the Eventarc trigger must live there (nam5, eur3 or a region)
FIRESTORE_LOCATION="${FIRESTORE_LOCATION:?set FIRESTORE_LOCATION}"
CHARTS_BUCKET="${CHARTS_BUCKET:?set CHARTS_BUCKET (bucket name, without gs://)}"
SERVICE="${SERVICE:-worker-chart-export}"
AR_REPO="${AR_REPO:-containers}"
IMAGE_TAG="${IMAGE_TAG:-$(git rev-parse --short HEAD 2>/dev/null || date +%Y%m%d%H%M%S)}"
IMAGE="${REGION}-docker.pkg.dev/${PROJECT_ID}/${AR_REPO}/${SERVICE}:${IMAGE_TAG}"
SECRET_NAME="${SECRET_NAME:-chart-img-accounts}"
# JSON file [{"id": "...", "apiKey": "..."}]; only needed the first time (creates the secret)
ACCOUNTS_FILE="${ACCOUNTS_FILE:-}"
RUNTIME_SA_NAME="${RUNTIME_SA_NAME:-worker-chart-export}"
TRIGGER_SA_NAME="${TRIGGER_SA_NAME:-worker-chart-export-trigger}"
TRIGGER_NAME="${TRIGGER_NAME:-worker-chart-export-flow-runs}"
APP_ENV="${APP_ENV:-prod}"
# Cloud Run request timeout; REQUEST_TIMEOUT_SECONDS is set to the same value so that the
# step budget (timeout - FINALIZE_BUDGET_SECONDS) ends before Cloud Run cuts the request.
TIMEOUT_SECONDS="${TIMEOUT_SECONDS:-300}"
FINALIZE_BUDGET_SECONDS="${FINALIZE_BUDGET_SECONDS:-30}"
CONCURRENCY="${CONCURRENCY:-4}"
MAX_INSTANCES="${MAX_INSTANCES:-1}"
TEMPLATES_DIR="${TEMPLATES_DIR:-chart-templates}"

RUNTIME_SA="${RUNTIME_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
TRIGGER_SA="${TRIGGER_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

gcloud config set project "${PROJECT_ID}" >/dev/null

echo "== APIs"
gcloud services enable run.googleapis.com eventarc.googleapis.com \
  eventarcpublishing.googleapis.com firestore.googleapis.com storage.googleapis.com \
  secretmanager.googleapis.com artifactregistry.googleapis.com cloudbuild.googleapis.com \
  pubsub.googleapis.com logging.googleapis.com

echo "== service accounts"
for sa in "${RUNTIME_SA_NAME}" "${TRIGGER_SA_NAME}"; do
  gcloud iam service-accounts describe "${sa}@${PROJECT_ID}.iam.gserviceaccount.com" \
    >/dev/null 2>&1 || gcloud iam service-accounts create "${sa}"
done

echo "== image ${IMAGE}"
gcloud artifacts repositories describe "${AR_REPO}" --location="${REGION}" >/dev/null 2>&1 \
  || gcloud artifacts repositories create "${AR_REPO}" --repository-format=docker \
       --location="${REGION}"
# Cloud Build builds the Dockerfile remotely: no local Docker needed.
gcloud builds submit --tag "${IMAGE}" .

echo "== bucket gs://${CHARTS_BUCKET} (public read, uniform bucket-level access: contract §13.6)"
gcloud storage buckets describe "gs://${CHARTS_BUCKET}" >/dev/null 2>&1 \
  || gcloud storage buckets create "gs://${CHARTS_BUCKET}" --location="${REGION}" \
       --uniform-bucket-level-access --no-public-access-prevention
gcloud storage buckets add-iam-policy-binding "gs://${CHARTS_BUCKET}" \
  --member=allUsers --role=roles/storage.objectViewer >/dev/null
# objectUser = create + delete + get: overwriting manifest.json needs delete permission,
# which objectCreator lacks.
gcloud storage buckets add-iam-policy-binding "gs://${CHARTS_BUCKET}" \
  --member="serviceAccount:${RUNTIME_SA}" --role=roles/storage.objectUser >/dev/null

echo "== secret ${SECRET_NAME}"
if ! gcloud secrets describe "${SECRET_NAME}" >/dev/null 2>&1; then
  if [[ -z "${ACCOUNTS_FILE}" ]]; then
    echo "secret ${SECRET_NAME} does not exist: set ACCOUNTS_FILE to create it" >&2
    exit 1
  fi
  gcloud secrets create "${SECRET_NAME}" --replication-policy=automatic \
    --data-file="${ACCOUNTS_FILE}"
elif [[ -n "${ACCOUNTS_FILE}" ]]; then
  gcloud secrets versions add "${SECRET_NAME}" --data-file="${ACCOUNTS_FILE}"
fi
gcloud secrets add-iam-policy-binding "${SECRET_NAME}" \
  --member="serviceAccount:${RUNTIME_SA}" --role=roles/secretmanager.secretAccessor >/dev/null

echo "== Firestore access for the runtime service account"
gcloud projects add-iam-policy-binding "${PROJECT_ID}" \
  --member="serviceAccount:${RUNTIME_SA}" --role=roles/datastore.user \
  --condition=None >/dev/null

echo "== Cloud Run service ${SERVICE}"
gcloud run deploy "${SERVICE}" \
  --image="${IMAGE}" \
  --region="${REGION}" \
  --service-account="${RUNTIME_SA}" \
  --no-allow-unauthenticated \
  --concurrency="${CONCURRENCY}" \
  --max-instances="${MAX_INSTANCES}" \
  --timeout="${TIMEOUT_SECONDS}" \
  --cpu=1 --memory=512Mi \
  --set-secrets="CHART_IMG_ACCOUNTS_JSON=${SECRET_NAME}:latest" \
  --set-env-vars="APP_ENV=${APP_ENV},CHARTS_API_MODE=real,CHARTS_BUCKET=${CHARTS_BUCKET},GOOGLE_CLOUD_PROJECT=${PROJECT_ID},REQUEST_TIMEOUT_SECONDS=${TIMEOUT_SECONDS},FINALIZE_BUDGET_SECONDS=${FINALIZE_BUDGET_SECONDS},THREADS=${CONCURRENCY},DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA=true"

echo "== Eventarc trigger ${TRIGGER_NAME} (${FIRESTORE_LOCATION})"
gcloud run services add-iam-policy-binding "${SERVICE}" --region="${REGION}" \
  --member="serviceAccount:${TRIGGER_SA}" --role=roles/run.invoker >/dev/null
gcloud projects add-iam-policy-binding "${PROJECT_ID}" \
  --member="serviceAccount:${TRIGGER_SA}" --role=roles/eventarc.eventReceiver \
  --condition=None >/dev/null
gcloud eventarc triggers describe "${TRIGGER_NAME}" --location="${FIRESTORE_LOCATION}" \
  >/dev/null 2>&1 \
  || gcloud eventarc triggers create "${TRIGGER_NAME}" \
       --location="${FIRESTORE_LOCATION}" \
       --destination-run-service="${SERVICE}" \
       --destination-run-region="${REGION}" \
       --event-filters="type=google.cloud.firestore.document.v1.updated" \
       --event-filters="database=(default)" \
       --event-filters-path-pattern="document=flow_runs/{runId}" \
       --event-data-content-type="application/protobuf" \
       --service-account="${TRIGGER_SA}"

echo "== chart templates -> Firestore chart_templates/"
if command -v worker-chart-export >/dev/null 2>&1; then
  GOOGLE_CLOUD_PROJECT="${PROJECT_ID}" worker-chart-export templates sync --dir "${TEMPLATES_DIR}"
else
  echo "worker-chart-export is not installed here: run" \
       "'GOOGLE_CLOUD_PROJECT=${PROJECT_ID} worker-chart-export templates sync --dir ${TEMPLATES_DIR}'" \
       "from a checkout (pip install -e .) with Application Default Credentials" >&2
fi

echo "done: ${SERVICE} (${IMAGE}) <- ${TRIGGER_NAME}; artifacts in gs://${CHARTS_BUCKET}/charts/"
