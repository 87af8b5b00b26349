package kdb_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestIter_CapacityEndsAtLength: Iter's doc says that appending to a key
// or value is safe, its capacity ending at its length (an append copies,
// never writing into memory others read). A key still in the mem tables
// came back with a capacity rounded up to its size class (len 4, cap 8:
// an outside review). Checked for keys and values in the mem tables and
// checkpointed, inline and kept in the journal.
func TestIter_CapacityEndsAtLength(t *testing.T) {
	for _, ckpt := range []bool{false, true} {
		db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			v := bytes.Repeat([]byte{byte('a' + i%26)}, 10+i)
			if i%10 == 0 {
				v = bytes.Repeat([]byte{'J'}, 5000) // kept in the journal
			}
			if err := db.Put("x", fmt.Appendf(nil, "k%03d", i), v); err != nil {
				t.Fatal(err)
			}
		}
		if ckpt {
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		err = db.View(func(s *kdb.Snapshot) error {
			it := s.Iter("x")
			for ok := it.First(); ok; ok = it.Next() {
				k, v := it.Key(), it.Value()
				if cap(k) != len(k) || cap(v) != len(v) {
					t.Errorf("checkpointed %v: key %q len %d cap %d, value len %d cap %d", ckpt, k, len(k), cap(k), len(v), cap(v))
				}
				n++
			}
			return it.Err()
		})
		if err != nil || n != 50 {
			t.Fatalf("checkpointed %v: %d keys, %v", ckpt, n, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
