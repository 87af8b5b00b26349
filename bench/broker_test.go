package bench

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// BenchmarkBroker measures the broker message store with persistent 1 KiB
// messages and SyncAlways (every Send and Ack durable on return): the
// producers enqueue b.N messages on one queue concurrently, then as many
// consumers dequeue them (a dispatcher reads batches in order and hands
// them out) and ack each one with its own durable Ack. msgs/s is b.N
// divided by the time of both phases; enqueue-msgs/s and ack-msgs/s time
// each phase. Concurrent producers and consumers share fsyncs (group
// commit): fsyncs/msg reports it.
func BenchmarkBroker(b *testing.B) {
	for _, producers := range []int{1, 16} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "db")
			db, err := kdb.Open(dir, &kdb.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}()
			body := make([]byte, 1024)
			for i := range body {
				body[i] = byte(i * 7)
			}
			fs0 := db.Stats().JournalFsyncs
			b.SetBytes(1024)
			b.ResetTimer()
			start := time.Now()
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 2*producers)
			for p := range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					pid := fmt.Sprint("producer-", p)
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						m := &kdb.Message{ID: fmt.Sprint("m-", i), ProducerID: pid, ProducerSeq: uint64(i), Body: body,
							Properties: map[string]string{"JMSType": "bench"}}
						if _, err := db.Send(kdb.Queue, "bench", m); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			enq := time.Since(start)
			seqs := make(chan uint64, 1024)
			for range producers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for s := range seqs {
						if err := db.Ack(kdb.Queue, "bench", s); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			var from uint64
			for got := 0; got < b.N; {
				ms, err := db.Read(kdb.Queue, "bench", from, 256)
				if err != nil || len(ms) == 0 {
					b.Fatalf("read from %d: %d messages, %v", from, len(ms), err)
				}
				for _, m := range ms {
					seqs <- m.Seq
				}
				got += len(ms)
				from = ms[len(ms)-1].Seq + 1
			}
			close(seqs)
			wg.Wait()
			total := time.Since(start)
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			if d, err := db.Destination(kdb.Queue, "bench"); err != nil || d.Count != 0 {
				b.Fatalf("left %+v %v", d, err)
			}
			b.ReportMetric(float64(b.N)/total.Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N)/enq.Seconds(), "enqueue-msgs/s")
			b.ReportMetric(float64(b.N)/(total-enq).Seconds(), "ack-msgs/s")
			b.ReportMetric(float64(db.Stats().JournalFsyncs-fs0)/float64(2*b.N), "journal-fsyncs/call") // a call: one Send or one Ack
		})
	}
}
