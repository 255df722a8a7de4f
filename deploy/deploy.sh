#!/usr/bin/env bash
# Deploys worker-chart-export and the flow around it to Google Cloud: the Firestore database
# (Native mode), the image, the bucket, the secret, service accounts and IAM, three Cloud Run
# services from the same image (the worker, advance_flow, the reaper), two Eventarc triggers
# with a dead-letter topic, the reaper's Cloud Scheduler job, the Firestore index the reaper's
# query needs, the Firestore security rules (closed to client SDKs), log-based metrics, alert
# policies, the dashboard, and the chart templates. Idempotent: each resource is looked up
# first, created when absent, updated only where it differs (Cloud Run gets a new revision
# each time). A preflight (gcloud, its login, Application Default Credentials, the project,
# REGION among Cloud Run's, the secret) runs before anything is changed. See deploy/README.md.
#
# Usage: deploy/deploy.sh [--dry-run] [--print-config] [--help]
#   --dry-run       print every command that would run, in order, one per line, and run nothing:
#                   "? " marks a read-only look-up, "#" lines say where a real run would stop,
#                   <...> is a value only known at run time
#   --print-config  print the resolved configuration as NAME=value lines and exit
# Configuration: environment variables, documented in deploy/README.md, e.g.
#   PROJECT_ID=my-project REGION=europe-west1 FIRESTORE_LOCATION=eur3 \
#   CHARTS_BUCKET=my-charts ACCOUNTS_FILE=./chart-img.accounts.json ./deploy/deploy.sh --dry-run
set -euo pipefail
# Layout: constants, then one function per section in the order a deploy runs them, and `main`
# at the bottom calling them. Every section reads the configuration's global variables
# (resolve_configuration); the helpers that run or print a command come before the sections.

# Every call below was checked against this Google Cloud CLI (tests/deploy/ has the installed
# CLI parse each one); alert policies need its alpha track (`gcloud alpha monitoring policies`:
# no GA or beta command manages them).
MIN_GCLOUD_VERSION=528.0.0
# advance_flow must see a flow_run's creation (its first steps become READY then), so its
# trigger takes every write; the worker only acts on updates (a step set READY).
WORKER_EVENT_TYPE=google.cloud.firestore.document.v1.updated
ADVANCE_EVENT_TYPE=google.cloud.firestore.document.v1.written
# Firestore security rules: no gcloud command releases them, the Firebase Rules API does (the
# Firebase CLI's own calls); the (default) database's release is named cloud.firestore.
RULES_API=https://firebaserules.googleapis.com/v1
RULES_RELEASE=cloud.firestore
RULES_FILE=deploy/firestore.rules
# rules_api's status for a GET of something absent
ABSENT_RULES=10
# Seconds to wait before trying again a call refused while IAM changes propagate (a grant or a
# service account made a moment ago; usually under a minute): 4 more tries over 2 min 30 s, so a
# role that is really missing is not waited on for long (the message then says to run it again).
IAM_RETRY_DELAYS="${IAM_RETRY_DELAYS:-10 20 40 80}"
# A change refused while IAM propagates (a service account or a grant made a moment ago is not
# seen everywhere yet: "does not exist", PERMISSION_DENIED, Eventarc's "may take a few minutes")
# is tried again after each of IAM_RETRY_DELAYS, saying so; any other failure stops the deploy.
PROPAGATING='does not exist|PERMISSION_DENIED|[Pp]ermission denied|propagat|may take a few minutes'
# What gcloud says of a resource that is not there (describe, below).
ABSENT='NOT_FOUND|[Nn]ot found|does not exist|404'
# A trigger as deploy.sh wants it, in the shape `describe` prints it (sync_trigger): one sorted
# line per event filter (attribute, operator, value), each followed by destination, account
# and encoding.
TRIGGER_FORMAT="value(eventFilters.attribute,eventFilters.operator,eventFilters.value"
TRIGGER_FORMAT+=",destination.cloudRun.service,destination.cloudRun.region,serviceAccount"
TRIGGER_FORMAT+=",eventDataContentType)"
# The Cloud Monitoring dashboard's file, in deploy/monitoring/.
DASHBOARD_FILE=worker-chart-export.dashboard.json
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

DRY_RUN=0
PRINT_CONFIG=0
parse_args() {
  local arg
  for arg in "$@"; do
    case "${arg}" in
      --dry-run) DRY_RUN=1 ;;
      --print-config) PRINT_CONFIG=1 ;;
      -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
      *) echo "unknown argument: ${arg} (see --help)" >&2; exit 2 ;;
    esac
  done
}

