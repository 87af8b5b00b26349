package bench

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// readKeys is the number of keys in the read store.
const readKeys = 1_000_000

// readValueSize is the size of each value in the read store.
const readValueSize = 100

// readKey writes the i-th key of the read store into k (16 bytes): the
// first 8 bytes spread the keys over the key space (so consecutive i are
// not neighbours in the tree), the last 8 make them unique.
func readKey(k []byte, i uint64) {
	binary.BigEndian.PutUint64(k, i*0x9E3779B97F4A7C15)
	binary.BigEndian.PutUint64(k[8:], i)
}

// BuildReadStore returns the directory of a cached store holding readKeys
// keys of 16 bytes with readValueSize-byte values (the i-th value starts
// with i, little-endian) in index "read", building it if needed. Values are
// inline in the B-tree. It is reused across runs; delete it to rebuild.
func BuildReadStore(tb testing.TB) string {
	tb.Helper()
	return cachedStore(tb, "read-1M", func(db *kdb.DB) {
		b := kdb.NewBatch()
		val := make([]byte, readValueSize)
		var k [16]byte
		for i := uint64(0); i < readKeys; {
			b.Reset()
			for j := 0; j < 1000 && i < readKeys; j, i = j+1, i+1 {
				readKey(k[:], i)
				binary.LittleEndian.PutUint64(val, i)
				b.Put("read", k[:], val)
			}
			if err := db.Write(b); err != nil {
				tb.Fatal(err)
			}
		}
	})
}

// BenchmarkRead measures reads of the read store (1,000,000 keys, 100-byte
// values inline in the B-tree) with a warm cache: before timing, one full
// scan reads every page once (so each page's checksum was verified and the
// pages are in the OS cache).
//
//   - op=get: one DB.Get of a uniformly random key per operation; the value
//     is checked. ns/op is the time of one Get.
//   - op=scan: one View per operation that seeks to a uniformly random key
//     and reads the values of it and the next 99 keys (fewer at the end of
//     the index); keys/s counts the keys read.
func BenchmarkRead(b *testing.B) {
	dir := BuildReadStore(b)
	db, err := kdb.Open(dir, &kdb.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}()
	var n int
	err = db.View(func(s *kdb.Snapshot) error {
		it := s.Iter("read")
		for ok := it.First(); ok; ok = it.Next() {
			if len(it.Value()) != readValueSize {
				b.Fatalf("value of %d bytes", len(it.Value()))
			}
			n++
		}
		return it.Err()
	})
	if err != nil || n != readKeys {
		b.Fatalf("warm-up scan: %d keys, %v", n, err)
	}

	b.Run("op=get", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(5, 5))
		var k [16]byte
		b.ResetTimer()
		for range b.N {
			i := rng.Uint64N(readKeys)
			readKey(k[:], i)
			v, err := db.Get("read", k[:])
			if err != nil || len(v) != readValueSize || binary.LittleEndian.Uint64(v) != i {
				b.Fatalf("get %d: %d bytes, %v", i, len(v), err)
			}
		}
	})

	b.Run("op=scan", func(b *testing.B) {
		const scanLen = 100
		rng := rand.New(rand.NewPCG(6, 6))
		var k [16]byte
		keys := 0
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			readKey(k[:], rng.Uint64N(readKeys))
			err := db.View(func(s *kdb.Snapshot) error {
				it := s.Iter("read")
				got := 0
				for ok := it.Seek(k[:]); ok && got < scanLen; ok = it.Next() {
					if got == 0 && !bytes.Equal(it.Key(), k[:]) {
						b.Fatalf("seek %x found %x", k, it.Key())
					}
					if len(it.Value()) != readValueSize {
						b.Fatalf("value of %d bytes", len(it.Value()))
					}
					got++
				}
				keys += got
				return it.Err()
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		el := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(keys)/el.Seconds(), "keys/s")
		b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
	})
}
