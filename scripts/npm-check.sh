#!/usr/bin/env bash
# The npm packages work as a user gets them (intent 0034): make npm packs
# them from make dist's archives; the launcher's tarball and this
# platform's binary package are installed with npm from the tarballs into
# a fresh prefix (npm asks the registry only for metadata: the other
# platforms' optional packages, which it leaves out); then the official
# MCP TypeScript SDK client (testdata/tsclient, pinned) runs the server as
# `npx symm-mcp` from that prefix and lists the tools of plain mode. The
# launcher passes arguments, the exit status and a host's SIGTERM through.
# Needs node 20 or later and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s npm DIST_DIR="$work/dist"
version=$(cd "$work/dist/npm" && ls symm-mcp-[0-9]*.tgz)
version=${version#symm-mcp-}
version=${version%.tgz}
platform=$(node -p 'process.platform + "-" + process.arch')
prefix=$work/prefix
mkdir -p "$prefix"
npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
  "$work/dist/npm/symm-mcp-$version.tgz" "$work/dist/npm/symm-mcp-$platform-$version.tgz" >/dev/null
installed=$(cd "$prefix/node_modules" && echo * @symm-mcp/*)
[ "$installed" = "@symm-mcp symm-mcp @symm-mcp/$platform" ] || {
  echo "npm-check: the prefix holds $installed; want symm-mcp and @symm-mcp/$platform only" >&2
  exit 1
}

# What the binary says of itself is what the server must say in
# initialize, through npx and the launcher.
binary=$prefix/node_modules/@symm-mcp/$platform/bin/symm-mcp
said=$("$binary" --version 2>&1)
through=$(cd "$work" && npx --prefix "$prefix" --no -- symm-mcp --version 2>&1)
[ "$through" = "$said" ] || { echo "npm-check: npx symm-mcp --version said '$through'; the binary '$said'" >&2; exit 1; }
# serve is the daemon, symm-mcpd, installed beside the binary (intent 0049).
served=$(cd "$work" && npx --prefix "$prefix" --no -- symm-mcp serve --version 2>&1)
[ "$served" = "$said" ] || { echo "npm-check: npx symm-mcp serve --version said '$served'; the binary '$said'" >&2; exit 1; }
status=0
(cd "$work" && npx --prefix "$prefix" --no -- symm-mcp --no-such-flag 2>/dev/null) || status=$?
[ "$status" = 2 ] || { echo "npm-check: a usage error exits $status through the launcher; want 2" >&2; exit 1; }

# A host's SIGTERM to the launcher reaches the server, and the launcher
# ends as the server did.
mkfifo "$work/in"
exec 3<>"$work/in" # stdin stays open: only the signal ends the server
node "$prefix/node_modules/.bin/symm-mcp" --no-notify <"$work/in" >/dev/null 2>"$work/stderr" &
launcher=$!
server=
for _ in $(seq 300); do # poll for the server to start, at most 30 s
  server=$(pgrep -P "$launcher" || true)
  [ -n "$server" ] && [ "$(readlink "/proc/$server/exe" 2>/dev/null)" = "$(readlink -f "$binary")" ] && break
  server=
  sleep 0.1
done
[ -n "$server" ] || { echo "npm-check: the launcher started no server" >&2; cat "$work/stderr" >&2; exit 1; }
kill -TERM "$launcher"
status=0
wait "$launcher" || status=$?
exec 3>&-
if kill -0 "$server" 2>/dev/null; then
  echo "npm-check: the server (pid $server) outlived the launcher's SIGTERM" >&2
  kill -KILL "$server"
  exit 1
fi
echo "npm-check: SIGTERM to the launcher: the server ended, the launcher exited $status" >&2

npm ci --prefix testdata/tsclient --no-audit --no-fund --loglevel=error >/dev/null
NPM_PREFIX="$prefix" SYMM_MCP_VERSION="${said#symm-mcp }" node --test testdata/tsclient/npx.test.mjs
# The release's MCP Registry entry: valid, at the version of the launcher
# it names (the package.json inside the tarball).
mkdir "$work/launcher"
tar -xzf "$work/dist/npm/symm-mcp-$version.tgz" -C "$work/launcher"
SYMM_SERVER_JSON="$work/dist/npm/server.json" SYMM_NPM_PACKAGE="$work/launcher/package/package.json" \
  go test -count=1 -run '^TestRegistryServerJSON$' ./cmd/symm-mcp >/dev/null
grep -q "\"version\": \"$version\"" "$work/dist/npm/server.json" || { echo "npm-check: server.json is not at $version" >&2; exit 1; }
echo "npm-check: server.json at $version, valid against the registry's schema" >&2
echo "npm-check: symm-mcp $version from the tarballs: $said; the TypeScript SDK listed the tools through npx symm-mcp" >&2
