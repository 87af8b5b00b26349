package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb/journal"
)

// TestInspect_HugeSegmentIsNotRead: a journal segment far larger than any
// the journal writes (a segment's file is at most SegmentSize, itself at
// most 2 GiB: FORMAT.md §4.1), such as a sparse file, is reported as a
// journal error at once, not read through: inspect (and check, which runs
// it, and a repair dry run) opened the journal and then the store
// read-only, and each read the whole file: 20 GiB of zeros took 56 s, a
// terabyte hours. The page file's part of the report is still shown; repair
// does not offer recover --skip-damaged, as nothing is lost or skipped.
func TestInspect_HugeSegmentIsNotRead(t *testing.T) {
	dir := makeStore(t, 10)
	var segs []string
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, ok := journal.ParseSegmentName(e.Name()); ok {
			segs = append(segs, e.Name())
		}
	}
	if len(segs) == 0 {
		t.Fatal("no journal segment")
	}
	last := slices.Max(segs)
	if err := os.Truncate(filepath.Join(dir, last), 1<<40); err != nil {
		t.Skipf("no sparse 1 TiB file here: %v", err)
	}
	for _, cmd := range []string{"inspect", "check", "repair"} {
		type result struct {
			code      int
			out, errs string
		}
		done := make(chan result, 1)
		go func() {
			code, out, errs := runTool(t, cmd, dir)
			done <- result{code, out, errs}
		}()
		select {
		case r := <-done:
			if r.code != exitProblems || !strings.Contains(r.out, "error: journal: ") || !strings.Contains(r.out, last) ||
				!strings.Contains(r.out, "larger than any segment") {
				t.Errorf("%s: exit %d, stdout:\n%s\nstderr: %s\nwant exit 1 and a journal error naming %s as larger than any segment", cmd, r.code, r.out, r.errs, last)
			}
			if cmd == "repair" && strings.Contains(r.out, "skip-damaged") {
				t.Errorf("repair offers --skip-damaged for a segment that is only too long:\n%s", r.out)
			}
			if cmd == "inspect" && !strings.Contains(r.out, "meta (Open would use)") {
				t.Errorf("inspect: the page file's part is missing:\n%s", r.out)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s of a store with a 1 TiB sparse segment %s did not return in 20 s: it reads the file through", cmd, last)
		}
	}
}
