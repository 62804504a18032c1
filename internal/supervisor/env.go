package supervisor

import (
	"fmt"
	"path/filepath"
	"strings"
)

// The agent's environment: the base environment with the spec's values
// over it, and only the absolute entries of its PATH (see LookPath, which
// searches the same entries).

// MergeEnv returns base with over's values: a key present in both keeps its
// place and takes over's value; keys only in over follow, in their order;
// no key appears twice. Entries of base are kept as they are; an entry of
// over that is not KEY=VALUE is an error. base is not changed.
func MergeEnv(base, over []string) ([]string, error) {
	out := make([]string, 0, len(base)+len(over))
	at := make(map[string]int, len(base)+len(over))
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := at[k]; ok {
			out[i] = kv
			return
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		add(kv)
	}
	for _, kv := range over {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("start agent: environment entry %q is not KEY=VALUE", kv)
		}
		add(kv)
	}
	return out, nil
}

// absolutePath keeps only the absolute entries of env's PATH. The agent
// runs in the workspace, so a relative or empty entry would let a file
// there stand in for whatever the agent runs by name: node for
// "#!/usr/bin/env node", git, a shell. With no absolute entry left, PATH
// is unset (an empty PATH would mean the working directory).
func absolutePath(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "PATH=")
		if !ok {
			out = append(out, kv)
			continue
		}
		var dirs []string
		for _, dir := range filepath.SplitList(v) {
			if filepath.IsAbs(dir) {
				dirs = append(dirs, dir)
			}
		}
		if len(dirs) > 0 {
			out = append(out, "PATH="+strings.Join(dirs, string(filepath.ListSeparator)))
		}
	}
	return out
}

// lookupEnv returns the value of the last entry for key, as the C library
// and os/exec do.
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
