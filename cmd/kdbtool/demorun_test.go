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
// ErrLocked naming it before it removes anything: an earlier
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

// TestDemo_RefusalLeavesNothingAndScanDirIsChecked: a demo run from inside
// DIR-scan (cd d-scan; kdbtool demo ../d) deleted the directory the shell
// stood in, then failed (getwd) with the first demo's stores gone: DIR-scan
// is now checked as DIR is, exit 2. And a demo refused for what DIR holds
// (another program's file) left its lock files beside DIR: the directories
// are judged before the lock is taken, so a refusal creates nothing.
func TestDemo_RefusalLeavesNothingAndScanDirIsChecked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	scan := filepath.Join(root, "d-scan")
	docs := filepath.Join(root, "docs")
	for _, d := range []string{scan, docs} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(docs, "letter.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(cwd string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], append([]string{"demo", "-size-mib", "1"}, args...)...)
		cmd.Dir = cwd
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
		var errb strings.Builder
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, errb.String()
	}
	for _, dir := range []string{"../d", filepath.Join(root, "d")} {
		if code, errs := run(scan, dir); code != exitUsage || !strings.Contains(errs, "-scan beside it, is the current directory") {
			t.Errorf("demo %s from inside d-scan: exit %d, %q; want exit 2 naming DIR-scan", dir, code, errs)
		}
	}
	if code, errs := run(root, docs); code != exitUsage || !strings.Contains(errs, "holds letter.txt, which is not a store's file") {
		t.Errorf("demo of a directory of another program's files: exit %d, %q; want exit 2", code, errs)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "d-scan" || names[1] != "docs" {
		t.Errorf("after the refused demos %s holds %q, want only d-scan and docs", root, names)
	}
	if ents, err := os.ReadDir(scan); err != nil || len(ents) != 0 {
		t.Errorf("d-scan after the refused demos: %d entries, %v; want it empty and there", len(ents), err)
	}
}
