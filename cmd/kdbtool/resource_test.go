package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestInspectCheck_OutOfFileDescriptorsIsNotDamage: a store whose live
// journal segments outnumber the file descriptors the tool may open. The
// journal keeps at most MaxOpenSegments of them open (its default follows
// the descriptor limit), so with 30 descriptors inspect and check run
// (before, each failed: a descriptor per segment). With too few for even
// that (10), running out is an I/O error (exit 3) that says it is not
// damage; inspect exited 1 with "error: journal: ... too many open files",
// and check printed "problems found", which read as a damaged journal.
func TestInspectCheck_OutOfFileDescriptorsIsNotDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3000 { // values over ValueThreshold stay in the journal: every segment live
		if err := db.Put("t", fmt.Appendf(nil, "k%05d", i), make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "db-*.log"))
	if err != nil || len(segs) < 40 {
		t.Fatalf("%d segments (%v): the test needs more than the child's 30 descriptors", len(segs), err)
	}
	for _, cmdName := range []string{"inspect", "check"} {
		cmd := exec.Command(os.Args[0], cmdName, dir)
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_NOFILE=30")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s with 30 descriptors and %d segments: %v, want success\n%s", cmdName, len(segs), err, out)
		}
		cmd = exec.Command(os.Args[0], cmdName, dir)
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_NOFILE=10")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitIO {
			t.Errorf("%s with 10 descriptors: %v, want exit %d\n%s", cmdName, err, exitIO, out)
			continue
		}
		s := string(out)
		if !strings.Contains(s, "too many open files") || !strings.Contains(s, "not damage") || strings.Contains(s, "problems found") {
			t.Errorf("%s with 10 descriptors: want the error called not damage, no \"problems found\"\n%s", cmdName, s)
		}
	}
	// With enough descriptors the same store is fine.
	if code, out, errs := runTool(t, "check", dir); code != exitOK {
		t.Fatalf("check: exit %d\n%s%s", code, out, errs)
	}
}

// TestInspect_UnwrittenMetaSlot: a store's second meta slot, all zero
// until its first checkpoint after creation (Open takes it: a crash during
// the creation leaves the slot so), is "never written", not a damaged
// slot ("NOT intact: bad magic", a warning).
func TestInspect_UnwrittenMetaSlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1, NoCheckpointOnClose: true, PageSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Slot 1 is page 2 (docs/FORMAT.md): as before the first checkpoint.
	f, err := os.OpenFile(filepath.Join(dir, "db.data"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), 2*4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runTool(t, "inspect", dir)
	if code != exitOK || !strings.Contains(out, "never written") || strings.Contains(out, "NOT intact") || strings.Contains(out, "warning") {
		t.Fatalf("inspect: exit %d\n%s%s", code, out, errs)
	}
}
