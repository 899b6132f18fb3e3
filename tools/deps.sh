#!/bin/sh
# deps.sh: checks for the Debian packages vil needs and installs the missing ones with apt-get,
# as root or through sudo; without either it prints the exact command and fails.
#   tools/deps.sh [build|demo|test|slurm|all]    (default all: build + demo + test)
set -u

BUILD_PKGS="gcc make pkg-config libjpeg62-turbo-dev libstb-dev libcjson-dev libzip-dev libarchive-dev libopenblas-dev zlib1g-dev libopenmpi-dev openmpi-bin"
DEMO_PKGS="dataset-fashion-mnist"
# the test suite checks the whole network against an independent PyTorch implementation, and the
# vil package (python/) with that torch, installed with pip into a venv (tests/test_python.sh)
TEST_PKGS="python3-torch python3-venv python3-setuptools python3-wheel"
# make test-slurm: a one-node Slurm cluster on this machine (tools/slurm_local.sh)
SLURM_PKGS="slurm-wlm munge"

case "${1:-all}" in
    build) want="$BUILD_PKGS" ;;
    demo) want="$BUILD_PKGS $DEMO_PKGS" ;;
    test) want="$BUILD_PKGS $TEST_PKGS" ;;
    slurm) want="$BUILD_PKGS $SLURM_PKGS" ;;
    all) want="$BUILD_PKGS $DEMO_PKGS $TEST_PKGS" ;;
    *) echo "usage: tools/deps.sh [build|demo|test|slurm|all]" >&2; exit 2 ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps: not a Debian system (no dpkg-query): install the equivalents of" >&2
    echo "      $want" >&2
    exit 1
fi

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=""
for p in $want; do
    # libjpeg-dev is Debian's name for the libjpeg62-turbo-dev headers: either will do
    if [ "$p" = libjpeg62-turbo-dev ] && installed libjpeg-dev; then continue; fi
    installed "$p" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "deps: all present ($want)"
    exit 0
fi

echo "deps: missing:$missing"
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" = 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "deps: not root and no sudo: as root, run" >&2
    echo "      apt-get update && $cmd" >&2
    exit 1
fi
# a fresh machine may have no package lists yet: update once if the install cannot find them
if ! $sudo $cmd; then
    echo "deps: retrying after apt-get update"
    $sudo apt-get update && $sudo $cmd || {
        echo "deps: the install failed: run   apt-get update && $cmd   as root" >&2
        exit 1
    }
fi
for p in $missing; do
    installed "$p" || { echo "deps: $p is still not installed" >&2; exit 1; }
done
echo "deps: installed$missing"
