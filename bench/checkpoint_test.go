package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// db.redo header: FORMAT.md §2.6. The benchmark reads the image
// count of the last checkpoint's batch to verify how many pages it wrote.
const (
	redoOffCount = 48 // uint64: number of page images, the meta slot included
	redoHeadSize = 64
)

// BenchmarkCheckpoint measures the cost of a checkpoint with the same number
// of dirty pages in stores of different sizes (BuildStore's cached stores:
// index "data", 16-byte keys, 16 KiB values in overflow chains). Its cost
// should follow the dirty pages, not the size of the store.
//
// Each iteration (not timed) overwrites the values of keys picked uniformly
// at random among all the keys of "data", with values of the same size, in
// durable batches: as many keys as should make the checkpoint write about
// dirty pages (a key's overwrite dirties its new leaf, overflow chain and
// branch path and stamps the old ones free), so the dirty pages are spread
// over the whole file. The writes go to the mem tables; no page is dirty
// until the checkpoint applies them. Then it times db.Checkpoint() alone:
// the mem tables applied to the pages, db.free, db.redo, the in-place
// writes to db.data, the fsyncs, and journal GC. The journal is durable
// already (SyncAlways). How many keys make dirty pages is learnt from the
// checkpoints before (the first guess is 16 pages a key).
//
// Before 2026-12-07 the fill wrote until Stats.DirtyPages reached dirty, as
// it did before the mem tables; since them nothing is dirty before the
// checkpoint, and the fill never ended.
//
// Each sub-benchmark first drops db.data's pages from the OS page cache
// (untimed; KDB_BENCH_KEEP_CACHE=1 keeps them), so that every size starts
// from the same cache state. On recent Linux (6.18 here), ext4 can cache a
// file in large folios after large sequential writes or reads (the store's
// build, a page scan), and a 4 KiB write into a large folio costs CPU in
// proportion to the folio's size (the kernel walks every block of the folio
// when the page is written and again at writeback). That made the same
// checkpoint use twice the CPU on a store whose history left it so.
//
// Metrics: ms/checkpoint (wall time); cpu-ms/checkpoint (user+system CPU
// time of the whole process during the checkpoint: the part that is not
// waiting for the disk); major-faults/checkpoint (the process's page
// faults that waited for the disk during the checkpoint, reading db.data
// through the mapping: each may read a whole read-around window, so it
// counts waits, not pages); dirty-pages (the pages the checkpoint took, from
// Stats.CheckpointPages); keys-overwritten (per checkpoint); pages-written
// (the page images of the checkpoint's batch as read back from db.redo, the
// meta slot excluded: the dirty pages plus the pages the checkpoint itself
// frees or writes, such as the index root page).
func BenchmarkCheckpoint(b *testing.B) {
	for _, sz := range sizes {
		for _, dirty := range []int{256, 4096} {
			b.Run(fmt.Sprintf("size=%s/dirty=%d", sz.name, dirty), func(b *testing.B) {
				if sz.big && os.Getenv("KDB_BENCH_BIG") == "" {
					b.Skip("set KDB_BENCH_BIG=1 to build and run the 4 GiB store")
				}
				benchCheckpoint(b, BuildStore(b, sz.bytes), sz.bytes, dirty)
			})
		}
	}
}

