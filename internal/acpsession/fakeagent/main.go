package fakeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// IsHelper reports whether this process was started as the fake agent
// (HelperEnv=1): a TestMain then calls os.Exit(Main()).
func IsHelper() bool { return os.Getenv(HelperEnv) == "1" }

// Main runs the fake agent on the process's stdio and returns its exit
// status. With ModeEnv=sleep it only sleeps until killed (a forked
// grandchild).
func Main() int {
	if os.Getenv(ModeEnv) == "sleep" {
		for {
			time.Sleep(time.Hour)
		}
	}
	cfg, err := LoadConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake-acp-agent:", err)
		return 2
	}
	if cfg.IgnoreSigterm {
		signal.Ignore(syscall.SIGTERM)
	}
	err = serve(context.Background(), os.Stdin, os.Stdout, os.Stderr, cfg, true)
	var ee *ExitError
	switch {
	case errors.As(err, &ee):
		return ee.Code
	case err != nil:
		fmt.Fprintln(os.Stderr, "fake-acp-agent:", err)
		return 1
	}
	return 0
}
