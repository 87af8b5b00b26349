package main

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestMain lets a test run the test binary as kdbtool itself (for tests
// that must SIGKILL a real process): KDBTOOL_TEST_MAIN=1 makes it main.
func TestMain(m *testing.M) {
	if os.Getenv("KDBTOOL_TEST_MAIN") == "1" {
		// KDBTOOL_TEST_NOFILE=N: run with at most N file descriptors.
		if n, err := strconv.ParseUint(os.Getenv("KDBTOOL_TEST_NOFILE"), 10, 64); err == nil {
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				os.Exit(99)
			}
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
