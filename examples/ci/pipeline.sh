#!/usr/bin/env bash
# ascendctl in CI on a jump host: preflight -> deploy -> status -> bench, with JUnit and
# JSON reports for every stage; `doctor` collects a support bundle (run it when a stage
# failed). The GitLab CI and GitHub Actions examples next to this file call it one stage
# per job/step; tests/lab/test_ci_pipeline_lab.py runs it on the lab end to end.
#
#   examples/ci/pipeline.sh STAGE...        STAGE: preflight deploy status bench doctor
#
# Environment (never arguments - CI masks variables, not command lines):
#   ASCENDCTL_INVENTORY   the inventory (required)
#   ASCENDCTL_SSH_KEY     private key file for every node (e.g. a GitLab "file" variable);
#                         or leave it unset and load a key into ssh-agent
#   ASCENDCTL_KNOWN_HOSTS known_hosts file with the nodes' host keys (strict checking)
#   the API key           the variable (or 0600 file) the inventory's serving.api_key names
#   ASCENDCTL             the command to run (default: ascendctl)
#   REPORTS               where reports go (default: reports)
#   BENCH_ARGS            extra `bench` arguments, e.g. "--input-len 512 --output-len 256"
# Nothing prompts: stdin is closed and deploy gets --yes (ASCENDCTL_YES=1 works too).
#
# Exit status: the failing stage's ascendctl exit code (see docs/operations.md);
# preflight warnings (3) and doctor findings (1, 3) do not fail the stage.
set -euo pipefail

ASCENDCTL=${ASCENDCTL:-ascendctl}
REPORTS=${REPORTS:-reports}
read -r -a bench_args <<< "${BENCH_ARGS:-}"
: "${ASCENDCTL_INVENTORY:?set ASCENDCTL_INVENTORY to the inventory file}"
export ASCENDCTL_INVENTORY ASCENDCTL_PLAIN=${ASCENDCTL_PLAIN:-1}
mkdir -p "$REPORTS"

# run NAME ALLOWED_CODES CMD...: stdout (JSON) to $REPORTS/NAME.json, stderr to the log
run() {
  local name=$1 allowed=$2 code=0
  shift 2
  echo "== ascendctl $name" >&2
  "$@" < /dev/null > "$REPORTS/$name.json" || code=$?
  if [[ " $allowed " == *" $code "* ]]; then
    echo "== $name: exit $code (ok)" >&2
    return 0
  fi
  echo "== $name: FAILED with exit $code; reports in $REPORTS/" >&2
  return "$code"
}

stage() {
  case "$1" in
    preflight) run preflight "0 3" "$ASCENDCTL" preflight --json --junit "$REPORTS/preflight.xml" ;;
    deploy)    run deploy "0" "$ASCENDCTL" deploy --yes --json --junit "$REPORTS/deploy.xml" ;;
    status)    run status "0" "$ASCENDCTL" status --json ;;
    bench)     run bench "0" "$ASCENDCTL" bench "${bench_args[@]}" --json --junit "$REPORTS/bench.xml" ;;
    doctor)    run doctor "0 1 3" "$ASCENDCTL" doctor --json --bundle "$REPORTS/doctor.tar.gz" ;;
    *) echo "pipeline.sh: unknown stage '$1' (preflight deploy status bench doctor)" >&2; return 2 ;;
  esac
}

[ $# -gt 0 ] || set -- preflight deploy status bench
for name in "$@"; do
  stage "$name"
done
