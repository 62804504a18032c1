#!/usr/bin/env bash
# make bench's baseline (issue 33): prints the path of the server binary
# that make bench measures beside today's, building it when BASELINE names
# a commit.
#
#   bench-baseline.sh BASELINE CACHE
#
# BASELINE is a server binary (a path to an executable file: used as it
# is), a commit of this repository's history (its tree taken with git
# archive into a temporary directory and built there as make build builds
# the server, CGO_ENABLED=0 go build -trimpath, into
# CACHE/baseline/<full commit>/symm-mcp, with symm-mcpd beside it from the
# split of intent 0049 on, kept for the next run), or
# empty or "none": no baseline, nothing printed.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1-}
cache=${2:?usage: bench-baseline.sh BASELINE CACHE}
GO=${GO:-go}

case $base in
"" | none) exit 0 ;;
esac
if [ -f "$base" ]; then
	if [ ! -x "$base" ]; then
		echo "bench: BASELINE $base is not executable" >&2
		exit 1
	fi
	realpath "$base"
	exit 0
fi
if ! rev=$(git rev-parse --verify --quiet "$base^{commit}"); then
	echo "bench: BASELINE $base is neither a file nor a commit of this repository (a shallow clone may lack it: git fetch --unshallow)" >&2
	exit 1
fi
out="$cache/baseline/$rev/symm-mcp"
if [ ! -x "$out" ]; then
	echo "bench: building the baseline $base ($rev) into $out" >&2
	src=$(mktemp -d)
	trap 'rm -rf "$src"' EXIT
	git archive "$rev" | tar -x -C "$src"
	mkdir -p "$(dirname "$out")"
	# The module's own go.mod and go.sum at that commit; no workspace.
	# From the split on (intent 0049), serve is symm-mcpd, built beside it.
	pkgs=./cmd/symm-mcp
	if [ -d "$src/cmd/symm-mcpd" ]; then pkgs="$pkgs ./cmd/symm-mcpd"; fi
	tmp=$(dirname "$out")/tmp
	rm -rf "$tmp" && mkdir -p "$tmp"
	# shellcheck disable=SC2086 # pkgs is a list of words
	(cd "$src" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=mod "$GO" build -trimpath -o "$tmp/" $pkgs) >&2
	if [ -x "$tmp/symm-mcpd" ]; then mv "$tmp/symm-mcpd" "$(dirname "$out")/symm-mcpd"; fi
	mv "$tmp/symm-mcp" "$out"
	rmdir "$tmp"
fi
echo "$out"
