package leakcheck

import (
	"os"
	"testing"
	"time"
)

type recorder struct{ failed bool }

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }

func TestCheckSeesALeakedGoroutineAndFD(t *testing.T) {
	base := Take()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); <-stop }()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	base.Check(&r, 50*time.Millisecond, 0, 0)
	if !r.failed {
		t.Fatal("a leaked goroutine and fd were not reported")
	}
	close(stop)
	<-done
	f.Close()
	r = recorder{}
	base.Check(&r, 5*time.Second, 0, 0)
	if r.failed {
		t.Fatal("a clean state was reported as a leak")
	}
}
