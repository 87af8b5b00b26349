package main

import (
	"fmt"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/journal"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// finding is an expected problem: severity, area and a piece of its message.
type finding struct{ severity, area, contains string }

// requireFindings checks that problems are exactly want, in order.
func requireFindings(t *testing.T, what string, got any, want []finding) {
	t.Helper()
	ps, _ := got.([]any)
	if len(ps) != len(want) {
		t.Fatalf("%s: %d problems %v, want %d %v", what, len(ps), ps, len(want), want)
	}
	for i, w := range want {
		p := ps[i].(map[string]any)
		if p["severity"] != w.severity || p["area"] != w.area || !strings.Contains(p["message"].(string), w.contains) {
			t.Errorf("%s: problem %d = %v, want %v", what, i, p, w)
		}
	}
}

func TestDamage_Stores(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		inspect int
		check   int
		found   []finding // check's problems (inspect's are the same minus index)
		repair  []string  // repair's dry-run actions
		// after repair --apply (with --rebuild-index if rebuild)
		rebuild     bool
		applyCode   int
		afterCheck  int
		recoverCode int
	}{
		{
			name: "bad page checksum", damage: flipDataPage, inspect: 0, check: 1,
			found:   []finding{{"error", "index", "checksum mismatch"}},
			repair:  []string{},
			rebuild: true, applyCode: 0, afterCheck: 0, recoverCode: 0,
		},
		{
			name: "torn journal tail", damage: tornTail, inspect: 0, check: 0,
			found:     []finding{{"warning", "journal", "torn tail: 104 bytes"}},
			repair:    []string{actTruncateTail},
			applyCode: 0, afterCheck: 0, recoverCode: 0,
		},
		{
			name: "stale db.free", damage: staleFree, inspect: 0, check: 0,
			found:     []finding{{"warning", "free_list", "Open would scan every page: db.free checkpoint"}},
			repair:    []string{actRebuildFreeList},
			applyCode: 0, afterCheck: 0, recoverCode: 0,
		},
		{
			name: "missing segment", damage: missingSegment, inspect: 1, check: 1,
			found: []finding{
				{"error", "journal", "db-2.log@0: segment db-2.log is missing"},
				{"error", "store", "segment db-2.log is missing"},
			},
			repair:    []string{},
			applyCode: 1, afterCheck: 1, recoverCode: 1,
		},
		{
			// The replay position lies at the end of the last segment
			// (Close checkpointed): an open verifies nothing before it in
			// that segment, so recover opens, but check reads it all and
			// reports the damage once, under journal.
			name: "damaged record before the replay position", damage: flipBeforeReplayPosition, inspect: 1, check: 1,
			// and the key whose value it held, under index
			found:     []finding{{"error", "journal", "checksum mismatch"}, {"error", "index", "values kept in the journal cannot be read: tree \"u/users\" key"}},
			repair:    []string{},
			applyCode: 1, afterCheck: 1, recoverCode: 0,
		},
		{
			name: "half-written db.redo", damage: halfRedo, inspect: 0, check: 0,
			found:     []finding{{"warning", "redo", "db.redo incomplete"}},
			repair:    []string{},
			applyCode: 0, afterCheck: 0, recoverCode: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := makeStore(t, 6000)
			c.damage(t, dir)
			before := snapshotFiles(t, dir)

			code, m := runJSON(t, "inspect", "--json", dir)
			if code != c.inspect {
				t.Errorf("inspect: exit %d, want %d", code, c.inspect)
			}
			var inspWant []finding
			for _, f := range c.found {
				if f.area != "index" {
					inspWant = append(inspWant, f)
				}
			}
			if inspWant == nil {
				inspWant = []finding{}
			}
			requireFindings(t, "inspect", m["problems"], inspWant)
			if c.name == "stale db.free" {
				if jget(t, m, "free_list.matches_meta") != false || jget(t, m, "free_list.open_would") != "scanned" {
					t.Errorf("inspect: stale db.free: free_list = %v", m["free_list"])
				}
				files := jget(t, m, "free_list.files").([]any)
				for _, f := range files {
					if f.(map[string]any)["matches_meta"] != false {
						t.Errorf("inspect: %v matches the meta", f)
					}
				}
			}

			code, m = runJSON(t, "check", "--json", dir)
			if code != c.check || m["ok"] != (c.check == 0) {
				t.Errorf("check: exit %d ok %v, want %d", code, m["ok"], c.check)
			}
			requireFindings(t, "check", m["problems"], c.found)

			code, m = runJSON(t, "repair", "--json", dir)
			var acts []string
			for _, a := range m["actions"].([]any) {
				acts = append(acts, a.(map[string]any)["action"].(string))
			}
			if fmt.Sprint(acts) != fmt.Sprint(c.repair) {
				t.Errorf("repair dry run: actions %v, want %v", acts, c.repair)
			}
			// The advice names what helps: for damage before the replay
			// position the store opens as it is, and recover
			// --skip-damaged (which only skips what replay would read)
			// changes nothing.
			if c.name == "damaged record before the replay position" {
				u := jsonString(m["unfixable"])
				if !strings.Contains(u, "the store opens as it is") || strings.Contains(u, "skip-damaged opens the store") {
					t.Errorf("repair dry run: unfixable %q: want the advice for damage before the replay position", u)
				}
			}
			wantDry := 0
			if len(c.repair) > 0 || c.check != 0 {
				wantDry = 1
			}
			if code != wantDry {
				t.Errorf("repair dry run: exit %d, want %d", code, wantDry)
			}
			requireSameFiles(t, before, snapshotFiles(t, dir))

			args := []string{"repair", "--json", "--apply"}
			if c.rebuild {
				args = append(args, "--rebuild-index")
			}
			code, m = runJSON(t, append(args, dir)...)
			if code != c.applyCode {
				t.Errorf("repair --apply: exit %d, want %d: %v", code, c.applyCode, m)
			}
			if len(c.repair) > 0 || c.rebuild {
				if len(m["saved"].([]any)) == 0 {
					t.Errorf("repair --apply saved no .broken copy")
				}
				if _, err := os.Stat(filepath.Join(dir, "db.data.broken")); err != nil {
					t.Errorf("no db.data.broken: %v", err)
				}
				if jget(t, m, "after.free_list_matches_meta") != true {
					t.Errorf("after repair db.free does not match the meta")
				}
			} else if c.applyCode != 0 {
				requireSameFiles(t, before, snapshotFiles(t, dir))
			}

			code, m = runJSON(t, "check", "--json", dir)
			if code != c.afterCheck {
				t.Errorf("check after repair: exit %d, want %d: %v", code, c.afterCheck, m["problems"])
			}
			if c.afterCheck == 0 && c.name != "half-written db.redo" {
				requireFindings(t, "check after repair", m["problems"], []finding{})
			}

			code, m = runJSON(t, "recover", "--json", dir)
			if code != c.recoverCode {
				t.Errorf("recover: exit %d, want %d", code, c.recoverCode)
			}
			if code != 0 {
				if !strings.Contains(fmt.Sprint(m["error"]), "corrupt") {
					t.Errorf("recover: error %v", m["error"])
				}
			} else {
				if m["free_list_path"] != "trusted" {
					t.Errorf("recover after repair: free list %v (%v)", m["free_list_path"], m["reason"])
				}
				for _, k := range []string{"reason", "pages_scanned", "records_replayed", "duration_ms"} {
					if _, ok := m[k]; !ok {
						t.Errorf("recover: no %s", k)
					}
				}
			}
		})
	}
}

