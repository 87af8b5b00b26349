package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// everyCommand is each subcommand that reads a store, run on dir (acked:
// a --acked file for verify).
func everyCommand(t *testing.T, dir, acked string) [][]string {
	t.Helper()
	return [][]string{
		{"inspect", dir}, {"check", dir}, {"recover", dir}, {"verify", "--acked", acked, dir},
		{"repair", dir}, {"repair", "--apply", dir}, {"dump", "--index", "users", dir},
		{"export", dir, filepath.Join(t.TempDir(), "x.kdbx")},
	}
}

func ackedFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(f, []byte("user-00001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestExitCodes_DataFileNotRegular: db.data replaced by a directory or a
// FIFO is a damaged store for every command: exit 1 with one message (it
// was 1 for inspect and check, 3 for recover and verify, and a FIFO made
// inspect block for ever). The commands run as child processes with a
// timeout.
func TestExitCodes_DataFileNotRegular(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"directory", "FIFO"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 100)
			data := filepath.Join(dir, "db.data")
			if err := os.Rename(data, data+".moved"); err != nil {
				t.Fatal(err)
			}
			var err error
			if kind == "directory" {
				err = os.Mkdir(data, 0o750)
			} else {
				err = syscall.Mkfifo(data, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, args := range everyCommand(t, dir, ackedFile(t)) {
				code, out, errs := runChildTimeout(t, 20*time.Second, args...)
				if code != exitProblems || !strings.Contains(out+errs, "db.data is a "+kind+", not a regular file") {
					t.Errorf("%q: exit %d, want 1 naming the %s:\n%s%s", args, code, kind, out, errs)
				}
			}
		})
	}
}

// TestExitCodes_LostDataFileVerify: verify on a store that lost db.data
// exits 1 (ErrCorrupt), as check and recover do; it was 3.
func TestExitCodes_LostDataFileVerify(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	if err := os.Remove(filepath.Join(dir, "db.data")); err != nil {
		t.Fatal(err)
	}
	for _, args := range everyCommand(t, dir, ackedFile(t)) {
		code, out, errs := runTool(t, args...)
		if code != exitProblems || !strings.Contains(out+errs, "db.data is missing") {
			t.Errorf("%q: exit %d, want 1:\n%s%s", args, code, out, errs)
		}
	}
}

// TestOutput_NoIntactMetaSlotOneLine: with both meta slots damaged, the
// error (errors.Join of one error per slot) is one line of human output
// everywhere, naming both slots.
func TestOutput_NoIntactMetaSlotOneLine(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	for _, off := range []int64{4096 + 40, 8192 + 40} {
		if err := kdbtest.FlipBit(vfs.OS, filepath.Join(dir, "db.data"), off, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range everyCommand(t, dir, ackedFile(t)) {
		code, out, errs := runTool(t, args...)
		if code != exitProblems {
			t.Errorf("%q: exit %d, want 1", args, code)
		}
		found := false
		for _, line := range strings.Split(out+errs, "\n") {
			if strings.Contains(line, "no intact meta slot") {
				found = true
				if !strings.Contains(line, "meta slot 0") || !strings.Contains(line, "meta slot 1") {
					t.Errorf("%q: the error is not one line naming both slots: %q", args, line)
				}
			} else if strings.Contains(line, "meta slot 1: checksum mismatch") {
				t.Errorf("%q: a slot's error on a line of its own: %q", args, line)
			}
		}
		if !found {
			t.Errorf("%q: no \"no intact meta slot\":\n%s%s", args, out, errs)
		}
	}
}

// TestRepair_AdviceWhenJournalCollected: a store whose db-1.log is gone
// (its index still refers to values kept there) cannot be rebuilt by
// --rebuild-index, so repair must not advise it: it advises recover
// --skip-damaged, which works.
func TestRepair_AdviceWhenJournalCollected(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 6000)
	if err := os.Remove(filepath.Join(dir, "db-1.log")); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "repair", "--json", dir)
	unfixable := jsonString(m["unfixable"])
	if code != exitProblems || strings.Contains(unfixable, "rerun with --rebuild-index") ||
		!strings.Contains(unfixable, "the journal starts at db-2.log, not db-1.log") ||
		!strings.Contains(unfixable, "kdbtool recover --skip-damaged") {
		t.Errorf("repair: exit %d, unfixable:\n%s", code, unfixable)
	}
	// What it would have advised is refused, saying the same.
	code, m = runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
	if code != exitProblems || !strings.Contains(jsonString(m["unfixable"]), "kdbtool recover --skip-damaged") {
		t.Errorf("repair --apply --rebuild-index: exit %d, %v", code, m["unfixable"])
	}
	// What it advises works.
	if code, _, errs := runTool(t, "recover", "--skip-damaged", dir); code != exitOK {
		t.Errorf("recover --skip-damaged: exit %d: %s", code, errs)
	}
}

