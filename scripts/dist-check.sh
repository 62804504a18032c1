#!/usr/bin/env bash
# The release archives are reproducible: make dist twice on this commit,
# the second time from an empty Go build cache, another temporary
# directory and a strict umask, and the two outputs must be byte-identical
# (every archive and SHA256SUMS). Then the linux/amd64 archive's binaries
# run and print the version and commit they were built with: symm-mcp,
# and its serve, which is symm-mcpd beside it (intent 0049); the archive
# holds the sandbox's pre-exec step beside them.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
# The version, commit and its time, read once from the Makefile: both
# builds are of one commit even if HEAD moves meanwhile.
read -r version commit commit_time < <(make -s --no-print-directory -f - print <<<'include Makefile
print: ; @echo $(VERSION) $(COMMIT) $(COMMIT_TIME)')
set -- VERSION="$version" COMMIT="$commit" COMMIT_TIME="$commit_time"
make -s dist DIST_DIR="$work/a" "$@"
mkdir -p "$work/cache" "$work/tmp"
(umask 077 && GOCACHE="$work/cache" TMPDIR="$work/tmp" make -s dist DIST_DIR="$work/b" "$@")

(cd "$work/a" && ls) >"$work/a.list"
(cd "$work/b" && ls) >"$work/b.list"
diff -u "$work/a.list" "$work/b.list"
[ "$(wc -l <"$work/a.list")" -eq 5 ] || { echo "dist-check: want 4 archives and SHA256SUMS:" >&2; cat "$work/a.list" >&2; exit 1; }
for f in $(cat "$work/a.list"); do
  cmp "$work/a/$f" "$work/b/$f" || { echo "dist-check: $f differs between two builds of one commit" >&2; exit 1; }
done
(cd "$work/a" && sha256sum --quiet -c SHA256SUMS)

archive=$(ls "$work/a"/symm-mcp_*_linux_amd64.tar.gz)
tar -C "$work" -xzf "$archive"
dir=$(basename "$archive" .tar.gz)
[ "$(cd "$work/$dir" && ls | tr '\n' ' ')" = "LICENSE-APACHE LICENSE-MIT README.md symm-mcp symm-mcpd symm-sandbox-exec " ] || { echo "dist-check: $dir holds $(ls "$work/$dir")" >&2; exit 1; }
got=$("$work/$dir/symm-mcp" --version 2>&1)
want="symm-mcp $version+${commit:0:12}"
[ "$got" = "$want" ] || { echo "dist-check: --version: got '$got', want '$want'" >&2; exit 1; }
got=$("$work/$dir/symm-mcp" serve --version 2>&1)
[ "$got" = "$want" ] || { echo "dist-check: serve --version (symm-mcpd): got '$got', want '$want'" >&2; exit 1; }
echo "dist-check: two builds byte-identical; $dir: $got" >&2
