package kdb_test

// Outside tester (root-package misuse): handles used after they ended,
// the same store opened twice, leaks over many Open/Close cycles, odd
// names and keys. All REGRESSION tests (the contract holds).

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// REGRESSION: a second in-process Open of the same directory is ErrLocked
// (and says so), also ReadOnly-with-writer is allowed; after Close the
// directory opens again.
func TestMisuse_OpenSameDirTwice(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if db2, err := kdb.Open(dir, nil); !errors.Is(err, kdb.ErrLocked) {
		if db2 != nil {
			db2.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ro, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("ReadOnly open beside the writer: %v", err)
	}
	if err := ro.Put("t", []byte("k"), []byte("w")); !errors.Is(err, kdb.ErrReadOnly) {
		t.Fatalf("Put on ReadOnly: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	if v, err := db.Get("t", []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get after reopen: %q %v", v, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// REGRESSION: 60 Open/write/View/Close cycles (some with a failed second
// Open, a ReadOnly open, a View left running past CloseWait) leak neither
// goroutines nor file descriptors.
func TestMisuse_NoLeaksOverOpenCloseCycles(t *testing.T) {
	dir := t.TempDir()
	// Warm up (lazy runtime goroutines, first Open).
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	time.Sleep(50 * time.Millisecond)
	g0, fd0 := runtime.NumGoroutine(), countFDs(t)
	for i := 0; i < 60; i++ {
		db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10, CloseWait: time.Millisecond, ValueThreshold: 16})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kdb.Open(dir, nil); !errors.Is(err, kdb.ErrLocked) {
			t.Fatalf("second Open: %v", err)
		}
		for j := 0; j < 20; j++ {
			if err := db.Put("t", []byte{byte(i), byte(j)}, bytes.Repeat([]byte{byte(j)}, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("d", []byte{byte(i)}, []byte("x")) }, nil); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			ro, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ro.Get("t", []byte{byte(i), 0}); err != nil {
				t.Fatal(err)
			}
			ro.Close()
		}
		release := make(chan struct{})
		viewDone := make(chan error, 1)
		if i%4 == 0 { // a View that outlasts CloseWait
			started := make(chan struct{})
			go func() {
				viewDone <- db.View(func(s *kdb.Snapshot) error {
					it := s.Iter("t")
					it.First()
					close(started)
					<-release
					if it.Next() {
						return errors.New("iterator moved after Close")
					}
					return it.Err()
				})
			}()
			<-started
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		close(release)
		if i%4 == 0 {
			if err := <-viewDone; !errors.Is(err, kdb.ErrClosed) {
				t.Fatalf("View outlasting Close: %v, want ErrClosed", err)
			}
		}
	}
	var g1, fd1 int
	for try := 0; try < 100; try++ {
		time.Sleep(20 * time.Millisecond)
		g1, fd1 = runtime.NumGoroutine(), countFDs(t)
		if g1 <= g0 && fd1 <= fd0 {
			break
		}
	}
	if g1 > g0 || fd1 > fd0 {
		buf := make([]byte, 1<<20)
		t.Fatalf("after 60 cycles: goroutines %d -> %d, fds %d -> %d\n%s", g0, g1, fd0, fd1, buf[:runtime.Stack(buf, true)])
	}
}

// REGRESSION: snapshots, iterators and transactions used after their
// function returned get ErrInvalid; after Close, every entry point is
// ErrClosed; a Commit waited for after Close returns its outcome.
func TestMisuse_UseAfterReturnAndAfterClose(t *testing.T) {
	db, err := kdb.Open("/db", misuseOpts())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := db.Put("t", []byte{'k', byte(i)}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var snap *kdb.Snapshot
	var it *kdb.Iter
	if err := db.View(func(s *kdb.Snapshot) error { snap, it = s, s.Iter("t"); it.First(); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Get("t", []byte{'k', 0}); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Snapshot.Get after its View: %v", err)
	}
	if it.Next() || !errors.Is(it.Err(), kdb.ErrInvalid) || it.Key() != nil {
		t.Fatalf("Iter after its View: key %q err %v", it.Key(), it.Err())
	}
	var tx *kdb.Txn
	var txIt *kdb.Iter
	c, err := db.Submit(func(x *kdb.Txn) error { tx, txIt = x, x.Iter("t"); return x.Put("t", []byte("s"), []byte("v")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("t", []byte("late"), []byte("v")); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Txn.Put after Submit returned: %v", err)
	}
	if _, err := tx.Get("t", []byte("s")); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Txn.Get after Submit returned: %v", err)
	}
	if txIt.First() || !errors.Is(txIt.Err(), kdb.ErrInvalid) {
		t.Fatalf("Txn iterator after Submit returned: %v", txIt.Err())
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	// A Commit submitted, never waited for before Close.
	c2, err := db.Submit(func(x *kdb.Txn) error { return x.Put("t", []byte("s2"), []byte("v")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := muWithin(t, 5*time.Second, "Wait after Close", c2.Wait); err != nil && !errors.Is(err, kdb.ErrClosed) {
		t.Fatalf("Wait of a Commit abandoned by Close: %v", err)
	}
	checks := map[string]error{}
	checks["Put"] = db.Put("t", []byte("x"), []byte("y"))
	checks["Delete"] = db.Delete("t", []byte("x"))
	b := kdb.NewBatch()
	b.Put("t", []byte("x"), []byte("y"))
	checks["Write"] = db.Write(b)
	checks["Write(empty)"] = db.Write(kdb.NewBatch())
	checks["Update"] = db.Update(func(*kdb.Txn) error { return nil })
	_, checks["Submit"] = db.Submit(func(*kdb.Txn) error { return nil })
	checks["Defer"] = db.Defer(func(*kdb.Txn) error { return nil }, nil)
	checks["View"] = db.View(func(*kdb.Snapshot) error { return nil })
	_, checks["Get"] = db.Get("t", []byte("x"))
	checks["Sync"] = db.Sync()
	checks["Checkpoint"] = db.Checkpoint()
	_, checks["Compact"] = db.Compact()
	_, checks["Check"] = db.Check()
	_, checks["Export"] = db.Export(&bytes.Buffer{})
	checks["Close"] = db.Close()
	for call, err := range checks {
		if !errors.Is(err, kdb.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", call, err)
		}
	}
	_ = db.Stats() // must not panic
	_ = db.Recovery()
}

// REGRESSION: odd names and keys. Index names of any bytes (NUL, '/',
// 0xff, the longest allowed) round-trip through the journal, a
// checkpoint, a reopen and Export/Import; invalid ones (empty, too long,
// empty or oversized key, value above MaxValueSize) are ErrInvalid and
// write nothing of their batch.
func TestMisuse_OddNamesAndKeys(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"\x00", "a/b", "/", "\xff\xfe", "u/x", "k/segrefs", strings.Repeat("n", kdb.MaxIndexNameSize), "sp ace\n"}
	keys := [][]byte{{0}, {0xff}, bytes.Repeat([]byte{0}, kdb.MaxKeySize), bytes.Repeat([]byte{0xff}, kdb.MaxKeySize)}
	for _, n := range names {
		for _, k := range keys {
			if err := db.Put(n, k, append([]byte(n), k...)); err != nil {
				t.Fatalf("Put(%q, %d-byte key): %v", n, len(k), err)
			}
		}
	}
	bad := map[string]func(b *kdb.Batch){
		"empty index":    func(b *kdb.Batch) { b.Put("", []byte("k"), nil) },
		"long index":     func(b *kdb.Batch) { b.Put(strings.Repeat("n", kdb.MaxIndexNameSize+1), []byte("k"), nil) },
		"nil key":        func(b *kdb.Batch) { b.Put("t", nil, []byte("v")) },
		"long key":       func(b *kdb.Batch) { b.Put("t", make([]byte, kdb.MaxKeySize+1), nil) },
		"huge value":     func(b *kdb.Batch) { b.Put("t", []byte("k"), make([]byte, kdb.MaxValueSize+1)) },
		"empty drop":     func(b *kdb.Batch) { b.DropIndex("") },
		"delete nil key": func(b *kdb.Batch) { b.Delete("t", nil) },
	}
	for what, f := range bad {
		b := kdb.NewBatch()
		b.Put("t", []byte("good"), []byte("v"))
		f(b)
		if err := db.Write(b); !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("Write with %s: %v, want ErrInvalid", what, err)
		}
		err := db.Update(func(tx *kdb.Txn) error {
			if err := tx.Put("t", []byte("good"), []byte("v")); err != nil {
				return err
			}
			nb := kdb.NewBatch()
			f(nb)
			_ = nb
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Delete("t", []byte("good")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Get("t", []byte("good")); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("a rejected batch wrote: %v", err)
	}
	check := func(stage string, db *kdb.DB) {
		t.Helper()
		for _, n := range names {
			for _, k := range keys {
				v, err := db.Get(n, k)
				if err != nil || !bytes.Equal(v, append([]byte(n), k...)) {
					t.Fatalf("%s: Get(%q, %d-byte key): %q %v", stage, n, len(k), v, err)
				}
			}
		}
		if _, err := db.Check(); err != nil {
			t.Fatalf("%s: Check: %v", stage, err)
		}
	}
	check("applied", db)
	if err := db.Close(); err != nil { // no checkpoint: replayed at Open
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen (replay of odd names): %v", err)
	}
	check("replayed", db)
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	check("checkpointed", db)
	var exp bytes.Buffer
	if _, err := db.Export(&exp); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if _, err := kdb.Import(dir2, &exp, nil); err != nil {
		t.Fatalf("Import: %v", err)
	}
	db, err = kdb.Open(dir2, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("imported", db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
