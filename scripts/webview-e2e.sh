#!/usr/bin/env bash
# The live view in a real browser: Debian's headless Chromium (the
# chromium package) driven by playwright-core (testdata/webview, pinned in
# its package-lock.json; it downloads no browser of its own) against a
# daemon with the fake ACP agent as codex. Screenshots go to
# bin/e2e/screenshots/. With the argument bench, make bench's figures
# instead: the list's first paint with 1,000 tasks, and a 100,000-update
# turn followed by a task page (its CPU baseline from
# testdata/webview/floodbase). Needs node 20 or later, npm and chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=testdata/webview/view.test.mjs
case "${1:-}" in
  "") ;;
  bench) suite=testdata/webview/bench.test.mjs ;;
  *) echo "usage: $0 [bench]" >&2; exit 2 ;;
esac

browser="${CHROMIUM:-$(command -v chromium || true)}"
if [ -z "$browser" ]; then
  echo "webview-e2e: no chromium on PATH (apt-get install chromium, or set CHROMIUM)" >&2
  exit 1
fi
go build -o bin/ ./cmd/symm-mcp ./cmd/symm-mcpd # serve is bin/symm-mcpd (intent 0049)
go build -o bin/fake-acp-agent ./internal/acpsession/fakeagent/cmd/fake-acp-agent
if [ "$suite" = testdata/webview/bench.test.mjs ]; then go build -o bin/floodbase ./testdata/webview/floodbase; fi
npm ci --prefix testdata/webview --no-audit --no-fund --loglevel=error >/dev/null # errors still reach stderr
echo "webview-e2e: node $(node --version), $("$browser" --version 2>/dev/null | head -1), playwright-core $(node -p 'require("./testdata/webview/node_modules/playwright-core/package.json").version')" >&2
mkdir -p bin/e2e/screenshots
SYMM_MCP="$PWD/bin/symm-mcp" FAKE_ACP_AGENT="$PWD/bin/fake-acp-agent" FLOODBASE="$PWD/bin/floodbase" CHROMIUM="$browser" SCREENSHOTS="$PWD/bin/e2e/screenshots" \
  node --test "$suite"
