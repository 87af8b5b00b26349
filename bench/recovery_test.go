package bench

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

var sizes = []struct {
	name  string
	bytes int64
	big   bool
}{
	{"256MiB", 256 << 20, false},
	{"1GiB", 1 << 30, false},
	{"4GiB", 4 << 30, true},
}

// BenchmarkRecovery reopens a store after a crash that left 8 MiB of journal
// to replay, trusting db.free or forcing the page scan. Each iteration
// crashes the store (not timed): a child process writes the journal and is
// killed with SIGKILL (CrashWithJournal). Then it times kdb.Open until it
// returns a store that serves reads and writes: page file, free list,
// journal open (verified from the replay position, the records replayed
// during that same pass). The crash is made again for each iteration rather
// than copied from one image: a copy of the 4 GiB page file would cost more
// than the whole benchmark, and each crash leaves the same state (the same
// keys put again over the store the last iteration checkpointed). The checkpoint recovery asks
// for runs in the background after Open returns (Options.
// CheckpointBeforeServing); its duration is reported apart, as
// recovery-checkpoint-ms.
//
// By default the page cache is warm, as after a process crash. With
// KDB_BENCH_COLD=1 (root only) each iteration syncs and drops the page
// cache before the timed open, as after a machine crash.
func BenchmarkRecovery(b *testing.B) {
	for _, sz := range sizes {
		for _, free := range []string{"trusted", "scan"} {
			b.Run("size="+sz.name+"/free="+free, func(b *testing.B) {
				if sz.big && os.Getenv("KDB_BENCH_BIG") == "" {
					b.Skip("set KDB_BENCH_BIG=1 to build and run the 4 GiB store")
				}
				dir := BuildStore(b, sz.bytes)
				var scanned, replayed, bytes float64
				var replayTime, ckTime, pfTime, jTime time.Duration
				var opens, journals, replays []time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					puts := CrashWithJournal(b, dir, 8<<20)
					if os.Getenv("KDB_BENCH_COLD") != "" {
						dropCaches(b)
					}
					b.StartTimer()
					t := time.Now()
					db, err := kdb.Open(dir, &kdb.Options{ForceFreeListScan: free == "scan"})
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					opens = append(opens, time.Since(t))
					r := db.Recovery()
					if (free == "trusted") != (r.FreeListPath == "trusted") {
						b.Fatalf("free list path %q (%s)", r.FreeListPath, r.Reason)
					}
					if r.RecordsReplayed < int64(puts) {
						b.Fatalf("%d records replayed after a crash that left %d puts", r.RecordsReplayed, puts)
					}
					scanned += float64(r.PagesScanned)
					replayed += float64(r.RecordsReplayed)
					bytes += float64(r.BytesReplayed)
					replayTime += r.ReplayTime
					pfTime += r.PageFileTime
					jTime += r.JournalTime
					journals, replays = append(journals, r.JournalTime), append(replays, r.ReplayTime)
					if err := db.Close(); err != nil {
						b.Fatal(err)
					}
					// Close waited for the recovery checkpoint, or took it.
					ckTime += db.Recovery().CheckpointTime
					b.StartTimer()
				}
				b.ReportMetric(scanned/float64(b.N), "pages-scanned")
				b.ReportMetric(replayed/float64(b.N), "records-replayed")
				ms := func(d time.Duration) float64 { return float64(d) / 1e6 / float64(b.N) }
				b.ReportMetric(ms(pfTime), "pagefile-ms")
				b.ReportMetric(ms(jTime), "journal-ms")
				b.ReportMetric(ms(replayTime), "replay-ms")
				b.ReportMetric(ms(ckTime), "recovery-checkpoint-ms")
				// The medians resist the outliers of a shared machine.
				b.ReportMetric(median(opens), "open-median-ms")
				b.ReportMetric(median(journals), "journal-median-ms")
				b.ReportMetric(median(replays), "replay-median-ms")
				if replayTime > 0 {
					b.ReportMetric(bytes/(1<<20)/replayTime.Seconds(), "replay-MiB/s")
				}
			})
		}
	}
}

// median returns the median of ds in milliseconds.
func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return float64(m) / 1e6
}

// dropCaches syncs and drops the page cache (needs root).
func dropCaches(b *testing.B) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0); err != nil {
		b.Skipf("KDB_BENCH_COLD needs root: %v", err)
	}
}
