package kdb_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/checksum"
	"github.com/kdb-project/kdb/vfs"
)

// forgeFreeFile rewrites dir's db.free as FORMAT.md §2.5 lays it
// out, keeping its store ID, checkpoint ID and page count (so Open trusts
// it) but listing the pages [first, pageCount) as free: one range that
// covers every data page, the live ones included.
func forgeFreeFile(t *testing.T, fsys vfs.FS, dir string, first uint64) {
	t.Helper()
	name := filepath.Join(dir, "db.free")
	b, err := vfs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	pageCount := le.Uint64(b[48:])
	out := make([]byte, 72+16)
	copy(out[8:56], b[8:56]) // magic, version, store ID, checkpoint ID, page count
	le.PutUint64(out[56:], 1)
	le.PutUint64(out[64:], pageCount-first)
	le.PutUint64(out[72:], first)
	le.PutUint64(out[80:], pageCount-first)
	le.PutUint64(out[0:], checksum.Sum64(out[8:]))
	if err := vfs.WriteFileAtomic(fsys, name, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

func lieValue(index string, i, gen int) []byte {
	return fmt.Appendf(nil, "%s/%06d/gen%d/%s", index, i, gen, bytes.Repeat([]byte{byte('a' + i%26)}, i%300))
}

// TestDB_LyingFreeListLosesNothing: a db.free with a valid checksum and the
// right IDs that lists every page, live B-tree pages included, as free.
// Reopened, 10,000 keys are written over several checkpoints; reopened
// again, every key written before and after reads back exactly and Check
// passes. The lie is counted, logged and in the recovery report.
func TestDB_LyingFreeListLosesNothing(t *testing.T) {
	dir := t.TempDir()
	o := kdb.Options{CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20}
	db, err := kdb.Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	indexes := []string{"a", "b", "c"}
	want := map[string]map[int][]byte{}
	put := func(db *kdb.DB, from, to, gen int) {
		t.Helper()
		for i := from; i < to; i += 50 {
			var b kdb.Batch
			for j := i; j < min(i+50, to); j++ {
				ix := indexes[j%len(indexes)]
				v := lieValue(ix, j, gen)
				b.Put(ix, fmt.Appendf(nil, "k%06d", j), v)
				if want[ix] == nil {
					want[ix] = map[int][]byte{}
				}
				want[ix][j] = v
			}
			if err := db.Write(&b); err != nil {
				t.Fatal(err)
			}
		}
	}
	verify := func(db *kdb.DB, what string) {
		t.Helper()
		for _, ix := range indexes {
			for j, v := range want[ix] {
				got, err := db.Get(ix, fmt.Appendf(nil, "k%06d", j))
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%s: %s k%06d = %.40q, %v; want %.40q", what, ix, j, got, err, v)
				}
			}
		}
		if _, err := db.Check(); err != nil {
			t.Fatalf("%s: check: %v", what, err)
		}
	}
	put(db, 0, 6000, 0)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	put(db, 0, 2000, 1) // some pages freed and stamped
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	forgeFreeFile(t, vfs.OS, dir, 3)
	logs := &lockedWriter{w: new(bytes.Buffer)}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	db, err = kdb.Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	if r := db.Recovery(); r.FreeListPath != "trusted" || r.FreeListLied {
		t.Fatalf("recovery before any write %+v", r)
	}
	for gen := 2; gen < 6; gen++ {
		put(db, (gen-2)*2500, (gen-1)*2500, gen) // 10,000 keys, overwrites and new ones
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	// Check waits for the background proof of the pages set aside.
	verify(db, "after the lie")
	st := db.Stats()
	if st.FreeListHeld != 0 {
		t.Fatalf("%d pages still held after Check", st.FreeListHeld)
	}
	r := db.Recovery()
	if st.FreeListLies == 0 || !r.FreeListLied || r.FreeListLiedPage < 3 || r.FreeListLies != st.FreeListLies || r.FreeListLieReason == "" {
		t.Fatalf("lie not reported: stats lies %d, recovery %+v", st.FreeListLies, r)
	}
	// One error for the first lie (not one per page), then the count.
	if l := logs.String(); bytes.Count([]byte(l), []byte("listed a page in use")) != 1 ||
		!bytes.Contains([]byte(l), []byte("free list is rebuilt")) {
		t.Fatalf("lie not logged once, or the rebuild not logged: %s", l)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	o.Logger = nil
	db, err = kdb.Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	verify(db, "reopened")
	put(db, 0, 3000, 7)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	verify(db, "reopened and written")
	if st := db.Stats(); st.FreeListLies != 0 || db.Recovery().FreeListLied {
		t.Fatalf("honest list lied after reopen: %d", st.FreeListLies)
	}
}

// lockedWriter serializes writes for a logger used by several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// TestDB_LyingFreeListFoundByReplay: the lie is found while recovery
// replays the journal; the report Open logs and returns already says so,
// and the checkpoint recovery asks for replaces the lying db.free.
func TestDB_LyingFreeListFoundByReplay(t *testing.T) {
	dir := t.TempDir()
	o := kdb.Options{CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20}
	crash := o
	crash.NoCheckpointOnClose = true // the last 1,000 puts are only in the journal
	db, err := kdb.Open(dir, &crash)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i += 100 {
		if i == 2000 {
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		var b kdb.Batch
		for j := i; j < i+100; j++ {
			b.Put("t", fmt.Appendf(nil, "k%05d", j), lieValue("t", j, 0))
		}
		if err := db.Write(&b); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	forgeFreeFile(t, vfs.OS, dir, 3)
	logs := &lockedWriter{w: new(bytes.Buffer)}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	o.CheckpointBeforeServing = true
	db, err = kdb.Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	r := db.Recovery()
	if r.RecordsReplayed == 0 || !r.FreeListLied || r.FreeListLiedPage < 3 {
		t.Fatalf("recovery %+v", r)
	}
	if l := logs.String(); !bytes.Contains([]byte(l), []byte("free_list_lied=true")) {
		t.Fatalf("recovery log: %s", l)
	}
	for i := range 3000 {
		got, err := db.Get("t", fmt.Appendf(nil, "k%05d", i))
		if err != nil || !bytes.Equal(got, lieValue("t", i, 0)) {
			t.Fatalf("k%05d = %.40q, %v", i, got, err)
		}
	}
	if _, err := db.Check(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o.Logger = nil
	db, err = kdb.Open(dir, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := db.Recovery(); r.FreeListLied {
		t.Fatalf("lied again after the recovery checkpoint: %+v", r)
	}
	if _, err := db.Check(); err != nil {
		t.Fatal(err)
	}
}
