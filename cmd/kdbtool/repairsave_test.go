package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// brokenCopies lists the names in dir that a saved backup has
// (<name>.broken, <name>.broken.N): a temporary copy is not one.
func brokenCopies(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.Contains(e.Name(), ".broken") && !strings.HasSuffix(e.Name(), ".tmp") {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestRepair_KilledWhileSavingLeavesNoBroken: repair --apply SIGKILLed in
// the middle of saving db.data's backup (the child stops there, with part
// of the copy written, and says so; then the test kills it) leaves no
// db.data.broken that would look like a whole backup. The repair run
// again saves the whole file, repairs the store and leaves no temporary
// copy.
func TestRepair_KilledWhileSavingLeavesNoBroken(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 300)
	staleFree(t, dir)
	data, err := os.ReadFile(filepath.Join(dir, "db.data"))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) <= 64<<10 {
		t.Fatalf("db.data is %d bytes: too small to be killed in the middle of its copy", len(data))
	}
	cmd := exec.Command(os.Args[0], "repair", "--apply", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_PAUSE_SAVE=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	sc := bufio.NewScanner(pipe)
	paused := false
	for !paused && sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		paused = strings.HasPrefix(sc.Text(), pausedSaving)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !paused {
		t.Fatalf("the repair never paused in a save; stderr:\n%s", said.String())
	}
	if names := brokenCopies(t, dir); len(names) != 0 {
		t.Fatalf("a repair killed while saving left %v, which look like whole backups (%s)", names, strings.TrimSpace(said.String()))
	}

	code, out, errs := runTool(t, "repair", "--apply", dir)
	if code != exitOK || !strings.Contains(out, "check ok true") {
		t.Fatalf("repair --apply again: exit %d\n%s%s", code, out, errs)
	}
	saved, err := os.ReadFile(filepath.Join(dir, "db.data.broken"))
	if err != nil || !bytes.Equal(saved, data) {
		t.Fatalf("db.data.broken after the second repair: %d bytes, want the %d of db.data before (%v)", len(saved), len(data), err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("left after the second repair: %s", e.Name())
		}
	}
}

// TestRepair_FailedSaveLeavesNoBrokenAndSaysNothingDone: repair --apply
// whose backup copy fails (the child runs under "ulimit -f", so a write
// past the limit gets EFBIG; Go ignores SIGXFSZ) exits 3 naming the
// error, leaves no partial .broken (nor a temporary copy, nor any other
// change), and does not print "did:" for work it never did. Without the
// limit it repairs the store.
func TestRepair_FailedSaveLeavesNoBrokenAndSaysNothingDone(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := makeStore(t, 300)
	staleFree(t, dir)
	st, err := os.Stat(filepath.Join(dir, "db.data"))
	if err != nil {
		t.Fatal(err)
	}
	// 128 blocks: 64 KiB (or 128 KiB where a block is 1 KiB).
	if st.Size() <= 128<<10 {
		t.Fatalf("db.data is %d bytes: too small to exceed the limit", st.Size())
	}
	before := fileStates(t, dir)
	for _, args := range [][]string{{"repair", "--apply", dir}, {"repair", "--apply", "--json", dir}} {
		cmd := exec.Command(sh, append([]string{"-c", `ulimit -f 128 && exec "$0" "$@"`, os.Args[0]}, args...)...)
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != exitIO || !strings.Contains(errb.String(), "file too large") {
			t.Errorf("%v under ulimit -f: exit %d, stderr %q; want exit %d and the error", args, code, errb.String(), exitIO)
		}
		if strings.Contains(out.String(), "did:") || strings.Contains(out.String(), `"done": true`) {
			t.Errorf("%v failed but says it did the work:\n%s", args, out.String())
		}
		requireUntouched(t, "a repair whose save failed", before, fileStates(t, dir))
	}
	code, out, errs := runTool(t, "repair", "--apply", dir)
	if code != exitOK || !strings.Contains(out, "did: rebuild the free list") || !strings.Contains(out, "check ok true") {
		t.Fatalf("repair --apply without the limit: exit %d\n%s%s", code, out, errs)
	}
}
