package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/symm-mcp/symm-mcp/internal/sandbox/preexec"
)

// Subcommand is the hidden subcommand of symm-mcp that runs Main, the
// pre-exec step (package preexec, which documents its protocol).
const Subcommand = preexec.Subcommand

// ExitRefused is the pre-exec step's exit status when it does not start
// the agent; its reason is its one line on stderr.
const ExitRefused = preexec.ExitRefused

// Main is `symm-mcp sandbox-exec FLAGS -- /abs/agent args...`, the
// pre-exec step (preexec.Main): it returns only when it does not start
// the agent, with ExitRefused and the reason on stderr.
func Main(args []string, stderr io.Writer) int {
	return preexec.Main(args, stringWriter{stderr})
}

type stringWriter struct{ io.Writer }

func (w stringWriter) WriteString(s string) (int, error) { return io.WriteString(w.Writer, s) }

// Command returns the command line that starts argv confined by rs, and
// the files the process must inherit as descriptors 3 and on (the
// supervisor's Spec.ExtraFiles): self is the pre-exec program (symm-mcp,
// or symm-sandbox-exec), argv[0] the agent's resolved absolute path. The
// agent's process is the pre-exec step's own, so its pid, process group
// and death signal are the ones the supervisor set up. rs stays the
// caller's to close once the process started.
func Command(self string, rs *Ruleset, argv []string) (cmd []string, files []*os.File, err error) {
	if !filepath.IsAbs(self) {
		return nil, nil, fmt.Errorf("sandbox: the pre-exec program's path %q is not absolute", self)
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return nil, nil, fmt.Errorf("sandbox: the agent's command %q does not start with an absolute path", argv)
	}
	if rs == nil || rs.file == nil {
		return nil, nil, fmt.Errorf("sandbox: no ruleset to confine %s with", argv[0])
	}
	cmd = append([]string{self, Subcommand, strconv.FormatUint(uint64(rs.flags), 10), "--"}, argv...)
	return cmd, []*os.File{rs.file}, nil // descriptor 3: preexec.RulesetFD
}
