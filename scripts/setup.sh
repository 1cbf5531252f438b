#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine; cheap when already done.
set -euo pipefail
PY=${1:-.venv/bin/python}
need=()
for cmd in ip:iproute2 unshare:util-linux setpriv:util-linux sysctl:procps; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd##*:}")
done
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  else
    echo "missing Debian packages: ${need[*]} (run as root or install them)" >&2; exit 1
  fi
fi
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -e '.[test]'
# The image test (tests/integration/deploy/test_d12_image_contents.py) installs requirements.lock
# the way the Containerfile does, but offline: it needs this host's wheels of the lock in a
# wheelhouse. An offline pass finds them when they are there already (no network, about a
# second); only a missing or stale wheel goes to PyPI.
cache=${LOCAL_CCM_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/local-ccm-test}
wheels=(--require-hashes --only-binary=:all: -r requirements.lock -d "$cache/wheels")
if ! "$PY" -m pip download -q --no-index --find-links "$cache/wheels" "${wheels[@]}" \
    >/dev/null 2>&1; then
  "$PY" -m pip download -q "${wheels[@]}"
fi
