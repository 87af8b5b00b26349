package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// TestCheckRepair_DamagedFreePage: a byte flipped in a page the free list
// holds loses nothing: no tree reaches the page. check used to call it
// "index: corrupt: page N is neither reachable nor free (leaked)" (the scan
// of its read-only open, or the proof of a trusted list, sets a damaged
// page aside), and repair then refused everything, advising a restore from
// a backup, while a writable open's scan frees such a page again. Now
// check warns (exit 0), naming the page, and repair --apply (its forced
// scan) frees it: the store is clean afterwards. Three ways in: db.free
// lists the page, db.free is missing (the open scans), and after an open
// whose proof of the trusted list set the page aside for good.
func TestCheckRepair_DamagedFreePage(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"listed in db.free", "db.free missing", "set aside by an open"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir, page := storeWithDamagedFreePage(t)
			want := storeContent(t, dir)
			switch how {
			case "db.free missing":
				if err := os.Remove(filepath.Join(dir, "db.free")); err != nil {
					t.Fatal(err)
				}
			case "set aside by an open":
				if code, _, errs := runTool(t, "recover", dir); code != 0 {
					t.Fatalf("recover: exit %d: %s", code, errs)
				}
			}
			code, m := runJSON(t, "check", "--json", dir)
			msgs := jsonProblems(m)
			if code != 0 || strings.Contains(msgs, "leaked") || !strings.Contains(msgs, fmt.Sprintf("page %d", page)) {
				t.Errorf("check: exit %d, want 0 with a warning naming page %d: %v", code, page, m["problems"])
			}
			for _, p := range m["problems"].([]any) {
				if p.(map[string]any)["severity"] != "warning" {
					t.Errorf("check: %v, want warnings only", p)
				}
			}
			code, m = runJSON(t, "repair", "--json", dir)
			if u := jsonString(m["unfixable"]); u != "" || len(m["actions"].([]any)) == 0 {
				t.Errorf("repair dry run: exit %d, unfixable %q, actions %v: want a rebuild of the free list", code, u, m["actions"])
			}
			code, m = runJSON(t, "repair", "--json", "--apply", dir)
			if code != 0 || jget(t, m, "after.ok") != true {
				t.Fatalf("repair --apply: exit %d, %v", code, m)
			}
			if ps := m["after"].(map[string]any)["problems"].([]any); len(ps) != 0 {
				t.Errorf("after repair --apply: problems %v, want none (the page is free again)", ps)
			}
			if got := storeContent(t, dir); got != want {
				t.Errorf("the store's content changed")
			}
			if code, out, errs := runTool(t, "check", dir); code != 0 || strings.Contains(out, "warning") {
				t.Errorf("check after the repair: exit %d:\n%s%s", code, out, errs)
			}
		})
	}
}

// storeWithDamagedFreePage returns a closed store whose db.free lists a
// page with a byte of its payload flipped, and that page.
func storeWithDamagedFreePage(t *testing.T) (string, uint64) {
	t.Helper()
	dir := makeStore(t, 3000)
	db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	for i := 0; i < 3000; i += 2 {
		b.Delete("users", []byte(fmt.Sprintf("user-%05d", i)))
		if b.Len() == 100 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Checkpoint(); err != nil { // frees the pages the deletes replaced
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := pagefile.Inspect(vfs.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if in.TrustedFile != "db.free" {
		t.Fatalf("Open would not trust db.free: %s", in.Reason)
	}
	var page uint64
	for _, f := range in.FreeFiles {
		if f.Name == "db.free" && len(f.Ranges) > 0 {
			page = uint64(f.Ranges[0].Start)
		}
	}
	if page == 0 {
		t.Fatal("db.free lists no page")
	}
	p := filepath.Join(dir, "db.data")
	fd, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(page)*int64(in.PageSize) + int64(in.PageSize)/2
	one := []byte{0}
	if _, err := fd.ReadAt(one, off); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x5a
	if _, err := fd.WriteAt(one, off); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, page
}
