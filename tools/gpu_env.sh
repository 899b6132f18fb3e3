#!/bin/sh
# Source this on the lent GPU machine (Ubuntu, no libstb-dev / libcjson-dev there): unpacks the
# Debian packages carried in .deps/ (made here with `apt-get download libstb-dev libstb0
# libcjson-dev libcjson1` inside .deps/) and exports MAKEFLAGS so `make` finds them.
#   . tools/gpu_env.sh && make -j16 && make test-gpu
set -e
mkdir -p /tmp/vil-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/vil-deps; done
export DEPS_PREFIX=/tmp/vil-deps/usr
export MAKEFLAGS="DEPS_PREFIX=/tmp/vil-deps/usr"
set +e
