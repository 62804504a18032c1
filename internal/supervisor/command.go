package supervisor

import "os/exec"

// RunCommand runs cmd to its end, as exec.Cmd.Run does, with its pid
// registered as one of the Supervisor's children while it runs: the
// subreaper leaves its exit status to cmd.Wait. Short helper commands that
// need a process group of their own (git, for worktrees) run through it.
func (s *Supervisor) RunCommand(cmd *exec.Cmd) error {
	children.mu.Lock()
	err := cmd.Start()
	pid := 0
	if err == nil {
		pid = cmd.Process.Pid
		children.pids[pid] = struct{}{}
	}
	children.mu.Unlock()
	if err != nil {
		return err
	}
	err = cmd.Wait()
	children.mu.Lock()
	delete(children.pids, pid)
	children.mu.Unlock()
	return err
}
