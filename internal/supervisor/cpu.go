package supervisor

import (
	"sync"
	"time"
)

// cpuScanEvery bounds how often CPU reads /proc: one scan of every
// process's stat serves each call within it, whichever run asks, so that
// sampling many runs costs one scan, not one per run.
const cpuScanEvery = time.Second

// cpuCache is the latest /proc scan: the CPU ticks of each process group.
// Its mutex is taken alone, never across the scan (no two locks held
// together, and no I/O under one).
type cpuCache struct {
	mu      sync.Mutex
	at      time.Time
	byGroup map[int]uint64
}

// CPU is the CPU time the process group of run id has used so far: the
// user and system time of the group's processes, and of the children they
// reaped. ok is false for a run that is not live, or where /proc cannot
// tell (not Linux). It is a sample for the caller's judgement of the run
// (is the agent working?): a value that changed between two samples means
// the group ran; it can go down when a member exits unreaped by the
// group. The supervisor keeps no judgement of it.
func (s *Supervisor) CPU(id RunID) (cpu time.Duration, ok bool) {
	s.mu.Lock()
	r := s.runs[id]
	s.mu.Unlock()
	if r == nil {
		return 0, false
	}
	now := time.Now()
	s.cpu.mu.Lock()
	byGroup := s.cpu.byGroup
	fresh := byGroup != nil && now.Sub(s.cpu.at) < cpuScanEvery
	s.cpu.mu.Unlock()
	if !fresh {
		var err error
		if byGroup, err = scanGroupCPU(); err != nil {
			return 0, false
		}
		s.cpu.mu.Lock()
		s.cpu.at, s.cpu.byGroup = now, byGroup
		s.cpu.mu.Unlock()
	}
	ticks, ok := byGroup[r.pid]
	return time.Duration(ticks) * time.Second / clockTicks, ok
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's times: 100 on
// every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) needs cgo).
const clockTicks = 100
