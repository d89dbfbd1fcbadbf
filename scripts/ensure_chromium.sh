#!/usr/bin/env bash
# The browser tests drive Debian's chromium (never a downloaded browser build).
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
as_root env DEBIAN_FRONTEND=noninteractive \
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq chromium >/dev/null
