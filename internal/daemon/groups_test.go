package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupsRecord: a recorded group still running is ended; one whose
// leader's start time differs (its pid was reused) is left alone; either
// way the record is cleared.
func TestGroupsRecord(t *testing.T) {
	t.Parallel()
	start := func(t *testing.T) *exec.Cmd {
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd
	}
	state := shortDir(t)
	g := NewGroups(state, nil)
	_, err := g.endSurvivors() // makes the directory
	require.NoError(t, err)

	ours, reused := start(t), start(t)
	st, alive := readProcStat(ours.Process.Pid)
	require.True(t, alive)
	require.NotZero(t, st.start)
	g.Started(ours.Process.Pid, st.start)
	rst, _ := readProcStat(reused.Process.Pid)
	g.Started(reused.Process.Pid, rst.start+1)
	g.Started(1<<22+3, 5) // gone long ago
	g.Started(4242, 1)
	g.Ended(4242)

	ended, err := g.endSurvivors()
	require.NoError(t, err)
	assert.Equal(t, []int{ours.Process.Pid}, ended)
	err = ours.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	assert.NoError(t, syscall.Kill(reused.Process.Pid, 0), "a reused pid is left alone")

	entries, err := os.ReadDir(filepath.Join(state, groupsDirName))
	require.NoError(t, err)
	assert.Empty(t, entries)
	_, err = os.Stat(filepath.Join(state, groupsDirName, strconv.Itoa(4242)))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestDecideGroup: what survives of a recorded group is ended only when
// it is surely the recorded group's.
func TestDecideGroup(t *testing.T) {
	t.Parallel()
	const pgid, start, sid = 500, 1000, 77
	rec := groupRecord{pgid: pgid, start: start, sid: sid, hasSID: true}
	member := func(pid int, st uint64, session int) procStat {
		return procStat{pid: pid, pgrp: pgid, session: session, start: st}
	}
	tests := []struct {
		name   string
		rec    groupRecord
		leader *procStat
		procs  []procStat
		group  bool
		pids   []int
		leftBy bool // a reason to leave something alone is given
	}{
		{name: "leader alive, same start", rec: rec, leader: &procStat{pid: pgid, pgrp: pgid, session: sid, start: start}, group: true},
		{name: "leader alive, another start (pid reused)", rec: rec, leader: &procStat{pid: pgid, pgrp: pgid, start: start + 5}, leftBy: true},
		{name: "leader alive, no start recorded", rec: groupRecord{pgid: pgid}, leader: &procStat{pid: pgid, pgrp: pgid, start: start}, leftBy: true},
		{name: "leader alive, its stat unreadable", rec: rec, leader: &procStat{pid: pgid}, leftBy: true},
		{name: "leader gone, nothing left", rec: rec, procs: []procStat{{pid: 9, pgrp: 8, session: sid, start: start}}},
		{
			name: "leader gone, its members", rec: rec,
			procs: []procStat{member(600, start, sid), member(601, start+9, sid), {pid: 602, pgrp: 3, session: sid, start: start + 1}},
			pids:  []int{600, 601},
		},
		{
			name: "leader gone, the pgid reused in another session", rec: rec,
			procs:  []procStat{member(600, start+50, sid+1)},
			leftBy: true,
		},
		{
			name: "leader gone, a process older than the leader", rec: rec,
			procs:  []procStat{member(600, start-1, sid), member(601, start+1, sid)},
			pids:   []int{601},
			leftBy: true,
		},
		{
			name: "leader gone, an older daemon's record without the session", rec: groupRecord{pgid: pgid, start: start},
			procs:  []procStat{member(600, start+1, sid)},
			leftBy: true,
		},
		{
			// In a container whose session leader is outside the PID
			// namespace every process's session reads 0.
			name: "leader gone, session 0 recorded (a container)", rec: groupRecord{pgid: pgid, start: start, hasSID: true},
			procs: []procStat{member(600, start+1, 0), member(601, start+1, 5)},
			pids:  []int{600}, leftBy: true,
		},
		{
			name: "leader gone, no start recorded", rec: groupRecord{pgid: pgid},
			procs:  []procStat{member(600, start+1, 0)},
			leftBy: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideGroup(tt.rec, tt.leader, tt.procs)
			assert.Equal(t, tt.group, d.group, "the whole group")
			assert.Equal(t, tt.pids, d.pids, "members one by one")
			assert.Equal(t, tt.leftBy, d.why != "", "why: %q", d.why)
		})
	}
}

func TestParseGroupRecord(t *testing.T) {
	t.Parallel()
	assert.Equal(t, groupRecord{pgid: 5, start: 123, sid: 9, hasSID: true}, parseGroupRecord(5, []byte("123 9\n")))
	assert.Equal(t, groupRecord{pgid: 5, start: 123, sid: 0, hasSID: true}, parseGroupRecord(5, []byte("123 0\n")), "session 0 (a container) is a session")
	assert.Equal(t, groupRecord{pgid: 5, start: 123}, parseGroupRecord(5, []byte("123\n")), "an older daemon's record")
	assert.Equal(t, groupRecord{pgid: 5}, parseGroupRecord(5, []byte("junk")))
}

// TestGroupsRecordLeaderGone: a recorded group whose leader exited has
// its members ended one by one.
func TestGroupsRecordLeaderGone(t *testing.T) {
	t.Parallel()
	state := shortDir(t)
	g := NewGroups(state, nil)
	_, err := g.endSurvivors()
	require.NoError(t, err)

	cmd := exec.Command("sh", "-c", "sleep 1000 & echo $!; read x; exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var member int
	_, err = fmt.Fscan(stdout, &member)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(member, syscall.SIGKILL) })
	st, alive := readProcStat(cmd.Process.Pid)
	require.True(t, alive)
	g.Started(cmd.Process.Pid, st.start)
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), "the leader exits")
	mst, alive := readProcStat(member)
	require.True(t, alive, "its member lives on")
	require.Equal(t, cmd.Process.Pid, mst.pgrp)

	ended, err := g.endSurvivors()
	require.NoError(t, err)
	assert.Equal(t, []int{cmd.Process.Pid}, ended)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.NoError(t, WaitExited(ctx, member), "the member was ended")
}

// TestGroupsRecordWithoutStart: a record whose start time could not be
// read leaves a live group alone: its leader may be any process that got
// the pid since.
func TestGroupsRecordWithoutStart(t *testing.T) {
	t.Parallel()
	state := shortDir(t)
	g := NewGroups(state, nil)
	_, err := g.endSurvivors()
	require.NoError(t, err)
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.NoError(t, os.WriteFile(filepath.Join(state, groupsDirName, strconv.Itoa(cmd.Process.Pid)), []byte("0\n"), 0o600))
	ended, err := g.endSurvivors()
	require.NoError(t, err)
	assert.Empty(t, ended)
	assert.NoError(t, syscall.Kill(cmd.Process.Pid, 0), "left alone")
}
