package kdb_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/internal/kdbtest/dbtest"
	"github.com/kdb-project/kdb/vfs"
)

// lostStore builds a closed store in a MemFS with writes in its journal and
// db.data, then removes db.data and every file of drop.
func lostStore(t *testing.T, drop ...string) *vfs.MemFS {
	t.Helper()
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, SegmentSize: 64 << 10, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if err := db.Put("ix", []byte(fmt.Sprintf("k%04d", i)), make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]string{"db.data"}, drop...) {
		if err := mem.Remove("/db/" + n); err != nil {
			t.Fatal(err)
		}
	}
	return mem
}

func memNames(t *testing.T, mem *vfs.MemFS) []string {
	t.Helper()
	names, err := mem.ReadDir("/db")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestOpen_MissingDataFileIsCorrupt: a directory that holds what only an
// existing store leaves (journal segments, db.free, db.free.prev, db.redo)
// but no db.data is ErrCorrupt naming db.data and what remains, for a
// writable and a read-only open, and Open creates nothing.
func TestOpen_MissingDataFileIsCorrupt(t *testing.T) {
	t.Parallel()
	segsOf := func(mem *vfs.MemFS) []string {
		var s []string
		for _, n := range memNames(t, mem) {
			if strings.HasSuffix(n, ".log") {
				s = append(s, n)
			}
		}
		return s
	}
	probe := lostStore(t)
	segs := segsOf(probe)
	if len(segs) < 2 {
		t.Fatalf("want two segments or more, have %v", segs)
	}
	cases := []struct {
		name string
		drop []string
		want string
	}{
		{"everything but db.data", nil, "journal segments db-1.log to"},
		{"only the journal", []string{"db.free", "db.free.prev", "db.redo"}, "journal segments db-1.log to"},
		{"only the last segment", append(append([]string{}, segs[:len(segs)-1]...), "db.free", "db.free.prev", "db.redo"), segs[len(segs)-1]},
		{"only db.free", append(append([]string{}, segs...), "db.free.prev", "db.redo"), "db.free"},
		{"only db.free.prev", append(append([]string{}, segs...), "db.free", "db.redo"), "db.free.prev"},
		{"only db.redo", append(append([]string{}, segs...), "db.free", "db.free.prev"), "db.redo"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			mem := lostStore(t, c.drop...)
			before := memNames(t, mem)
			for _, ro := range []bool{false, true} {
				db, err := kdb.Open("/db", &kdb.Options{FS: mem, ReadOnly: ro})
				if err == nil {
					db.Close()
					t.Fatalf("read-only %v: Open created a new store over %v", ro, before)
				}
				if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "db.data is missing") || !strings.Contains(err.Error(), c.want) {
					t.Errorf("read-only %v: %v, want ErrCorrupt naming db.data and %s", ro, err, c.want)
				}
			}
			if after := memNames(t, mem); !slices.Equal(before, after) {
				t.Errorf("Open changed the directory: %v -> %v", before, after)
			}
		})
	}
	// What only an unfinished creation leaves (the lock, db.data.tmp) is
	// not a store: Open creates one.
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/db", 0o750); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"lock", "db.data.tmp"} {
		f, err := mem.OpenFile("/db/"+n, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("half"), 0)
		f.Close()
	}
	db, err := kdb.Open("/db", &kdb.Options{FS: mem})
	if err != nil {
		t.Fatalf("open over an unfinished creation: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpen_CrashDuringCreation crashes the creation of a store (Open of an
// empty directory, then one acknowledged write and Close) at every mutating
// file-system operation, under every power-loss model of the crash
// campaign: each image opens, as a new store or as the store created, never
// with ErrCorrupt, holds the write if it was acknowledged, and passes Check.
func TestOpen_CrashDuringCreation(t *testing.T) {
	t.Parallel()
	opts := func(fs vfs.FS) *kdb.Options {
		return &kdb.Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1}
	}
	// Count the operations of the whole sequence.
	var n atomic.Int64
	counted := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op.Mutating() {
			n.Add(1)
		}
		return nil
	})
	var created atomic.Int64
	run := func(fs vfs.FS) (acked bool) {
		db, err := kdb.Open("/db/store", opts(fs))
		if err != nil {
			return false
		}
		created.Store(n.Load())
		acked = db.Put("ix", []byte("k"), []byte("v")) == nil
		db.Close()
		return acked
	}
	if !run(counted) {
		t.Fatal("the sequence fails without a crash")
	}
	total, inOpen := int(n.Load()), int(created.Load())
	if inOpen < 5 {
		t.Fatalf("creation took %d mutating operations; the test counts them wrong", inOpen)
	}
	points := 0
	for k := 1; k <= total+1; k++ {
		for i, o := range dbtest.CampaignSettings {
			o.Seed = int64(k*10 + i)
			cr := kdbtest.CrashAt(vfs.NewMem(), k, o)
			acked := run(cr.FS())
			img := cr.Image()
			points++
			db, err := kdb.Open("/db/store", opts(img))
			if err != nil {
				t.Fatalf("crash at op %d of %d (creation: %d), %+v: reopen: %v", k, total, inOpen, o, err)
			}
			v, err := db.Get("ix", []byte("k"))
			switch {
			case acked && (err != nil || string(v) != "v"):
				t.Errorf("crash at op %d, %+v: the acknowledged write is lost: %q %v", k, o, v, err)
			case !acked && err != nil && !errors.Is(err, kdb.ErrNotFound):
				t.Errorf("crash at op %d, %+v: get: %v", k, o, err)
			}
			if _, err := db.Check(); err != nil {
				t.Errorf("crash at op %d, %+v: check: %v", k, o, err)
			}
			// The reopened store takes writes and reopens again.
			if err := db.Put("ix", []byte("after"), []byte("x")); err != nil {
				t.Errorf("crash at op %d, %+v: put after reopen: %v", k, o, err)
			}
			if err := db.Close(); err != nil {
				t.Errorf("crash at op %d, %+v: close: %v", k, o, err)
			}
			if db, err := kdb.Open("/db/store", opts(img)); err != nil {
				t.Errorf("crash at op %d, %+v: second reopen: %v", k, o, err)
			} else {
				db.Close()
			}
		}
	}
	t.Logf("%d crash points: %d mutating operations (%d in the creating Open)", points, total, inOpen)
}
