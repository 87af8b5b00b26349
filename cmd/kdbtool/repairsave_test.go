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

// TestRepair_DataFileLinkKept: a db.data that is a symbolic link (to a
// file on another disk) stays one. A repair that opens the store writes
// through it; a rebuild of the index, which writes a new db.data by a
// rename in the store's directory, replaced the link with a regular file
// there (the file it pointed to kept the old bytes): it is refused, saying
// why and what to do, and changes nothing, as the dry run says.
func TestRepair_DataFileLinkKept(t *testing.T) {
	t.Parallel()
	link := func(t *testing.T) (dir, target string) {
		dir = makeStore(t, 3000)
		target = filepath.Join(t.TempDir(), "db.data")
		if err := os.Rename(filepath.Join(dir, "db.data"), target); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "db.data")); err != nil {
			t.Fatal(err)
		}
		return dir, target
	}
	isLink := func(t *testing.T, p string) {
		t.Helper()
		if st, err := os.Lstat(p); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer a symbolic link (%v)", p, err)
		}
	}

	// A free-list rebuild opens the store: it writes through the link.
	dir, _ := link(t)
	if err := os.Remove(filepath.Join(dir, "db.free")); err != nil {
		t.Fatal(err)
	}
	if code, m := runJSON(t, "repair", "--json", "--apply", dir); code != exitOK {
		t.Errorf("repair --apply: exit %d: %v", code, m)
	}
	isLink(t, filepath.Join(dir, "db.data"))

	// A rebuild of the index is refused, dry run or not.
	dir, target := link(t)
	before := fileStates(t, dir)
	targetBefore, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--rebuild-index"}, {"--apply", "--rebuild-index"}} {
		code, m := runJSON(t, append([]string{"repair", "--json"}, append(args, dir)...)...)
		if u := jsonString(m["unfixable"]); code != exitProblems || !strings.Contains(u, "db.data is a symbolic link to "+target) {
			t.Errorf("repair %v: exit %d, unfixable %q; want 1 refusing the rebuild over the link", args, code, u)
		}
	}
	requireUntouched(t, "repair --apply --rebuild-index", before, fileStates(t, dir))
	isLink(t, filepath.Join(dir, "db.data"))
	if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, targetBefore) {
		t.Errorf("the file db.data links to changed (%v)", err)
	}

	// So is one of a db.data the link leads to that cannot be read.
	if err := os.Truncate(target, 0); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
	if u := jsonString(m["unfixable"]); code != exitProblems || !strings.Contains(u, "db.data is a symbolic link to "+target) {
		t.Errorf("repair --apply --rebuild-index of an emptied db.data: exit %d, unfixable %q; want 1 refusing", code, u)
	}
	isLink(t, filepath.Join(dir, "db.data"))
}
