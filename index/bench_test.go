package index

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// The benchmarks share one store of benchKeys keys (16-byte keys, 100-byte
// values) in one tree, on the OS file system with 4 KiB pages, built once
// per test binary (not timed) in a temporary directory removed by TestMain.
const (
	benchKeys  = 1_000_000
	benchValue = 100
)

var bench struct {
	once sync.Once
	dir  string
	pf   *pagefile.File
	s    *Store
	err  error
	// next is the first key index not yet used by BenchmarkPut.
	next uint64
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.pf != nil {
		if err := bench.pf.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			code = 1
		}
	}
	if bench.dir != "" {
		_ = os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

// benchKey returns the 16-byte key of index i: a bijective scramble of i,
// so that consecutive indexes land in random places of the tree.
func benchKey(buf []byte, i uint64) []byte {
	x := i*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	x ^= x >> 29
	binary.BigEndian.PutUint64(buf[0:8], x)
	binary.BigEndian.PutUint64(buf[8:16], i)
	return buf[:16]
}

func benchVal(i uint64) []byte {
	v := make([]byte, benchValue)
	for j := range v {
		v[j] = byte(i + uint64(j))
	}
	return v
}

func benchStore(b *testing.B) *Store {
	b.Helper()
	bench.once.Do(func() {
		bench.dir, bench.err = os.MkdirTemp("", "kdb-index-bench-")
		if bench.err != nil {
			return
		}
		bench.pf, _, bench.err = pagefile.Open(bench.dir, pagefile.Options{FS: vfs.OS})
		if bench.err != nil {
			return
		}
		bench.s, bench.err = Open(bench.pf, Options{})
		if bench.err != nil {
			return
		}
		var kb [16]byte
		const batch = 100_000
		for lo := uint64(0); lo < benchKeys && bench.err == nil; lo += batch {
			bench.err = bench.s.Update(func(tx *Tx) error {
				tr := tx.Tree([]byte("bench"))
				if tr == nil {
					var err error
					if tr, err = tx.CreateTree([]byte("bench")); err != nil {
						return err
					}
				}
				for i := lo; i < lo+batch; i++ {
					if err := tr.Put(benchKey(kb[:], i), benchVal(i)); err != nil {
						return err
					}
				}
				return nil
			})
			if bench.err == nil && lo%300_000 == 0 {
				bench.err = bench.s.Checkpoint(pagefile.MetaUpdate{})
			}
		}
		if bench.err == nil {
			bench.err = bench.s.Checkpoint(pagefile.MetaUpdate{})
		}
		if bench.err == nil {
			bench.err = warm(bench.s)
		}
		bench.next = benchKeys
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.s
}

// warm reads every page of the tree once, so that the benchmarks measure a
// warm page cache (mapped and checksum-verified pages), not first touches.
func warm(s *Store) error {
	return s.View(func(tx *Tx) error {
		c := tx.Tree([]byte("bench")).Cursor()
		n := 0
		for _, _, ok := c.First(); ok; _, _, ok = c.Next() {
			n++
		}
		if c.Err() == nil && n < benchKeys {
			return fmt.Errorf("warm: %d keys", n)
		}
		return c.Err()
	})
}

// checkpointUntimed checkpoints with the timer stopped, so that the dirty
// page cache stays bounded while a write benchmark runs.
func checkpointUntimed(b *testing.B, s *Store) {
	b.StopTimer()
	if err := s.Checkpoint(pagefile.MetaUpdate{}); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
}

// BenchmarkGet: random Gets of present keys, all in one View (the Get
// itself: binary search on page bytes). view=per-op opens a View per Get.
func BenchmarkGet(b *testing.B) {
	s := benchStore(b)
	b.Run("view=shared", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 1))
		var kb [16]byte
		b.ReportAllocs()
		err := s.View(func(tx *Tx) error {
			tr := tx.Tree([]byte("bench"))
			b.ResetTimer()
			for range b.N {
				_, ok, err := tr.Get(benchKey(kb[:], rng.Uint64N(benchKeys)))
				if err != nil || !ok {
					return fmt.Errorf("get: %v %v", ok, err)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	})
	b.Run("view=per-op", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(2, 1))
		var kb [16]byte
		b.ReportAllocs()
		for range b.N {
			err := s.View(func(tx *Tx) error {
				_, ok, err := tx.Tree([]byte("bench")).Get(benchKey(kb[:], rng.Uint64N(benchKeys)))
				if err != nil || !ok {
					return fmt.Errorf("get: %v %v", ok, err)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPut: inserts of new random keys. batch=1 commits one Update per
// Put; batch=100 commits 100 Puts per Update (ns/op is per Put). The
// timer stops for a checkpoint every 10,000 Updates.
func BenchmarkPut(b *testing.B) {
	s := benchStore(b)
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			var kb [16]byte
			val := benchVal(7)
			b.ReportAllocs()
			for done, updates := 0, 0; done < b.N; updates++ {
				n := min(batch, b.N-done)
				err := s.Update(func(tx *Tx) error {
					tr := tx.Tree([]byte("bench"))
					for range n {
						if err := tr.Put(benchKey(kb[:], bench.next), val); err != nil {
							return err
						}
						bench.next++
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				done += n
				if updates%10_000 == 9_999 {
					checkpointUntimed(b, s)
				}
			}
			checkpointUntimed(b, s)
		})
	}
}

// BenchmarkDelete: deletes of random present keys, one Update per Delete
// (batch=1) or 100 per Update (ns/op per Delete). The deleted keys are put
// back afterwards, untimed.
func BenchmarkDelete(b *testing.B) {
	s := benchStore(b)
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			var kb [16]byte
			perm := rand.New(rand.NewPCG(3, uint64(batch))).Perm(benchKeys)
			if b.N > len(perm) {
				b.Fatalf("b.N %d > %d keys", b.N, len(perm))
			}
			b.ReportAllocs()
			for done, updates := 0, 0; done < b.N; updates++ {
				n := min(batch, b.N-done)
				err := s.Update(func(tx *Tx) error {
					tr := tx.Tree([]byte("bench"))
					for j := range n {
						ok, err := tr.Delete(benchKey(kb[:], uint64(perm[done+j])))
						if err != nil || !ok {
							return fmt.Errorf("delete: %v %v", ok, err)
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				done += n
				if updates%10_000 == 9_999 {
					checkpointUntimed(b, s)
				}
			}
			b.StopTimer()
			for lo := 0; lo < b.N; lo += 20_000 {
				err := s.Update(func(tx *Tx) error {
					tr := tx.Tree([]byte("bench"))
					for _, i := range perm[lo:min(lo+20_000, b.N)] {
						if err := tr.Put(benchKey(kb[:], uint64(i)), benchVal(uint64(i))); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Checkpoint(pagefile.MetaUpdate{}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkScan: a Seek to a random key and 100 Nexts, in one View per
// scan; ns/key is the cost per key visited.
func BenchmarkScan(b *testing.B) {
	s := benchStore(b)
	const scanLen = 100
	rng := rand.New(rand.NewPCG(4, 1))
	var kb [16]byte
	b.ReportAllocs()
	keys := 0
	for range b.N {
		err := s.View(func(tx *Tx) error {
			c := tx.Tree([]byte("bench")).Cursor()
			n := 0
			for k, v, ok := c.Seek(benchKey(kb[:], rng.Uint64N(benchKeys))); ok && n < scanLen; k, v, ok = c.Next() {
				if len(k) != 16 || len(v) != benchValue {
					return fmt.Errorf("entry %q of %d bytes", k, len(v))
				}
				n++
			}
			keys += n
			return c.Err()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(keys, 1)), "ns/key")
}
