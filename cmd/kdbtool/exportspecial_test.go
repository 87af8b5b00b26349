//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestExport_RefusesNonRegularFile: export renames its snapshot over FILE,
// so a FILE that is a device, a FIFO or a socket (kdbtool export DIR
// /dev/full, run as root, replaced the device node with a regular file
// and exited 0) is refused before anything is written, and left as it was.
func TestExport_RefusesNonRegularFile(t *testing.T) {
	dir := makeStore(t, 10)
	out := t.TempDir()
	fifo := filepath.Join(out, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	link := filepath.Join(out, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{fifo, link} {
		code, _, errs := runTool(t, "export", dir, file)
		if code == exitOK {
			t.Fatalf("export to a FIFO (%s): exit 0, want a refusal", file)
		}
		if !strings.Contains(errs, "not a regular file") {
			t.Errorf("export to a FIFO (%s): stderr %q, want it to say FILE is not a regular file", file, errs)
		}
		st, err := os.Lstat(fifo)
		if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("export to %s replaced the FIFO: %v %v", file, st.Mode(), err)
		}
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 2 {
		t.Errorf("export left files beside FILE: %v", ents)
	}
}
