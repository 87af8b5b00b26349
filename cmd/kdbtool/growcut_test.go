package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func init() {
	register("test-grow-child", command{hidden: true, run: runGrowChild})
}

// atGrow is what test-grow-child prints when its checkpoint is about to
// grow db.data (db.redo is complete and synced by then).
const atGrow = "at-grow"

func growValue(i int) []byte { return []byte(strings.Repeat(fmt.Sprintf("v%06d.", i), 40)) }
func growKey(i int) []byte   { return []byte(fmt.Sprintf("g%06d", i)) }

// runGrowChild (a hidden command of the test binary, run as a child)
// writes batches into the store in DIR and checkpoints after each,
// printing the number of keys acknowledged, until a checkpoint is about
// to grow db.data: there it prints atGrow and stops until it is killed.
func runGrowChild(args []string, stdout, stderr io.Writer) int {
	dir := args[0]
	hook := func(e vfs.Event) error {
		if e.Op == vfs.OpAllocate && filepath.Base(e.Path) == "db.data" {
			fmt.Fprintln(stdout, atGrow)
			time.Sleep(time.Hour)
		}
		return nil
	}
	db, err := kdb.Open(dir, &kdb.Options{FS: vfs.Intercept(vfs.OS, hook), SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitIO
	}
	n := 0
	for {
		b := kdb.NewBatch()
		for range 50 {
			b.Put("grow", growKey(n), growValue(n))
			n++
		}
		if err := db.Write(b); err != nil {
			fmt.Fprintln(stderr, err)
			return exitIO
		}
		fmt.Fprintln(stdout, n)
		if err := db.Checkpoint(); err != nil {
			fmt.Fprintln(stderr, err)
			return exitIO
		}
	}
}

// killedGrowingCheckpoint builds a store and kills a writer (SIGKILL) in
// a checkpoint that grows db.data, after db.redo was written and synced
// and before db.data was grown. It returns the store and how many keys
// the writer had acknowledged.
func killedGrowingCheckpoint(t *testing.T) (string, int) {
	t.Helper()
	dir := makeStore(t, 100)
	cmd := exec.Command(os.Args[0], "test-grow-child", dir)
	cmd.Env = append(os.Environ(), "KDBTOOL_TEST_MAIN=1")
	var errb strings.Builder
	cmd.Stderr = &errb
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked, at := 0, false
	sc := bufio.NewScanner(pipe)
	for !at && sc.Scan() {
		if sc.Text() == atGrow {
			at = true
		} else if n, err := strconv.Atoi(sc.Text()); err == nil {
			acked = n
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !at {
		t.Fatalf("the writer stopped before a checkpoint grew db.data: %s", errb.String())
	}
	return dir, acked
}

// TestCheck_GrowingCheckpointCutShortIsNotDamage: a writer SIGKILLed in a
// checkpoint that grows db.data, after db.redo was synced and before the
// grow, leaves db.data shorter than the page count of the meta db.redo
// carries. That is a normal crash state that recovery completes, not a
// cut page file: inspect and check warn "recovery pending" and exit 0,
// repair plans to apply db.redo (exit 1: something to do) and its --apply
// does it; recover completes it too, and check is clean afterwards, with
// every acknowledged key there.
func TestCheck_GrowingCheckpointCutShortIsNotDamage(t *testing.T) {
	t.Parallel()
	dir, acked := killedGrowingCheckpoint(t)

	// The state: a complete db.redo that Open would apply, whose meta
	// counts more pages than db.data holds.
	code, m := runJSON(t, "inspect", "--json", dir)
	size := jget(t, m, "data_size").(float64)
	need := jget(t, m, "meta.page_count").(float64) * jget(t, m, "page_size").(float64)
	if jget(t, m, "redo.would_apply") != true || size >= need {
		t.Fatalf("not the state: db.redo would apply %v, db.data %v bytes, meta wants %v", jget(t, m, "redo.would_apply"), size, need)
	}
	probs := fmt.Sprint(m["problems"])
	if code != exitOK || !strings.Contains(probs, "recovery pending") || strings.Contains(probs, "severity:error") {
		t.Errorf("inspect: exit %d, problems %s; want exit 0 and a recovery pending warning", code, probs)
	}
	code, out, errs := runTool(t, "check", dir)
	if code != exitOK || !strings.Contains(out, "warning: pagefile: recovery pending") || strings.Contains(out, "error:") || !strings.HasSuffix(out, "ok\n") {
		t.Errorf("check: exit %d; want 0, ok and a recovery pending warning\n%s%s", code, out, errs)
	}
	code, out, errs = runTool(t, "repair", dir)
	if code != exitProblems || !strings.Contains(out, "would: apply db.redo") || strings.Contains(out, "cannot repair") {
		t.Errorf("repair (dry run): exit %d; want 1 planning to apply db.redo, nothing unrepairable\n%s%s", code, out, errs)
	}

	// repair --apply, on a copy, applies db.redo as recovery would.
	cp := filepath.Join(t.TempDir(), "copy")
	if err := copyDir(dir, cp); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runTool(t, "repair", "--apply", cp)
	if code != exitOK || !strings.Contains(out, "did: apply db.redo") || !strings.Contains(out, "check ok true") {
		t.Errorf("repair --apply: exit %d\n%s%s", code, out, errs)
	}

	if code, out, errs := runTool(t, "recover", dir); code != exitOK {
		t.Fatalf("recover: exit %d\n%s%s", code, out, errs)
	}
	for _, d := range []string{dir, cp} {
		code, out, errs := runTool(t, "check", d)
		if code != exitOK || strings.Contains(out, "warning") || strings.Contains(out, "error") {
			t.Errorf("check %s after the recovery: exit %d; want clean\n%s%s", d, code, out, errs)
		}
		db, err := kdb.Open(d, &kdb.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range acked {
			if v, err := db.Get("grow", growKey(i)); err != nil || string(v) != string(growValue(i)) {
				t.Errorf("%s: acknowledged key %d: %v", d, i, err)
				break
			}
		}
		if v, err := db.Get("users", []byte("user-00043")); err != nil || string(v) != "value-43" {
			t.Errorf("%s: users key: %q, %v", d, v, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecover_CutBelowTheCheckpointRedoFollowsIsDamage: the state above
// (a complete db.redo waiting to be applied), with db.data then cut below
// the page count of the checkpoint db.redo follows. db.redo holds only
// the pages its own checkpoint wrote, so applying it cannot make the file
// whole. Before, inspect warned "recovery pending" and exited 0, recover
// applied db.redo into the holes and exited 0, and the store then failed
// its page checks (an outside tester's truncate -s 8192 db.data). Now
// inspect and check call it a cut page file, recover refuses it and
// writes nothing, repair plans no db.redo, and its --rebuild-index brings
// back every acknowledged key from the journal.
func TestRecover_CutBelowTheCheckpointRedoFollowsIsDamage(t *testing.T) {
	t.Parallel()
	dir, acked := killedGrowingCheckpoint(t)
	_, m := runJSON(t, "inspect", "--json", dir)
	ps := int64(jget(t, m, "page_size").(float64))
	if err := os.Truncate(filepath.Join(dir, "db.data"), 3*ps); err != nil { // header and both meta slots
		t.Fatal(err)
	}

	code, m := runJSON(t, "inspect", "--json", dir)
	probs := fmt.Sprint(m["problems"])
	if code != exitProblems || strings.Contains(probs, "recovery pending") || !strings.Contains(probs, "the page file was cut") {
		t.Errorf("inspect: exit %d, problems %s; want exit 1 and a cut page file", code, probs)
	}
	if code, out, errs := runTool(t, "check", dir); code == exitOK || strings.HasSuffix(out, "ok\n") {
		t.Errorf("check: exit %d; want the damage reported\n%s%s", code, out, errs)
	}
	before := snapshotFiles(t, dir)
	code, out, errs := runTool(t, "recover", dir)
	if code != exitProblems || !strings.Contains(errs, "the file was cut") {
		t.Errorf("recover: exit %d; want 1, the file was cut\n%s%s", code, out, errs)
	}
	after := snapshotFiles(t, dir)
	for name, b := range before {
		if name != "lock" && string(after[name]) != string(b) {
			t.Errorf("recover changed %s of a store it refused", name)
		}
	}
	code, out, errs = runTool(t, "repair", dir)
	if code != exitProblems || strings.Contains(out, "apply db.redo") || !strings.Contains(out, "--rebuild-index") {
		t.Errorf("repair (dry run): exit %d; want 1, no db.redo to apply, a rebuild advised\n%s%s", code, out, errs)
	}
	code, out, errs = runTool(t, "repair", "--apply", "--rebuild-index", dir)
	if code != exitOK || !strings.Contains(out, "check ok true") {
		t.Fatalf("repair --apply --rebuild-index: exit %d\n%s%s", code, out, errs)
	}
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range acked {
		if v, err := db.Get("grow", growKey(i)); err != nil || string(v) != string(growValue(i)) {
			t.Fatalf("acknowledged key %d after the rebuild: %v", i, err)
		}
	}
}
