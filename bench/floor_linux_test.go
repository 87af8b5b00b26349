//go:build linux

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkFsyncFloor measures the physical limit of one durable writer on
// the benchmark's disk: a 1 KiB pwrite at the next offset followed by an
// fdatasync, in a loop, into a file in b.TempDir() (or a fresh directory
// under KDB_BENCH_DIR, to measure another disk). Nothing of kdb runs. The
// sub-benchmarks are the states a journal segment's blocks can be in:
//
//	file=fallocated  preallocated with fallocate(2) and never written, as a
//	                 new segment is: the file system converts each unwritten
//	                 extent it writes into at the sync;
//	file=written     every block written (zeros) and synced beforehand, as a
//	                 zero-filled or recycled segment is.
//
// fsyncs/s is b.N over the wall time of the loop. Every other write
// figure is best read as a ratio to this one measured in the same run, e.g.
//
//	go test ./bench -run '^$' -bench 'FsyncFloor|Write/writers=1' -benchtime 3s
func BenchmarkFsyncFloor(b *testing.B) {
	for _, state := range []string{"fallocated", "written"} {
		b.Run("file="+state, func(b *testing.B) { fsyncLoop(b, state, 1024) })
	}
}

// BenchmarkFsyncGroup is BenchmarkFsyncFloor with appends of the size of a
// commit group (a group of 14 broker pairs is ~18 KiB): what one fdatasync
// of a group costs against the floor's 1 KiB record, for each file state.
// On the 2-vCPU VM (2026-12-02, loops interleaving the sizes, 600-1,500
// rounds): into written blocks (as the journal's, zero-filled) 16 KiB cost
// 1.0-1.05x 1 KiB (375 against 369 µs, 625 against 628); into fallocated
// ones 1.3-1.7x (a 1 KiB append converts a new extent only at every fourth
// sync). The disk's own speed moved 2x between those runs.
//
//	go test ./bench -run '^$' -bench 'FsyncFloor|FsyncGroup' -benchtime 2000x
func BenchmarkFsyncGroup(b *testing.B) {
	for _, state := range []string{"fallocated", "written"} {
		for _, kib := range []int{4, 16, 32} {
			b.Run(fmt.Sprintf("file=%s/size=%dKiB", state, kib), func(b *testing.B) { fsyncLoop(b, state, kib<<10) })
		}
	}
}

// fsyncLoop appends rec bytes and fdatasyncs, b.N times, into a file in
// the given state (BenchmarkFsyncFloor), and reports fsyncs/s.
func fsyncLoop(b *testing.B, state string, rec int) {
	dir := b.TempDir()
	if d := os.Getenv("KDB_BENCH_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o750); err != nil {
			b.Fatal(err)
		}
		var err error
		if dir, err = os.MkdirTemp(d, "floor-"); err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	f, err := os.OpenFile(filepath.Join(dir, "floor.log"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	// Room for b.N records, in whole MiB.
	size := (int64(b.N)*int64(rec) + 1<<20 - 1) &^ (1<<20 - 1)
	switch state {
	case "fallocated":
		if err := unix.Fallocate(fd, 0, 0, size); err != nil {
			b.Skipf("fallocate: %v", err)
		}
	case "written":
		zeros := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(zeros)) {
			if _, err := unix.Pwrite(fd, zeros, off); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := unix.Fsync(fd); err != nil { // the size and the blocks, before the clock starts
		b.Fatal(err)
	}
	buf := make([]byte, rec)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	b.SetBytes(int64(rec))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		buf[0] = byte(i)
		if _, err := unix.Pwrite(fd, buf, int64(i)*int64(rec)); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "fsyncs/s")
}
