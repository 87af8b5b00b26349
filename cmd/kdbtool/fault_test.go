//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunGuarded_FaultOnAMappedFileIsAnIOError: a command whose read of a
// mapped file faults (the file cut short under the mapping: SIGBUS) ends
// with exit 3 and a line saying what happened, not the runtime's fatal
// error, stack dump and exit 2; with --json, the error document on stdout.
// Other panics are not swallowed.
func TestRunGuarded_FaultOnAMappedFileIsAnIOError(t *testing.T) {
	name := filepath.Join(t.TempDir(), "db.data")
	if err := os.WriteFile(name, bytes.Repeat([]byte{1}, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mm, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mm)
	if err := os.Truncate(name, 0); err != nil {
		t.Fatal(err)
	}
	var sink byte
	reader := command{run: func(args []string, stdout, stderr io.Writer) int {
		sink += mm[1<<15] // past the end of the file now: SIGBUS
		return exitOK
	}}
	for _, args := range [][]string{{"DIR"}, {"--json", "DIR"}} {
		var out, errb bytes.Buffer
		code := runGuarded("check", reader, args, &out, &errb)
		msg := errb.String()
		if len(args) == 2 {
			msg = out.String()
		}
		if code != exitIO || !strings.Contains(msg, "memory-mapped store file") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want exit 3 saying a mapped read failed", args, code, out.String(), errb.String())
		}
	}
	defer func() {
		if r := recover(); r != "a bug" {
			t.Errorf("a panic that is no fault: recovered %v, want it to go on", r)
		}
	}()
	runGuarded("check", command{run: func([]string, io.Writer, io.Writer) int { panic("a bug") }}, nil, io.Discard, io.Discard)
}
