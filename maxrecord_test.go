package kdb_test

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestOpen_BatchLargerThanTheReopenersBound: a store written with large
// journal segments (so batch records up to 16 MiB) and reopened after a
// crash with the default options (records up to 8 MiB for 32 MiB
// segments). The acknowledged batch was taken for a torn tail and
// truncated: lost without an error. Every open, read-only or not, with
// any SegmentSize, now reads it.
func TestOpen_BatchLargerThanTheReopenersBound(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, SegmentSize: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	const n = 24_000 // values inline (up to ValueThreshold): one batch record of ~11 MiB
	for i := range n {
		b.Put("t", fmt.Appendf(nil, "k%07d", i), make([]byte, 480))
	}
	if db.MaxBatchSize() <= 8<<20 {
		t.Fatalf("MaxBatchSize %d with 256 MiB segments", db.MaxBatchSize())
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	img := mem.CrashClone(vfs.CrashOptions{}) // synced bytes only: the power fails
	_ = db.Close()

	for _, o := range []kdb.Options{{ReadOnly: true}, {SegmentSize: 1 << 20}, {}} {
		o.FS = img.Clone()
		db, err := kdb.Open("/db", &o)
		if err != nil {
			t.Fatalf("%+v: Open: %v", o, err)
		}
		rec := db.Recovery()
		if rec.TornBytesTruncated != 0 {
			t.Errorf("%+v: truncated %d bytes at %v", o, rec.TornBytesTruncated, rec.TornAt)
		}
		for _, i := range []int{0, n / 2, n - 1} {
			if _, err := db.Get("t", fmt.Appendf(nil, "k%07d", i)); err != nil {
				t.Errorf("%+v: key %d: %v", o, i, err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
