package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRepair_TornTailSavesLastSegment: repair --apply on a store whose
// last journal segment has a torn tail saves that segment as
// <segment>.broken (README: every file it may change, the last journal
// segment among them) before the Open that truncates the tail: saved[]
// lists it, and the copy holds exactly the segment's bytes before the
// repair, torn tail included, which the repaired segment no longer has.
func TestRepair_TornTailSavesLastSegment(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 300)
	tornTail(t, dir)
	segs := segments(t, dir)
	last := segs[len(segs)-1].ID.String()
	before, err := os.ReadFile(filepath.Join(dir, last))
	if err != nil {
		t.Fatal(err)
	}

	code, m := runJSON(t, "repair", "--json", "--apply", dir)
	if code != exitOK || m["done"] != true {
		t.Fatalf("repair --apply of a torn tail in %s: exit %d, done %v; want 0 and done: %v", last, code, m["done"], m)
	}
	var saved []string
	for _, s := range m["saved"].([]any) {
		saved = append(saved, s.(string))
	}
	want := last + ".broken"
	if !slices.Contains(saved, want) {
		t.Errorf("saved %v: want it to list %s (the last segment, whose torn tail the repair truncates)", saved, want)
	}
	got, err := os.ReadFile(filepath.Join(dir, want))
	if err != nil {
		t.Fatalf("the copy of the last segment: %v", err)
	}
	if !bytes.Equal(got, before) {
		t.Errorf("%s: %d bytes that differ from the %d of %s before the repair", want, len(got), len(before), last)
	}
	// The repair did cut the tail (and re-preallocated the segment with
	// zeros, which a closing checkpoint may write over): the torn bytes are
	// no longer in the segment, and without the copy they would be gone.
	after, err := os.ReadFile(filepath.Join(dir, last))
	if err != nil {
		t.Fatal(err)
	}
	end := segs[len(segs)-1].End.Offset
	torn := bytes.Repeat([]byte{0xAB}, 100) // what tornTail wrote at end
	if !bytes.Equal(before[end:end+100], torn) {
		t.Fatalf("%s before the repair: no torn tail at %d", last, end)
	}
	if int64(len(after)) < end || !bytes.Equal(after[:end], before[:end]) || bytes.Contains(after[end:], torn) {
		t.Errorf("%s after the repair: want the %d bytes before the tail kept and the torn tail gone", last, end)
	}
}
