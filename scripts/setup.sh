#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine; cheap when already done.
set -euo pipefail
PY=${1:-.venv/bin/python}
need=()
# The next five build and run the image (`make image`, `make test`): a root file system from
# Debian's archive, an OCI runtime, and tools that read OCI images. The rest run the real-node
# tier (tests/realnode): containerd, what the kubelet calls at run time, and gcc for the pause
# program (static, so also libc6-dev below). Then two publish and run the release: the CNCF
# distribution registry on loopback (`make publish` in tests) and qemu for the arm64 image. The
# last, arping, is the client of the L2 announcement tests (tests/netns/announce).
for cmd in ip:iproute2 unshare:util-linux setpriv:util-linux nsenter:util-linux sysctl:procps \
    mmdebstrap:mmdebstrap runc:runc umoci:umoci skopeo:skopeo dpkg-deb:dpkg \
    containerd:containerd ctr:containerd conntrack:conntrack ebtables:ebtables ethtool:ethtool \
    socat:socat iptables:iptables gcc:gcc docker-registry:docker-registry \
    qemu-aarch64-static:qemu-user-static arping:iputils-arping; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd##*:}")
done
# Packages without a command on PATH: the CNI plugins (bridge, host-local, loopback) and libc.a.
for pkg in containernetworking-plugins libc6-dev; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ] || need+=("$pkg")
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
# The project's wheel is built with exactly these (hash-pinned) setuptools and wheel.
"$PY" -m pip install -q --require-hashes -r requirements-build.lock
# `make image` installs requirements.lock into the image with the pip of requirements-build.lock,
# offline: it needs the wheels of both locks in a wheelhouse. An offline pass finds them when
# they are there already (no network, about a second); only a missing or stale wheel goes to
# PyPI.
cache=${LOCAL_CCM_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/local-ccm-test}
# The image is built for linux/amd64 and linux/arm64 whatever this machine is, so the runtime
# wheels come for both, with the manylinux tags bookworm's glibc 2.36 accepts (scripts/lock.py's
# platforms()); the build tools are pure Python.
tags() {
  local minor
  for minor in $(seq 36 -1 17); do printf -- '--platform\nmanylinux_2_%s_%s\n' "$minor" "$1"; done
  printf -- '--platform\nmanylinux2014_%s\n--python-version\n3.11\n--implementation\ncp\n' "$1"
}
for lock in requirements.lock:x86_64 requirements.lock:aarch64 requirements-build.lock:; do
  mapfile -t platform < <([ -n "${lock#*:}" ] && tags "${lock#*:}")
  wheels=(--require-hashes --only-binary=:all: --no-deps "${platform[@]}" -r "${lock%%:*}"
          -d "$cache/wheels")
  if ! "$PY" -m pip download -q --no-index --find-links "$cache/wheels" "${wheels[@]}" \
      >/dev/null 2>&1; then
    "$PY" -m pip download -q "${wheels[@]}"
  fi
done
