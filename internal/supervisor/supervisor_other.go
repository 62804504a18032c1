//go:build !linux

package supervisor

import (
	"errors"
	"log/slog"
	"syscall"
)

// withDeathSignal does nothing where there is no PR_SET_PDEATHSIG.
func withDeathSignal(a *syscall.SysProcAttr) *syscall.SysProcAttr { return a }

// processStart is unknown here.
func processStart(int) uint64 { return 0 }

// pollExit returns at once: cmd.Wait waits.
func pollExit(int) {}

// reaper does nothing where there is no child subreaper: orphans of an
// agent's group go to init, which reaps them.
type reaper struct{}

func startReaper(*slog.Logger) (*reaper, error) {
	return nil, errors.New("a child subreaper needs Linux")
}

func (r *reaper) stop() {}

// scanGroupCPU cannot read process times here.
func scanGroupCPU() (map[int]uint64, error) {
	return nil, errors.New("process CPU times need Linux's /proc")
}
