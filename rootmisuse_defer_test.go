package kdb_test

// Root-package misuse (found by an outside tester): deferred transactions folded into
// an unrelated Submit.

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// FIXED: TestMisuse_FoldedDefersFailUnrelatedSubmit. Submit returns
// ErrInvalid "split the batch" only for a transaction that is too large
// (MaxBatchSize; each value up to MaxValueSize). Deferred transactions of
// the Submit's namespace are folded into its transaction (deferred.go,
// tx.folded), so the size checked was, before the fix (splitFolded), the sum of every Defer queued plus the
// Submit's own writes: a one-byte Submit fails with ErrInvalid because of
// writes that are not its own, each of which is valid alone. With the
// default options three deferred 6 MiB values (each well under
// MaxValueSize = 8 MiB) exceed the group bound (SegmentSize/2 = 16 MiB).
// The deferred transactions are put back and folded into the next Submit
// again, which fails the same way until some Write, Sync or the timer
// runs them alone.
func TestMisuse_FoldedDefersFailUnrelatedSubmit(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	big := bytes.Repeat([]byte("v"), 6<<20)
	dones := make(chan error, 3)
	for i := 0; i < 3; i++ {
		k := []byte{'d', byte('0' + i)}
		if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("t", k, big) }, func(err error) { dones <- err }); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte("small"), []byte("x")) })
		if err != nil {
			t.Fatalf("Submit #%d of a one-byte value: %v (caused by the deferred transactions folded into it)", i+1, err)
		}
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	// Each deferred write alone is fine: Sync runs them one by one.
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := <-dones; err != nil {
			t.Fatalf("deferred done: %v", err)
		}
	}
}

// Same, through the record bound on a store with small segments
// (MaxBatchSize = SegmentSize/4 = 16 KiB): 100 deferred writes of 200
// bytes (inline values) make a tiny Submit's batch record too large.
func TestMisuse_FoldedDefersFailUnrelatedSubmitSmallSegments(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: 1 << 40, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v := bytes.Repeat([]byte("v"), 200)
	for i := 0; i < 100; i++ {
		k := []byte{'d', byte(i)}
		if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("t", k, v) }, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte("small"), []byte("x")) })
	if err != nil {
		t.Fatalf("Submit of a one-byte value (MaxBatchSize %d): %v", db.MaxBatchSize(), err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
}

// The deferred transactions committed apart from an oversized host still
// come before it, each whole: a deferred write and the host's write of the
// same key end with the host's value, every deferred key is there, every
// done is called once with nil, and a reopen (after a crash image taken
// once the Submit was durable) holds all of it.
func TestDefer_SplitFromAnOversizedHostKeepsOrder(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, SyncInterval: 1 << 40, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	v := bytes.Repeat([]byte("v"), 200)
	var dones atomic.Int32
	for i := 0; i < 100; i++ {
		k := []byte{'d', byte(i)}
		err := db.Defer(func(tx *kdb.Txn) error {
			if err := tx.Put("t", k, v); err != nil {
				return err
			}
			return tx.Put("t", []byte("shared"), []byte{'d', byte(i)})
		}, func(err error) {
			if err != nil {
				t.Errorf("deferred done: %v", err)
			}
			dones.Add(1)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Submit(func(tx *kdb.Txn) error {
		got, err := tx.Get("t", []byte("shared"))
		if err != nil || !bytes.Equal(got, []byte{'d', 99}) {
			t.Errorf("the host reads shared = %q, %v; want the last deferred write", got, err)
		}
		return tx.Put("t", []byte("shared"), []byte("host"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := dones.Load(); n != 100 {
		t.Fatalf("%d deferred dones after the host's Wait, want 100", n)
	}
	img := mem.Clone()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := kdb.Open("/db", &kdb.Options{FS: img, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if got, err := db2.Get("t", []byte("shared")); err != nil || string(got) != "host" {
		t.Fatalf("shared = %q, %v after reopen; want the host's write, last", got, err)
	}
	for i := 0; i < 100; i++ {
		if got, err := db2.Get("t", []byte{'d', byte(i)}); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("deferred key %d: %v", i, err)
		}
	}
}
