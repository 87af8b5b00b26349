package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepair_JournalCutBeforeReplaySaysWhatIsLost: on a journal cut short
// before the checkpoint's replay position, the repair plan said both
// "would: truncate the torn journal tail: N bytes" and (inspect's problem)
// "those bytes were durable, so this is not a crash's torn tail"; repair
// --apply --rebuild-index then reported success and never said that the
// records from the cut on were lost (verify found thousands of keys
// missing). The plan no longer calls it a torn tail, and the repair says
// what is lost (lost, lost_bytes: more than the bytes from the cut to the
// replay position). A cut at a record's boundary (no torn bytes: the
// journal just ends before the replay position) was not even flagged as a
// cut, and the rebuild lost those records silently; it is the same case.
func TestRepair_JournalCutBeforeReplaySaysWhatIsLost(t *testing.T) {
	t.Parallel()
	src := makeStore(t, 500)
	code, m := runJSON(t, "inspect", "--json", src)
	if code != exitOK {
		t.Fatalf("inspect: exit %d", code)
	}
	seg := fmt.Sprintf("db-%d.log", uint64(jget(t, m, "meta.replay_segment").(float64)))
	off := int64(jget(t, m, "meta.replay_offset").(float64))
	if seg != "db-1.log" || off < 1000 {
		t.Fatalf("replay position %s@%d: want one well inside db-1.log (so that --rebuild-index can run)", seg, off)
	}
	cut := func(t *testing.T, at int64) string {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "store")
		if err := copyDir(src, dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(dir, seg), at); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// Mid-record: the cut leaves a torn record; where it begins is the
	// record boundary the second case cuts at.
	mid := cut(t, off-333)
	_, m = runJSON(t, "inspect", "--json", mid)
	tornAt, _ := jget(t, m, "journal.torn_at").(string)
	var boundary int64
	if _, err := fmt.Sscanf(strings.TrimPrefix(tornAt, seg+"@"), "%d", &boundary); err != nil || boundary <= 0 || boundary > off-333 {
		t.Fatalf("inspect of a journal cut at %d: torn_at %q", off-333, tornAt)
	}
	for _, c := range []struct {
		name string
		dir  string
	}{
		{"cut mid-record", mid},
		{"cut at a record boundary", cut(t, boundary)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, m := runJSON(t, "inspect", "--json", c.dir)
			if jget(t, m, "journal.torn_before_replay") != true || jget(t, m, "journal.torn_at") != tornAt {
				t.Errorf("inspect: torn_before_replay %v, torn_at %v; want true, %s", jget(t, m, "journal.torn_before_replay"), jget(t, m, "journal.torn_at"), tornAt)
			}
			code, out, errs := runTool(t, "repair", "--rebuild-index", c.dir)
			if code != exitProblems || strings.Contains(out, "would: truncate the torn journal tail") ||
				!strings.Contains(out, "so this is not a crash's torn tail, and the durable records from "+tornAt+" on are lost") ||
				!strings.Contains(out, "would lose: the journal's durable records from "+tornAt+" on: more than ") {
				t.Errorf("repair --rebuild-index (dry run): exit %d, want 1, a plan that calls the cut no torn tail and says what would be lost:\n%s%s", code, out, errs)
			}
			// Without --rebuild-index: db.data is whole, so the advice is
			// recover --skip-damaged, which keeps it, not a rebuild from
			// the cut journal, which replaces it with less; the cut alone
			// (which does not make the store open) is not planned.
			code, out, errs = runTool(t, "repair", c.dir)
			if code != exitProblems || !strings.Contains(out, "kdbtool recover --skip-damaged opens it as db.data holds it") ||
				strings.Contains(out, "rerun with --rebuild-index") || strings.Contains(out, "would: cut the journal") {
				t.Errorf("repair (dry run): exit %d, want 1 advising recover --skip-damaged, no rebuild and no cut alone:\n%s%s", code, out, errs)
			}
			want := off - boundary
			code, m = runJSON(t, "repair", "--json", "--rebuild-index", c.dir)
			if code != exitProblems || m["lost_bytes"] != float64(want) || !strings.Contains(fmt.Sprint(m["lost"]), fmt.Sprintf("more than %d bytes", want)) {
				t.Errorf("repair --json --rebuild-index: exit %d, lost %v, lost_bytes %v; want %d", code, m["lost"], m["lost_bytes"], want)
			}
			code, out, errs = runTool(t, "repair", "--apply", "--rebuild-index", c.dir)
			if code != exitOK || !strings.Contains(out, fmt.Sprintf("lost: the journal's durable records from %s on: more than %d bytes", tornAt, want)) {
				t.Errorf("repair --apply --rebuild-index: exit %d, want 0 and a report saying what was lost:\n%s%s", code, out, errs)
			}
		})
	}
}
