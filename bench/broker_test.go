package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// BenchmarkBrokerDrain measures the broker message store with persistent 1 KiB
// messages and SyncAlways (every Send and Ack durable on return): the
// producers enqueue b.N messages on one queue concurrently, then as many
// consumers dequeue them (a dispatcher reads batches in order and hands
// them out) and ack each one with its own durable Ack. msgs/s is b.N
// divided by the time of both phases; enqueue-msgs/s and ack-msgs/s time
// each phase. Concurrent producers and consumers share fsyncs (group
// commit): journal-fsyncs/call reports it (the journal's fdatasyncs per
// Send or Ack call, 2·b.N of them).
func BenchmarkBrokerDrain(b *testing.B) {
	for _, producers := range []int{1, 16} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			db, br := openBroker(b, filepath.Join(b.TempDir(), "db"), &kdb.Options{})
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
						m := &broker.Message{ID: fmt.Sprint("m-", i), ProducerID: pid, ProducerSeq: uint64(i), Body: body,
							Properties: map[string]string{"JMSType": "bench"}}
						if _, err := br.Send(broker.Queue, "bench", m); err != nil {
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
						if err := br.Ack(broker.Queue, "bench", s); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			var from uint64
			for got := 0; got < b.N; {
				ms, err := br.Read(broker.Queue, "bench", from, 256)
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
			if d, err := br.Destination(broker.Queue, "bench"); err != nil || d.Count != 0 {
				b.Fatalf("left %+v %v", d, err)
			}
			b.ReportMetric(float64(b.N)/total.Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N)/enq.Seconds(), "enqueue-msgs/s")
			b.ReportMetric(float64(b.N)/(total-enq).Seconds(), "ack-msgs/s")
			b.ReportMetric(float64(db.Stats().JournalFsyncs-fs0)/float64(2*b.N), "journal-fsyncs/call") // a call: one Send or one Ack
		})
	}
}

// BenchmarkBroker measures the broker in KahaDB's shape: each of producers
// goroutines sends a persistent 1 KiB message to one queue and then acks
// it, in a loop (SyncAlways: every Send is durable on return). With
// acks=sync each Ack is durable on return too; with acks=async it is
// journaled and applied at once and made durable by the next synced write
// (Broker.AckAsync). pairs/s is b.N send+ack pairs over the wall time,
// fsyncs/pair the journal fsyncs per pair, and pairs-per-floor-fsync is
// pairs/s divided by the fsyncs/s a bare 1 KiB write + fdatasync reaches
// on the same disk, measured in slices interleaved with the pairs
// (interleaved: the faster of a fallocated and a zero-filled file).
// non-fsync-µs/pair (one producer) is the wall time per pair minus the time
// spent in the journal's fdatasyncs; µs/journal-fsync is the mean time of
// one of those (a whole group's) and µs/floor-fsync the floor's 1 KiB one.
func BenchmarkBroker(b *testing.B) {
	for _, acks := range []string{"sync", "async"} {
		for _, producers := range []int{1, 16} {
			b.Run(fmt.Sprintf("producers=%d/acks=%s", producers, acks), func(b *testing.B) {
				benchBrokerPairs(b, producers, acks == "async")
			})
		}
	}
}

// openBroker opens a store in dir and its broker, closed (and the close
// checked) when the benchmark ends.
func openBroker(b *testing.B, dir string, o *kdb.Options) (*kdb.DB, *broker.Broker) {
	b.Helper()
	db, err := kdb.Open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := db.Close(); err != nil {
			b.Error(err)
		}
	})
	br, err := broker.Open(db)
	if err != nil {
		b.Fatal(err)
	}
	return db, br
}

