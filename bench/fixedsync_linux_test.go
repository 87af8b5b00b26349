package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// BenchmarkBrokerFixedSync is BenchmarkBroker's shape (each producer sends
// a 1 KiB message and acks it, in a loop, on one queue) on a simulated disk
// whose journal sync is a sleep of fixed length (nanosleep(2), 250 µs
// asked, which blocks the thread in a system call as fdatasync does),
// whatever the size of the group being synced: the data goes to the OS
// cache only, so NOTHING IS DURABLE here. It is an instrument for changes
// to the commit path: it shows what the committer and the broker make of
// a disk that costs the same per sync, without the real disk's swings
// (2,300-5,700 fsyncs/s within minutes on the 2-vCPU VM) and without its
// size effect (a 16 KiB group syncs ~1.35x slower than the floor's 1 KiB
// record: BenchmarkFsyncGroup). pairs-per-sim-sync is pairs/s times the
// mean measured length of one simulated sync, the counterpart of
// BenchmarkBroker's pairs-per-floor-fsync.
//
//	go test ./bench -run '^$' -bench BrokerFixedSync -benchtime 4000x -count 6
func BenchmarkBrokerFixedSync(b *testing.B) {
	for _, acks := range []string{"sync", "async"} {
		for _, producers := range []int{1, 16} {
			b.Run(fmt.Sprintf("producers=%d/acks=%s", producers, acks), func(b *testing.B) {
				benchBrokerFixedSync(b, producers, acks == "async")
			})
		}
	}
}

func benchBrokerFixedSync(b *testing.B, producers int, async bool) {
	fs := &syncTimer{FS: vfs.OS, suffix: ".log", fake: sleep250}
	_, br := openBroker(b, filepath.Join(b.TempDir(), "db"), &kdb.Options{FS: fs})
	ack := br.Ack
	if async {
		ack = br.AckAsync
	}
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte(i * 7)
	}
	var id atomic.Int64
	ns0, n0 := fs.ns.Load(), fs.n.Load()
	b.SetBytes(1024)
	b.ResetTimer()
	start := time.Now()
	err := runPairs(br, ack, producers, b.N, &id, body)
	el := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if d, err := br.Destination(broker.Queue, "bench"); err != nil || d.Count != 0 {
		b.Fatal(errors.Join(err, fmt.Errorf("left %+v", d)))
	}
	syncs := fs.n.Load() - n0
	mean := time.Duration((fs.ns.Load() - ns0) / max(syncs, 1))
	pairs := float64(b.N) / el.Seconds()
	b.ReportMetric(pairs, "pairs/s")
	b.ReportMetric(float64(syncs)/float64(b.N), "syncs/pair")
	b.ReportMetric(float64(mean.Microseconds()), "µs/sim-sync")
	b.ReportMetric(pairs*mean.Seconds(), "pairs-per-sim-sync")
}

// sleep250 is the simulated disk's sync: 250 µs asked of nanosleep(2).
func sleep250() {
	ts := unix.NsecToTimespec(int64(250 * time.Microsecond))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
