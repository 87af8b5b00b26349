package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRepair_UnreadableDataFile: a db.data whose header or meta slots
// cannot be read (a flipped byte, a file cut short or emptied) is a page
// file only the journal can rebuild, as a missing one is: check says that
// repair --apply --rebuild-index can rebuild it when the journal still
// begins at db-1.log, the dry run says so and changes nothing, and the
// rebuild moves the damaged files aside and brings every write back. It
// used to stop at "kdbtool repair: pagefile: corrupt: ...", with or without
// --rebuild-index, and check gave no advice.
func TestCheckRepair_UnreadableDataFile(t *testing.T) {
	t.Parallel()
	const pageSize = 4096 // the default, which makeStore uses
	flip := func(off int64) func(t *testing.T, p string) {
		return func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, off); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 0xff
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, p string)
		says   string
	}{
		{"header byte flipped", flip(20), "header"},
		{"both meta slots flipped", func(t *testing.T, p string) {
			flip(pageSize+20)(t, p)
			flip(2*pageSize+20)(t, p)
		}, "meta slot"},
		{"cut inside the meta slots", func(t *testing.T, p string) {
			if err := os.Truncate(p, pageSize+100); err != nil {
				t.Fatal(err)
			}
		}, "meta slot"},
		{"emptied", func(t *testing.T, p string) {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		}, "header"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 3000)
			want := storeContent(t, dir)
			c.damage(t, filepath.Join(dir, "db.data"))
			before := snapshotFiles(t, dir)

			code, m := runJSON(t, "check", "--json", dir)
			requireFindings(t, "check", m["problems"], []finding{{"error", "pagefile", c.says}})
			if code != exitProblems || !strings.Contains(jsonProblems(m), "kdbtool repair --apply --rebuild-index can rebuild it") {
				t.Errorf("check: exit %d, want 1 with the rebuild advice: %v", code, m["problems"])
			}
			code, m = runJSON(t, "repair", "--json", dir)
			if code != exitProblems || !strings.Contains(jsonString(m["unfixable"]), "rerun with --rebuild-index") {
				t.Errorf("repair dry run: exit %d, want 1 advising --rebuild-index: %v", code, m)
			}
			code, m = runJSON(t, "repair", "--json", "--apply", dir)
			if code != exitProblems {
				t.Errorf("repair --apply without --rebuild-index: exit %d: %v", code, m)
			}
			code, m = runJSON(t, "repair", "--json", "--rebuild-index", dir)
			if code != exitProblems || len(m["actions"].([]any)) == 0 {
				t.Errorf("repair --rebuild-index dry run: exit %d, want 1 listing the rebuild: %v", code, m)
			}
			requireSameFiles(t, before, snapshotFiles(t, dir))

			code, m = runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
			if code != 0 || jget(t, m, "after.ok") != true {
				t.Fatalf("repair --apply --rebuild-index: exit %d, %v", code, m)
			}
			if _, err := os.Stat(filepath.Join(dir, "db.data.broken")); err != nil {
				t.Errorf("the damaged db.data was not kept: %v", err)
			}
			if got := storeContent(t, dir); got != want {
				t.Errorf("the rebuilt store differs from the one before the damage")
			}
			if code, _, errs := runTool(t, "check", dir); code != 0 {
				t.Errorf("check after the rebuild: exit %d: %s", code, errs)
			}
		})
	}

	// With the journal collected, nothing can rebuild it: check and repair
	// say so, and nothing changes.
	t.Run("journal collected", func(t *testing.T) {
		t.Parallel()
		dir := makeStore(t, 3000)
		flip(20)(t, filepath.Join(dir, "db.data"))
		if err := os.Remove(filepath.Join(dir, "db-1.log")); err != nil {
			t.Fatal(err)
		}
		before := snapshotFiles(t, dir)
		code, m := runJSON(t, "check", "--json", dir)
		if code != exitProblems || !strings.Contains(jsonProblems(m), "the journal starts at db-2.log, not db-1.log") {
			t.Errorf("check: exit %d: %v", code, m["problems"])
		}
		code, m = runJSON(t, "repair", "--json", "--apply", "--rebuild-index", dir)
		if code != exitProblems || !strings.Contains(jsonString(m["unfixable"]), "restore db.data from a backup") {
			t.Errorf("repair --apply --rebuild-index: exit %d, %v", code, m)
		}
		requireSameFiles(t, before, snapshotFiles(t, dir))
	})
}

// jsonProblems is the messages of a decoded problems list, one a line.
func jsonProblems(m map[string]any) string {
	var b strings.Builder
	ps, _ := m["problems"].([]any)
	for _, p := range ps {
		if pm, ok := p.(map[string]any); ok {
			s, _ := pm["message"].(string)
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

// TestCheck_JournalNotCheckedSaysSo: when check never reads the journal
// (db.data is missing or cannot be read, or the journal cannot be
// opened), it says the journal was not checked and why, in the human line
// and the JSON (journal_checked false, journal_not_checked); it printed
// "journal: 0 records (0 payload bytes) verified". A sound store's journal
// is checked.
func TestCheck_JournalNotCheckedSaysSo(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		why    string
	}{
		{"db.data missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "db.data")); err != nil {
				t.Fatal(err)
			}
		}, "db.data is missing"},
		{"db.data emptied", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "db.data"), 0); err != nil {
				t.Fatal(err)
			}
		}, "db.data cannot be read"},
		{"segment a directory", func(t *testing.T, dir string) {
			seg := filepath.Join(dir, segments(t, dir)[0].ID.String())
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(seg, 0o750); err != nil {
				t.Fatal(err)
			}
		}, "the journal cannot be opened"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 3000)
			c.damage(t, dir)
			code, out, _ := runTool(t, "check", dir)
			if code != exitProblems || strings.Contains(out, "payload bytes) verified") || !strings.Contains(out, "journal: not checked: "+c.why) {
				t.Errorf("check: exit %d, want 1 and \"journal: not checked: %s\":\n%s", code, c.why, out)
			}
			_, m := runJSON(t, "check", "--json", dir)
			if why, _ := m["journal_not_checked"].(string); m["journal_checked"] != false || !strings.Contains(why, c.why) {
				t.Errorf("check --json: journal_checked %v, journal_not_checked %v; want false and %q", m["journal_checked"], m["journal_not_checked"], c.why)
			}
		})
	}
	dir := makeStore(t, 300)
	if code, m := runJSON(t, "check", "--json", dir); code != exitOK || m["journal_checked"] != true || m["journal_not_checked"] != "" {
		t.Errorf("check --json of a sound store: exit %d, journal_checked %v, journal_not_checked %v", code, m["journal_checked"], m["journal_not_checked"])
	}
}
