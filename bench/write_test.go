package bench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// BenchmarkWrite measures durable 1 KiB puts (SyncAlways, default options:
// the value is kept in the journal, the index holds its reference) at
// random 16-byte keys into a fresh store, one Put per operation, from
// writers goroutines. Each Put returns once it is on disk; concurrent
// writers share fsyncs (group commit). Background checkpoints run as they
// would in production, and the timed region ends with a DB.Checkpoint that
// writes what the puts left dirty: a peer such as bbolt pays its page
// writes inside every commit, so kdb's deferred page writes are counted
// too. ops/s is b.N over the wall time of all puts and that checkpoint;
// journal-fsyncs/op is the journal's fsyncs (the ones a durable put waits
// for; the checkpoints' fsyncs of db.data, db.redo and db.free are not
// counted) per put; checkpoints/op is the checkpoints taken per put, the
// final one included. non-fsync-µs/op (one writer) is the wall time per
// put, without the final checkpoint, minus the time spent in the journal's
// fdatasyncs. of-floor is ops/s divided by the fsyncs/s of a bare 1 KiB write +
// fdatasync on the same disk (the faster of a fallocated and a zero-filled
// file), measured in slices interleaved with the puts (interleaved), so
// that on a loaded machine both see the same disk.
func BenchmarkWrite(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			root := b.TempDir()
			fm := newFloorMeter(b, root, 1024)
			defer fm.close()
			st := &syncTimer{FS: vfs.OS, suffix: ".log"}
			db, err := kdb.Open(filepath.Join(root, "db"), &kdb.Options{FS: st})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}()
			st0 := db.Stats()
			sync0 := st.ns.Load()
			b.SetBytes(1024)
			rngs := make([]*rand.Rand, writers)
			for w := range rngs {
				rngs[w] = rand.New(rand.NewPCG(uint64(w), 3))
			}
			var failed atomic.Value
			b.ResetTimer()
			b.StopTimer()
			el, floor := interleaved(b, fm, b.N, 250*writers, 50, func(n int) {
				var next atomic.Int64
				var wg sync.WaitGroup
				for w := range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rngs[w]
						val := make([]byte, 1024)
						var k [16]byte
						for next.Add(1) <= int64(n) {
							binary.BigEndian.PutUint64(k[:], rng.Uint64())
							binary.BigEndian.PutUint64(k[8:], rng.Uint64())
							binary.LittleEndian.PutUint64(val, rng.Uint64())
							if err := db.Put("write", k[:], val); err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			puts := el
			b.StartTimer()
			ck := time.Now()
			if err := db.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			el += time.Since(ck)
			b.StopTimer()
			stats := db.Stats()
			b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
			b.ReportMetric(float64(stats.JournalFsyncs-st0.JournalFsyncs)/float64(b.N), "journal-fsyncs/op")
			b.ReportMetric(float64(stats.Checkpoints-st0.Checkpoints)/float64(b.N), "checkpoints/op")
			reportGroups(b, st0, stats)
			if writers == 1 {
				// What a put costs besides the fdatasync it waits for.
				b.ReportMetric(float64(puts-time.Duration(st.ns.Load()-sync0))/float64(b.N)/1e3, "non-fsync-µs/op")
			}
			b.ReportMetric(floor, "floor-fsyncs/s")
			b.ReportMetric(float64(b.N)/el.Seconds()/floor, "of-floor")
		})
	}
}
