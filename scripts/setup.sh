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
