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

// Deleting the lock file of a live store does not let a second writer in,
// in this process or another: the store's directory is locked too. (With
// the lock file alone, the next Open created a new one and locked it: two
// writers on one store, acknowledged writes lost, found by hand.) Once the
// holder closes, the store opens again and its writes are all there.
func TestOpen_LockFileDeletedUnderALiveStore(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir + "/lock"); err != nil {
		t.Fatal(err)
	}
	if db2, err := kdb.Open(dir, nil); err == nil {
		db2.Close()
		t.Fatal("a second Open in this process succeeded after the lock file was deleted")
	} else if !errors.Is(err, kdb.ErrLocked) || !strings.Contains(err.Error(), "held by this process") {
		t.Errorf("second Open in the same process: %v; want ErrLocked saying held by this process", err)
	}
	if err := os.Remove(dir + "/lock"); err != nil { // the failed Open created it again
		t.Fatal(err)
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
	if !strings.Contains(string(out), "RESULT locked=true") || !strings.Contains(string(out), "held by another process") {
		t.Errorf("Open in another process after the lock file was deleted: %s; want ErrLocked saying held by another process", out)
	}
	if err := db.Put("t", []byte("k2"), []byte("v2")); err != nil {
		t.Fatalf("the holder's write after the refused Opens: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer db.Close()
	for _, k := range []string{"k", "k2"} {
		if _, err := db.Get("t", []byte(k)); err != nil {
			t.Errorf("%s after reopen: %v", k, err)
		}
	}
}
