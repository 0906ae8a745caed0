#!/usr/bin/env bash
# Build the pinned MinIO server (the real S3 endpoint of the staging tests) into
# the tool cache outside the work tree. Idempotent: nothing is rebuilt when the
# pinned version is already there. About three minutes on two cores when cold.
# Usage: hack/build-minio.sh            (prints the path of the binary on success)
set -euo pipefail

# MinIO tags are not semver; this pseudo-version builds with go install here.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
BIN="$CACHE/bin"
mkdir -p "$BIN"
export GOFLAGS="${GOFLAGS:--trimpath}" CGO_ENABLED=0

log() { printf '[build-minio] %s\n' "$*" >&2; }

if [ -x "$BIN/minio" ] && [ "$(cat "$BIN/.minio.version" 2>/dev/null)" = "$MINIO_VERSION" ]; then
  echo "$BIN/minio"
  exit 0
fi
command -v go >/dev/null || { log "Go is required (https://go.dev/dl)"; exit 1; }
log "building minio $MINIO_VERSION (go install; about three minutes when cold)"
GOBIN="$BIN" go install "github.com/minio/minio@$MINIO_VERSION"
echo "$MINIO_VERSION" > "$BIN/.minio.version"
log "minio ready in $BIN"
echo "$BIN/minio"