// runPairs runs n send-then-ack pairs of 1 KiB messages (body) on queue
// "bench" from producers goroutines, message IDs numbered on from id, and
// then Broker.Sync (timed too: the last AckAsyncs applied and durable). It
// returns the first error.
func runPairs(br *broker.Broker, ack func(broker.DestKind, string, ...uint64) error, producers, n int, id *atomic.Int64, body []byte) error {
	var failed atomic.Value
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := fmt.Sprint("producer-", p)
			for next.Add(1) <= int64(n) {
				i := id.Add(1)
				m := &broker.Message{ID: fmt.Sprint("m-", i), ProducerID: pid, ProducerSeq: uint64(i), Body: body,
					Properties: map[string]string{"JMSType": "bench"}}
				seq, err := br.Send(broker.Queue, "bench", m)
				if err == nil {
					err = ack(broker.Queue, "bench", seq)
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := br.Sync(); err != nil {
		return err
	}
	err, _ := failed.Load().(error)
	return err
}

func benchBrokerPairs(b *testing.B, producers int, async bool) {
	root := b.TempDir()
	fm := newFloorMeter(b, root, 1024)
	defer fm.close()
	st := &syncTimer{FS: vfs.OS, suffix: ".log"}
	db, br := openBroker(b, filepath.Join(root, "db"), &kdb.Options{FS: st})
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte(i * 7)
	}
	ack := br.Ack
	if async {
		ack = br.AckAsync
	}
	fs0, ck0 := db.Stats().JournalFsyncs, db.Stats().Checkpoints
	g0 := db.Stats()
	sync0 := st.ns.Load()
	b.SetBytes(1024)
	var failed atomic.Value
	var id atomic.Int64
	b.ResetTimer()
	b.StopTimer()
	el, floor := interleaved(b, fm, b.N, 125*producers, 50, func(n int) {
		if err := runPairs(br, ack, producers, n, &id, body); err != nil {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	if d, err := br.Destination(broker.Queue, "bench"); err != nil || d.Count != 0 {
		b.Fatal(errors.Join(err, fmt.Errorf("left %+v", d)))
	}
	pairs := float64(b.N) / el.Seconds()
	fsyncs := db.Stats().JournalFsyncs - fs0
	b.ReportMetric(pairs, "pairs/s")
	b.ReportMetric(float64(fsyncs)/float64(b.N), "fsyncs/pair")
	// What one journal fdatasync (a whole group) took, against the floor's
	// 1 KiB one in the same slices.
	b.ReportMetric(float64(st.ns.Load()-sync0)/float64(max(fsyncs, 1))/1e3, "µs/journal-fsync")
	b.ReportMetric(1e6/floor, "µs/floor-fsync")
	b.ReportMetric(float64(db.Stats().Checkpoints-ck0)/float64(b.N), "checkpoints/pair")
	b.ReportMetric(floor, "floor-fsyncs/s")
	b.ReportMetric(pairs/floor, "pairs-per-floor-fsync")
	reportGroups(b, g0, db.Stats())
	if producers == 1 {
		// What a pair costs besides the fdatasyncs it waits for.
		b.ReportMetric(float64(el-time.Duration(st.ns.Load()-sync0))/float64(b.N)/1e3, "non-fsync-µs/pair")
	}
}

// BenchmarkBrokerNoSync runs BenchmarkBroker's pairs with the journal never
// synced (UnsafeSyncNever, nothing durable): what the broker's own work
// allows, the bound on pairs/s when a sync costs nothing. cpu-µs/pair is
// the process's CPU time (user and system, every thread) per pair;
// allocs/op counts per pair too.
func BenchmarkBrokerNoSync(b *testing.B) {
	for _, producers := range []int{1, 16} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			db, br := openBroker(b, filepath.Join(b.TempDir(), "db"), &kdb.Options{Sync: kdb.UnsafeSyncNever})
			body := make([]byte, 1024)
			var id atomic.Int64
			b.ReportAllocs()
			g0 := db.Stats()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			start := time.Now()
			if err := runPairs(br, br.AckAsync, producers, b.N, &id, body); err != nil {
				b.Fatal(err)
			}
			el := time.Since(start)
			cpu := cpuTime(b) - cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el.Seconds(), "pairs/s")
			b.ReportMetric(float64(cpu)/float64(b.N)/1e3, "cpu-µs/pair")
			reportGroups(b, g0, db.Stats())
			if d, err := br.Destination(broker.Queue, "bench"); err != nil || d.Count != 0 {
				b.Fatal(errors.Join(err, fmt.Errorf("left %+v", d)))
			}
			_ = db
		})
	}
}

// reportGroups reports how many batches (transactions) the commit leaders'
// groups carried on average between two Stats.
func reportGroups(b *testing.B, s0, s1 kdb.Stats) {
	if g := s1.Commits - s0.Commits; g > 0 {
		b.ReportMetric(float64(s1.Batches-s0.Batches)/float64(g), "batches/group")
	}
}
