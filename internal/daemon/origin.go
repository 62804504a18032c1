package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Origin is what started the daemon, for status: the daemon's environment
// and working directory are those of the process that started it (an
// autostarting front, and so its host's), which is what a user asks when
// the agents lack a variable or run in an unexpected directory.
type Origin struct {
	// PID and Command are the process that started the daemon: a front
	// ("symm-mcp --shared ..."), or a shell for a serve run by hand.
	PID     int    `json:"pid"`
	Command string `json:"command,omitempty"`
	// HostPID and Host are that process's parent and its name: the MCP
	// host (claude, codex, ...) that ran the front. 0 and "" when not
	// known.
	HostPID int    `json:"host_pid,omitempty"`
	Host    string `json:"host,omitempty"`
	// Dir is the daemon's working directory, its starter's: a spawn_task
	// without workspace runs there.
	Dir string `json:"dir"`
	// EnvFile is the --env-file the daemon read (absolute), "" when none.
	EnvFile string `json:"env_file,omitempty"`
}

// maxCommand bounds the command line kept.
const maxCommand = 1024

// ReadOrigin reads the daemon's origin: its parent (the front that
// started it, waiting for its readiness, is still its parent when serve
// calls this at its start) and the parent's parent, from /proc. Where
// /proc cannot be read (not Linux, or the process went away), only the
// pids known are given.
func ReadOrigin(envFile string) Origin {
	o := Origin{PID: os.Getppid()}
	o.Dir, _ = os.Getwd()
	if envFile != "" {
		if abs, err := filepath.Abs(envFile); err == nil {
			envFile = abs
		}
		o.EnvFile = envFile
	}
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(o.PID), "cmdline")); err == nil {
		o.Command = strings.Join(strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00"), " ")
		if len(o.Command) > maxCommand {
			o.Command = o.Command[:maxCommand] + "…"
		}
	}
	if ppid, ok := parentOf(o.PID); ok && ppid > 0 {
		o.HostPID = ppid
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(ppid), "comm")); err == nil {
			o.Host = strings.TrimSpace(string(b))
		}
	}
	return o
}

// parentOf reads pid's parent from /proc/<pid>/stat, whose second field
// (the name, in parentheses) may hold spaces and parentheses: the fields
// after the last ')' are "state ppid ...".
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
