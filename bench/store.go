package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// Dir returns the directory under which built stores are cached.
func Dir() string {
	if d := os.Getenv("KDB_BENCH_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "kdb-bench")
}

// BuildOptions are the options used to build the big stores: values inline
// in the B-tree (so the page file, not the journal, holds the data), no
// fsync while building (the build is not what is measured; the final Close
// checkpoints and syncs).
func BuildOptions() *kdb.Options {
	return &kdb.Options{
		ValueThreshold:       -1,
		Sync:                 kdb.UnsafeSyncNever,
		CheckpointInterval:   -1,
		CheckpointDirtyPages: 16384,
	}
}

// BuildStore returns the directory of a cached store whose db.data is at
// least size bytes, building it if needed: keys of 16 bytes with 16 KiB
// values in index "data". It is reused across runs; delete Dir() to rebuild.
func BuildStore(tb testing.TB, size int64) string {
	tb.Helper()
	return cachedStore(tb, fmt.Sprintf("store-%dMiB", size>>20), func(db *kdb.DB) {
		fillStore(tb, db, size)
	})
}

// cachedStore returns the directory Dir()/name, first filling a new store
// there with fill (opened with BuildOptions, closed after) unless a
// previous run completed it (its "built" marker exists).
func cachedStore(tb testing.TB, name string, fill func(db *kdb.DB)) string {
	tb.Helper()
	dir := filepath.Join(Dir(), name)
	done := filepath.Join(dir, "built")
	if _, err := os.Stat(done); err == nil {
		return dir
	}
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	db, err := kdb.Open(dir, BuildOptions())
	if err != nil {
		tb.Fatal(err)
	}
	fill(db)
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(done, []byte("ok\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built %s in %v", dir, time.Since(start).Round(time.Millisecond))
	return dir
}

// fillStore writes keys of 16 bytes with 16 KiB values into index "data"
// until db.data holds at least size bytes.
func fillStore(tb testing.TB, db *kdb.DB, size int64) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	val := make([]byte, 16<<10)
	for i := range val {
		val[i] = byte(rng.Uint32())
	}
	b := kdb.NewBatch()
	var n uint64
	for {
		st := db.Stats()
		if int64(st.PageCount)*4096 >= size {
			break
		}
		b.Reset()
		for range 64 {
			var k [16]byte
			binary.BigEndian.PutUint64(k[:], n)
			binary.BigEndian.PutUint64(k[8:], rng.Uint64())
			binary.LittleEndian.PutUint64(val, n)
			b.Put("data", k[:], val)
			n++
		}
		if err := db.Write(b); err != nil {
			tb.Fatal(err)
		}
	}
}
