package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func putN(t *testing.T, db *kdb.DB, idx string, n, size int) {
	t.Helper()
	v := bytes.Repeat([]byte{7}, size)
	b := kdb.NewBatch()
	for i := 0; i < n; i++ {
		b.Put(idx, []byte(fmt.Sprintf("k%06d", i)), v)
		if b.Len() == 8 || i == n-1 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestDB_CheckpointTriggers(t *testing.T) {
	tests := []struct {
		name string
		opts kdb.Options
	}{
		{"journal-bytes", kdb.Options{CheckpointBytes: 256 << 10}},
		{"dirty-pages", kdb.Options{CheckpointDirtyPages: 32, ValueThreshold: -1}},
		{"interval", kdb.Options{CheckpointInterval: 20 * time.Millisecond}},
		// 1 ms at the default 100 MiB/s assumed replay rate: ~100 KiB.
		{"recovery-time-target", kdb.Options{RecoveryTimeTarget: time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.FS = vfs.NewMem()
			o.SegmentSize = 128 << 10
			if o.CheckpointInterval == 0 {
				o.CheckpointInterval = -1
			}
			db, err := kdb.Open("/db", &o)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			putN(t, db, "x", 1000, 700)
			waitFor(t, "a background checkpoint", func() bool { return db.Stats().Checkpoints > 0 })
		})
	}
}

func TestDB_NoCheckpointWithoutTrigger(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A new store's first checkpoint, inside Open, names its journal.
	base := db.Stats().Checkpoints
	if base != 1 {
		t.Fatalf("a new store: %d checkpoints in Open, want its first one", base)
	}
	putN(t, db, "x", 100, 10)
	time.Sleep(50 * time.Millisecond)
	if n := db.Stats().Checkpoints - base; n != 0 {
		t.Fatalf("%d checkpoints without a trigger", n)
	}
}

func TestDB_JournalGC(t *testing.T) {
	for _, archive := range []string{"", "archive"} {
		t.Run("archive="+archive, func(t *testing.T) {
			mem := vfs.NewMem()
			db, err := kdb.Open("/db", &kdb.Options{FS: mem, SegmentSize: 64 << 10, ArchiveDir: archive, CheckpointInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			// Large values live in the journal: overwriting them all
			// frees the old segments.
			for round := 0; round < 4; round++ {
				putN(t, db, "x", 50, 2000)
			}
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			st := db.Stats()
			if st.SegmentsRemoved == 0 {
				t.Fatalf("no segment removed: %+v", st)
			}
			if _, err := db.Check(); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if archive != "" {
				names, err := mem.ReadDir("/db/archive")
				if err != nil || len(names) == 0 {
					t.Fatalf("archive: %v %v", names, err)
				}
			}
			db, err = kdb.Open("/db", &kdb.Options{FS: mem})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			v, err := db.Get("x", []byte("k000049"))
			if err != nil || len(v) != 2000 {
				t.Fatalf("after GC and reopen: %d bytes, %v", len(v), err)
			}
		})
	}
}

func TestDB_ArchiveDirMustStayInside(t *testing.T) {
	for _, p := range []string{"../elsewhere", "/tmp", "a/../../b", "."} {
		_, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), ArchiveDir: p})
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("ArchiveDir %q: %v, want ErrInvalid", p, err)
		}
	}
}

