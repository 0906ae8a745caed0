#!/usr/bin/env bash
# System packages the integration tests use for real. Idempotent.
set -euo pipefail
here="$(dirname "$0")"
bash "$here/install-xrootd.sh"
bash "$here/build-minio.sh" >/dev/null
