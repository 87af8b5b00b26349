package kdb_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

const lockEnvDir = "KDB_LOCK_CHILD_DIR"

// TestOpen_LockChild is the child of TestOpen_ErrLockedNamesTheHolder: it
// does nothing unless KDB_LOCK_CHILD_DIR is set, and then tries to open
// that store and prints the error.
func TestOpen_LockChild(t *testing.T) {
	dir := os.Getenv(lockEnvDir)
	if dir == "" {
		return
	}
	db, err := kdb.Open(dir, nil)
	if err == nil {
		db.Close()
		fmt.Println("RESULT opened")
		return
	}
	fmt.Printf("RESULT locked=%v %v\n", errors.Is(err, kdb.ErrLocked), err)
}

// ErrLocked says whether the store is held by this process (a second Open
// in the same process) or by another one.
func TestOpen_ErrLockedNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kdb.Open(dir, nil)
	if !errors.Is(err, kdb.ErrLocked) || !strings.Contains(err.Error(), "held by this process") {
		t.Errorf("second Open in the same process: %v; want ErrLocked saying held by this process", err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestOpen_LockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockEnvDir+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "RESULT locked=true") || !strings.Contains(string(out), "held by another process") ||
		strings.Contains(string(out), "held by this process") {
		t.Errorf("Open in another process: %s; want ErrLocked saying held by another process", out)
	}

	// Once closed, the store opens again, in this process and in another.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(exe, "-test.run=^TestOpen_LockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockEnvDir+"="+dir)
	if out, err = cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "RESULT opened") {
		t.Errorf("child open after Close: %v\n%s", err, out)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	db.Close()
}
