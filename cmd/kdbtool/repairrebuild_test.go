package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pageFiles is the state of the page-file files of the store in dir (bytes
// and modification time), the ones a rebuild of the index replaces.
func pageFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := fileStates(t, dir)
	for n := range m {
		if !strings.HasPrefix(n, "db.") || strings.Contains(n, ".broken") {
			delete(m, n)
		}
	}
	return m
}

// killRepairWhenPaused runs kdbtool args in a child that pauses once repair
// --apply has done step, and kills it there with SIGKILL (a child that
// never pauses has exited by then: the kill fails the test).
func killRepairWhenPaused(t *testing.T, args []string, step string) {
	t.Helper()
	signalWhenPaused(t, args, "KDBTOOL_TEST_PAUSE_REPAIR="+step, pausedRepairing, os.Kill)
}

// TestRepair_RebuildFailedCopyLeavesStoreAsItWas: repair --apply
// --rebuild-index moved db.data, db.redo and db.free* aside before it
// copied the last journal segment; a copy that failed (a full disk: here
// "ulimit -f", EFBIG) left a store without db.data that no open took,
// reported as "not done". The copy now comes first: the repair fails with
// exit 3 saying the store is as it was, which it is (every file of the
// page file untouched, every key there), and it runs without the limit.
func TestRepair_RebuildFailedCopyLeavesStoreAsItWas(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 3000)
	want := storeContent(t, dir)
	before := pageFiles(t, dir)
	cmd := exec.Command(os.Args[0], "repair", "--apply", "--rebuild-index", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_FSIZE=102400")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitIO ||
		!strings.Contains(errb.String(), "file too large") || !strings.Contains(errb.String(), "which is as it was") {
		t.Errorf("repair --apply --rebuild-index under a file size limit: %v, stderr %q; want exit %d, the error, and that the store is as it was", err, errb.String(), exitIO)
	}
	requireUntouched(t, "a rebuild whose copy failed", before, pageFiles(t, dir))
	if got := storeContent(t, dir); got != want {
		t.Fatal("the store differs after a failed rebuild")
	}
	if code, out, errs := runTool(t, "repair", "--apply", "--rebuild-index", dir); code != exitOK || !strings.Contains(out, "check ok true") {
		t.Fatalf("repair --apply --rebuild-index without the limit: exit %d\n%s%s", code, out, errs)
	}
	if got := storeContent(t, dir); got != want {
		t.Fatal("the rebuilt store differs from the one before")
	}
}

// TestRepair_RebuildKilledOrInterruptedAtEachStep: a rebuild of the index
// killed (SIGKILL) or interrupted (SIGINT, SIGTERM) after each of its steps
// leaves a store that opens with every key: before the new db.data is in
// place (the segment copied, the new db.data made beside it) the page file
// is untouched, and an interrupt stops there with exit 130 saying so; once
// it is in place the open (this repair's or the next one's) rebuilds it,
// and an interrupt lets this repair's open finish first. A kill left
// db.data missing ("db.data is missing, but db-1.log remain").
func TestRepair_RebuildKilledOrInterruptedAtEachStep(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 3000)
	want := storeContent(t, src)
	fresh := func(t *testing.T) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "store")
		if err := copyDir(src, dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, step := range []string{"copied", "made", "swapped"} {
		committed := step == "swapped"
		dir := fresh(t)
		before := pageFiles(t, dir)
		args := []string{"repair", "--apply", "--rebuild-index", dir}
		killRepairWhenPaused(t, args, step)
		if !committed {
			requireUntouched(t, "a rebuild killed after "+step, before, pageFiles(t, dir))
		}
		if got := storeContent(t, dir); got != want {
			t.Errorf("killed after %s: the store differs", step)
		}
		if code, out, errs := runTool(t, "repair", "--apply", "--rebuild-index", dir); code != exitOK || !strings.Contains(out, "check ok true") {
			t.Errorf("killed after %s, the repair again: exit %d\n%s%s", step, code, out, errs)
		}
		if got := storeContent(t, dir); got != want {
			t.Errorf("killed after %s, repaired again: the store differs", step)
		}

		for _, sig := range interruptSignals(t) {
			dir := fresh(t)
			before := pageFiles(t, dir)
			code, said := signalWhenPaused(t, args, "KDBTOOL_TEST_PAUSE_REPAIR="+step, pausedRepairing, sig)
			wantSaid := "which is as it was"
			if committed {
				wantSaid = "the repair was carried out and the store closed"
			}
			if code != exitInterrupted || !strings.Contains(said, "interrupted") || !strings.Contains(said, wantSaid) {
				t.Errorf("%v after %s: exit %d, stderr %q; want %d, 'interrupted' and %q", sig, step, code, said, exitInterrupted, wantSaid)
			}
			if !committed {
				requireUntouched(t, "a rebuild interrupted after "+step, before, pageFiles(t, dir))
			}
			if _, err := os.Stat(filepath.Join(dir, rebuildTmp)); !os.IsNotExist(err) {
				t.Errorf("%v after %s left %s (%v)", sig, step, rebuildTmp, err)
			}
			if got := storeContent(t, dir); got != want {
				t.Errorf("%v after %s: the store differs", sig, step)
			}
		}
	}
}
