#!/usr/bin/env bash
# The official MCP TypeScript SDK client (testdata/tsclient, pinned in its
# package-lock.json) against the built server, with the fake ACP agent as
# codex: a strict tools/list, then every tool and error code, the SDK
# validating each reply against the tool's outputSchema, under protocol
# versions 2025-06-18 and 2025-11-25. Needs node 20 or later and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

go build -o bin/symm-mcp ./cmd/symm-mcp
go build -o bin/fake-acp-agent ./internal/acpsession/fakeagent/cmd/fake-acp-agent
npm ci --prefix testdata/tsclient --no-audit --no-fund --loglevel=error >/dev/null # errors still reach stderr
echo "ts-client: node $(node --version), @modelcontextprotocol/sdk $(node -p 'require("./testdata/tsclient/node_modules/@modelcontextprotocol/sdk/package.json").version')" >&2
SYMM_MCP="$PWD/bin/symm-mcp" FAKE_ACP_AGENT="$PWD/bin/fake-acp-agent" \
  node --test testdata/tsclient/client.test.mjs