func benchCheckpoint(b *testing.B, dir string, size int64, dirty int) {
	if os.Getenv("KDB_BENCH_KEEP_CACHE") == "" {
		if err := dropFileCache(filepath.Join(dir, "db.data")); err != nil {
			b.Fatal(err)
		}
	}
	opts := BuildOptions()
	opts.Sync = kdb.SyncAlways // the journal is durable before the checkpoint starts
	opts.CheckpointBytes = 1 << 40
	opts.CheckpointDirtyPages = 1 << 20 // no background checkpoint, no write stall
	db, err := kdb.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}()
	keys := storeKeys(b, db, size)
	// Leave no dirty page from Open behind, and take the first checkpoint
	// after Open (which may also sync db.data) out of the measurement.
	if err := db.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(len(keys)), uint64(dirty)))
	val := make([]byte, 16<<10)
	for i := range val {
		val[i] = byte(rng.Uint32())
	}
	bt := kdb.NewBatch()
	perKey := 16.0 // pages a checkpoint takes per overwritten key, learnt
	var keysSum, pagesSum float64
	var dirtySum, writtenSum float64
	var spent, cpu time.Duration
	var faults int64
	// fill overwrites about as many keys as make dirty pages, and returns
	// how many it overwrote.
	fill := func() int {
		if st := db.Stats(); st.DirtyPages != 0 {
			b.Fatalf("%d dirty pages before the fill", st.DirtyPages)
		}
		keysN := max(1, int(float64(dirty)/perKey+0.5))
		for done := 0; done < keysN; {
			n := min(64, keysN-done)
			bt.Reset()
			for range n {
				binary.LittleEndian.PutUint64(val, rng.Uint64())
				bt.Put("data", keys[rng.IntN(len(keys))], val)
			}
			if err := db.Write(bt); err != nil {
				b.Fatal(err)
			}
			done += n
		}
		return keysN
	}
	// One untimed round learns the pages per key of this store.
	before := db.Stats().CheckpointPages
	n := fill()
	if err := db.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	perKey = max(1, float64(db.Stats().CheckpointPages-before)/float64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		keysN := fill()
		before := db.Stats().CheckpointPages
		cpu0, flt0 := cpuTime(b), majorFaults(b)
		b.StartTimer()
		start := time.Now()
		if err := db.Checkpoint(); err != nil {
			b.Fatal(err)
		}
		spent += time.Since(start)
		b.StopTimer()
		cpu += cpuTime(b) - cpu0
		faults += majorFaults(b) - flt0
		took := db.Stats().CheckpointPages - before
		if took == 0 {
			b.Fatalf("the checkpoint after %d overwrites took no page", keysN)
		}
		keysSum += float64(keysN)
		pagesSum += float64(took)
		perKey = pagesSum / keysSum
		dirtySum += float64(took)
		writtenSum += float64(redoPages(b, dir))
		b.StartTimer()
	}
	b.StopTimer() // not the deferred Close
	b.ReportMetric(float64(spent.Microseconds())/1e3/float64(b.N), "ms/checkpoint")
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/checkpoint")
	b.ReportMetric(float64(faults)/float64(b.N), "major-faults/checkpoint")
	b.ReportMetric(dirtySum/float64(b.N), "dirty-pages")
	b.ReportMetric(keysSum/float64(b.N), "keys-overwritten")
	b.ReportMetric(writtenSum/float64(b.N), "pages-written")
}

// cpuTime returns the user+system CPU time the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// majorFaults returns the process's major page faults so far: reads of
// the mapping that waited for the disk.
func majorFaults(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Majflt
}

// storeKeys returns the keys of index "data" in a store BuildStore built
// for size, regenerated from BuildStore's random sequence (reading them
// would read the whole store, values included, and fill the page cache).
// It checks the count and a sample of the keys against the store.
func storeKeys(tb testing.TB, db *kdb.DB, size int64) [][]byte {
	tb.Helper()
	var n uint64
	if err := db.View(func(s *kdb.Snapshot) (err error) {
		n, err = s.Len("data")
		return err
	}); err != nil || n == 0 {
		tb.Fatalf("index data: %d keys, %v", n, err)
	}
	// INVARIANT: this mirrors BuildStore: the value's bytes first, then one
	// Uint64 per key.
	rng := rand.New(rand.NewPCG(uint64(size), 1))
	for range 16 << 10 {
		rng.Uint32()
	}
	keys := make([][]byte, n)
	for i := range keys {
		k := make([]byte, 16)
		binary.BigEndian.PutUint64(k, uint64(i))
		binary.BigEndian.PutUint64(k[8:], rng.Uint64())
		keys[i] = k
	}
	for i := uint64(0); i < n; i += max(1, n/64) {
		if _, err := db.Get("data", keys[i]); err != nil {
			tb.Fatalf("regenerated key %d of %d (%x): %v; BuildStore and storeKeys disagree", i, n, keys[i], err)
		}
	}
	if _, err := db.Get("data", keys[n-1]); err != nil {
		tb.Fatalf("regenerated last key %x: %v", keys[n-1], err)
	}
	return keys
}

// redoPages returns the number of pages the last checkpoint wrote, read
// from the image count in db.redo's header (FORMAT.md §2.6), less the meta
// slot's image.
func redoPages(tb testing.TB, dir string) int {
	tb.Helper()
	f, err := os.Open(filepath.Join(dir, "db.redo"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var h [redoHeadSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		tb.Fatalf("read db.redo header: %v", err)
	}
	n := binary.LittleEndian.Uint64(h[redoOffCount:])
	if n == 0 || n > 1<<30 {
		tb.Fatalf("db.redo@%d: %d images", redoOffCount, n)
	}
	return int(n) - 1
}
