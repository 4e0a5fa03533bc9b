#!/usr/bin/env bash
# Install Debian's chromium for the real-browser tests (tests/test_browser.py and the live-segment
# browser test), which drive it through Playwright's executable_path: no Playwright browser download.
# Idempotent and quiet; needs root (or passwordless sudo). About 110 MB to download, 25 s here.
set -euo pipefail
if [ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
$SUDO apt-get update -qq >/dev/null || true
$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
[ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null
