#!/usr/bin/env bash
# install-agents.sh installs pinned versions of the npm-installable ACP
# agents, and of the MCP hosts Claude Code and Codex CLI, into a cache folder
# outside the checkout, for capturing offers (scripts/capture-offers) and for
# the end-to-end suite. A developer tool: symm-mcp never installs agents.
# The pins are internal/agents' table, printed by go run ./scripts/agent-pins.
#
#   scripts/install-agents.sh            install what is missing or outdated
#   eval "$(scripts/install-agents.sh --print-path)"   ... and put them on PATH
#   . "$(scripts/install-agents.sh --env-file)"        the same, through a file
#
# Cache: $SYMM_AGENTS_CACHE, else $XDG_CACHE_HOME/symm-mcp/agents, else
# ~/.cache/symm-mcp/agents. Each agent gets an npm prefix of its own
# (<cache>/<agent>), because the packages' executable names collide, and a
# stamp (<cache>/<agent>/.symm-pin) holding the package it was installed
# from. A rerun with unchanged pins does nothing; a changed pin reinstalls
# that agent only. <cache>/bin holds one link per agent executable, and
# <cache>/env.sh puts that directory first on PATH.
#
# Network: the npm registry only (npm install). Needs node, npm and go on PATH.
set -euo pipefail

cache="${SYMM_AGENTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/symm-mcp/agents}"
mode=install
case "${1:-}" in
"") ;;
--print-path) mode=print-path ;;
--env-file) mode=env-file ;;
-h | --help)
	sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "install-agents.sh: unknown argument $1 (try --help)" >&2
	exit 2
	;;
esac

log() { echo "install-agents: $*" >&2; }

if [[ "$cache" == *"'"* ]]; then
	log "the cache path may not contain a single quote: $cache"
	exit 2
fi

command -v npm >/dev/null || {
	log "npm is not on PATH"
	exit 1
}
command -v go >/dev/null || {
	log "go is not on PATH (it reads the pins from internal/agents)"
	exit 1
}

# Agent name, npm package@version, executable inside node_modules/.bin: the
# ACP agents of internal/agents' table that are on npm (their offers are in
# testdata/agents), then the MCP hosts of the end-to-end suite's host tests
# (agents.Hosts). Read before the cache is touched: a failure leaves it as
# it was.
pins_text="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && go run ./scripts/agent-pins)"
mapfile -t PINS <<<"$pins_text"
if [[ -z "$pins_text" ]]; then
	log "go run ./scripts/agent-pins printed no pins"
	exit 1
fi
mkdir -p "$cache/bin"

# One install at a time per cache: the e2e suite and a developer may race.
exec 9>"$cache/.lock"
if command -v flock >/dev/null; then
	flock 9
fi

for pin in "${PINS[@]}"; do
	read -r agent pkg exe <<<"$pin"
	prefix="$cache/$agent"
	stamp="$prefix/.symm-pin"
	if [[ -f "$stamp" && "$(cat "$stamp")" == "$pkg" && -x "$prefix/node_modules/.bin/$exe" ]]; then
		log "$agent: $pkg already installed"
	else
		log "$agent: installing $pkg into $prefix"
		# Install beside the old prefix and swap, so an interrupted install
		# never leaves a stamped, half-filled prefix behind.
		tmp="$cache/.$agent.new"
		rm -rf "$tmp"
		mkdir -p "$tmp"
		start=$SECONDS
		npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error "$pkg" >&2
		[[ -x "$tmp/node_modules/.bin/$exe" ]] || {
			log "$agent: $pkg did not install node_modules/.bin/$exe"
			exit 1
		}
		printf '%s\n' "$pkg" >"$tmp/.symm-pin"
		rm -rf "$prefix"
		mv "$tmp" "$prefix"
		log "$agent: done in $((SECONDS - start))s"
	fi
	if [[ "$(readlink "$cache/bin/$exe" 2>/dev/null)" != "$prefix/node_modules/.bin/$exe" ]]; then
		ln -sfn "$prefix/node_modules/.bin/$exe" "$cache/bin/$exe"
	fi
done

env_text="# Written by scripts/install-agents.sh: the pinned ACP agents, first on PATH.
export SYMM_AGENTS_CACHE='$cache'
export PATH='$cache/bin':\"\$PATH\""
if [[ ! -f "$cache/env.sh" || "$(cat "$cache/env.sh")" != "$env_text" ]]; then
	printf '%s\n' "$env_text" >"$cache/env.sh.new"
	mv "$cache/env.sh.new" "$cache/env.sh"
fi

case $mode in
print-path) echo "export PATH='$cache/bin':\"\$PATH\"" ;;
env-file) echo "$cache/env.sh" ;;
install) log "agents are in $cache/bin; source $cache/env.sh to put them on PATH" ;;
esac
