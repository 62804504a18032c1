package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// groupsDirName holds one file per agent process group still running,
// named by its pgid and holding its leader's start time.
const groupsDirName = "groups"

// Groups is the record of the daemon's agent process groups in its state
// directory (a supervisor.GroupRecord). PR_SET_PDEATHSIG ends an agent
// when the daemon is killed, but not the processes the agent started in
// its group; the next daemon on the state directory ends those (Listen,
// under the state directory's lock, so never a running daemon's groups).
type Groups struct {
	dir string
	log *slog.Logger
}

// NewGroups returns the record in stateDir; nothing is touched until
// Listen has checked and locked the directory.
func NewGroups(stateDir string, log *slog.Logger) *Groups {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Groups{dir: filepath.Join(stateDir, groupsDirName), log: log}
}

// Started records a group; a record that cannot be written is logged (the
// agent runs anyway, and PR_SET_PDEATHSIG still covers the agent itself).
func (g *Groups) Started(pgid int, startTime uint64) {
	name := filepath.Join(g.dir, strconv.Itoa(pgid))
	tmp := name + ".tmp"
	err := os.WriteFile(tmp, []byte(strconv.FormatUint(startTime, 10)+"\n"), 0o600)
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		_ = os.Remove(tmp)
		g.log.Warn("cannot record the agent's process group", "pgid", pgid, "err", err)
	}
}

// Ended forgets a group confirmed gone.
func (g *Groups) Ended(pgid int) {
	if err := os.Remove(filepath.Join(g.dir, strconv.Itoa(pgid))); err != nil && !errors.Is(err, os.ErrNotExist) {
		g.log.Warn("cannot remove the record of a process group", "pgid", pgid, "err", err)
	}
}

// endSurvivors sends SIGKILL to every recorded group that still has a
// member, and forgets every record. A group whose leader runs with another
// start time is not ours (its pid was reused; a pgid cannot be reused while
// any member of the old group lives) and is left alone. It returns the
// groups it signalled.
func (g *Groups) endSurvivors() ([]int, error) {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, &PathError{Path: g.dir, Err: fmt.Errorf("cannot create the process-group record: %w", err)}
	}
	entries, err := os.ReadDir(g.dir)
	if err != nil {
		return nil, &PathError{Path: g.dir, Err: err}
	}
	var ended []int
	for _, e := range entries {
		path := filepath.Join(g.dir, e.Name())
		pgid, err := strconv.Atoi(e.Name())
		if err != nil || pgid <= 1 {
			_ = os.Remove(path)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		start, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if leader, alive := processStart(pgid); alive && start != 0 && leader != start {
			g.log.Info("a recorded process group's id belongs to another process now; left alone", "pgid", pgid)
		} else if syscall.Kill(-pgid, 0) == nil {
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
				g.log.Warn("ended an agent process group that survived the previous daemon", "pgid", pgid)
				ended = append(ended, pgid)
			}
		}
		_ = os.Remove(path)
	}
	return ended, nil
}

// processStart reads pid's start time (/proc/<pid>/stat field 22); alive
// is false when pid does not exist.
func processStart(pid int) (start uint64, alive bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, true
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 {
		return 0, true
	}
	v, _ := strconv.ParseUint(string(f[19]), 10, 64)
	return v, true
}