// TestRepair_ShortDataFile: db.data cut to half its page count. Open refuses
// it, so a free-list rebuild (recover --force-scan, repair --apply) cannot
// help and no message may advise one: check names the short page file and
// advises repair --rebuild-index (the journal begins at db-1.log), which
// works.
func TestRepair_ShortDataFile(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 6000)
	in, err := pagefile.Inspect(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "db.data"), int64(in.Meta.PageCount/2)*int64(in.PageSize)); err != nil {
		t.Fatal(err)
	}
	want := "shorter than its"
	for _, cmd := range []string{"inspect", "check", "repair"} {
		code, m := runJSON(t, cmd, "--json", dir)
		all := fmt.Sprint(m["problems"], m["unfixable"], m["actions"])
		if code != exitProblems || !strings.Contains(all, want) {
			t.Errorf("%s: exit %d, want 1 with %q: %s", cmd, code, want, all)
		}
		if strings.Contains(all, "rebuild it: kdbtool recover --force-scan") || strings.Contains(all, "recover --force-scan does the same") ||
			strings.Contains(all, actRebuildFreeList) {
			t.Errorf("%s: advises a free-list rebuild for a short db.data: %s", cmd, all)
		}
		if cmd == "check" && !strings.Contains(all, "kdbtool repair --apply --rebuild-index rebuilds it") {
			t.Errorf("check: no --rebuild-index advice: %s", all)
		}
		if cmd == "repair" && !strings.Contains(all, "rerun with --rebuild-index") {
			t.Errorf("repair: no --rebuild-index advice: %s", all)
		}
	}
	if code, _, _ := runTool(t, "recover", "--force-scan", dir); code != exitProblems {
		t.Errorf("recover --force-scan on a short db.data: exit %d, want 1 (it cannot help)", code)
	}
	code, m := runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
	if code != exitOK {
		t.Fatalf("repair --apply --rebuild-index: exit %d: %v", code, m)
	}
	if code, out, _ := runTool(t, "check", dir); code != exitOK {
		t.Errorf("check after the rebuild: exit %d\n%s", code, out)
	}
}

// TestExitCodes_SegmentNotRegular: a journal segment replaced by a
// directory or a FIFO is a damaged store, as a db.data that is not a
// regular file is: every command exits 1 naming the segment. It was exit 3,
// "could not be read (an I/O or resource error, not damage)" and "check
// incomplete", which tells the operator to retry.
func TestExitCodes_SegmentNotRegular(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"directory", "FIFO"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 6000)
			segs := segments(t, dir)
			if len(segs) < 2 {
				t.Fatalf("segments %v: want two or more", segs)
			}
			seg := filepath.Join(dir, segs[0].ID.String())
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
			var err error
			if kind == "directory" {
				err = os.Mkdir(seg, 0o750)
			} else {
				err = syscall.Mkfifo(seg, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, args := range everyCommand(t, dir, ackedFile(t)) {
				code, out, errs := runChildTimeout(t, 20*time.Second, args...)
				if code != exitProblems || !strings.Contains(out+errs, segs[0].ID.String()+": not a regular file") {
					t.Errorf("%q: exit %d, want 1 naming %s, not a regular file:\n%s%s", args, code, segs[0].ID, out, errs)
				}
			}
			// recover --skip-damaged refuses it too: repair's advice is to
			// move it out first.
			_, m := runJSON(t, "repair", "--json", dir)
			if u := jsonString(m["unfixable"]); !strings.Contains(u, "once it is moved out") {
				t.Errorf("repair: unfixable %q, want the advice to move it out first", u)
			}
		})
	}
}

// TestRecover_JSONWhenCloseFails: recover --json prints one JSON document
// with the error when the store opened but its closing checkpoint failed
// (here a symbolic link planted at db.free.tmp once the store is open, in a
// child process, so db.free cannot be written: the checkpoint never
// follows it), as it does when the open fails; it printed nothing on
// stdout, and exit 3.
func TestRecover_JSONWhenCloseFails(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 100)
	outside := filepath.Join(t.TempDir(), "outside")
	cmd := exec.Command(os.Args[0], "recover", "--json", "--force-scan", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_PLANT_FREE_TMP="+outside)
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != exitIO || !strings.Contains(out.String(), `"error": "close: `) || !strings.Contains(out.String(), "db.free.tmp") {
		t.Errorf("recover --json: exit %d, want 3 and a JSON error naming db.free.tmp on stdout:\nstdout: %s\nstderr: %s", code, out.String(), errs.String())
	}
	if _, err := os.Lstat(outside); !os.IsNotExist(err) {
		t.Errorf("the closing checkpoint wrote through the link at db.free.tmp: %v", err)
	}
}