func TestDB_ReadOnly(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, SegmentSize: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	putN(t, db, "x", 10, 10)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := mem.Clone()
	ro, err := kdb.Open("/db", &kdb.Options{FS: mem, ReadOnly: true, SegmentSize: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := ro.Get("x", []byte("k000003")); err != nil || len(v) != 10 {
		t.Fatalf("read-only get: %v %v", v, err)
	}
	if err := ro.Put("x", []byte("k"), nil); !errors.Is(err, kdb.ErrReadOnly) {
		t.Fatalf("read-only put: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing was written: the files are byte for byte the same.
	names, _ := mem.ReadDir("/db")
	for _, n := range names {
		a, _ := vfs.ReadFile(mem, "/db/"+n)
		b, _ := vfs.ReadFile(before, "/db/"+n)
		if !bytes.Equal(a, b) {
			t.Errorf("read-only open changed %s", n)
		}
	}
}

func TestDB_InvalidArguments(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	long := bytes.Repeat([]byte{1}, kdb.MaxKeySize+1)
	for name, fn := range map[string]func() error{
		"empty key":     func() error { return db.Put("x", nil, []byte("v")) },
		"long key":      func() error { return db.Put("x", long, []byte("v")) },
		"empty index":   func() error { return db.Put("", []byte("k"), []byte("v")) },
		"huge value":    func() error { return db.Put("x", []byte("k"), make([]byte, kdb.MaxValueSize+1)) },
		"delete no key": func() error { return db.Delete("x", nil) },
	} {
		if err := fn(); !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// The handle is still good.
	if err := db.Put("x", long[:kdb.MaxKeySize], []byte("v")); err != nil {
		t.Fatal(err)
	}
}

func TestDB_UpdateIsAtomicAndSerializable(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const workers, incs = 8, 50
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := 0; i < incs; i++ {
				err := db.Update(func(tx *kdb.Txn) error {
					v, err := tx.Get("c", []byte("n"))
					if err != nil && !errors.Is(err, kdb.ErrNotFound) {
						return err
					}
					n := 0
					if len(v) > 0 {
						fmt.Sscan(string(v), &n)
					}
					return tx.Put("c", []byte("n"), []byte(fmt.Sprint(n+1)))
				})
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	v, err := db.Get("c", []byte("n"))
	if err != nil || string(v) != fmt.Sprint(workers*incs) {
		t.Fatalf("counter %q, %v; want %d", v, err, workers*incs)
	}
	// A failing Update writes nothing.
	boom := errors.New("boom")
	err = db.Update(func(tx *kdb.Txn) error {
		if err := tx.Put("c", []byte("n"), []byte("lost")); err != nil {
			return err
		}
		if v, _ := tx.Get("c", []byte("n")); string(v) != "lost" {
			return fmt.Errorf("read-your-writes: %q", v)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if v, _ := db.Get("c", []byte("n")); string(v) != fmt.Sprint(workers*incs) {
		t.Fatalf("a failed Update wrote %q", v)
	}
}

// TestDB_ReadOnlySeesTheJournal: a read-only open after a crash shows every
// acknowledged write, checkpointed or not, and writes nothing.
func TestDB_ReadOnlySeesTheJournal(t *testing.T) {
	mem := vfs.NewMem()
	o := &kdb.Options{FS: mem, SegmentSize: 128 << 10, CheckpointInterval: -1}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	putN(t, db, "x", 20, 100)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	putN(t, db, "y", 20, 900) // journal only: values in the journal, index pages dirty
	img := mem.CrashClone(vfs.CrashOptions{})
	_ = db.Close()
	before := img.Clone()
	ro, err := kdb.Open("/db", &kdb.Options{FS: img, ReadOnly: true, SegmentSize: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, idx := range []string{"x", "y"} {
		v, err := ro.Get(idx, []byte("k000019"))
		if err != nil || len(v) == 0 {
			t.Fatalf("read-only get %s: %d bytes, %v", idx, len(v), err)
		}
	}
	if r := ro.Recovery(); r.RecordsReplayed == 0 {
		t.Fatalf("nothing replayed: %+v", r)
	}
	if _, err := ro.Check(); err != nil {
		t.Fatal(err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := img.ReadDir("/db")
	for _, n := range names {
		a, errA := vfs.ReadFile(img, "/db/"+n)
		b, errB := vfs.ReadFile(before, "/db/"+n)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("read-only open changed %s", n)
		}
	}
}

func TestDB_CheckProgress(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), ValueThreshold: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	putN(t, db, "x", 3000, 1500)            // 3000 keys on about 1,500 pages
	if err := db.Checkpoint(); err != nil { // the keys in the pages, not the mem tables
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	rep, err := db.CheckProgress(func(phase string, done uint64) {
		if done <= calls[phase] {
			t.Errorf("%s: progress went from %d to %d", phase, calls[phase], done)
		}
		calls[phase] = done
	})
	if err != nil {
		t.Fatal(err)
	}
	// Reports come every 1,024 keys: the last one at 2,048 of 3,000.
	if calls["keys"] != 2048 || calls["index pages"] == 0 || calls["index pages"] > rep.ReachablePages {
		t.Fatalf("progress %v for %+v", calls, rep)
	}
}

// TestDB_IdleStoreTakesNoCheckpoints: an interval checkpoint runs only
// when something was written since the last one: an idle store takes none
// (each would cost fsyncs of db.free, db.redo and db.data every interval).
// Once the writes are checkpointed, 12 intervals pass without one (it
// waits up to 5 s for such a quiet stretch: a loaded machine may delay the
// checkpoints that are due).
func TestDB_IdleStoreTakesNoCheckpoints(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	putN(t, db, "x", 10, 10)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := db.Stats().Checkpoints
		time.Sleep(60 * time.Millisecond)
		if m := db.Stats().Checkpoints; m == n && n > 0 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints, still %d more in the last 12 intervals of an idle store", m, m-n)
		}
	}
}
