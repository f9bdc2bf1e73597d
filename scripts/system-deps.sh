#!/usr/bin/env bash
# Install the Debian packages deepedge uses (bubblewrap, the sandbox of tenant code;
# stress-ng; wrk for bench.serving; PostgreSQL 15; chromium with its driver for the
# dashboard's browser test) when
# they are missing.
# Needs root and apt-get; elsewhere it says what to install and carries on, and the tests
# that need those services skip with that reason.
set -u
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v stress-ng >/dev/null 2>&1 || need+=(stress-ng)
command -v wrk >/dev/null 2>&1 || need+=(wrk)  # bench.serving's load generator
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${need[*]} from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq "${need[@]}" >/dev/null \
    || echo "warning: could not install ${need[*]}; tests needing them will skip" >&2
else
  echo "warning: please install ${need[*]} (Debian: apt-get install ${need[*]}); tests needing them will skip" >&2
fi
exit 0
