package journal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// BenchmarkAppend measures Append of 1 KiB records, one record per batch,
// by N concurrent writers, on the real file system with SyncAlways: every
// acknowledged record is durable. It reports records/s (acknowledged records
// per second of wall time) and fsyncs/record (file fdatasyncs, rotations
// included, divided by records), which shows group commit at work.
func BenchmarkAppend(b *testing.B) {
	for _, writers := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			j, _, err := Open(b.TempDir(), Options{FS: vfs.OS, Sync: SyncAlways})
			if err != nil {
				b.Fatal(err)
			}
			rec := Record{Type: 1, Payload: make([]byte, 1024)}
			for i := range rec.Payload {
				rec.Payload[i] = byte(i)
			}
			before := j.Stats()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(int64(len(rec.Payload)))
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := j.Append(rec); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			after := j.Stats()
			records := after.Records - before.Records
			if records != int64(b.N) {
				b.Fatalf("%d records acknowledged, want %d", records, b.N)
			}
			b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(after.Fsyncs-before.Fsyncs)/float64(records), "fsyncs/record")
			if err := j.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
