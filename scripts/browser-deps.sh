#!/usr/bin/env bash
# Installs what the console's browser test needs (tests/api/console_browser.rs): Debian's chromium and
# chromium-driver when they are missing (as root, with apt-get), and axe-core pinned by
# tests/console/package-lock.json (npm ci, into tests/console/node_modules, never committed).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "scripts/browser-deps.sh: chromium and chromedriver are missing; run this as root to install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium chromium-driver >/dev/null
fi
echo "scripts/browser-deps.sh: $(chromium --version 2>/dev/null), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)"

(cd tests/console && npm ci --ignore-scripts --no-audit --no-fund >/dev/null)
echo "scripts/browser-deps.sh: axe-core $(node -p 'require("./tests/console/node_modules/axe-core/package.json").version')"