// TestJSON_ErrorBeforeReport: every subcommand that takes --json prints
// one JSON document naming the error when it fails before its report (no
// store there, a db.data that cannot be stat'ed or is a directory, a live
// store where the command needs the lock, a bad argument after the flags
// were parsed), {"error": ..., "corrupt": ...}, with the exit codes
// unchanged. check, inspect, repair and recover printed nothing on stdout
// then; dump, export, import, verify and demo still did. stress, whose
// stdout is the list of acknowledged keys, prints its --json summary on
// stderr, and so its error document too, instead of the human line.
func TestJSON_ErrorBeforeReport(t *testing.T) {
	t.Parallel()
	loop := makeStore(t, 100)
	if err := os.Rename(filepath.Join(loop, "db.data"), filepath.Join(loop, "db.data.moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("db.data", filepath.Join(loop, "db.data")); err != nil {
		t.Fatal(err)
	}
	dirData := makeStore(t, 100)
	if err := os.Remove(filepath.Join(dirData, "db.data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dirData, "db.data"), 0o750); err != nil {
		t.Fatal(err)
	}
	store := makeStore(t, 100)
	live := makeStore(t, 100)
	db, err := kdb.Open(live, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acked := ackedFile(t)
	garbage := filepath.Join(t.TempDir(), "garbage.kdbx")
	if err := os.WriteFile(garbage, []byte("not an export at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "notes.txt"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func() string { return filepath.Join(t.TempDir(), "none") }
	cases := []struct {
		args     []string
		code     int
		says     string
		corrupt  bool
		onStderr bool // stress: the JSON document is on stderr, stdout (the acknowledged keys) is empty
	}{
		{[]string{"check", "--json", none()}, exitIO, "is not a kdb store", false, false},
		{[]string{"inspect", "--json", none()}, exitIO, "is not a kdb store", false, false},
		{[]string{"repair", "--json", none()}, exitIO, "is not a kdb store", false, false},
		{[]string{"repair", "--json", "--apply", none()}, exitIO, "no such file", false, false},
		{[]string{"check", "--json", loop}, exitIO, "too many levels of symbolic links", false, false},
		{[]string{"inspect", "--json", loop}, exitIO, "too many levels of symbolic links", false, false},
		{[]string{"repair", "--json", loop}, exitIO, "too many levels of symbolic links", false, false},
		{[]string{"inspect", "--json", dirData}, exitProblems, "db.data is a directory", true, false},
		{[]string{"repair", "--json", dirData}, exitProblems, "db.data is a directory", true, false},
		{[]string{"repair", "--json", "--apply", live}, exitIO, "store is locked", false, false},
		// A bad argument once the flags are parsed.
		{[]string{"check", "--json"}, exitUsage, "want one DIR", false, false},
		{[]string{"inspect", "--json", store, store}, exitUsage, "want one DIR", false, false},
		{[]string{"repair", "--json", ""}, exitUsage, "DIR is empty", false, false},
		{[]string{"recover", "--json"}, exitUsage, "want one DIR", false, false},
		// dump
		{[]string{"dump", "--json", "--index", "users", none()}, exitIO, "is not a kdb store", false, false},
		{[]string{"dump", "--json", "--index", "users", dirData}, exitProblems, "db.data is a directory", true, false},
		{[]string{"dump", "--json", "--index", "users", loop}, exitIO, "too many levels of symbolic links", false, false},
		{[]string{"dump", "--json", "--index", "nope", store}, exitProblems, "nope", false, false},
		{[]string{"dump", "--json", "--index", "users", "--ns", "bad/ns", store}, exitUsage, "bad/ns", false, false},
		{[]string{"dump", "--json", "--index", "users", "--hex", "--start", "zz", store}, exitUsage, "--start", false, false},
		{[]string{"dump", "--json", "--queue", "q", "--start", "x", store}, exitUsage, "--start", false, false},
		{[]string{"dump", "--json", "--index", "users", "--limit", "-1", store}, exitUsage, "--limit -1", false, false},
		{[]string{"dump", "--json", "--index", "users", "--queue", "q", store}, exitUsage, "exactly one of", false, false},
		{[]string{"dump", "--json", "--index", "users"}, exitUsage, "want one DIR", false, false},
		// export
		{[]string{"export", "--json", none(), filepath.Join(t.TempDir(), "x")}, exitIO, "is not a kdb store", false, false},
		{[]string{"export", "--json", dirData, filepath.Join(t.TempDir(), "x")}, exitProblems, "db.data is a directory", true, false},
		{[]string{"export", "--json", store, filepath.Join(none(), "x")}, exitIO, "no such file", false, false},
		{[]string{"export", "--json", store}, exitUsage, "want DIR FILE", false, false},
		{[]string{"export", "--json", store, ""}, exitUsage, "FILE is empty", false, false},
		// import
		{[]string{"import", "--json", garbage, store}, exitProblems, "already holds a store", false, false},
		{[]string{"import", "--json", filepath.Join(t.TempDir(), "none.kdbx"), none()}, exitIO, "no such file", false, false},
		{[]string{"import", "--json", garbage, none()}, exitProblems, "not a valid kdb export", true, false},
		{[]string{"import", "--json", garbage}, exitUsage, "want FILE DIR", false, false},
		// verify
		{[]string{"verify", "--json", "--acked", acked, none()}, exitIO, "is not a kdb store", false, false},
		{[]string{"verify", "--json", "--acked", acked, dirData}, exitProblems, "db.data is a directory", true, false},
		{[]string{"verify", "--json", "--acked", acked, live}, exitIO, "store is locked", false, false},
		{[]string{"verify", "--json", "--acked", filepath.Join(t.TempDir(), "none"), store}, exitIO, "no such file", false, false},
		{[]string{"verify", "--json", store}, exitUsage, "--acked FILE is required", false, false},
		{[]string{"verify", "--json", "--acked", acked, "--index", "", store}, exitUsage, "--index is empty", false, false},
		// demo: refused before it removes or builds anything.
		{[]string{"demo", "--json", home}, exitUsage, "not a store's file", false, false},
		{[]string{"demo", "--json", "--size-mib", "0", none()}, exitUsage, "--size-mib 0", false, false},
		{[]string{"demo", "--json", none(), none()}, exitUsage, "want at most one DIR", false, false},
		{[]string{"demo", "--json", live}, exitUsage, "kdbtool demo did not build", false, false},
		// stress
		{[]string{"stress", "--json", "--count", "3", dirData}, exitProblems, "db.data is a directory", true, true},
		{[]string{"stress", "--json", "--count", "3", live}, exitIO, "store is locked", false, true},
	}
	for _, c := range cases {
		code, out, errs := runTool(t, c.args...)
		doc := out
		if c.onStderr {
			if out != "" {
				t.Errorf("%q: stdout %q, want nothing (no key acknowledged)", c.args, out)
			}
			doc = errs
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			t.Errorf("%q: exit %d, not one JSON document: %v\nstdout: %s\nstderr: %s", c.args, code, err, out, errs)
			continue
		}
		if e, _ := m["error"].(string); code != c.code || !strings.Contains(e, c.says) || m["corrupt"] != c.corrupt {
			t.Errorf("%q: exit %d, JSON %v; want exit %d, corrupt %v and an error saying %q", c.args, code, m, c.code, c.corrupt, c.says)
		}
	}
	if b, err := os.ReadFile(filepath.Join(home, "notes.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("demo touched %s: %v", home, err)
	}
	// A repair that fails once it has its plan prints its report, which
	// names the error: here the temporary name of db.data's .broken copy
	// is a directory.
	dir := makeStore(t, 100)
	if err := os.Remove(filepath.Join(dir, "db.free")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "db.data.broken.tmp"), 0o750); err != nil {
		t.Fatal(err)
	}
	code, m := runJSON(t, "repair", "--json", "--apply", dir)
	if e, _ := m["error"].(string); code != exitIO || !strings.Contains(e, "db.data.broken.tmp") || m["done"] != false {
		t.Errorf("repair --apply failing to save db.data: exit %d, JSON %v; want exit 3, done false, an error naming db.data.broken.tmp", code, m)
	}
}

// TestFreeListTempNotRegular: a directory, a FIFO or a symbolic link at
// db.free.tmp, where every checkpoint writes the new free list, made every
// closing checkpoint fail (a link: write outside the store's directory)
// while check said ok. A writable open refuses it at once (ErrCorrupt
// naming it: exit 1, nothing written), check and inspect report it, and
// repair --apply moves it aside (never deletes it or what it holds, never
// follows the link), after which the store opens.
func TestFreeListTempNotRegular(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"directory", "FIFO", "symbolic link"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 100)
			tmp := filepath.Join(dir, "db.free.tmp")
			outside := filepath.Join(t.TempDir(), "outside")
			if err := os.WriteFile(outside, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			switch kind {
			case "directory":
				if err := os.Mkdir(tmp, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tmp, "mine"), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			case "FIFO":
				if err := syscall.Mkfifo(tmp, 0o600); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.Symlink(outside, tmp); err != nil {
					t.Fatal(err)
				}
			}
			for _, cmd := range []string{"check", "inspect"} {
				code, m := runJSON(t, cmd, "--json", dir)
				if code != exitProblems || !strings.Contains(fmt.Sprint(m["problems"]), tmp+" is a "+kind) {
					t.Errorf("%s: exit %d, want 1 naming %s, a %s: %v", cmd, code, tmp, kind, m["problems"])
				}
			}
			if code, _, errs := runTool(t, "recover", "--force-scan", dir); code != exitProblems ||
				!strings.Contains(errs, tmp+" is a "+kind) || strings.Contains(errs, "close:") {
				t.Errorf("recover: exit %d, want 1, the open refusing %s:\n%s", code, tmp, errs)
			}
			code, m := runJSON(t, "repair", "--json", dir)
			if code != exitProblems || !strings.Contains(fmt.Sprint(m["actions"]), "move db.free.tmp aside") {
				t.Errorf("repair: exit %d, want 1 planning to move db.free.tmp aside: %v", code, m)
			}
			code, m = runJSON(t, "repair", "--json", "--apply", dir)
			if code != exitOK || !strings.Contains(fmt.Sprint(m["saved"]), "db.free.tmp.broken") {
				t.Errorf("repair --apply: exit %d, want 0 with db.free.tmp saved aside: %v", code, m)
			}
			switch kind {
			case "directory":
				if _, err := os.Stat(filepath.Join(dir, "db.free.tmp.broken", "mine")); err != nil {
					t.Errorf("the directory moved aside lost what it held: %v", err)
				}
			case "FIFO":
				if st, err := os.Lstat(tmp + ".broken"); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
					t.Errorf("the FIFO moved aside: %v, %v", st, err)
				}
			default:
				if l, err := os.Readlink(tmp + ".broken"); err != nil || l != outside {
					t.Errorf("the link moved aside: %q, %v", l, err)
				}
			}
			if code, _, errs := runTool(t, "recover", dir); code != exitOK {
				t.Errorf("recover after the repair: exit %d: %s", code, errs)
			}
			if b, err := os.ReadFile(outside); err != nil || string(b) != "keep me" {
				t.Errorf("the file the link named was written: %q, %v", b, err)
			}
		})
	}
}

// TestVerify_ExitIOWhenCloseFails: verify (a writable open, as the
// application's after a crash) exits 3 naming the failure when its closing
// checkpoint fails, as recover does; it exited 0, "ok": true, with the
// store's recovery not done.
func TestVerify_ExitIOWhenCloseFails(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "s")
	code, keys, errs := runTool(t, "stress", dir, "--count", "200", "-size", "100")
	if code != exitOK {
		t.Fatalf("stress: exit %d: %s", code, errs)
	}
	acked := filepath.Join(t.TempDir(), "acked")
	if err := os.WriteFile(acked, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	// A crash's leftovers for the open to recover: db.free gone, so the
	// free list is rebuilt and the open asks for a checkpoint.
	if err := os.Remove(filepath.Join(dir, "db.free")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	for _, asJSON := range []bool{false, true} {
		args := []string{"verify", "--acked", acked, dir}
		if asJSON {
			args = append([]string{"verify", "--json"}, args[1:]...)
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1", "KDBTOOL_TEST_PLANT_FREE_TMP="+outside)
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
		if code != exitIO || !strings.Contains(out.String()+errb.String(), "close: ") || !strings.Contains(out.String()+errb.String(), "db.free.tmp") {
			t.Errorf("%q: exit %d, want 3 naming the failed close:\nstdout: %s\nstderr: %s", args, code, out.String(), errb.String())
		}
		if err := os.Remove(filepath.Join(dir, "db.free.tmp")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(outside); !os.IsNotExist(err) {
		t.Errorf("the closing checkpoint wrote through the link at db.free.tmp: %v", err)
	}
}