// TestRecover_DamagedBeforeRepair runs recover straight on the damaged
// stores: it heals a torn tail and a stale db.free by itself.
func TestRecover_DamagedBeforeRepair(t *testing.T) {
	t.Parallel()
	dir := makeStore(t, 500)
	tornTail(t, dir)
	code, m := runJSON(t, "recover", "--json", dir)
	if code != 0 || m["bytes_truncated"] != float64(104) {
		t.Errorf("recover torn tail: exit %d, %v", code, m)
	}
	dir = makeStore(t, 500)
	staleFree(t, dir)
	code, m = runJSON(t, "recover", "--json", dir)
	if code != 0 || m["free_list_path"] != "scanned" || m["reason"] == "" || m["pages_scanned"].(float64) == 0 {
		t.Errorf("recover stale db.free: exit %d, %v", code, m)
	}
	code, m = runJSON(t, "recover", "--json", "--force-scan", dir)
	if code != 0 || m["free_list_path"] != "scanned" {
		t.Errorf("recover --force-scan: exit %d, %v", code, m)
	}
	code, m = runJSON(t, "recover", "--json", dir)
	if code != 0 || m["free_list_path"] != "trusted" || m["pages_scanned"] != float64(0) {
		t.Errorf("recover after recover: exit %d, %v", code, m)
	}
}

