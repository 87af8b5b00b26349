//go:build linux

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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

// BenchmarkFsyncBusy is the floor's loop (1 KiB into written blocks)
// while one thread spins on one CPU (busy=cpuN, pinned there), against
// busy=none: what CPU work elsewhere in the process costs each fdatasync,
// CPU by CPU. The loop runs in a goroutine as kdb's journal syncs do
// (loop=goroutine), or locked to its own thread (loop=thread), which
// isolates the machine's part from the Go runtime's. Nothing is pinned
// but the spinning thread.
//
// On the 2-vCPU VM (2026-12-02, Linux 6.18; /proc/interrupts: the disk's
// virtio queue interrupt is handled by CPU 1 only), 4 rounds of 1,500
// fdatasyncs, mean per sync: busy=none 175-320 µs (190 in 3 rounds of 4),
// busy=cpu1 376-680 µs (2x, every round, both loops), busy=cpu0 either
// 212-250 µs or 477-541 µs (5 of 8 runs; 373 in one), presumably as the
// syncing thread was or was not placed on the spinner's CPU. A one-off
// loop with the syncing thread pinned to the other CPU than the spinner's:
// CPU 1 busy +100-150 µs per sync, CPU 0 busy +0-40 µs. A completion reaches a
// busy vCPU late, so the CPU work a process does while its journal syncs
// (producers building their transactions, the previous group's apply,
// the runtime's own threads) slows that sync on this machine class.
//
//	go test ./bench -run '^$' -bench FsyncBusy -benchtime 2000x -count 3
func BenchmarkFsyncBusy(b *testing.B) {
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		b.Skipf("sched_getaffinity: %v", err)
	}
	busy := []int{-1}
	for cpu := 0; cpu < 8; cpu++ {
		if cpus.IsSet(cpu) {
			busy = append(busy, cpu)
		}
	}
	for _, loop := range []string{"goroutine", "thread"} {
		for _, cpu := range busy {
			name := "busy=none"
			if cpu >= 0 {
				name = fmt.Sprintf("busy=cpu%d", cpu)
			}
			b.Run("loop="+loop+"/"+name, func(b *testing.B) {
				if cpu >= 0 {
					stop := make(chan struct{})
					done := make(chan error, 1)
					go spin(cpu, stop, done)
					defer func() {
						close(stop)
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}()
				}
				if loop == "thread" {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
				}
				fsyncLoop(b, "written", 1024)
			})
		}
	}
}

// spin keeps CPU cpu busy until stop is closed, from a thread pinned
// there, and then reports on done.
func spin(cpu int, stop <-chan struct{}, done chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // the thread is pinned: the runtime drops it
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		done <- err
		return
	}
	for n := 0; ; n++ {
		if n%1024 == 0 {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
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
