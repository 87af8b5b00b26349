package main

import (
	"errors"
	"testing"
)

type closer struct{ err error }

func (c closer) Close() error { return c.err }

type failed struct{ err error }

func (f failed) Err() error { return f.err }

// The broker's stop reports a store write that failed while it served
// (the hook's Err), though the server and the store close without error:
// the command then exits 1, not 0 with "stopped".
func TestShutdown_ReportsStoreFailure(t *testing.T) {
	errDisk := errors.New("injected I/O error")
	if err := shutdown(closer{}, failed{errDisk}, closer{}); !errors.Is(err, errDisk) {
		t.Errorf("shutdown after a store failure: %v, want it reported", err)
	}
	errClose := errors.New("close failed")
	if err := shutdown(closer{errClose}, failed{}, closer{}); !errors.Is(err, errClose) {
		t.Errorf("shutdown with the server's Close failing: %v, want it reported", err)
	}
	if err := shutdown(closer{}, failed{}, closer{}); err != nil {
		t.Errorf("a clean shutdown: %v", err)
	}
}
