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
// final one included.
func BenchmarkWrite(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db, err := kdb.Open(filepath.Join(b.TempDir(), "db"), &kdb.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}()
			st0 := db.Stats()
			b.SetBytes(1024)
			b.ResetTimer()
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			var failed atomic.Value
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 3))
					val := make([]byte, 1024)
					var k [16]byte
					for next.Add(1) <= int64(b.N) {
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
			if err := db.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			el := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			st := db.Stats()
			b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
			b.ReportMetric(float64(st.JournalFsyncs-st0.JournalFsyncs)/float64(b.N), "journal-fsyncs/op")
			b.ReportMetric(float64(st.Checkpoints-st0.Checkpoints)/float64(b.N), "checkpoints/op")
		})
	}
}
