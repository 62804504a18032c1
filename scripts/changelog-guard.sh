#!/usr/bin/env bash
# The changelog rule: CHANGELOG.md has an "## [Unreleased]" section, and when
# Go code or go.mod changed since the last release tag, that section is not
# empty. Without a tag, every change is unreleased.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

file=CHANGELOG.md
[ -f "$file" ] || { echo "changelog-guard: $file is missing" >&2; exit 1; }
grep -q '^## \[Unreleased\]' "$file" || { echo "changelog-guard: $file has no '## [Unreleased]' section" >&2; exit 1; }

# The Unreleased section: from its heading to the next "## [" heading.
body=$(awk '/^## \[Unreleased\]/{on=1; next} on && /^## \[/{exit} on' "$file" | grep -E '^\s*[-*] ' || true)

# No "| head" here: under pipefail the writer's SIGPIPE (exit 141) would fail
# the guard whenever the list outgrows what head reads before it exits.
tag=$(git describe --tags --abbrev=0 2>/dev/null || true)
if [ -n "$tag" ]; then
  changed=$(git diff --name-only "$tag" -- '*.go' go.mod go.sum)
else
  changed=$(git ls-files -- '*.go')
fi
if [ -n "$changed" ] && [ -z "$body" ]; then
  echo "changelog-guard: Go code changed since ${tag:-the first commit} but '## [Unreleased]' lists nothing" >&2
  exit 1
fi
echo "changelog-guard: ok"
