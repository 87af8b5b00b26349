package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// importLeftovers lists the temporary directories of imports into dir.
func importLeftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".import-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestImport_KilledLeavesNoStore: an import SIGKILLed halfway (it reads
// the snapshot from a FIFO that the test fills halfway and holds open, so
// the kill lands mid-import every time) leaves no DIR: check does not
// call anything there a store. The import run again succeeds, says it
// removed the leftover, and leaves none.
func TestImport_KilledLeavesNoStore(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 6000)
	imp := startPipedImport(t, src, 3, 4, nil)
	cmd, w, file, dst := imp.cmd, imp.w, imp.file, imp.dst
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	w.Close()
	if cmd.ProcessState.Success() {
		t.Fatalf("the import finished before the kill")
	}

	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a killed import left %s: %v", dst, err)
	}
	left := importLeftovers(t, dst)
	if len(left) != 1 {
		t.Fatalf("leftovers %v, want the killed import's temporary directory", left)
	}
	if fi, err := os.Stat(left[0]); err != nil || fi.Mode().Perm()&0o027 != 0 {
		t.Errorf("temporary directory %v: want no group write, no access for others (%v)", fi.Mode(), err)
	}
	if code, out, _ := runTool(t, "check", dst); code == exitOK || strings.Contains(out, "ok\n") {
		t.Errorf("check of the killed import's DIR: exit %d\n%s", code, out)
	}
	// The leftover holds a partial store, which check called "ok" (the
	// keys not yet read were simply absent): every command refuses it as
	// an unfinished import, and changes nothing in it.
	before := fileStates(t, left[0])
	for _, args := range [][]string{{"check"}, {"inspect"}, {"dump", "--index", "users"}, {"recover"}, {"repair"}, {"repair", "--apply"},
		{"export", "EXPORT"}, {"verify", "--read-only", "--index", "users", "--acked", "ACKED"}, {"stress", "--count", "10"}} {
		args := append([]string{args[0], left[0]}, args[1:]...)
		for i, a := range args {
			switch a {
			case "EXPORT":
				args[i] = filepath.Join(t.TempDir(), "x.kdbx")
			case "ACKED":
				args[i] = filepath.Join(t.TempDir(), "acked")
				if err := os.WriteFile(args[i], []byte("user-00001\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		if code, out, errs := runTool(t, args...); code != exitProblems || !strings.Contains(out+errs, "is an unfinished import") ||
			!strings.Contains(out+errs, "delete the directory and import again") {
			t.Errorf("%v of a killed import's leftover: exit %d, want 1 refusing an unfinished import:\n%s%s", args[:1], code, out, errs)
		}
	}
	requireUntouched(t, "the commands on the leftover", before, fileStates(t, left[0]))

	code, m := runJSON(t, "import", "--json", file, dst)
	if code != exitOK {
		t.Fatalf("import again: exit %d: %v", code, m)
	}
	if !strings.Contains(jsonString(m["warnings"]), "removed what 1 interrupted import(s) into "+dst+" left") {
		t.Errorf("import again: warnings %v", m["warnings"])
	}
	if left := importLeftovers(t, dst); len(left) != 0 {
		t.Errorf("left after the second import: %v", left)
	}
	if code, out, _ := runTool(t, "check", dst); code != exitOK {
		t.Errorf("check of the import: exit %d\n%s", code, out)
	}
	if storeContent(t, dst) != storeContent(t, src) {
		t.Errorf("the imported store differs from the exported one")
	}
}

// TestImport_Targets: an import into an existing empty directory works; a
// non-empty directory (not a store) is refused, exit 1, and left as it was;
// a failed import leaves no temporary directory.
func TestImport_Targets(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 100)
	file := filepath.Join(t.TempDir(), "s.kdbx")
	if code, _, errs := runTool(t, "export", src, file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	empty := t.TempDir()
	if code, _, errs := runTool(t, "import", file, empty); code != exitOK {
		t.Errorf("import into an empty directory: exit %d: %s", code, errs)
	}
	if code, _, _ := runTool(t, "check", empty); code != exitOK {
		t.Errorf("check after the import into an empty directory: exit %d", code)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "notes"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runTool(t, "import", file, full)
	if code != exitProblems || !strings.Contains(errs, "is not empty") {
		t.Errorf("import into a non-empty directory: exit %d: %s", code, errs)
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("the non-empty directory changed: %v", ents)
	}
	if left := importLeftovers(t, full); len(left) != 0 {
		t.Errorf("a refused import left %v", left)
	}
}

// TestExport_RemovesStaleTemp: the temporary file a killed export left
// (.FILE.tmp-DIGITS) is removed by the next export to FILE, which says so;
// one whose lock is held (an export running meanwhile) and names of other
// patterns are left alone.
func TestExport_RemovesStaleTemp(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	out := t.TempDir()
	file := filepath.Join(out, "snap.kdbx")
	stale := filepath.Join(out, ".snap.kdbx.tmp-123456")
	busy := filepath.Join(out, ".snap.kdbx.tmp-777")
	other := filepath.Join(out, ".snap.kdbx.tmp-12ab")
	for _, p := range []string{stale, busy, other} {
		if err := os.WriteFile(p, []byte("partial snapshot"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lk, err := vfs.OS.Lock(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	code, m := runJSON(t, "export", "--json", dir, file)
	if code != exitOK {
		t.Fatalf("export: exit %d: %v", code, m)
	}
	if w := jsonString(m["warnings"]); !strings.Contains(w, "removed .snap.kdbx.tmp-123456, the temporary file of an interrupted export") ||
		strings.Contains(w, "777") {
		t.Errorf("warnings: %q", w)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale temporary file is still there: %v", err)
	}
	for _, p := range []string{busy, other} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "partial snapshot" {
			t.Errorf("%s was touched: %q %v", p, b, err)
		}
	}
	if code, _, errs := runTool(t, "import", file, filepath.Join(t.TempDir(), "copy")); code != exitOK {
		t.Errorf("import of the export: exit %d: %s", code, errs)
	}
}

// TestImport_IntoASymlink: DIR a symbolic link to an empty directory (the
// store on another disk) gets the store in that directory, and the link
// stays. Import used to remove the link as if it were the empty directory
// and rename its store there: the store landed beside the link, on the
// link's file system, and the linked directory stayed empty. A dangling
// link is refused, and left as it was.
func TestImport_IntoASymlink(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 100)
	file := filepath.Join(t.TempDir(), "s.kdbx")
	if code, _, errs := runTool(t, "export", src, file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	target := filepath.Join(t.TempDir(), "bigdisk")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	link := filepath.Join(parent, "store")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runTool(t, "import", file, link); code != exitOK {
		t.Fatalf("import into a link to an empty directory: exit %d: %s", code, errs)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(target, "db.data")); err != nil {
		t.Errorf("the linked directory holds no store: %v", err)
	}
	if code, _, errs := runTool(t, "check", link); code != exitOK {
		t.Errorf("check through the link: exit %d: %s", code, errs)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Errorf("the link's directory holds %v, want the link alone", ents)
	}

	dangling := filepath.Join(parent, "gone")
	if err := os.Symlink(filepath.Join(parent, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runTool(t, "import", file, dangling)
	if code == exitOK || !strings.Contains(errs, "symbolic link") {
		t.Errorf("import into a dangling link: exit %d: %s", code, errs)
	}
	if st, err := os.Lstat(dangling); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the dangling link was changed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(parent, "nowhere")); err == nil {
		t.Errorf("the import created the dangling link's target")
	}
}

// pipedImport is a kdbtool import child reading its snapshot from a named
// pipe, stopped part-way (startPipedImport).
type pipedImport struct {
	cmd  *exec.Cmd
	w    *os.File // the pipe's writing end, open
	file string   // the whole snapshot, as a file
	dst  string   // the import's DIR
}

// startPipedImport exports src to a file, starts "kdbtool import" of it
// into a new DIR reading from a named pipe (stderr, if not nil, gets the
// child's), writes num/den of the snapshot into the pipe and returns once
// a store is being built for DIR (in DIR or an import's temporary
// directory beside it): the import then waits for the rest.
func startPipedImport(t *testing.T, src string, num, den int, stderr io.Writer) pipedImport {
	t.Helper()
	file := filepath.Join(t.TempDir(), "full.kdbx")
	if code, _, errs := runTool(t, "export", src, file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	snap, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "imp")
	cmd := exec.Command(os.Args[0], "import", fifo, dst)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(w)
	if _, err := bw.Write(snap[:len(snap)*num/den]); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for building := false; !building; {
		for _, d := range append(importLeftovers(t, dst), dst) {
			if st, err := os.Stat(filepath.Join(d, "db-1.log")); err == nil && st.Size() > 0 {
				building = true
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no store is being built for %s", dst)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pipedImport{cmd: cmd, w: w, file: file, dst: dst}
}
