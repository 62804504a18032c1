package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/symm-mcp/symm-mcp/internal/agents"
)

// fakeNPM is an npm that logs each package it is asked to install and
// gives its prefix the executable the table says the package provides.
func fakeNPM(t *testing.T, dir string) (log string) {
	t.Helper()
	log = filepath.Join(dir, "npm.log")
	var cases strings.Builder
	for _, in := range agents.Installs() {
		cases.WriteString("\t'" + in.Spec + "') exe='" + in.Executable + "' ;;\n")
	}
	script := `#!/usr/bin/env bash
set -euo pipefail
prefix= pkg=
while [[ $# -gt 0 ]]; do
	case $1 in
	--prefix) prefix=$2; shift ;;
	install | --*) ;;
	*) pkg=$1 ;;
	esac
	shift
done
case $pkg in
` + cases.String() + `	*) echo "fake npm: unknown package $pkg" >&2; exit 1 ;;
esac
echo "$pkg" >>'` + log + `'
mkdir -p "$prefix/node_modules/.bin"
printf '#!/bin/sh\necho %s\n' "$pkg" >"$prefix/node_modules/.bin/$exe"
chmod +x "$prefix/node_modules/.bin/$exe"
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "npm"), []byte(script), 0o755))
	return log
}

// TestInstallScriptReadsTheTable runs scripts/install-agents.sh with a fake
// npm: it installs exactly the table's packages, in its order, each into
// its folder, with its stamp and its link; a rerun installs nothing; a
// stamp of another version reinstalls that one alone.
func TestInstallScriptReadsTheTable(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	script := filepath.Join(root, "scripts", "install-agents.sh")
	text, err := os.ReadFile(script)
	require.NoError(t, err)
	for _, in := range agents.Installs() {
		require.False(t, strings.Contains(string(text), in.Spec), "the script keeps no pin of its own: it holds %s", in.Spec)
	}

	bin := t.TempDir()
	log := fakeNPM(t, bin)
	cache := filepath.Join(t.TempDir(), "cache")
	install := func(t *testing.T, args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(script, args...)
		cmd.Dir = t.TempDir() // the script finds the checkout itself
		cmd.Env = append(os.Environ(), "SYMM_AGENTS_CACHE="+cache, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		require.NoError(t, cmd.Run(), "stderr:\n%s", errs.String())
		return out.String(), errs.String()
	}
	logged := func() []string {
		b, err := os.ReadFile(log)
		if os.IsNotExist(err) {
			return nil
		}
		require.NoError(t, err)
		return strings.Fields(string(b))
	}

	var specs []string
	for _, in := range agents.Installs() {
		specs = append(specs, in.Spec)
	}
	_, stderr := install(t)
	require.Equal(t, specs, logged(), "npm installed the table, in order")
	for _, in := range agents.Installs() {
		assert.Contains(t, stderr, in.Name+": installing "+in.Spec)
		stamp, err := os.ReadFile(filepath.Join(cache, in.Name, ".symm-pin"))
		require.NoError(t, err)
		assert.Equal(t, in.Spec+"\n", string(stamp))
		link, err := os.Readlink(filepath.Join(cache, "bin", in.Executable))
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(cache, in.Name, "node_modules", ".bin", in.Executable), link)
	}

	_, stderr = install(t)
	assert.Equal(t, specs, logged(), "a rerun installs nothing")
	for _, in := range agents.Installs() {
		assert.Contains(t, stderr, in.Name+": "+in.Spec+" already installed")
	}

	first := agents.Installs()[0]
	require.NoError(t, os.WriteFile(filepath.Join(cache, first.Name, ".symm-pin"), []byte(first.Spec+"-old\n"), 0o644))
	stdout, stderr := install(t, "--print-path")
	assert.Equal(t, append(specs, first.Spec), logged(), "a changed pin reinstalls that one alone")
	assert.Contains(t, stderr, first.Name+": installing "+first.Spec)
	assert.Equal(t, "export PATH='"+filepath.Join(cache, "bin")+"':\"$PATH\"\n", stdout)
}