# --- configuration: everything below reads these ----------------------------------------------
require_variables() {
  local missing=() name
  for name in PROJECT_ID REGION FIRESTORE_LOCATION CHARTS_BUCKET; do
    [[ -n "${!name:-}" ]] || missing+=("${name}")
  done
  if ((${#missing[@]} > 0)); then
    echo "deploy.sh: missing required variables: ${missing[*]} (see deploy/README.md, Configuration)" >&2
    exit 2
  fi
}

resolve_names() {
  # REGION: Cloud Run, Artifact Registry, bucket and scheduler region. FIRESTORE_LOCATION: the
  # (default) database's location (nam5, eur3 or a region); the Eventarc triggers must live there
  # (deploy/README.md, "REGION and FIRESTORE_LOCATION"). CHARTS_BUCKET: a bucket name or
  # gs://name, as the worker itself accepts.
  CHARTS_BUCKET="${CHARTS_BUCKET#gs://}"
  CHARTS_BUCKET="${CHARTS_BUCKET%/}"
  SERVICE="${SERVICE:-worker-chart-export}"
  ADVANCE_SERVICE="${ADVANCE_SERVICE:-${SERVICE}-advance-flow}"
  REAPER_SERVICE="${REAPER_SERVICE:-${SERVICE}-reaper}"
  AR_REPO="${AR_REPO:-containers}"
  IMAGE_TAG="${IMAGE_TAG:-$(git -C "${REPO_ROOT}" rev-parse --short HEAD 2>/dev/null || date +%Y%m%d%H%M%S)}"
  # Set IMAGE to deploy an image that is already built (skips Cloud Build).
  BUILD_IMAGE=1
  if [[ -n "${IMAGE:-}" ]]; then BUILD_IMAGE=0; fi
  IMAGE="${IMAGE:-${REGION}-docker.pkg.dev/${PROJECT_ID}/${AR_REPO}/${SERVICE}:${IMAGE_TAG}}"
  SECRET_NAME="${SECRET_NAME:-chart-img-accounts}"
  # JSON file [{"id": "...", "apiKey": "..."}]: needed the first time (creates the secret) and to
  # rotate keys (adds a version when it differs from the latest). Checked before anything runs.
  ACCOUNTS_FILE="${ACCOUNTS_FILE:-}"
  # A relative path is the caller's: deploy.sh works from the checkout's root (prepare_run).
  if [[ -n "${ACCOUNTS_FILE}" && "${ACCOUNTS_FILE}" != /* ]]; then ACCOUNTS_FILE="${PWD}/${ACCOUNTS_FILE}"; fi
  # The worker mounts one numbered version of the secret, the one this deploy verified (the
  # latest, or the one made from ACCOUNTS_FILE), never `latest`. SECRET_VERSION pins another one
  # (a roll-back): it is verified the same way.
  SECRET_VERSION="${SECRET_VERSION:-}"
  # Contract §13.6: anyone with a chart's URL may read it (allUsers, no listing). false: the
  # bucket is private (public access prevention enforced), for organisations that forbid
  # allUsers; readers then need a role on it or signed URLs (deploy/README.md, "The bucket").
  PUBLIC_READ="${PUBLIC_READ:-true}"
  RUNTIME_SA_NAME="${RUNTIME_SA_NAME:-worker-chart-export}"
  FLOW_SA_NAME="${FLOW_SA_NAME:-worker-chart-export-flow}"
  TRIGGER_SA_NAME="${TRIGGER_SA_NAME:-worker-chart-export-trigger}"
  SCHEDULER_SA_NAME="${SCHEDULER_SA_NAME:-worker-chart-export-scheduler}"
  TRIGGER_NAME="${TRIGGER_NAME:-${SERVICE}-flow-runs}"
  ADVANCE_TRIGGER_NAME="${ADVANCE_TRIGGER_NAME:-${ADVANCE_SERVICE}-trigger}"
  DEAD_LETTER_TOPIC="${DEAD_LETTER_TOPIC:-${SERVICE}-dead-letter}"
  DEAD_LETTER_HOLD="${DEAD_LETTER_TOPIC}-hold"
  REAPER_JOB="${REAPER_JOB:-${REAPER_SERVICE}}"
  SCHEDULER_LOCATION="${SCHEDULER_LOCATION:-${REGION}}"
  # The Cloud Monitoring dashboard (deploy/monitoring/${DASHBOARD_FILE}): its id in the project.
  DASHBOARD_ID="${DASHBOARD_ID:-${SERVICE}}"
  # Optional: saves a `gcloud projects describe` (needed for the Pub/Sub service agent's address).
  PROJECT_NUMBER="${PROJECT_NUMBER:-}"
  TEMPLATES_DIR="${TEMPLATES_DIR:-chart-templates}"
}

resolve_knobs() {
  # Pub/Sub counts every delivery, a 429 at max instances included: leave room for those.
  MAX_DELIVERY_ATTEMPTS="${MAX_DELIVERY_ATTEMPTS:-20}"
  # Every minute: the tick is how soon a step left to the reaper (an expired lease, a step
  # waiting out a long CHART-IMG outage) is taken up again (deploy/README.md, "What it costs at rest").
  REAPER_SCHEDULE="${REAPER_SCHEDULE:-* * * * *}"
  APP_ENV="${APP_ENV:-prod}"
  # The smallest CHART-IMG plan among the accounts: the image size and studies/drawings limits
  # templates are checked against, by the worker and by templates sync (deploy/README.md).
  CHART_IMG_PLAN="${CHART_IMG_PLAN:-BASIC}"
  # The step budget's source: Cloud Run's request timeout AND the worker's REQUEST_TIMEOUT_SECONDS
  # (budget = this - FINALIZE_BUDGET_SECONDS). TIMEOUT_SECONDS is the older name of the same knob.
  REQUEST_TIMEOUT_SECONDS="${REQUEST_TIMEOUT_SECONDS:-${TIMEOUT_SECONDS:-300}}"
  FINALIZE_BUDGET_SECONDS="${FINALIZE_BUDGET_SECONDS:-30}"
  ADVANCE_TIMEOUT_SECONDS="${ADVANCE_TIMEOUT_SECONDS:-60}"
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
  # Comma-separated notification channel resource names for the alert policies (optional). They
  # are the policies' channels: a re-deploy sets exactly these.
  NOTIFICATION_CHANNELS="${NOTIFICATION_CHANNELS:-}"
}

resolve_identities() {
  RUNTIME_SA="${RUNTIME_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
  FLOW_SA="${FLOW_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
  TRIGGER_SA="${TRIGGER_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
  SCHEDULER_SA="${SCHEDULER_SA_NAME}@${PROJECT_ID}.iam.gserviceaccount.com"
  # The worker's environment; deploy/cloudrun.service.yaml lists the same (a test compares them).
  WORKER_ENV="APP_ENV=${APP_ENV},CHARTS_API_MODE=real,CHARTS_BUCKET=${CHARTS_BUCKET}"
  WORKER_ENV+=",GOOGLE_CLOUD_PROJECT=${PROJECT_ID},REQUEST_TIMEOUT_SECONDS=${REQUEST_TIMEOUT_SECONDS}"
  WORKER_ENV+=",FINALIZE_BUDGET_SECONDS=${FINALIZE_BUDGET_SECONDS},THREADS=${CONCURRENCY}"
  WORKER_ENV+=",DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA=true,CHART_IMG_PLAN=${CHART_IMG_PLAN}"
  FLOW_ENV="APP_ENV=${APP_ENV},GOOGLE_CLOUD_PROJECT=${PROJECT_ID}"
}

resolve_configuration() {
  require_variables
  resolve_names
  resolve_knobs
  resolve_identities
}

print_configuration() {
  local name
  for name in PROJECT_ID REGION FIRESTORE_LOCATION CHARTS_BUCKET SERVICE ADVANCE_SERVICE \
    REAPER_SERVICE IMAGE SECRET_NAME RUNTIME_SA FLOW_SA TRIGGER_SA SCHEDULER_SA TRIGGER_NAME \
    ADVANCE_TRIGGER_NAME DEAD_LETTER_TOPIC DEAD_LETTER_HOLD MAX_DELIVERY_ATTEMPTS REAPER_JOB \
    REAPER_SCHEDULE SCHEDULER_LOCATION APP_ENV REQUEST_TIMEOUT_SECONDS FINALIZE_BUDGET_SECONDS \
    ADVANCE_TIMEOUT_SECONDS CONCURRENCY MAX_INSTANCES MIN_INSTANCES CPU MEMORY \
    ADVANCE_CONCURRENCY ADVANCE_MAX_INSTANCES REAPER_TIMEOUT_SECONDS DASHBOARD_ID PUBLIC_READ \
    SECRET_VERSION CHART_IMG_PLAN; do
    printf '%s=%q\n' "${name}" "${!name}"
  done
}

# --- checks that gcloud would only report halfway through: all of them, then stop -------------
PROBLEMS=()
int_in() { # NAME LOW HIGH WHY
  local value="${!1}"
  if ! [[ "${value}" =~ ^[0-9]+$ ]] || ((10#${value} < $2 || 10#${value} > $3)); then
    PROBLEMS+=("$1 must be $2..$3 ($4), got '${value}'")
  fi
}

# PROJECT_ID and REGION by their form, before anything uses them (a project id as Google documents
# it; a region as Cloud Run names them). The region is also looked up in Cloud Run's own list at
# the preflight (check_region_listed), when a login allows.
PROJECT_ID_FORM='^[a-z][a-z0-9-]{4,28}[a-z0-9]$'
REGION_FORM='^[a-z]+-[a-z]+[0-9]+$'
check_project_and_region() {
  [[ "${PROJECT_ID}" =~ ${PROJECT_ID_FORM} ]] \
    || PROBLEMS+=("PROJECT_ID: '${PROJECT_ID}' is not a project ID: 6 to 30 lowercase letters, digits and hyphens, starting with a letter, not ending with a hyphen (the ID, not the project's name: 'gcloud projects list' shows both)")
  [[ "${REGION}" =~ ${REGION_FORM} ]] \
    || PROBLEMS+=("REGION: '${REGION}' is not a region name: lowercase letters, a hyphen, lowercase letters and a number, like europe-west1 ('gcloud run regions list' names Cloud Run's)")
}

check_numbers() {
  # Events reach both event-driven services through Pub/Sub push subscriptions, whose
  # acknowledgement deadline (set below from these timeouts) is at most 600 s: a longer request
  # would be delivered again while it still runs. Cloud Run alone would allow 3600.
  int_in REQUEST_TIMEOUT_SECONDS 1 600 "Pub/Sub's maximum acknowledgement deadline is 600 s"
  int_in ADVANCE_TIMEOUT_SECONDS 1 600 "Pub/Sub's maximum acknowledgement deadline is 600 s"
  int_in FINALIZE_BUDGET_SECONDS 0 599 "time kept to finalize the step"
  int_in MAX_DELIVERY_ATTEMPTS 5 100 "Pub/Sub's dead-letter range"
  int_in REAPER_TIMEOUT_SECONDS 15 1800 "Cloud Scheduler's attempt deadline range"
  if [[ "${FINALIZE_BUDGET_SECONDS}" =~ ^[0-9]+$ && "${REQUEST_TIMEOUT_SECONDS}" =~ ^[0-9]+$ ]] \
    && ((10#${FINALIZE_BUDGET_SECONDS} >= 10#${REQUEST_TIMEOUT_SECONDS})); then
    PROBLEMS+=("FINALIZE_BUDGET_SECONDS must be below REQUEST_TIMEOUT_SECONDS")
  fi
}

check_names() {
  if ! [[ "${CHARTS_BUCKET}" =~ ^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$ ]]; then
    PROBLEMS+=("CHARTS_BUCKET: expected a bucket name or gs://<bucket>, got '${CHARTS_BUCKET}'")
  fi
  if ! [[ "${DASHBOARD_ID}" =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$ ]]; then
    PROBLEMS+=("DASHBOARD_ID: expected letters, digits, '-' and '_' (up to 100), got '${DASHBOARD_ID}'")
  fi
  [[ "${CHART_IMG_PLAN}" =~ ^(BASIC|PRO|MEGA|ULTRA|ENTERPRISE)$ ]] \
    || PROBLEMS+=("CHART_IMG_PLAN must be BASIC, PRO, MEGA, ULTRA or ENTERPRISE, got '${CHART_IMG_PLAN}'")
  [[ "${PUBLIC_READ}" =~ ^(true|false)$ ]] \
    || PROBLEMS+=("PUBLIC_READ must be true or false (contract §13.6: true), got '${PUBLIC_READ}'")
  if [[ -n "${SECRET_VERSION}" ]]; then
    [[ "${SECRET_VERSION}" =~ ^[1-9][0-9]*$ ]] \
      || PROBLEMS+=("SECRET_VERSION must be a version number of ${SECRET_NAME}, got '${SECRET_VERSION}'")
    [[ -z "${ACCOUNTS_FILE}" ]] \
      || PROBLEMS+=("SECRET_VERSION and ACCOUNTS_FILE are both set: ACCOUNTS_FILE makes the version to deploy, SECRET_VERSION names one that exists")
  fi
  [[ "${IAM_RETRY_DELAYS}" =~ ^[0-9]+( [0-9]+)*$ ]] \
    || PROBLEMS+=("IAM_RETRY_DELAYS must be seconds separated by spaces, got '${IAM_RETRY_DELAYS}'")
}

find_project_cli() {
  # The project's own CLI: it checks ACCOUNTS_FILE and the secret's version (the worker's parser)
  # and syncs the templates.
  WCE=""
  if command -v worker-chart-export >/dev/null 2>&1; then
    WCE="$(command -v worker-chart-export)"
  elif [[ -x "${REPO_ROOT}/.venv/bin/worker-chart-export" ]]; then
    WCE="${REPO_ROOT}/.venv/bin/worker-chart-export"
  else
    PROBLEMS+=("worker-chart-export not found (on PATH or in .venv): install it with 'bash scripts/bootstrap.sh'")
  fi
}

check_accounts_file() {
  # The accounts file, by the worker's own parser: its line names the item and field, never a key
  # (`...: error: accounts file <path>: <problem>`), said here of the variable that names the file.
  local refusal
  if [[ -n "${ACCOUNTS_FILE}" && ! -f "${ACCOUNTS_FILE}" ]]; then
    PROBLEMS+=("ACCOUNTS_FILE ${ACCOUNTS_FILE}: no such file")
  elif [[ -n "${ACCOUNTS_FILE}" && -n "${WCE}" ]] \
    && ! refusal="$("${WCE}" accounts --check-file "${ACCOUNTS_FILE}" 2>&1 >/dev/null)"; then
    refusal="$(grep -m1 . <<<"${refusal}")"
    refusal="${refusal#*error: }"
    PROBLEMS+=("ACCOUNTS_FILE ${ACCOUNTS_FILE}: ${refusal#*"${ACCOUNTS_FILE}": }")
  fi
}

check_configuration() {
  check_project_and_region
  check_numbers
  check_names
  find_project_cli
  check_accounts_file
  if ((${#PROBLEMS[@]} > 0)); then
    printf 'deploy.sh: %s\n' "${PROBLEMS[@]}" >&2
    exit 2
  fi
  # Pub/Sub's minimum acknowledgement deadline is 10 s.
  WORKER_ACK_DEADLINE=$((10#${REQUEST_TIMEOUT_SECONDS} < 10 ? 10 : 10#${REQUEST_TIMEOUT_SECONDS}))
  ADVANCE_ACK_DEADLINE=$((10#${ADVANCE_TIMEOUT_SECONDS} < 10 ? 10 : 10#${ADVANCE_TIMEOUT_SECONDS}))
}

# --- how commands run -----------------------------------------------------------------------------
# run: a command that changes something. describe: a read-only look-up of a resource that may
# be absent (see below). capture: a read-only look-up whose output is used. A dry run prints
# each, read-only ones with a leading "? ", and yields a placeholder for captured output.
prepare_run() {
  # Every gcloud call takes the project from here (the user's gcloud configuration is left alone)
  # and never waits on a prompt.
  export CLOUDSDK_CORE_PROJECT="${PROJECT_ID}" CLOUDSDK_CORE_DISABLE_PROMPTS=1
  WORK_DIR="$(mktemp -d)"
  trap 'rm -rf "${WORK_DIR}"' EXIT
  exec 3>&1 # print_cmd's lines, also from inside $(capture ...)
  cd "${REPO_ROOT}"
  # Files handed to gcloud after filling in names (alert policies, the dashboard): a real run
  # keeps them while it runs; a dry run leaves them in out/deploy-dry-run/ to be read.
  RENDERED="${WORK_DIR}"
  if [[ "${DRY_RUN}" == 1 ]]; then
    RENDERED=out/deploy-dry-run
    rm -rf "${RENDERED}"
    mkdir -p "${RENDERED}"
  fi
}
quote() { # one word as a shell reads it back: bare when plain, else in single quotes
  if [[ "$1" =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
print_cmd() { # prefix word...
  local prefix="$1" line="" word
  shift
  for word in "$@"; do line+=" $(quote "${word}")"; done
  printf '%s%s\n' "${prefix}" "${line# }" >&3
}
# In a dry run: a line saying what a real run checks here, and where it would stop.
stops_if() { if [[ "${DRY_RUN}" == 1 ]]; then echo "#   a real run stops here if $*"; fi; }
attempt() { # the command's stderr is shown as it comes and kept in ${WORK_DIR}/stderr
  local status
  set +e
  { "$@" 2>&1 1>&4 4>&- | tee "${WORK_DIR}/stderr" >&2; } 4>&1
  status=${PIPESTATUS[0]}
  set -e
  return "${status}"
}
run() {
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "" "$@"; return 0; fi
  local delays tried=0 status=0
  read -r -a delays <<<"${IAM_RETRY_DELAYS}"
  until attempt "$@"; do
    status=$?
    grep -qE "${PROPAGATING}" "${WORK_DIR}/stderr" || return "${status}"
    if ((tried == ${#delays[@]})); then
      echo "deploy.sh: still refused after ${tried} more tries. If a role was granted or an account made a moment ago (a new project), IAM may need a few more minutes: run deploy.sh again, it carries on where it stopped; otherwise the message above names what is missing." >&2
      return "${status}"
    fi
    echo "deploy.sh: refused, as happens while IAM propagates a grant or an account made a moment ago: trying again in ${delays[tried]} s ($((tried + 1)) of ${#delays[@]})" >&2
    sleep "${delays[tried]}"
    tried=$((tried + 1))
  done
}
capture() {
  local placeholder="$1"
  shift
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "? " "$@"; printf '%s' "${placeholder}"; else "$@"; fi
}
# describe: returns 0 with the command's output in DESCRIBED when the resource exists, 1 when
# gcloud says it does not; any other failure (permission, API disabled, a rejected command)
# stops the deploy with gcloud's message instead of passing for "absent". A dry run prints it
# with a leading "? " and takes it as absent, so the create that follows is printed too.
DESCRIBED=""
describe() {
  DESCRIBED=""
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "? " "$@"; return 1; fi
  if DESCRIBED="$("$@" 2>"${WORK_DIR}/stderr")"; then return 0; fi
  grep -qE "${ABSENT}" "${WORK_DIR}/stderr" && return 1
  { printf 'deploy.sh: stopped: could not look up:'; printf ' %q' "$@"; echo; cat "${WORK_DIR}/stderr"; } >&2
  exit 1
}
die() { echo "deploy.sh: $*" >&2; exit 1; }
section() { if [[ "${DRY_RUN}" == 1 ]]; then echo "# == $*"; else echo "== $*"; fi; }
# What a check found, where it matters to the reader (a dry run's lines are comments).
note() { if [[ "${DRY_RUN}" == 1 ]]; then echo "#   $*"; else echo "$*"; fi; }
# gcloud's first line on stderr, without its "ERROR: (gcloud.command) " head.
gcloud_said() { grep -m1 . "${WORK_DIR}/stderr" | sed 's/^ERROR: ([^)]*) //'; }

# --- preflight: every check, then stop before any change, naming what to run --------------------
PREFLIGHT=()
check() { # FIX command...: a read-only call that must succeed; its output in CHECKED
  local fix="$1"
  shift
  CHECKED=""
  if [[ "${DRY_RUN}" == 1 ]]; then print_cmd "? " "$@"; stops_if "it fails: ${fix}"; return 0; fi
  if CHECKED="$("$@" 2>"${WORK_DIR}/stderr" </dev/null)"; then return 0; fi
  PREFLIGHT+=("${fix} (gcloud: $(gcloud_said))")
  return 1
}

preflight_tools() {
  local tool
  stops_if "curl or python3 is missing (the Firestore rules are released with them)"
  for tool in curl python3; do # the Firebase Rules API's calls and their JSON
    [[ "${DRY_RUN}" == 1 ]] || command -v "${tool}" >/dev/null 2>&1 \
      || PREFLIGHT+=("${tool} not found: install it (the Firestore rules are released with curl and python3)")
  done
  if [[ "${DRY_RUN}" == 0 ]] && ! command -v gcloud >/dev/null 2>&1; then
    die "gcloud not found: install the Google Cloud CLI >= ${MIN_GCLOUD_VERSION} (https://cloud.google.com/sdk/docs/install); nothing was changed"
  fi
  if check "gcloud is older than ${MIN_GCLOUD_VERSION}, the version these commands were checked against: run 'gcloud components update' (or upgrade the google-cloud-cli package)" \
    gcloud version --format='value("Google Cloud SDK")' && [[ "${DRY_RUN}" == 0 ]] \
    && ! printf '%s\n%s\n' "${MIN_GCLOUD_VERSION}" "${CHECKED:-0}" | sort -V -C; then
    PREFLIGHT+=("gcloud ${CHECKED:-(unknown version)} is older than ${MIN_GCLOUD_VERSION}, the version these commands were checked against: run 'gcloud components update' (or upgrade the google-cloud-cli package)")
  fi
  check "gcloud's alpha track is missing (alert policies are managed with 'gcloud alpha monitoring policies'): run 'gcloud components install alpha' (Debian/RPM packages include it)" \
    gcloud alpha monitoring policies list --help || true
}

LOGGED_IN=0
preflight_credentials() { # a real run: LOGGED_IN=1 when gcloud's login works
  local login=0
  if check "gcloud has no usable login: run 'gcloud auth login'" gcloud auth print-access-token; then
    login=1
  fi
  check "no Application Default Credentials, which templates sync (the last step) writes Firestore with: run 'gcloud auth application-default login'" \
    gcloud auth application-default print-access-token || true
  CHECKED="" # a token: kept no longer than needed
  if [[ "${DRY_RUN}" == 0 ]]; then LOGGED_IN="${login}"; fi
}

# A dry run changes nothing, and asks Google Cloud one thing when gcloud has a login: Cloud Run's
# regions (check_region_listed). Without a login it says so, and what it could not check.
dry_run_credentials() {
  if command -v gcloud >/dev/null 2>&1 && gcloud auth print-access-token >/dev/null 2>&1 </dev/null; then
    LOGGED_IN=1
  else
    echo "# no gcloud login here ('gcloud auth print-access-token' fails): this dry run asks Google Cloud nothing, so REGION ${REGION} is checked by its form only, not against Cloud Run's regions; a real run would stop at this preflight"
  fi
}

region_hint() { # the listed regions: those of REGION's area, or where to find them all
  local area="${REGION%%-*}" alike
  alike="$(grep -E "^${area}-" <<<"$1" | paste -sd, - | sed 's/,/, /g')" || true
  if [[ -n "${alike}" ]]; then echo "Cloud Run's ${area}-* regions: ${alike}"; else echo "'gcloud run regions list' names them"; fi
}

# REGION among the regions Cloud Run lists for this project; when the list cannot be read (Cloud
# Run's API not enabled yet in a new project, which only this deploy enables), REGION stands on
# its form, and a line says so.
check_region_listed() {
  local regions
  print_cmd "? " gcloud run regions list --format="value(locationId)"
  stops_if "REGION ${REGION} is not among them (when the list cannot be read, REGION is checked by its form only)"
  ((LOGGED_IN)) || return 0 # a dry run without a login: dry_run_credentials said so
  if ! regions="$(gcloud run regions list --format="value(locationId)" 2>"${WORK_DIR}/stderr" </dev/null)"; then
    note "REGION ${REGION} is checked by its form only: Cloud Run's list of regions could not be read (gcloud: $(gcloud_said))"
  elif grep -qxF -- "${REGION}" <<<"${regions}"; then
    note "REGION ${REGION} is one of Cloud Run's regions"
  else
    PREFLIGHT+=("REGION: '${REGION}' is not a Cloud Run region ($(region_hint "${regions}"))")
  fi
}

preflight_project() { # with a login: the project, and the secret's version when no file makes one
  if check "project ${PROJECT_ID} cannot be read with this login: check PROJECT_ID, or ask for a role on it (deploy/README.md, 'What you need')" \
    gcloud projects describe "${PROJECT_ID}" --format="value(projectNumber)"; then
    PROJECT_NUMBER="${PROJECT_NUMBER:-${CHECKED}}"
    check_region_listed
  fi
  # Without ACCOUNTS_FILE the secret must hold a usable version already.
  if [[ -z "${ACCOUNTS_FILE}" ]] \
    && check "secret ${SECRET_NAME} has no version ${SECRET_VERSION:-latest} to deploy: set ACCOUNTS_FILE to create it" \
      gcloud secrets versions describe "${SECRET_VERSION:-latest}" --secret="${SECRET_NAME}" \
      --format="value(state)" \
    && [[ "${DRY_RUN}" == 0 && "${CHECKED}" != ENABLED ]]; then
    PREFLIGHT+=("secret ${SECRET_NAME}: version ${SECRET_VERSION:-latest} is ${CHECKED:-in no state}, not ENABLED: enable it, or set ACCOUNTS_FILE to add one")
  fi
}

preflight() {
  section "preflight: tools, gcloud's login, Application Default Credentials, project ${PROJECT_ID}, secret ${SECRET_NAME}"
  if [[ "${DRY_RUN}" == 1 ]]; then dry_run_credentials; fi
  preflight_tools
  preflight_credentials
  if ((LOGGED_IN)) || [[ "${DRY_RUN}" == 1 ]]; then preflight_project; fi
  if ((${#PREFLIGHT[@]} > 0)); then
    printf 'deploy.sh: %s\n' "${PREFLIGHT[@]}" >&2
    echo "deploy.sh: stopped before changing anything" >&2
    exit 1
  fi
  PROJECT_NUMBER="${PROJECT_NUMBER:-<PROJECT_NUMBER>}"
}

# --- the deploy, section by section ------------------------------------------------------------
enable_apis() {
  section "APIs"
  run gcloud services enable run.googleapis.com eventarc.googleapis.com \
    eventarcpublishing.googleapis.com firestore.googleapis.com storage.googleapis.com \
    secretmanager.googleapis.com artifactregistry.googleapis.com cloudbuild.googleapis.com \
    pubsub.googleapis.com logging.googleapis.com monitoring.googleapis.com \
    cloudscheduler.googleapis.com firebaserules.googleapis.com
}

ensure_database() {
  local db_type db_location
  section "Firestore database (default), Native mode, in ${FIRESTORE_LOCATION}"
  if describe gcloud firestore databases describe --database="(default)" \
    --format="value(type,locationId)"; then
    read -r db_type db_location <<<"${DESCRIBED}"
    [[ "${db_type}" == FIRESTORE_NATIVE ]] \
      || die "the (default) database is ${db_type}: Firestore triggers need a Native mode database"
    [[ "${db_location}" == "${FIRESTORE_LOCATION}" ]] \
      || die "the (default) database is in ${db_location}, not FIRESTORE_LOCATION=${FIRESTORE_LOCATION}: the triggers must live where the database is; set FIRESTORE_LOCATION=${db_location}"
  else
    stops_if "the (default) database exists in Datastore mode, or in a location other than ${FIRESTORE_LOCATION}"
    run gcloud firestore databases create --database="(default)" --location="${FIRESTORE_LOCATION}" \
      --type=firestore-native
  fi
}

# Firestore security rules (release_rules): the services use server credentials, which rules do
# not apply to; a client (a Firebase app, an end user's token, no token) is refused everything.
# The Firebase Rules API, as the Firebase CLI calls it: create a ruleset from the file, then
# point the release at it. A release that already points at a ruleset holding exactly the file
# is left alone (rulesets are immutable; a project keeps at most 2,500). The caller's gcloud
# token goes to curl on stdin, never on a command line; x-goog-user-project bills the calls to
# the project, as user credentials need.
RULES_TOKEN=""
rules_api() { # placeholder METHOD PATH [BODY]: the answer's JSON; ABSENT_RULES for a GET's 404
  local placeholder="$1" method="$2" url="${RULES_API}/$3" body="${4:-}" answer status
  local call=(curl --silent --show-error --request "${method}" --write-out '\n%{http_code}'
    --header "x-goog-user-project: ${PROJECT_ID}" --header "Content-Type: application/json")
  [[ -z "${body}" ]] || call+=(--data-binary "${body}")
  if [[ "${DRY_RUN}" == 1 ]]; then
    local mark=""
    [[ "${method}" == GET ]] && mark="? "
    print_cmd "${mark}" "${call[@]}" --header "Authorization: Bearer <gcloud auth print-access-token>" "${url}"
    printf '%s' "${placeholder}"
    [[ "${method}" == GET ]] && return "${ABSENT_RULES}" # a dry run takes a look-up as "absent"
    return 0
  fi
  answer="$(printf 'Authorization: Bearer %s\n' "${RULES_TOKEN}" | "${call[@]}" --header @- "${url}")" \
    || die "the Firebase Rules API could not be reached (${method} ${url})"
  status="${answer##*$'\n'}"
  answer="${answer%$'\n'*}"
  [[ "${status}" == 404 && "${method}" == GET ]] && return "${ABSENT_RULES}"
  [[ "${status}" == 200 ]] || die "the Firebase Rules API answered ${method} ${url} with HTTP ${status}: ${answer}"
  printf '%s' "${answer}"
}
json() { python3 -c "$1" "${@:2}"; } # a JSON answer on stdin, read by a line of Python
rules_source() { # the ruleset the file makes, as the API takes it
  json 'import json, sys; print(json.dumps({"source": {"files": [{"name": "firestore.rules", "content": open(sys.argv[1], encoding="utf-8").read()}]}}))' "${RULES_FILE}" </dev/null
}
name_of() { json 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
holds_the_file() { # a ruleset's JSON on stdin
  json 'import json, sys; files = json.load(sys.stdin)["source"]["files"]; sys.exit([f["content"] for f in files] != [open(sys.argv[1], encoding="utf-8").read()])' "${RULES_FILE}"
}
new_ruleset() {
  local created
  created="$(rules_api "<name of the ruleset just created>" POST "projects/${PROJECT_ID}/rulesets" "$(rules_source)")"
  if [[ "${DRY_RUN}" == 1 ]]; then printf '%s' "${created}"; else name_of name <<<"${created}"; fi
}

release_rules() {
  local release_name="projects/${PROJECT_ID}/releases/${RULES_RELEASE}" found=0 release ruleset current
  section "Firestore security rules (${RULES_FILE}): closed to every client SDK, released as ${RULES_RELEASE}"
  if [[ "${DRY_RUN}" == 0 ]]; then
    RULES_TOKEN="$(gcloud auth print-access-token)"
  else
    print_cmd "? " gcloud auth print-access-token
  fi
  release="$(rules_api "" GET "${release_name}")" || found=$?
  ((found == 0 || found == ABSENT_RULES)) || exit 1 # rules_api said why
  if ((found == 0)); then
    ruleset="$(name_of rulesetName <<<"${release}")"
    current="$(rules_api "" GET "${ruleset}")" \
      || die "ruleset ${ruleset}, which ${RULES_RELEASE} names, cannot be read"
    if holds_the_file <<<"${current}"; then
      echo "rules: ${RULES_RELEASE} already holds ${RULES_FILE} (${ruleset})"
    else
      ruleset="$(new_ruleset)"
      rules_api "" PATCH "${release_name}" \
        "{\"release\": {\"name\": \"${release_name}\", \"rulesetName\": \"${ruleset}\"}}" >/dev/null
      echo "rules: ${RULES_RELEASE} now holds ${RULES_FILE} (${ruleset})"
    fi
  else
    stops_if "the Firebase Rules API refuses a call (not enabled, or no roles/firebaserules.admin)"
    ruleset="$(new_ruleset)"
    rules_api "" POST "projects/${PROJECT_ID}/releases" \
      "{\"name\": \"${release_name}\", \"rulesetName\": \"${ruleset}\"}" >/dev/null
    [[ "${DRY_RUN}" == 1 ]] || echo "rules: ${RULES_RELEASE} created, holding ${RULES_FILE} (${ruleset})"
  fi
  RULES_TOKEN=""
}

ensure_service_accounts() {
  local sa
  section "service accounts"
  for sa in "${RUNTIME_SA_NAME}" "${FLOW_SA_NAME}" "${TRIGGER_SA_NAME}" "${SCHEDULER_SA_NAME}"; do
    describe gcloud iam service-accounts describe "${sa}@${PROJECT_ID}.iam.gserviceaccount.com" \
      || run gcloud iam service-accounts create "${sa}"
  done
}

build_image() { # unless IMAGE names one already built
  [[ "${BUILD_IMAGE}" == 1 ]] || return 0
  section "image ${IMAGE}"
  describe gcloud artifacts repositories describe "${AR_REPO}" --location="${REGION}" \
    || run gcloud artifacts repositories create "${AR_REPO}" --repository-format=docker \
      --location="${REGION}"
  # Cloud Build builds the Dockerfile remotely: no local Docker needed.
  run gcloud builds submit --tag "${IMAGE}" .
}

PUBLIC_ROLES=""
public_roles() { # the roles allUsers has on the bucket now, one per line, in PUBLIC_ROLES
  PUBLIC_ROLES=""
  if describe gcloud storage buckets get-iam-policy "gs://${CHARTS_BUCKET}" \
    --flatten="bindings[].members" --format="value(bindings.role,bindings.members)"; then
    PUBLIC_ROLES="$(awk -F'\t' '$2 == "allUsers" { print $1 }' <<<"${DESCRIBED}")"
  fi
}

ensure_public_bucket() {
  section "bucket gs://${CHARTS_BUCKET} (public read of known names, no listing: contract §13.6)"
  describe gcloud storage buckets describe "gs://${CHARTS_BUCKET}" \
    || run gcloud storage buckets create "gs://${CHARTS_BUCKET}" --location="${REGION}" \
      --uniform-bucket-level-access --no-public-access-prevention
  # legacyObjectReader = storage.objects.get only: whoever has a manifest's or PNG's URL reads
  # it, nobody can enumerate the runs. Earlier deploys granted objectViewer (which lists): taken
  # back. An organisation policy forbidding allUsers refuses this: PUBLIC_READ=false.
  run gcloud storage buckets add-iam-policy-binding "gs://${CHARTS_BUCKET}" \
    --member=allUsers --role=roles/storage.legacyObjectReader \
    || die "the bucket cannot be made public here (above: an organisation policy or the bucket's public access prevention refuses allUsers): deploy with PUBLIC_READ=false (deploy/README.md, \"The bucket\")"
  public_roles
  if grep -qx roles/storage.objectViewer <<<"${PUBLIC_ROLES}"; then
    run gcloud storage buckets remove-iam-policy-binding "gs://${CHARTS_BUCKET}" \
      --member=allUsers --role=roles/storage.objectViewer
  fi
}

ensure_private_bucket() {
  local role
  section "bucket gs://${CHARTS_BUCKET} (private, PUBLIC_READ=false: readers need a role on it or a signed URL)"
  if describe gcloud storage buckets describe "gs://${CHARTS_BUCKET}" \
    --format="value(public_access_prevention)"; then
    [[ "${DESCRIBED}" == enforced ]] \
      || run gcloud storage buckets update "gs://${CHARTS_BUCKET}" --public-access-prevention
  else
    run gcloud storage buckets create "gs://${CHARTS_BUCKET}" --location="${REGION}" \
      --uniform-bucket-level-access --public-access-prevention
  fi
  # what an earlier public deploy granted, taken back
  public_roles
  for role in ${PUBLIC_ROLES}; do
    run gcloud storage buckets remove-iam-policy-binding "gs://${CHARTS_BUCKET}" \
      --member=allUsers --role="${role}"
  done
}

ensure_bucket() {
  if [[ "${PUBLIC_READ}" == true ]]; then ensure_public_bucket; else ensure_private_bucket; fi
  # objectUser = create + delete + get, on this bucket only: overwriting manifest.json needs
  # delete, which objectCreator lacks. No project-wide storage role anywhere.
  run gcloud storage buckets add-iam-policy-binding "gs://${CHARTS_BUCKET}" \
    --member="serviceAccount:${RUNTIME_SA}" --role=roles/storage.objectUser
}

# The secret (sync_secret): the worker mounts one numbered version, never `latest`:
# SECRET_VERSION, else the latest, which must hold ACCOUNTS_FILE's bytes (a version is added when
# it does not). Before any service uses it, that version is read back: ENABLED, holding those
# bytes, and taken by the worker's own accounts parser (a version it refuses would stop every
# instance at start-up).
latest_version() {
  capture "<latest version of ${SECRET_NAME}, read back below>" gcloud secrets versions describe \
    latest --secret="${SECRET_NAME}" --format="value(name.basename())"
}
read_version() { # number: its bytes in ${WORK_DIR}/accounts.json (a real run only)
  gcloud secrets versions access "$1" --secret="${SECRET_NAME}" \
    --out-file="${WORK_DIR}/accounts.json" >/dev/null
}

pin_secret_version() { # SECRET_PINNED: the version the worker will mount
  local created=0
  if ! describe gcloud secrets describe "${SECRET_NAME}" && [[ -n "${ACCOUNTS_FILE}" ]]; then
    # (without ACCOUNTS_FILE the preflight found a version: a real run does not get here)
    run gcloud secrets create "${SECRET_NAME}" --replication-policy=automatic \
      --data-file="${ACCOUNTS_FILE}"
    created=1
  fi
  SECRET_PINNED="${SECRET_VERSION}"
  [[ -z "${SECRET_PINNED}" ]] || return 0
  SECRET_PINNED="$(latest_version)"
  if [[ -n "${ACCOUNTS_FILE}" && "${created}" == 0 && "${DRY_RUN}" == 0 ]]; then
    read_version "${SECRET_PINNED}"
    if ! cmp -s "${WORK_DIR}/accounts.json" "${ACCOUNTS_FILE}"; then
      run gcloud secrets versions add "${SECRET_NAME}" --data-file="${ACCOUNTS_FILE}"
      SECRET_PINNED="$(latest_version)"
    fi
  fi
}

print_secret_check() { # a dry run's account of verify_secret_version
  local bytes=""
  print_cmd "? " gcloud secrets versions describe "${SECRET_PINNED}" --secret="${SECRET_NAME}" \
    --format="value(state)"
  print_cmd "? " gcloud secrets versions access "${SECRET_PINNED}" --secret="${SECRET_NAME}" \
    --out-file="<a file of deploy.sh's, deleted after the check>"
  [[ -z "${ACCOUNTS_FILE}" ]] || bytes=", does not hold ACCOUNTS_FILE's bytes,"
  stops_if "that version is not ENABLED${bytes} or the worker's accounts parser refuses it"
}

verify_secret_version() {
  local state refusal
  if [[ "${DRY_RUN}" == 1 ]]; then print_secret_check; return 0; fi
  state="$(gcloud secrets versions describe "${SECRET_PINNED}" --secret="${SECRET_NAME}" --format="value(state)")"
  [[ "${state}" == ENABLED ]] \
    || die "version ${SECRET_PINNED} of secret ${SECRET_NAME} is ${state:-in no state}, not ENABLED: enable it, or deploy another (ACCOUNTS_FILE, SECRET_VERSION)"
  read_version "${SECRET_PINNED}"
  if [[ -n "${ACCOUNTS_FILE}" ]] && ! cmp -s "${WORK_DIR}/accounts.json" "${ACCOUNTS_FILE}"; then
    die "version ${SECRET_PINNED} of secret ${SECRET_NAME} does not hold ACCOUNTS_FILE's bytes (a version added meanwhile?): run deploy.sh again"
  fi
  if ! refusal="$("${WCE}" accounts --check-file "${WORK_DIR}/accounts.json" 2>&1 >/dev/null)"; then
    refusal="$(grep -m1 . <<<"${refusal}")"
    die "version ${SECRET_PINNED} of secret ${SECRET_NAME} is refused by the worker's accounts parser: ${refusal##*"${WORK_DIR}/accounts.json": }"
  fi
  rm -f "${WORK_DIR}/accounts.json"
  echo "secret ${SECRET_NAME}: version ${SECRET_PINNED} read back: ENABLED, the accounts the worker takes"
}

sync_secret() {
  section "secret ${SECRET_NAME}: the version the worker mounts, read back first"
  pin_secret_version
  verify_secret_version
  run gcloud secrets add-iam-policy-binding "${SECRET_NAME}" \
    --member="serviceAccount:${RUNTIME_SA}" --role=roles/secretmanager.secretAccessor
}

grant_firestore_access() {
  local sa
  section "Firestore access (claim/finalize, usage transactions, advance_flow, reaper)"
  # Firestore has no narrower IAM scope than the project's database.
  for sa in "${RUNTIME_SA}" "${FLOW_SA}"; do
    run gcloud projects add-iam-policy-binding "${PROJECT_ID}" \
      --member="serviceAccount:${sa}" --role=roles/datastore.user --condition=None
  done
}

ensure_reaper_index() {
  section "Firestore index for the reaper's query (deploy/firestore.indexes.json)"
  # step_leases where expiresAt <= now, ordered by it: a single-field index, kept explicit so
  # an exemption elsewhere cannot drop it.
  run gcloud firestore indexes fields update expiresAt --database="(default)" \
    --collection-group=step_leases --index=order=ASCENDING --async
}

# Every service: from the one image, as its own account, internal traffic only, no public invoker.
deploy_service() { # service account flag...
  run gcloud run deploy "$1" \
    --image="${IMAGE}" \
    --region="${REGION}" \
    --service-account="$2" \
    --no-allow-unauthenticated \
    --ingress=internal \
    "${@:3}"
}

deploy_worker() {
  section "Cloud Run service ${SERVICE} (the worker)"
  deploy_service "${SERVICE}" "${RUNTIME_SA}" \
    --concurrency="${CONCURRENCY}" \
    --max-instances="${MAX_INSTANCES}" \
    --min-instances="${MIN_INSTANCES}" \
    --timeout="${REQUEST_TIMEOUT_SECONDS}" \
    --cpu="${CPU}" --memory="${MEMORY}" \
    --cpu-boost \
    --execution-environment=gen2 \
    --set-secrets="CHART_IMG_ACCOUNTS_JSON=${SECRET_NAME}:${SECRET_PINNED}" \
    --set-env-vars="${WORKER_ENV}"
}

# advance_flow and the reaper: the worker's image, serving another function, as the flow's account.
deploy_flow_service() { # service target concurrency max-instances timeout [flag...]
  deploy_service "$1" "${FLOW_SA}" \
    --command=worker-chart-export \
    --args=serve,--target="$2" \
    --concurrency="$3" \
    --max-instances="$4" \
    --timeout="$5" \
    --cpu=1 --memory=512Mi \
    "${@:6}" \
    --execution-environment=gen2 \
    --set-env-vars="${FLOW_ENV}"
}

deploy_advance_flow() {
  section "Cloud Run service ${ADVANCE_SERVICE} (advance_flow, CloudEvent)"
  deploy_flow_service "${ADVANCE_SERVICE}" advance_flow "${ADVANCE_CONCURRENCY}" \
    "${ADVANCE_MAX_INSTANCES}" "${ADVANCE_TIMEOUT_SECONDS}" --cpu-boost
}

deploy_reaper() { # one reap at a time: one request, one instance
  section "Cloud Run service ${REAPER_SERVICE} (reap_expired_leases, HTTP)"
  deploy_flow_service "${REAPER_SERVICE}" reap_expired_leases 1 1 "${REAPER_TIMEOUT_SECONDS}"
}

wanted_trigger() { # service event-type: TRIGGER_FORMAT's lines for the trigger deploy.sh wants
  local rest="$1"$'\t'"${REGION}"$'\t'"${TRIGGER_SA}"$'\tapplication/protobuf'
  printf '%s\t\t%s\t%s\n' database "(default)" "${rest}" type "$2" "${rest}"
  printf 'document\tmatch-path-pattern\tflow_runs/{runId}\t%s\n' "${rest}"
}
trigger_flags() { # service event-type: what `create` and `update` both take
  TRIGGER_FLAGS=(--location="${FIRESTORE_LOCATION}"
    --destination-run-service="$1" --destination-run-region="${REGION}"
    --event-filters="type=$2" --event-filters="database=(default)"
    --event-filters-path-pattern="document=flow_runs/{runId}"
    --event-data-content-type="application/protobuf" --service-account="${TRIGGER_SA}")
}
sync_trigger() { # name service event-type
  trigger_flags "$2" "$3"
  if ! describe gcloud eventarc triggers describe "$1" --location="${FIRESTORE_LOCATION}" \
    --flatten=eventFilters --format="${TRIGGER_FORMAT}"; then
    run gcloud eventarc triggers create "$1" "${TRIGGER_FLAGS[@]}"
    return
  fi
  local have want have_type
  have="$(sort <<<"${DESCRIBED}")"
  want="$(wanted_trigger "$2" "$3" | sort)"
  [[ "${have}" == "${want}" ]] && { echo "trigger $1: as wanted"; return; }
  have_type="$(awk -F'\t' '$1 == "type" { print $3 }' <<<"${have}")"
  if [[ "${have_type}" == "$3" ]]; then
    run gcloud eventarc triggers update "$1" "${TRIGGER_FLAGS[@]}"
  else
    # `gcloud eventarc triggers update` cannot change a trigger's event type: delete and create.
    # Events written in between (and until the new trigger is active, up to 2 minutes) do not
    # reach $2; deploy/README.md, "Re-deploying", says how to catch up.
    echo "trigger $1: event type ${have_type:-none} -> $3: deleting it and creating it again"
    run gcloud eventarc triggers delete "$1" --location="${FIRESTORE_LOCATION}"
    run gcloud eventarc triggers create "$1" "${TRIGGER_FLAGS[@]}"
  fi
}

sync_triggers() {
  local svc
  section "Eventarc triggers (${FIRESTORE_LOCATION})"
  # The trigger identity may invoke the two event-driven services and nothing else.
  for svc in "${SERVICE}" "${ADVANCE_SERVICE}"; do
    run gcloud run services add-iam-policy-binding "${svc}" --region="${REGION}" \
      --member="serviceAccount:${TRIGGER_SA}" --role=roles/run.invoker
  done
  run gcloud projects add-iam-policy-binding "${PROJECT_ID}" \
    --member="serviceAccount:${TRIGGER_SA}" --role=roles/eventarc.eventReceiver --condition=None
  # PROJECT_NUMBER: given, or read by the preflight's look-up of the project.
  PUBSUB_AGENT="service-${PROJECT_NUMBER}@gcp-sa-pubsub.iam.gserviceaccount.com"
  # Projects created before 8 April 2021 need this for Pub/Sub to mint the trigger's OIDC tokens;
  # granted on the trigger account only (not project-wide), harmless where it is not needed.
  run gcloud iam service-accounts add-iam-policy-binding "${TRIGGER_SA}" \
    --member="serviceAccount:${PUBSUB_AGENT}" --role=roles/iam.serviceAccountTokenCreator
  sync_trigger "${TRIGGER_NAME}" "${SERVICE}" "${WORKER_EVENT_TYPE}"
  sync_trigger "${ADVANCE_TRIGGER_NAME}" "${ADVANCE_SERVICE}" "${ADVANCE_EVENT_TYPE}"
}

# Each trigger's subscription: its acknowledgement deadline is its service's request timeout (a
# push is redelivered when unanswered by then), then the dead-letter policy.
sync_subscription() { # trigger ack-deadline
  local subscription want
  subscription="$(capture "<subscription of $1>" gcloud eventarc triggers describe "$1" \
    --location="${FIRESTORE_LOCATION}" --format="value(transport.pubsub.subscription)")"
  want="$2"$'\t'"projects/${PROJECT_ID}/topics/${DEAD_LETTER_TOPIC}"$'\t'"${MAX_DELIVERY_ATTEMPTS}"
  if ! describe gcloud pubsub subscriptions describe "${subscription}" --format="value(ackDeadlineSeconds,deadLetterPolicy.deadLetterTopic,deadLetterPolicy.maxDeliveryAttempts)" \
    && [[ "${DRY_RUN}" == 0 ]]; then
    die "the subscription of trigger $1 (${subscription}) was not found"
  fi
  [[ "${DESCRIBED}" == "${want}" ]] \
    || run gcloud pubsub subscriptions update "${subscription}" --ack-deadline="$2" \
      --dead-letter-topic="${DEAD_LETTER_TOPIC}" --max-delivery-attempts="${MAX_DELIVERY_ATTEMPTS}"
  run gcloud pubsub subscriptions add-iam-policy-binding "${subscription}" \
    --member="serviceAccount:${PUBSUB_AGENT}" --role=roles/pubsub.subscriber
}

sync_dead_letters() {
  section "dead-letter topic ${DEAD_LETTER_TOPIC}; the triggers' subscriptions"
  # Eventarc retries a failing delivery for 24 h, then drops it: a crashing defect must leave a
  # trace. The hold subscription keeps dead letters for 7 days to inspect or replay (an alert
  # below fires while it holds any).
  describe gcloud pubsub topics describe "${DEAD_LETTER_TOPIC}" \
    || run gcloud pubsub topics create "${DEAD_LETTER_TOPIC}"
  describe gcloud pubsub subscriptions describe "${DEAD_LETTER_HOLD}" \
    || run gcloud pubsub subscriptions create "${DEAD_LETTER_HOLD}" \
      --topic="${DEAD_LETTER_TOPIC}" --message-retention-duration=7d --expiration-period=never
  run gcloud pubsub topics add-iam-policy-binding "${DEAD_LETTER_TOPIC}" \
    --member="serviceAccount:${PUBSUB_AGENT}" --role=roles/pubsub.publisher
  sync_subscription "${TRIGGER_NAME}" "${WORKER_ACK_DEADLINE}"
  sync_subscription "${ADVANCE_TRIGGER_NAME}" "${ADVANCE_ACK_DEADLINE}"
}

schedule_reaper() {
  local reaper_url verb=create
  section "reaper schedule ${REAPER_JOB} (${REAPER_SCHEDULE}), Cloud Scheduler -> HTTP with OIDC"
  run gcloud run services add-iam-policy-binding "${REAPER_SERVICE}" --region="${REGION}" \
    --member="serviceAccount:${SCHEDULER_SA}" --role=roles/run.invoker
  reaper_url="$(capture "<url of ${REAPER_SERVICE}>" gcloud run services describe \
    "${REAPER_SERVICE}" --region="${REGION}" --format="value(status.url)")"
  if describe gcloud scheduler jobs describe "${REAPER_JOB}" --location="${SCHEDULER_LOCATION}"; then
    verb=update
  fi
  run gcloud scheduler jobs "${verb}" http "${REAPER_JOB}" \
    --location="${SCHEDULER_LOCATION}" \
    --schedule="${REAPER_SCHEDULE}" \
    --time-zone=Etc/UTC \
    --uri="${reaper_url}" \
    --http-method=POST \
    --oidc-service-account-email="${SCHEDULER_SA}" \
    --oidc-token-audience="${reaper_url}" \
    --attempt-deadline="${REAPER_TIMEOUT_SECONDS}s"
}

sync_metrics() {
  local config metric
  for config in deploy/monitoring/*.metric.json; do
    metric="$(basename "${config}" .metric.json)"
    if describe gcloud logging metrics describe "${metric}"; then
      run gcloud logging metrics update "${metric}" --config-from-file="${config}"
    else
      run gcloud logging metrics create "${metric}" --config-from-file="${config}"
    fi
  done
}

# Alert policies: only gcloud's alpha track has them. A policy is found by its display name and
# replaced from its file (the file, and NOTIFICATION_CHANNELS, are the truth). Files may name
# the dead-letter hold subscription as ${DEAD_LETTER_HOLD}.
sync_policies() {
  local create_channels=() update_channels=() template policy display_name existing
  if [[ -n "${NOTIFICATION_CHANNELS}" ]]; then
    create_channels=(--notification-channels="${NOTIFICATION_CHANNELS}")
    update_channels=(--set-notification-channels="${NOTIFICATION_CHANNELS}")
  fi
  for template in deploy/monitoring/*.policy.json; do
    policy="${template}"
    if grep -qF "\${DEAD_LETTER_HOLD}" "${template}"; then
      policy="${RENDERED}/$(basename "${template}")"
      sed "s/\${DEAD_LETTER_HOLD}/${DEAD_LETTER_HOLD}/g" "${template}" >"${policy}"
    fi
    display_name="$(sed -n 's/^  "displayName": "\(.*\)",$/\1/p' "${policy}")"
    existing="$(capture "" gcloud alpha monitoring policies list \
      --filter="displayName=\"${display_name}\"" --format="value(name)")"
    stops_if "several alert policies are named '${display_name}'"
    if [[ "${existing}" == *$'\n'* ]]; then
      die "several alert policies are named '${display_name}': delete all but one (${existing//$'\n'/, })"
    elif [[ -n "${existing}" ]]; then
      run gcloud alpha monitoring policies update "${existing}" --policy-from-file="${policy}" \
        "${update_channels[@]}"
    else
      run gcloud alpha monitoring policies create --policy-from-file="${policy}" "${create_channels[@]}"
    fi
  done
}

sync_monitoring() {
  section "log-based metrics and alert policies (deploy/monitoring/)"
  sync_metrics
  sync_policies
}

# The dashboard (sync_dashboard): GA since long before MIN_GCLOUD_VERSION. The file names the
# dashboard (projects/${PROJECT_ID}/dashboards/${DASHBOARD_ID}: create takes the id from it), so a
# re-deploy finds it and replaces it from the file. The API takes an update only with the etag of
# the version it replaces (it refuses an empty one), read just before: a dashboard edited
# meanwhile is refused, not overwritten.
dashboard_config() { # [etag]
  sed -n '1p' "deploy/monitoring/${DASHBOARD_FILE}"
  [[ -z "${1:-}" ]] || printf '  "etag": "%s",\n' "$1"
  sed -e '1d' -e "s|\${PROJECT_ID}|${PROJECT_ID}|g" -e "s|\${DASHBOARD_ID}|${DASHBOARD_ID}|g" \
    "deploy/monitoring/${DASHBOARD_FILE}"
}

sync_dashboard() {
  local dashboard="${RENDERED}/${DASHBOARD_FILE}"
  section "dashboard ${DASHBOARD_ID} (deploy/monitoring/${DASHBOARD_FILE})"
  if describe gcloud monitoring dashboards describe "${DASHBOARD_ID}" --format="value(etag)"; then
    [[ "${DESCRIBED}" =~ ^[A-Za-z0-9_=-]+$ ]] \
      || die "dashboard ${DASHBOARD_ID}: unexpected etag '${DESCRIBED}'"
    dashboard_config "${DESCRIBED}" >"${dashboard}"
    run gcloud monitoring dashboards update "${DASHBOARD_ID}" --config-from-file="${dashboard}"
  else
    dashboard_config >"${dashboard}"
    run gcloud monitoring dashboards create --config-from-file="${dashboard}"
  fi
}

sync_templates() {
  section "chart templates -> Firestore chart_templates/ (Application Default Credentials)"
  # The real project's Firestore, whatever emulator the shell may point at.
  run env -u FIRESTORE_EMULATOR_HOST GOOGLE_CLOUD_PROJECT="${PROJECT_ID}" \
    CHART_IMG_PLAN="${CHART_IMG_PLAN}" "${WCE}" templates sync --dir "${TEMPLATES_DIR}"
}

finish() {
  section "done: ${SERVICE} (${IMAGE}) <- ${TRIGGER_NAME}; artifacts in gs://${CHARTS_BUCKET}/charts/"
  if [[ "${DRY_RUN}" == 1 ]]; then
    echo "# the files above that deploy.sh fills in before gcloud reads them are kept in ${RENDERED}/"
  fi
}

main() {
  parse_args "$@"
  resolve_configuration
  if [[ "${PRINT_CONFIG}" == 1 ]]; then print_configuration; exit 0; fi
  check_configuration
  prepare_run
  preflight
  enable_apis
  ensure_database
  release_rules
  ensure_service_accounts
  build_image
  ensure_bucket
  sync_secret
  grant_firestore_access
  ensure_reaper_index
  deploy_worker
  deploy_advance_flow
  deploy_reaper
  sync_triggers
  sync_dead_letters
  schedule_reaper
  sync_monitoring
  sync_dashboard
  sync_templates
  finish
}

main "$@"
