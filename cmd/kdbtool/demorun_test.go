package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestDemo_SecondDemoOfSameDirIsRefused: a second 'kdbtool demo DIR'
// started while one runs found the store's lock free (between the first
// one's kill of its writer and its reopen nobody holds it), removed DIR and
// DIR-scan and rebuilt them, and the first failed ("copying the crashed
// store: open DIR-scan/db.free: no such file or directory"; an outside
// tester's script, 16 of 25 runs). Here the first demo stops right in that
// window (after the kill, before the copy): a second demo of the same DIR,
// and one whose DIR is the first one's DIR-scan, is refused at once with
// ErrLocked, exit 3, naming the running demo's lock, and touches nothing;
// the first then finishes with every key there. The lock file stays,
// empty, and the next demo takes it again.
func TestDemo_SecondDemoOfSameDirIsRefused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "demo")
	first := exec.Command(os.Args[0], "demo", "-size-mib", "1", "-seed", "1", dir)
	first.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_PAUSE_DEMO=1")
	stdin, err := first.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var firstOut strings.Builder
	first.Stdout = &firstOut
	pipe, err := first.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	defer func() {
		if !done {
			first.Process.Kill()
			first.Wait()
		}
	}()
	var said strings.Builder
	sc := bufio.NewScanner(pipe)
	paused := false
	for !paused && sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		paused = sc.Text() == pausedDemo
	}
	if !paused {
		t.Fatalf("the first demo never paused after its kill; stderr:\n%s", said.String())
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
		}
	}()

	before := fileStates(t, dir)
	for _, second := range []string{dir, dir + "-scan"} {
		code, out, errs := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", second)
		lock := filepath.Join(root, ".demo"+demoLockSuffix)
		if second != dir {
			lock = filepath.Join(root, ".demo-scan"+demoLockSuffix)
		}
		if code != exitIO || !strings.Contains(errs, kdb.ErrLocked.Error()) || !strings.Contains(errs, "another kdbtool demo") ||
			!strings.Contains(errs, lock) {
			t.Errorf("demo %s while a demo of %s runs: exit %d, stdout %q, stderr %q; want exit %d, %q naming %s",
				second, dir, code, out, errs, exitIO, kdb.ErrLocked, lock)
		}
	}
	requireUntouched(t, "a refused demo", before, fileStates(t, dir))
	if _, err := os.Stat(dir + "-scan"); !os.IsNotExist(err) {
		t.Errorf("%s-scan exists before the first demo copied its store: %v", dir, err)
	}

	stdin.Close()
	<-drained
	err = first.Wait()
	done = true
	if err != nil || !strings.Contains(firstOut.String(), "missing: 0 (trusted) and 0 (scan)") {
		t.Fatalf("the first demo, after a second was refused: %v\nstdout:\n%s\nstderr:\n%s", err, firstOut.String(), said.String())
	}
	if st, err := os.Stat(filepath.Join(root, ".demo"+demoLockSuffix)); err != nil || st.Size() != 0 {
		t.Errorf("the demo's lock file after its run: %v, %v; want it kept, empty", st, err)
	}
	if code, out, errs := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir); code != exitOK || !strings.Contains(out, "missing: 0") {
		t.Errorf("a demo of %s after the first one ended: exit %d, stdout %q, stderr %q", dir, code, out, errs)
	}
}

// TestDemo_HeldDemoLockIsRefused: a demo lock held by another process
// (here this test's; the demo runs as a child) makes demo exit 3 with
// ErrLocked naming it before it judges or removes anything: an earlier
// demo's DIR and DIR-scan are left as they were.
func TestDemo_HeldDemoLockIsRefused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "demo")
	for _, d := range []string{dir, dir + "-scan"} {
		if err := markDemoDir(d); err != nil {
			t.Fatal(err)
		}
	}
	lock := filepath.Join(root, ".demo"+demoLockSuffix)
	lk, err := vfs.OS.Lock(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	before, beforeScan := fileStates(t, dir), fileStates(t, dir+"-scan")
	code, _, errs := runChildTimeout(t, 2*time.Minute, "demo", "-size-mib", "1", dir)
	if code != exitIO || !strings.Contains(errs, kdb.ErrLocked.Error()) || !strings.Contains(errs, lock) {
		t.Errorf("demo with its lock held: exit %d, stderr %q; want exit %d, %q naming %s", code, errs, exitIO, kdb.ErrLocked, lock)
	}
	requireUntouched(t, "demo", before, fileStates(t, dir))
	requireUntouched(t, "demo", beforeScan, fileStates(t, dir+"-scan"))
}
