package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// kdbPairs runs warmup untimed pairs and then pairs timed of kdb's broker in
// KahaPairs's shape, in a fresh store in dir: each of producers goroutines
// sends a persistent 1 KiB message to one queue and then acks it (Ack,
// durable on return, or AckAsync), in a loop; the timed part ends with
// Broker.Sync (the last asynchronous acks durable). It returns the timed
// pairs per second.
func kdbPairs(dir string, producers, pairs, warmup int, syncAcks bool) (float64, error) {
	db, err := kdb.Open(dir, nil) // SyncAlways: every Send durable on return
	if err != nil {
		return 0, err
	}
	br, err := broker.Open(db)
	if err != nil {
		db.Close()
		return 0, err
	}
	ack := br.AckAsync
	if syncAcks {
		ack = br.Ack
	}
	body := make([]byte, 1024)
	var id atomic.Int64
	run := func(n int) error {
		var next atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pid := fmt.Sprint("producer-", p)
				for next.Add(1) <= int64(n) {
					i := id.Add(1)
					m := &broker.Message{ID: fmt.Sprint("m-", i), ProducerID: pid, ProducerSeq: uint64(i), Body: body}
					seq, err := br.Send(broker.Queue, "q", m)
					if err == nil {
						err = ack(broker.Queue, "q", seq)
					}
					if err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			return err
		}
		if err := br.Sync(); err != nil {
			return err
		}
		// Every message sent was acked: the queue is empty.
		if d, err := br.Destination(broker.Queue, "q"); err != nil || d.Count != 0 {
			return fmt.Errorf("peers: kdb's queue after the pairs: %+v, %v", d, err)
		}
		return nil
	}
	if err := run(warmup); err != nil {
		db.Close()
		return 0, err
	}
	start := time.Now()
	err = run(pairs)
	el := time.Since(start)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return float64(pairs) / el.Seconds(), nil
}

// floorFsyncs returns the fsyncs per second of a bare loop of 1 KiB pwrite
// + fdatasync, for about d, into a file in dir whose blocks were all
// written and synced first (as a journal's recycled or zero-filled blocks
// are): the disk's limit for one writer.
func floorFsyncs(dir string, d time.Duration) (float64, error) {
	const size = 16 << 20
	p := filepath.Join(dir, "floor")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(p)
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	buf := make([]byte, 1024)
	n, off := 0, int64(0)
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.WriteAt(buf, off); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		n++
		off = (off + 1024) % size
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// kahaRounds is how many times BenchmarkBrokerVsKahaDB runs each engine
// per shape (KDB_KAHADB_ROUNDS, default 3).
func kahaRounds(tb testing.TB) int {
	if v := os.Getenv("KDB_KAHADB_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			tb.Fatalf("KDB_KAHADB_ROUNDS=%q: want a count", v)
		}
		return n
	}
	return 3
}

// BenchmarkBrokerVsKahaDB compares kdb's broker with ActiveMQ KahaDB
// 5.17.2's queue message store, side by side in one run, in KahaDB's shape
// (BenchmarkBroker's in bench/): each of producers sends a persistent 1 KiB
// message to one queue and then acks it, in a loop; with acks=sync every
// ack is durable on return too, with acks=async it is journaled and made
// durable by a later synced write (kdb's Broker.AckAsync, KahaDB's ack
// without a required response). b.N is the pairs each engine runs per
// round, after as many untimed (a warm-up: the JVM's JIT, kdb's alike);
// the engines alternate, in a fresh store each, for KDB_KAHADB_ROUNDS
// rounds (default 3), each round beginning with the disk's floor (a bare
// 1 KiB write + fdatasync loop, 0.3 s). Reported, medians over the rounds:
// kdb-pairs/s and kahadb-pairs/s, kdb/kahadb (the median of the rounds'
// ratios), floor-fsyncs/s and each engine's pairs per floor fsync. The
// sec/op column is not a figure of either engine (the timer is stopped:
// each harness times its own pairs).
func BenchmarkBrokerVsKahaDB(b *testing.B) {
	if _, err := kahaClasspath(); err != nil {
		b.Skip(err)
	}
	for _, acks := range []string{"sync", "async"} {
		for _, producers := range []int{1, 16} {
			b.Run(fmt.Sprintf("producers=%d/acks=%s", producers, acks), func(b *testing.B) {
				b.StopTimer()
				syncAcks := acks == "sync"
				var kdbR, kahaR, ratio, floor []float64
				for r := range kahaRounds(b) {
					root := b.TempDir()
					f, err := floorFsyncs(root, 300*time.Millisecond)
					if err != nil {
						b.Fatal(err)
					}
					floor = append(floor, f)
					var k, h float64
					runKdb := func() {
						k, err = kdbPairs(filepath.Join(root, "kdb"), producers, b.N, b.N, syncAcks)
					}
					runKaha := func() {
						h, err = KahaDBPairs(filepath.Join(root, "kahadb"), producers, b.N, b.N, syncAcks)
					}
					first, second := runKdb, runKaha
					if r%2 == 1 {
						first, second = runKaha, runKdb
					}
					if first(); err != nil {
						b.Fatal(err)
					}
					if second(); err != nil {
						b.Fatal(err)
					}
					kdbR, kahaR, ratio = append(kdbR, k), append(kahaR, h), append(ratio, k/h)
				}
				fl := median(floor)
				b.ReportMetric(median(kdbR), "kdb-pairs/s")
				b.ReportMetric(median(kahaR), "kahadb-pairs/s")
				b.ReportMetric(median(ratio), "kdb/kahadb")
				b.ReportMetric(fl, "floor-fsyncs/s")
				b.ReportMetric(median(kdbR)/fl, "kdb-pairs-per-floor-fsync")
				b.ReportMetric(median(kahaR)/fl, "kahadb-pairs-per-floor-fsync")
			})
		}
	}
}

// TestKahaDBPairs runs both harnesses briefly (so that they keep building
// and running in CI): each reports a rate, and KahaDB's store holds its
// files after the run.
func TestKahaDBPairs(t *testing.T) {
	if _, err := kahaClasspath(); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("KDB_NEED_KAHADB") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	for _, syncAcks := range []bool{true, false} {
		sub := filepath.Join(dir, strconv.FormatBool(syncAcks))
		r, err := KahaDBPairs(filepath.Join(sub, "kahadb"), 4, 200, 50, syncAcks)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(sub, "kahadb", "db-1.log")); err != nil {
			t.Fatalf("KahaDB's journal: %v", err)
		}
		k, err := kdbPairs(filepath.Join(sub, "kdb"), 4, 200, 50, syncAcks)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("sync acks %v: kdb %.0f pairs/s, KahaDB %.0f", syncAcks, k, r)
	}
	if _, err := KahaDBPairs(filepath.Join(dir, "bad"), 0, 10, 0, true); err == nil {
		t.Fatal("KahaPairs with no producers did not fail")
	}
}

func TestParseKahaPairs(t *testing.T) {
	if r, err := parseKahaPairs("SLF4J: noise\npairs=10 seconds=0.5 pairs/s=20.0\n"); err != nil || r != 20 {
		t.Fatalf("got %v, %v", r, err)
	}
	for _, bad := range []string{"", "pairs=10", "pairs/s=x", "pairs/s=0"} {
		if _, err := parseKahaPairs(bad); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}
