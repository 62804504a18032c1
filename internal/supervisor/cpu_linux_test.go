package supervisor

import (
	"context"
	"testing"
	"time"
)

// TestCPUCountsTheGroup: the CPU time of a run is its group's: a spinning
// grandchild of an idle agent makes it advance; a run that ended, or was
// never started, has no sample.
func TestCPUCountsTheGroup(t *testing.T) {
	// The spinner burns a core until the group is ended: the turn's
	// cancel and the exit grace, which this test does not measure, are
	// cut short so that it burns only while the test waits for a scan.
	to := quick
	to.TurnCancel, to.ExitGrace = 50*time.Millisecond, 50*time.Millisecond
	sup := newSupervisor(t, to)
	pids := make(chan int, 1)
	convs := make(chan *lineConv, 1)
	s := newSink(false)
	id := start(t, sup, helperSpec(t, "busychild", pids, convs), s)
	recv(t, pids, 1)

	first, ok := sup.CPU(id)
	if !ok {
		t.Fatal("CPU of a live run: no sample")
	}
	deadline := time.Now().Add(waitLimit)
	for {
		cpu, ok := sup.CPU(id)
		if !ok {
			t.Fatal("CPU of a live run: no sample")
		}
		if cpu > first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group's CPU time stayed at %v while a member spun", cpu)
		}
		// Each call within cpuScanEvery reads the scan before: the
		// next scan is what this loop waits for.
		select {
		case <-time.After(cpuScanEvery / 4):
		case <-s.exited:
			t.Fatal("the run ended")
		}
	}
	if _, ok := sup.CPU(id + 100); ok {
		t.Error("CPU of an unknown run has a sample")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	sup.Stop(ctx, id)
	awaitExit(t, sup, id, s)
	if _, ok := sup.CPU(id); ok {
		t.Error("CPU of an ended run has a sample")
	}
}

func TestParseStatCPU(t *testing.T) {
	line := []byte("42 (a) b) c) S 1 7 7 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0 5 0 0")
	st, ok := parseStat(line)
	if !ok || !st.hasTicks || st.pgrp != 7 || st.ticks != 11+22+33+44 {
		t.Errorf("parseStat = %+v, %v; want pgrp 7, 110 ticks, true", st, ok)
	}
	if st, ok := parseStat([]byte("42 (a) S 1 7")); !ok || st.hasTicks {
		t.Errorf("a short line: %+v, %v; want its group and no ticks", st, ok)
	}
	if st, ok := parseStat([]byte("42 (a) S 1 7 7 0 -1")); !ok || st.hasTicks {
		t.Errorf("a line without the CPU times: %+v, %v; want no ticks", st, ok)
	}
	if _, ok := parseStat([]byte("42 (a) S 1 7 7 0 -1 4194560 100 0 0 0 11 x 33 44 20")); ok {
		t.Error("a line with a CPU time that is no number parsed")
	}
}
