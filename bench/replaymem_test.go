package bench

import (
	"encoding/binary"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// BenchmarkReplayMem is BenchmarkReplay on the in-memory file system: the
// CPU cost of recovery without the disk. The store reopened is an image of
// the file system taken before Close (what a process crash leaves).
func BenchmarkReplayMem(b *testing.B) {
	var bytes float64
	var spent float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		mem := vfs.NewMem()
		o := &kdb.Options{FS: mem, NoCheckpointOnClose: true, CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20}
		db, err := kdb.Open("/db", o)
		if err != nil {
			b.Fatal(err)
		}
		val := make([]byte, 1024)
		bt := kdb.NewBatch()
		n := 0
		for written := 0; written < 64<<20; {
			bt.Reset()
			for range 256 {
				var k [16]byte
				binary.BigEndian.PutUint64(k[:], uint64(n))
				bt.Put("replay", k[:], val)
				n++
				written += 1024 + 24
			}
			if err := db.Write(bt); err != nil {
				b.Fatal(err)
			}
		}
		img := mem.Clone() // the process dies here: no Close
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		db, err = kdb.Open("/db", &kdb.Options{FS: img})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		r := db.Recovery()
		bytes += float64(r.BytesReplayed)
		spent += r.ReplayTime.Seconds()
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(bytes/(1<<20)/spent, "replay-MiB/s")
}
