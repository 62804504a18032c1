//go:build !linux

package fakeagent

// signal is supported on Linux only; elsewhere it exits like Serve does.
func (a *agent) signal(name string) {
	a.stderrLine("fake-acp-agent: signal steps need Linux")
	a.exit(128)
}

// fork is supported on Linux only.
func (a *agent) fork(*Fork) {
	a.stderrLine("fake-acp-agent: fork steps need Linux")
}
