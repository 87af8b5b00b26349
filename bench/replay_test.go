package bench

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// BenchmarkReplay reopens a small store after a process crash (a child
// killed with SIGKILL, CrashWithJournal) that left 64 MiB of 1 KiB puts in
// the journal to replay. replay-MiB/s is the journal replayed divided by
// the replay phase's time: the one pass, inside the journal's open, that
// reads, verifies and applies the records after the checkpoint;
// journal-MiB/s divides it by the whole journal open (the pass, plus the
// segments' headers and finding and syncing the tail).
func BenchmarkReplay(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "db")
	var bytes float64
	var spent, replay time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_ = os.RemoveAll(dir)
		puts := CrashWithJournal(b, dir, 64<<20)
		b.StartTimer()
		db, err := kdb.Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		r := db.Recovery()
		if r.RecordsReplayed < int64(puts) {
			b.Fatalf("%d records replayed after a crash that left %d puts", r.RecordsReplayed, puts)
		}
		bytes += float64(r.BytesReplayed)
		spent += r.JournalTime + r.ReplayTime
		replay += r.ReplayTime
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(bytes/(1<<20)/replay.Seconds(), "replay-MiB/s")
	b.ReportMetric(bytes/(1<<20)/spent.Seconds(), "journal-MiB/s")
}

// heapSampler records the largest live heap seen.
type heapSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	peak uint64
}

func sampleHeap(every time.Duration) *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > h.peak {
				h.peak = v
			}
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	h.wg.Wait()
	return h.peak
}

// BenchmarkMemory writes 1 GiB (4 GiB with KDB_BENCH_BIG=1, or
// KDB_BENCH_MEMORY_MIB) with default
// options, half in values small enough to live in the B-tree and half in
// 16 KiB values kept in the journal, in batches of about 1 MiB from 4
// writers, and reports the largest live Go heap seen (sampled every 5 ms).
func BenchmarkMemory(b *testing.B) {
	total := int64(1 << 30)
	if os.Getenv("KDB_BENCH_BIG") != "" {
		total = 4 << 30
	}
	if v, err := strconv.ParseInt(os.Getenv("KDB_BENCH_MEMORY_MIB"), 10, 64); err == nil {
		total = v << 20
	}
	var peak uint64
	var stalls uint64
	start := time.Now()
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(b.TempDir(), "db")
		runtime.GC()
		h := sampleHeap(5 * time.Millisecond)
		db, err := kdb.Open(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		per := total / 4
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				small := make([]byte, 300)
				large := make([]byte, 16<<10)
				bt := kdb.NewBatch()
				for written := int64(0); written < per; {
					bt.Reset()
					for j := 0; j < 64; j++ {
						var k [16]byte
						binary.BigEndian.PutUint64(k[:], rng.Uint64())
						binary.BigEndian.PutUint64(k[8:], uint64(w))
						if j%2 == 0 {
							bt.Put("large", k[:], large)
							written += int64(len(large))
						} else {
							// as many bytes of small values as one large value
							for s := 0; s < len(large)/len(small); s++ {
								binary.BigEndian.PutUint64(k[:], rng.Uint64())
								bt.Put("small", k[:], small)
							}
							written += int64(len(large))
						}
					}
					if err := db.Write(bt); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		stalls += db.Stats().WriteStalls
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		if p := h.Stop(); p > peak {
			peak = p
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(total)/(1<<20), "MiB-written")
	b.ReportMetric(float64(total)*float64(b.N)/(1<<20)/time.Since(start).Seconds(), "MiB/s")
	b.ReportMetric(float64(stalls)/float64(b.N), "write-stalls")
}
