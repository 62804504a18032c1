package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// measureLauncher times what the npm package's launcher adds to start-up
// (intent 0034): exec → initialize answered through `node bin/symm-mcp.js`,
// which resolves this platform's binary package and runs the binary with
// its stdio, beside the binary exec'd directly; interleaved, so that both
// see the same load. The launcher runs from a node_modules tree laid out
// as npm installs the packages, the binary package's binary a link to the
// server measured here.
func measureLauncher(ctx context.Context, e *env, t *table) error {
	if e.cfg.launcher == "" {
		return errors.New("no launcher script given (-launcher npm/symm-mcp/bin/symm-mcp.js)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return fmt.Errorf("the launcher runs on node: %w", err)
	}
	nodeVersion, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return fmt.Errorf("node --version: %w", err)
	}
	script, pkg, err := installLauncher(e.dir, e.cfg.launcher, e.server)
	if err != nil {
		return err
	}
	var bare, launched []time.Duration
	for range e.cfg.execSamples {
		for _, argv := range [][]string{{e.server}, {node, script}} {
			s, took, err := e.startArgv(ctx, argv)
			if err != nil {
				return err
			}
			if err := s.close(); err != nil {
				return err
			}
			if len(argv) == 1 {
				bare = append(bare, took)
			} else {
				launched = append(launched, took)
			}
		}
	}
	b, l := median(bare), median(launched)
	over := l - b
	t.check("npm launcher: exec → initialize answered", "+"+ms(over)+" over the binary",
		fmt.Sprintf("node %s bin/symm-mcp.js → %s: %s; the binary exec'd directly: %s (%d each, interleaved)",
			strings.TrimSpace(string(nodeVersion)), pkg, ms(l), ms(b), len(launched)),
		"≤ +60 ms", over <= 60*time.Millisecond)
	return nil
}

// installLauncher lays out under dir the node_modules tree npm makes of
// the packages: symm-mcp with the launcher script, and this platform's
// @symm-mcp/<os>-<cpu> whose bin/symm-mcp is server. It returns the
// script's path there and the binary package's name.
func installLauncher(dir, launcher, server string) (script, pkg string, err error) {
	cpu := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	if cpu == "" {
		return "", "", fmt.Errorf("no npm binary package for %s", runtime.GOARCH)
	}
	pkg = "@symm-mcp/" + runtime.GOOS + "-" + cpu
	modules := filepath.Join(dir, "npm", "node_modules")
	src, err := os.ReadFile(launcher)
	if err != nil {
		return "", "", fmt.Errorf("the launcher script: %w", err)
	}
	script = filepath.Join(modules, "symm-mcp", "bin", "symm-mcp.js")
	bin := filepath.Join(modules, filepath.FromSlash(pkg), "bin")
	for _, d := range []string{filepath.Dir(script), bin} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", "", err
		}
	}
	files := map[string]string{
		script: string(src),
		filepath.Join(modules, "symm-mcp", "package.json"):              `{"name":"symm-mcp","version":"0.0.0"}`,
		filepath.Join(modules, filepath.FromSlash(pkg), "package.json"): fmt.Sprintf(`{"name":%q,"version":"0.0.0"}`, pkg),
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			return "", "", err
		}
	}
	if err := os.Symlink(server, filepath.Join(bin, "symm-mcp")); err != nil {
		return "", "", err
	}
	return script, pkg, nil
}
