package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestInspect_LostNewestMetaIsDamageNotAChange: the newest meta slot
// damaged and db.redo gone (two faults: nothing can restore that
// checkpoint's meta). Its pages were written in place, so the older meta's
// tree meets pages of a newer checkpoint. A read-only handle took that for
// a live writer's checkpoint (ErrStale) even though nothing changed:
// inspect, check and repair retried twenty times and then called the store
// unreadable, "an I/O or resource error, not damage", exit 3, and repair
// could plan nothing. Now, with the store's state unchanged since the
// handle opened, such a page is damage (ErrCorrupt): exit 1 at once, and
// repair --apply --rebuild-index brings back every key from the journal.
func TestInspect_LostNewestMetaIsDamageNotAChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: testSegmentSize, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%05d", i)) }
	val := func(i, round int) []byte { return []byte(fmt.Sprintf("v%d-%d", i, round)) }
	const n = 3000
	for round := 0; round < 4; round++ {
		b := kdb.NewBatch()
		for i := 0; i < n; i++ {
			b.Put("ix", key(i), val(i, round))
			if b.Len() == 500 {
				if err := db.Write(b); err != nil {
					t.Fatal(err)
				}
				b.Reset()
			}
		}
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	_, m := runJSON(t, "inspect", "--json", dir)
	ps := int64(jget(t, m, "page_size").(float64))
	newest, seq := -1, 0.0
	for _, s := range m["meta_slots"].([]any) {
		s := s.(map[string]any)
		if s["intact"] == true && s["seq"].(float64) > seq {
			newest, seq = int(s["slot"].(float64)), s["seq"].(float64)
		}
	}
	if newest < 0 {
		t.Fatalf("no intact meta slot: %v", m["meta_slots"])
	}
	f, err := os.OpenFile(filepath.Join(dir, "db.data"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(1+newest)*ps + 40
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Remove(filepath.Join(dir, "db.redo")); err != nil {
		t.Fatal(err)
	}

	for _, cmd := range []string{"inspect", "check"} {
		start := time.Now()
		code, out, errs := runTool(t, cmd, dir)
		if code != exitProblems || !strings.Contains(out, "the meta slot of that checkpoint is lost") || strings.Contains(out, "not damage") {
			t.Errorf("%s: exit %d in %v; want 1 and the lost meta named\n%s%s", cmd, code, time.Since(start), out, errs)
		}
	}
	code, out, errs := runTool(t, "repair", "--apply", "--rebuild-index", dir)
	if code != exitOK || !strings.Contains(out, "check ok true") {
		t.Fatalf("repair --apply --rebuild-index: exit %d\n%s%s", code, out, errs)
	}
	db, err = kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < n; i++ {
		if v, err := db.Get("ix", key(i)); err != nil || string(v) != string(val(i, 3)) {
			t.Fatalf("key %d after the rebuild: %q, %v", i, v, err)
		}
	}
}
