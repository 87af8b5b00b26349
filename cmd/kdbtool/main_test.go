package main

import (
	"os"
	"testing"
)

// TestMain lets a test run the test binary as kdbtool itself (for tests
// that must SIGKILL a real process): KDBTOOL_TEST_MAIN=1 makes it main.
func TestMain(m *testing.M) {
	if os.Getenv("KDBTOOL_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