// flipDataPage flips a byte in the payload of the last leaf-ish page.
func flipDataPage(t *testing.T, dir string) {
	t.Helper()
	in, err := pagefile.Inspect(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	// a page reachable from the index: the first data page that is not free.
	free := map[pagefile.PageID]bool{}
	for _, f := range in.FreeFiles {
		if f.Name == "db.free" {
			for _, r := range f.Ranges {
				for p := r.Start; p < r.End(); p++ {
					free[p] = true
				}
			}
		}
	}
	for p := pagefile.FirstDataPage; uint64(p) < in.Meta.PageCount; p++ {
		if !free[p] && p != in.Meta.Root {
			off := int64(p)*int64(in.PageSize) + 100
			if err := kdbtest.FlipBit(vfs.OS, filepath.Join(dir, "db.data"), off, 3); err != nil {
				t.Fatal(err)
			}
			t.Logf("flipped %v at %d", p, off)
			return
		}
	}
	t.Fatal("no data page")
}

// tornTail writes garbage just after the last acknowledged frame of the
// last segment, as a torn batch write leaves it.
// flipBeforeReplayPosition damages a record of the last segment, before
// the record the last checkpoint's replay position names.
func flipBeforeReplayPosition(t *testing.T, dir string) {
	t.Helper()
	segs := segments(t, dir)
	last := segs[len(segs)-1]
	j, _, err := journal.Open(dir, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var locs []journal.Location
	err = j.Iterate(journal.Location{Segment: last.ID}, func(loc journal.Location, _ journal.Record) error {
		locs = append(locs, loc)
		return nil
	})
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(locs) < 2 {
		t.Fatalf("the last segment holds %d records, want 2 or more", len(locs))
	}
	if err := kdbtest.FlipBit(vfs.OS, filepath.Join(dir, last.ID.String()), locs[0].Offset+40, 1); err != nil {
		t.Fatal(err)
	}
}

func tornTail(t *testing.T, dir string) {
	t.Helper()
	segs := segments(t, dir)
	last := segs[len(segs)-1]
	f, err := os.OpenFile(filepath.Join(dir, last.ID.String()), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 100)
	for i := range garbage {
		garbage[i] = 0xAB
	}
	if _, err := f.WriteAt(garbage, last.End.Offset); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func segments(t *testing.T, dir string) []journal.SegmentInfo {
	t.Helper()
	j, _, err := journal.Open(dir, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	return j.Segments()
}

// staleFree puts back the db.free and db.free.prev of two checkpoints
// earlier: both intact, neither matching the meta.
func staleFree(t *testing.T, dir string) {
	t.Helper()
	old := t.TempDir()
	for _, n := range []string{"db.free", "db.free.prev"} {
		if err := copyFile(filepath.Join(dir, n), filepath.Join(old, n)); err != nil {
			t.Fatal(err)
		}
	}
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if err := db.Put("users", []byte(fmt.Sprintf("late-%d", i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"db.free", "db.free.prev"} {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(filepath.Join(old, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// missingSegment removes db-2.log of three or more segments.
func missingSegment(t *testing.T, dir string) {
	t.Helper()
	if n := len(segments(t, dir)); n < 3 {
		t.Fatalf("%d segments, want 3 or more", n)
	}
	if err := os.Remove(filepath.Join(dir, "db-2.log")); err != nil {
		t.Fatal(err)
	}
}

// halfRedo cuts db.redo to half its size, as a crash while writing it.
func halfRedo(t *testing.T, dir string) {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, "db.redo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "db.redo"), st.Size()/2); err != nil {
		t.Fatal(err)
	}
}
