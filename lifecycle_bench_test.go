package kdb_test

import (
	"fmt"
	"testing"

	"github.com/kdb-project/kdb"
)

// BenchmarkDB_Iter scans 10,000 keys with 100-byte inline values in one
// View on the OS file system (reads through the mmap): ns/op is one key
// (Next, Key, Value). BenchmarkDB_Get is one Get of an inline value (a View
// registers and unregisters with the DB).
func BenchmarkDB_Iter(b *testing.B) {
	db := benchStore(b)
	b.ResetTimer()
	n := 0
	for n < b.N {
		err := db.View(func(s *kdb.Snapshot) error {
			it := s.Iter("x")
			for ok := it.First(); ok && n < b.N; ok = it.Next() {
				if len(it.Key()) == 0 || len(it.Value()) != 100 {
					return fmt.Errorf("bad entry")
				}
				n++
			}
			return it.Err()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDB_Get(b *testing.B) {
	db := benchStore(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := db.Get("x", fmt.Appendf(nil, "k%06d", i%10000)); err != nil {
			b.Fatal(err)
		}
	}
}

func benchStore(b *testing.B) *kdb.DB {
	db, err := kdb.Open(b.TempDir(), &kdb.Options{CheckpointInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	v := make([]byte, 100)
	bt := kdb.NewBatch()
	for i := 0; i < 10000; i++ {
		bt.Put("x", fmt.Appendf(nil, "k%06d", i), v)
		if bt.Len() == 500 {
			if err := db.Write(bt); err != nil {
				b.Fatal(err)
			}
			bt.Reset()
		}
	}
	if err := db.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	return db
}
