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
// named by its pgid and holding its leader's start time and session id
// ("<start> <sid>"; records of older daemons hold the start time alone).
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
// The leader's session id is recorded beside its start time: once the
// leader is gone, it is what tells the group's members from those of a
// group that reused the pgid.
func (g *Groups) Started(pgid int, startTime uint64) {
	line := strconv.FormatUint(startTime, 10)
	// A session id of 0 is a real value: in a PID namespace whose session
	// leader lives outside it (a container), every process reads 0. So a
	// leader whose stat cannot be read leaves the field out instead.
	if st, alive := readProcStat(pgid); alive && st.start == startTime {
		line += " " + strconv.Itoa(st.session)
	}
	line += "\n"
	name := filepath.Join(g.dir, strconv.Itoa(pgid))
	tmp := name + ".tmp"
	err := os.WriteFile(tmp, []byte(line), 0o600)
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

// endSurvivors sends SIGKILL to what survives of every recorded group,
// and forgets every record. It returns the groups it signalled.
func (g *Groups) endSurvivors() ([]int, error) {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, &PathError{Path: g.dir, Err: fmt.Errorf("cannot create the process-group record: %w", err)}
	}
	entries, err := os.ReadDir(g.dir)
	if err != nil {
		return nil, &PathError{Path: g.dir, Err: err}
	}
	var procs []procStat // read once, when some leader is gone
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
		rec := parseGroupRecord(pgid, b)
		leader, alive := readProcStat(pgid)
		var lp *procStat
		if alive {
			lp = &leader
		} else if procs == nil {
			procs = allProcStats()
		}
		d := decideGroup(rec, lp, procs)
		switch {
		case d.group:
			if syscall.Kill(-pgid, syscall.SIGKILL) == nil {
				g.log.Warn("ended an agent process group that survived the previous daemon", "pgid", pgid)
				ended = append(ended, pgid)
			}
		case len(d.pids) > 0:
			n := 0
			for _, pid := range d.pids {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					n++
				}
			}
			if n > 0 {
				g.log.Warn("ended what an agent's process group left after its leader exited", "pgid", pgid, "processes", n)
				ended = append(ended, pgid)
			}
		case d.why != "":
			g.log.Info("a recorded process group left alone", "pgid", pgid, "why", d.why)
		}
		_ = os.Remove(path)
	}
	return ended, nil
}

// groupRecord is one record: the group's pgid, its leader's start time
// (0: not recorded) and session id (hasSID false: not recorded).
type groupRecord struct {
	pgid   int
	start  uint64
	sid    int
	hasSID bool
}

func parseGroupRecord(pgid int, b []byte) groupRecord {
	rec := groupRecord{pgid: pgid}
	f := strings.Fields(string(b))
	if len(f) > 0 {
		rec.start, _ = strconv.ParseUint(f[0], 10, 64)
	}
	if len(f) > 1 {
		sid, err := strconv.Atoi(f[1])
		rec.sid, rec.hasSID = sid, err == nil
	}
	return rec
}

// groupDecision is what to signal of a recorded group: the whole group,
// some of its members one by one, or nothing (why says why, when it is
// not simply that nothing is left).
type groupDecision struct {
	group bool
	pids  []int
	why   string
}

// decideGroup decides on a record, given its leader's /proc entry (nil:
// gone) and, when the leader is gone, every process's.
//
// A live leader with the recorded start time is our agent: its whole
// group is ended. A live leader with another start time, or a record
// without one, may be another process that reused the pid: left alone.
// A gone leader leaves its members in the group, but the pgid may have
// been reused since by a new group whose leader exited in turn; so only
// processes in the group that started no earlier than our leader and in
// its session are ended, and a record without the session (an older
// daemon's) ends nothing, as we cannot tell.
func decideGroup(rec groupRecord, leader *procStat, procs []procStat) groupDecision {
	if leader != nil {
		switch {
		case rec.start == 0:
			return groupDecision{why: "its leader's start time was not recorded and a process leads the group"}
		case leader.start != rec.start:
			return groupDecision{why: "its pgid's leader is another process now"}
		}
		return groupDecision{group: true}
	}
	var members []procStat
	for _, p := range procs {
		if p.pgrp == rec.pgid {
			members = append(members, p)
		}
	}
	if len(members) == 0 {
		return groupDecision{}
	}
	if rec.start == 0 || !rec.hasSID {
		return groupDecision{why: "its leader is gone and the record cannot tell its members from another group's"}
	}
	var d groupDecision
	for _, p := range members {
		if p.start >= rec.start && p.session == rec.sid {
			d.pids = append(d.pids, p.pid)
		}
	}
	if len(d.pids) < len(members) {
		d.why = "some processes with its pgid are not of its session or started before its leader"
	}
	return d
}

// procStat is what the group record reads of /proc/<pid>/stat.
type procStat struct {
	pid, pgrp, session int
	start              uint64 // field 22, clock ticks since boot
}

// readProcStat reads pid's stat; alive is false when pid does not exist.
// A stat that cannot be parsed reads as zeros: a start time of 0 matches
// no record.
func readProcStat(pid int) (st procStat, alive bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	st, ok := parseProcStat(b)
	if !ok {
		st = procStat{}
	}
	st.pid = pid
	return st, true
}

func parseProcStat(b []byte) (procStat, bool) {
	// The command (field 2) is in parentheses and may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return procStat{}, false
	}
	var st procStat
	var err1, err2, err3 error
	st.pgrp, err1 = strconv.Atoi(string(f[2]))
	st.session, err2 = strconv.Atoi(string(f[3]))
	st.start, err3 = strconv.ParseUint(string(f[19]), 10, 64)
	return st, err1 == nil && err2 == nil && err3 == nil
}

// allProcStats reads every process's stat.
func allProcStats() []procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []procStat{}
	}
	procs := make([]procStat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, alive := readProcStat(pid); alive && st.start != 0 {
			procs = append(procs, st)
		}
	}
	return procs
}
