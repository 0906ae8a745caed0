#!/usr/bin/env bash
# make image-gateway: the dask-gateway image (images/gateway/Containerfile) on the
# Python base that `make images` builds, in the same buildah storage and by the same
# rules (wheels fetched on the host and installed with --no-index; an OCI archive
# keyed by its inputs, ${SWITCHYARD_CACHE:-~/.cache/switchyard}/images/oci/gateway.{tar,key}).
# A separate script, so that `make images` (run by `make test`) does not pay for it
# and its keys do not move with this image.
# Every build is checked: the image's own python imports switchyard.gateway.backend
# and its dask-gateway-server loads that backend from a gateway config.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}"
IMAGES="$CACHE/images"
OCI="$IMAGES/oci"
REGISTRY="${REGISTRY:-localhost}"
REGISTRY="${REGISTRY%/}"
PUSH="${PUSH:-0}"
PUSH_TLS_VERIFY="${PUSH_TLS_VERIFY:-true}"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/operator/pyproject.toml" | head -n1)"
# Built under localhost/ as hack/build-images.sh builds its images; PUSH=1 pushes it to REGISTRY.
BASE="localhost/switchyard-python:3.11-bookworm"
TAG="localhost/switchyard-gateway:$VERSION"
WHEELS="$IMAGES/wheels-gateway"
B=(buildah --storage-driver vfs --root "$IMAGES/storage" --runroot "$IMAGES/runroot")
say() { printf '[image-gateway] %s\n' "$*" >&2; }

[ -f "$OCI/python.key" ] || { say "no Python base: run make images first"; exit 1; }
exec 9>"$IMAGES/.lock"
flock 9
"${B[@]}" inspect --type image "$BASE" >/dev/null 2>&1 || "${B[@]}" pull -q "oci-archive:$OCI/python.tar" >/dev/null

# switchyard[gateway]'s dependencies (dask-gateway-server with its proxy binary,
# kubernetes_asyncio), keyed by pyproject.toml.
wheels_key="$(sha256sum "$REPO/operator/pyproject.toml" | cut -c1-16)"
if [ "$(cat "$WHEELS/.key" 2>/dev/null)" != "$wheels_key" ]; then
  say "wheels: pip wheel 'switchyard[gateway]'"
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  src="$(mktemp -d)"
  cp -a "$REPO/operator" "$src/operator"
  rm -rf "$src/operator"/*.egg-info "$src/operator/build"
  python3 -m pip wheel -q -w "$WHEELS" "$src/operator[gateway]" "setuptools>=77" wheel
  rm -f "$WHEELS"/switchyard-*.whl
  rm -rf "$src"
  echo "$wheels_key" > "$WHEELS/.key"
fi

# The build context: the Containerfile and the operator package without its tests.
ctx="$IMAGES/context/gateway"
rm -rf "$ctx" && mkdir -p "$ctx/images/gateway"
cp "$REPO/images/gateway/Containerfile" "$ctx/images/gateway/"
cp -a "$REPO/operator" "$ctx/operator"
rm -rf "$ctx/operator/tests"
find "$ctx" \( -name __pycache__ -o -name '*.egg-info' -o -name .pytest_cache -o -name build \) -prune -exec rm -rf {} +
key="$( (cd "$ctx" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum;
        echo "$(cat "$OCI/python.key") $wheels_key $TAG") | sha256sum | cut -c1-16)"

if [ -f "$OCI/gateway.tar" ] && [ "$(cat "$OCI/gateway.key" 2>/dev/null)" = "$key" ]; then
  say "inputs unchanged ($key), reusing $OCI/gateway.tar"
  "${B[@]}" inspect --type image "$TAG" >/dev/null 2>&1 || "${B[@]}" pull -q "oci-archive:$OCI/gateway.tar" >/dev/null
else
  say "building $TAG ($key)"
  start=$(date +%s)
  "${B[@]}" bud --quiet --isolation chroot --network host --layers=false -f "$ctx/images/gateway/Containerfile" \
    -t "$TAG" --build-arg "BASE=$BASE" --build-arg "PIP_INSTALL_OPTIONS=--no-index --find-links /wheels" \
    -v "$WHEELS:/wheels:ro" "$ctx" >/dev/null
  rm -f "$OCI/gateway.tar" "$OCI/gateway.key"
  "${B[@]}" push -q "$TAG" "oci-archive:$OCI/gateway.tar.tmp:$TAG" >/dev/null
  mv "$OCI/gateway.tar.tmp" "$OCI/gateway.tar"
  echo "$key" > "$OCI/gateway.key"
  seconds=$(( $(date +%s) - start ))
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" gateway "$TAG" "$key" "$seconds" \
    "$(stat -c %s "$OCI/gateway.tar")" >> "$IMAGES/report.tsv"
  say "built in ${seconds}s: $OCI/gateway.tar ($(stat -c %s "$OCI/gateway.tar") bytes)"
fi

# The check, inside the image as its user runs it: the backend imports, and the
# gateway's entrypoint loads SwitchyardBackend and gets as far as its setup, which
# refuses to start without a facility (the error names the setting).
ctr="$("${B[@]}" from -q "$TAG")"
trap '"${B[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
"${B[@]}" run --isolation chroot "$ctr" -- python -c \
  'import switchyard.gateway.backend as b, dask_gateway_server as s; print("switchyard.gateway.backend", b.SwitchyardBackend.__mro__[1].__module__, "dask-gateway-server", s.__version__)'
"${B[@]}" run --isolation chroot "$ctr" -- sh -c 'test -x "$(python -c "import dask_gateway_server.proxy.core as p, os; print(os.path.join(os.path.dirname(p.__file__), \"dask-gateway-proxy\"))")" && echo "dask-gateway-proxy present"'
out="$("${B[@]}" run --isolation chroot "$ctr" -- sh -c \
  'printf "c.DaskGateway.backend_class = \"switchyard.gateway.backend.SwitchyardBackend\"\nc.DaskGateway.address = \"127.0.0.1:0\"\nc.Proxy.address = \"127.0.0.1:0\"\n" > /tmp/gw.py && cd /tmp && dask-gateway-server -f /tmp/gw.py' 2>&1 || true)"
if ! grep -q "c.SwitchyardBackend.facility must name the AnalysisFacility" <<<"$out"; then
  say "the image's dask-gateway-server did not load SwitchyardBackend:"; echo "$out" >&2; exit 1
fi
say "check passed: dask-gateway-server in the image loads SwitchyardBackend (stopped at its facility check, as configured)"

if [ "$PUSH" = 1 ]; then
  [ "$REGISTRY" != localhost ] || { say "PUSH=1 needs REGISTRY=host/path"; exit 1; }
  "${B[@]}" push --tls-verify="$PUSH_TLS_VERIFY" "$TAG" "docker://$REGISTRY/switchyard-gateway:$VERSION"
fi
