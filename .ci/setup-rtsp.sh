#!/usr/bin/env bash
# Install the RTSP server the live-stream tests (tests/test_live.py) start on
# 127.0.0.1: Debian's rtsp-server-perl (ANNOUNCE/RECORD from a publisher,
# PLAY to clients; RTP over UDP only). Idempotent and quiet; needs root.
# The package's own service (which would listen on 0.0.0.0:554) is kept from
# starting: the tests run their own server on loopback ports.
set -euo pipefail
if command -v rtsp-server-perl >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod +x "$POLICY"
    ADDED_POLICY=1
fi
cleanup() { if [ "$ADDED_POLICY" = 1 ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends rtsp-server-perl >/dev/null
if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now rtsp-server-perl >/dev/null 2>&1 || true
fi
command -v rtsp-server-perl >/dev/null
