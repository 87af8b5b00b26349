package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// floorState is the state of the blocks a floor measurement appends into.
type floorState int

const (
	// floorSparse: an empty file; every write extends it.
	floorSparse floorState = iota
	// floorFallocated: blocks reserved by fallocate but never written
	// ("unwritten" extents: the file system converts them at each sync).
	floorFallocated
	// floorZeroed: blocks written with zeros and synced beforehand.
	floorZeroed
)

func (s floorState) String() string {
	switch s {
	case floorSparse:
		return "sparse"
	case floorFallocated:
		return "fallocated"
	case floorZeroed:
		return "zeroed"
	}
	return fmt.Sprintf("floorState(%d)", int(s))
}

// floorMeterFileSize is the size of the file a floor measurement appends into.
const floorMeterFileSize = 8 << 20

// measureFloor measures what the disk allows a durable writer: ops
// appends of size bytes at consecutive offsets of a new file under dir in
// the given state, each followed by an fdatasync, through the same vfs.OS
// calls the journal makes (WriteAt, then Sync: fdatasync on Linux). It
// returns the fsyncs per second. The file is removed afterwards.
func measureFloor(tb testing.TB, dir string, state floorState, size, ops int) float64 {
	tb.Helper()
	name := filepath.Join(dir, fmt.Sprintf("floor-%s.tmp", state))
	f, err := vfs.OS.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
		if err := os.Remove(name); err != nil {
			tb.Error(err)
		}
	}()
	if int64(size)*int64(ops) > floorMeterFileSize {
		ops = floorMeterFileSize / size
	}
	switch state {
	case floorFallocated:
		if err := f.Allocate(0, floorMeterFileSize); err != nil {
			tb.Fatal(err)
		}
	case floorZeroed:
		if _, err := f.WriteAt(make([]byte, floorMeterFileSize), 0); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	start := time.Now()
	for i := range ops {
		if _, err := f.WriteAt(buf, int64(i)*int64(size)); err != nil {
			tb.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			tb.Fatal(err)
		}
	}
	return float64(ops) / time.Since(start).Seconds()
}

// floorMeter measures the floor in slices interleaved with a benchmark's
// own work, so that on a loaded machine both see the same disk: it keeps a
// fallocated and a zero-filled file open and appends size bytes + an
// fdatasync to each per step, accumulating the time of each.
type floorMeter struct {
	tb    testing.TB
	size  int
	files [2]vfs.File
	names [2]string
	off   int64
	ops   int
	took  [2]time.Duration
}

// newFloorMeter creates the two files under dir (removed by close).
func newFloorMeter(tb testing.TB, dir string, size int) *floorMeter {
	tb.Helper()
	m := &floorMeter{tb: tb, size: size}
	for i, st := range []floorState{floorFallocated, floorZeroed} {
		m.names[i] = filepath.Join(dir, fmt.Sprintf("floor-%s.tmp", st))
		f, err := vfs.OS.OpenFile(m.names[i], os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			tb.Fatal(err)
		}
		m.files[i] = f
		if st == floorFallocated {
			err = f.Allocate(0, floorMeterFileSize)
		} else {
			_, err = f.WriteAt(make([]byte, floorMeterFileSize), 0)
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	return m
}

// run appends n records to each file, each followed by an fdatasync,
// wrapping around at floorMeterFileSize (the blocks were written once by then
// only in the zero-filled file, as in its state).
func (m *floorMeter) run(n int) {
	buf := make([]byte, m.size)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for i, f := range m.files {
		off := m.off
		start := time.Now()
		for range n {
			if off+int64(m.size) > floorMeterFileSize {
				off = 0
			}
			if _, err := f.WriteAt(buf, off); err != nil {
				m.tb.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				m.tb.Fatal(err)
			}
			off += int64(m.size)
		}
		m.took[i] += time.Since(start)
		if i == len(m.files)-1 {
			m.off = off
		}
	}
	m.ops += n
}

// best returns the fsyncs per second of the faster file state so far.
func (m *floorMeter) best() float64 {
	return max(float64(m.ops)/m.took[0].Seconds(), float64(m.ops)/m.took[1].Seconds())
}

func (m *floorMeter) close() {
	for i, f := range m.files {
		if err := f.Close(); err != nil {
			m.tb.Error(err)
		}
		if err := os.Remove(m.names[i]); err != nil {
			m.tb.Error(err)
		}
	}
}

// interleaved runs n operations of a benchmark in slices of chunk,
// alternating with floor slices of floorOps fsyncs per file state: work(k)
// runs k operations (its goroutines all finish before it returns). It
// returns the time spent in work and the floor (best state) in fsyncs/s
// measured over the same minutes.
func interleaved(b *testing.B, m *floorMeter, n, chunk, floorOps int, work func(k int)) (time.Duration, float64) {
	b.Helper()
	var took time.Duration
	m.run(floorOps)
	for done := 0; done < n; {
		k := min(chunk, n-done)
		b.StartTimer()
		start := time.Now()
		work(k)
		took += time.Since(start)
		b.StopTimer()
		done += k
		m.run(floorOps)
	}
	return took, m.best()
}

// syncTimer is a file system that adds up the time spent in Sync of the
// files whose names end in suffix (the journal's segments: ".log"), and
// counts those syncs, so a benchmark can tell the fdatasync from everything
// else on its path. With fake set, such a Sync calls fake instead and
// syncs nothing (BenchmarkBrokerFixedSync's simulated disk).
type syncTimer struct {
	vfs.FS
	suffix string
	fake   func()
	ns, n  atomic.Int64
}

func (s *syncTimer) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(strings.TrimSuffix(name, ".tmp"), s.suffix) {
		return f, err
	}
	return &timedFile{File: f, t: s}, nil
}

type timedFile struct {
	vfs.File
	t *syncTimer
}

// StartWriteback passes the journal's hint on to the file below.
func (f *timedFile) StartWriteback(off, n int64) error {
	if ws, ok := f.File.(vfs.WritebackStarter); ok {
		return ws.StartWriteback(off, n)
	}
	return nil
}

func (f *timedFile) Sync() error {
	start := time.Now()
	var err error
	if f.t.fake != nil {
		f.t.fake()
	} else {
		err = f.File.Sync()
	}
	f.t.ns.Add(int64(time.Since(start)))
	f.t.n.Add(1)
	return err
}
