#!/usr/bin/env bash
# `go install github.com/symm-mcp/symm-mcp/cmd/...@VERSION` works, and
# installs the three binaries: symm-mcp, the daemon symm-mcpd it hands serve
# to (intent 0049) and the sandbox's pre-exec step symm-sandbox-exec
# (intent 0048)
# (intent 0034): a module proxy made of this checkout's HEAD, a file://
# GOPROXY directory as the module proxy protocol lays it out
# (<module>/@v/{list,V.info,V.mod,V.zip}; the zip is git archive's with the
# <module>@<version>/ prefix, which is the module zip format: no vendor
# directory, no nested module, no symbolic link here), is put before the
# real proxy, which serves the dependencies (after the local module cache,
# so that a warm machine needs no network). go install builds from it into
# a fresh GOBIN and module cache, and the binary's --version is the
# version: the build information path of internal/version, with no VCS
# stamp and no link-time values. HEAD, not the working tree: commit first.
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/symm-mcp/symm-mcp
version=${GOINSTALL_VERSION:-v0.0.1-check}
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
at=$work/proxy/$module/@v
mkdir -p "$at"
git archive --format=zip --prefix="$module@$version/" -o "$at/$version.zip" HEAD
git show HEAD:go.mod >"$at/$version.mod"
time=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$time" >"$at/$version.info"
echo "$version" >"$at/list"

cache=$(go env GOMODCACHE)/cache/download
env GOFLAGS=-modcacherw GOMODCACHE="$work/modcache" GOBIN="$work/bin" GOTOOLCHAIN=local \
  GOPROXY="file://$work/proxy,file://$cache,https://proxy.golang.org" GONOSUMDB="$module" GOPRIVATE= \
  go install "$module/cmd/...@$version"
[ "$(cd "$work/bin" && ls | tr '\n' ' ')" = "symm-mcp symm-mcpd symm-sandbox-exec " ] || { echo "goinstall-check: installed $(ls "$work/bin"); want symm-mcp, symm-mcpd and symm-sandbox-exec" >&2; exit 1; }
got=$("$work/bin/symm-mcp" --version 2>&1)
[ "$got" = "symm-mcp $version" ] || { echo "goinstall-check: --version said '$got'; want 'symm-mcp $version'" >&2; exit 1; }
# serve is symm-mcpd's, found beside symm-mcp.
served=$("$work/bin/symm-mcp" serve --version 2>&1)
[ "$served" = "symm-mcp $version" ] || { echo "goinstall-check: serve --version said '$served'; want 'symm-mcp $version'" >&2; exit 1; }
for b in symm-mcp symm-mcpd symm-sandbox-exec; do
  go version -m "$work/bin/$b" | grep -q "^[[:space:]]mod[[:space:]]$module[[:space:]]$version[[:space:]]" ||
    { echo "goinstall-check: $b's build information names another module version:" >&2; go version -m "$work/bin/$b" >&2; exit 1; }
done
echo "goinstall-check: go install $module/cmd/...@$version from a file:// proxy: $got; serve: $served" >&2
