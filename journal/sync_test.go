package journal

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// Under SyncAlways a written batch is neither acknowledged (Tail, Iterate)
// nor durable until a SyncTo covers it; Read serves it at once (its writer
// may apply it before the fdatasync: TestRead_WrittenBeforeSync).
func TestJournal_WriteThenSyncTo(t *testing.T) {
	fs := vfs.NewMem()
	j, _ := openMem(t, fs, Options{})
	defer mustClose(t, j)
	tail := j.Tail()
	locs, end, err := j.Write(Record{Type: 1, Payload: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if j.Tail() != tail {
		t.Fatalf("tail %s moved to %s before the sync", tail, j.Tail())
	}
	if j.Durable(end) {
		t.Fatal("Durable before any sync")
	}
	if r, err := j.Read(locs[0]); err != nil || string(r.Payload) != "a" {
		t.Fatalf("Read of a written, unsynced record: %q %v", r.Payload, err)
	}
	img := fs.CrashClone(vfs.CrashOptions{})
	j2, _ := openMem(t, img, Options{})
	if n := len(collect(t, j2)); n != 0 {
		t.Fatalf("%d unsynced records survived a drop-all crash", n)
	}
	mustClose(t, j2)

	if err := j.SyncTo(end); err != nil {
		t.Fatal(err)
	}
	if j.Tail() != end || !j.Durable(end) {
		t.Fatalf("after SyncTo: tail %s, want %s; durable %v", j.Tail(), end, j.Durable(end))
	}
	if r, err := j.Read(locs[0]); err != nil || string(r.Payload) != "a" {
		t.Fatalf("Read after SyncTo: %q %v", r.Payload, err)
	}
	img = fs.CrashClone(vfs.CrashOptions{})
	j3, _ := openMem(t, img, Options{})
	defer mustClose(t, j3)
	if n := len(collect(t, j3)); n != 1 {
		t.Fatalf("%d records after SyncTo and a crash, want 1", n)
	}
	before := j.Stats().Fsyncs
	if err := j.SyncTo(end); err != nil || j.Stats().Fsyncs != before {
		t.Fatalf("SyncTo of a durable end: %v, %d fsyncs", err, j.Stats().Fsyncs-before)
	}
}

// A Write proceeds while a SyncTo's fdatasync runs, and is not reported
// durable by that fdatasync (it began before the write); the next SyncTo
// covers it.
func TestJournal_SyncToPipelined(t *testing.T) {
	mem := vfs.NewMem()
	var block atomic.Bool
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	fs := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpSync && strings.Contains(e.Path, segmentSuffix) && block.Load() {
			entered <- struct{}{}
			<-release
		}
		return nil
	})
	j, _ := openMem(t, fs, Options{})
	defer mustClose(t, j)
	_, endA, err := j.Write(Record{Type: 1, Payload: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	block.Store(true)
	done := make(chan error, 1)
	go func() { done <- j.SyncTo(endA) }()
	<-entered
	block.Store(false)
	wrote := make(chan Location, 1)
	go func() {
		_, endB, err := j.Write(Record{Type: 1, Payload: []byte("b")})
		if err != nil {
			t.Error(err)
		}
		wrote <- endB
	}()
	var endB Location
	select {
	case endB = <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("Write waited for the fdatasync in progress")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !j.Durable(endA) {
		t.Fatal("A not durable after its SyncTo")
	}
	if j.Durable(endB) || j.Tail() != endA {
		t.Fatalf("B, written during the fdatasync, reported durable (%v) or published (tail %s, A ends at %s)", j.Durable(endB), j.Tail(), endA)
	}
	img := mem.CrashClone(vfs.CrashOptions{})
	j2, _ := openMem(t, img, Options{})
	got := collect(t, j2)
	mustClose(t, j2)
	// B may have reached the disk with that fdatasync (it was written
	// before the file system's sync ran), but it was not reported durable.
	if len(got) == 0 || string(got[0].rec.Payload) != "a" {
		t.Fatalf("after the first sync and a crash: %d records, A missing", len(got))
	}
	if err := j.SyncTo(endB); err != nil {
		t.Fatal(err)
	}
	if !j.Durable(endB) || j.Tail() != endB {
		t.Fatalf("B after its SyncTo: durable %v, tail %s", j.Durable(endB), j.Tail())
	}
}

// A failed fdatasync in SyncTo fails the journal: the next Write and
// SyncTo return the error, and nothing is retried.
func TestJournal_SyncToFailureIsSticky(t *testing.T) {
	mem := vfs.NewMem()
	var fail atomic.Bool
	injected := errors.New("injected sync failure")
	fs := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpSync && strings.Contains(e.Path, segmentSuffix) && fail.Load() {
			return injected
		}
		return nil
	})
	j, _ := openMem(t, fs, Options{})
	_, end, err := j.Write(Record{Type: 1})
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := j.SyncTo(end); !errors.Is(err, injected) {
		t.Fatalf("SyncTo: %v, want the injected error", err)
	}
	fail.Store(false)
	if _, _, err := j.Write(Record{Type: 1}); !errors.Is(err, injected) {
		t.Fatalf("Write after a failed sync: %v", err)
	}
	if err := j.SyncTo(end); !errors.Is(err, injected) {
		t.Fatalf("SyncTo again: %v (retried?)", err)
	}
	if err := j.Close(); !errors.Is(err, injected) {
		t.Fatalf("Close: %v", err)
	}
}

// Segments are preallocated by writing zeros, never by fallocate, in 1 MiB
// steps; the rest of the last step reads as zeros, and a crash that
// leaves garbage in the unsynced zeros (and records) past the durable tail
// recovers to exactly the synced records.
func TestJournal_ZeroFilledPreallocation(t *testing.T) {
	mem := vfs.NewMem()
	var allocs atomic.Int64
	fs := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpAllocate && strings.Contains(e.Path, segmentSuffix) {
			allocs.Add(1)
		}
		return nil
	})
	j, _ := openMem(t, fs, Options{SegmentSize: 4 << 20})
	rec := Record{Type: 1, Payload: bytes.Repeat([]byte{0xA5}, 4000)}
	n := 0
	for j.Tail().Offset < allocStep+allocStep/2 {
		if _, err := j.Append(rec); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if allocs.Load() != 0 {
		t.Fatalf("%d fallocate calls on segments", allocs.Load())
	}
	tail := j.Tail()
	seg := j.Segments()[len(j.Segments())-1]
	if seg.Size != 2*allocStep {
		t.Fatalf("segment size %d with records to %d, want %d", seg.Size, tail.Offset, 2*allocStep)
	}
	rest := make([]byte, seg.Size-tail.Offset)
	f, err := mem.OpenFile(j.path(seg.ID), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(rest, tail.Offset); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if !isZero(rest) {
		t.Fatal("bytes after the tail are not zeros")
	}
	// Unsynced: records past the durable tail, then (UnsafeSyncNever
	// writes) the zeros of the next step.
	for j.w.alloc < 3*allocStep {
		if _, _, err := j.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range []vfs.CrashOptions{{KeepUnsynced: 0.5, GarbageUnsynced: 0.3, Seed: 1}, {KeepUnsynced: 1, GarbageUnsynced: 0.5, Seed: 2}, {}} {
		img := mem.CrashClone(o)
		j2, rep := openMem(t, img, Options{SegmentSize: 4 << 20})
		got := collect(t, j2)
		if len(got) < n {
			t.Fatalf("setting %d: %d records after the crash, %d were synced (report %+v)", i, len(got), n, rep)
		}
		for _, e := range got {
			if !bytes.Equal(e.rec.Payload, rec.Payload) {
				t.Fatalf("setting %d: record at %s differs", i, e.loc)
			}
		}
		mustClose(t, j2)
	}
	mustClose(t, j)
}

// A SyncTo whose fdatasync fails while a rotation seals the segment: the
// failed fdatasync may have dropped the dirty pages of batches written
// before it (modelled by MemFS.DropUnsynced, as Linux does), so the
// rotation's fdatasync, which would succeed without them, must not run,
// and those batches must never be acknowledged. Before the fix the
// rotation sealed the segment and a later SyncTo of such a batch returned
// nil through its fast path (the segment no longer active): an
// acknowledged batch that no crash image held (found by the race
// detector's scheduling in TestJournal_InjectedErrorAtEveryOp).
func TestJournal_FailedSyncRacingRotation(t *testing.T) {
	mem := vfs.NewMem()
	injected := errors.New("injected fdatasync failure")
	var armed, syncs atomic.Int32
	entered := make(chan struct{})     // the failing fdatasync began
	release := make(chan struct{})     // let it fail
	dropped := make(chan struct{})     // it dropped the pages and returned
	sealWritten := make(chan struct{}) // the rotation wrote its seal
	fsys := vfs.Intercept(mem, func(e vfs.Event) error {
		if armed.Load() == 0 || !strings.HasPrefix(e.Path, testDir+"/db-1.log") {
			return nil
		}
		switch e.Op {
		case vfs.OpWrite:
			if armed.CompareAndSwap(1, 2) {
				close(sealWritten)
			}
		case vfs.OpSync:
			switch syncs.Add(1) {
			case 1:
				close(entered)
				<-release
				e.File.(interface{ DropUnsynced() }).DropUnsynced()
				close(dropped)
				return injected
			case 2:
				<-dropped // the rotation's: after the failure dropped the pages
			}
		}
		return nil
	})
	j, _ := openMem(t, fsys, Options{SegmentSize: 4096})
	defer j.Close()
	// Fill the segment so that, after c, a 1 KiB batch no longer fits.
	for j.Tail().Offset+frameSize(256)+frameSize(1)+frameSize(0) <= 4096 {
		if _, err := j.Append(Record{Type: 1, Payload: make([]byte, 256)}); err != nil {
			t.Fatal(err)
		}
	}
	_, endC, err := j.Write(Record{Type: 1, Payload: []byte("c")})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(1)
	errA := make(chan error, 1)
	go func() { errA <- j.SyncTo(endC) }()
	<-entered
	errB := make(chan error, 1)
	go func() {
		_, err := j.Append(Record{Type: 1, Payload: make([]byte, 1024)})
		errB <- err
	}()
	select {
	case <-sealWritten:
	case <-time.After(5 * time.Second):
		t.Fatal("the rotation never wrote its seal")
	}
	close(release)
	if err := <-errA; !errors.Is(err, injected) {
		t.Fatalf("the failing SyncTo returned %v", err)
	}
	if err := <-errB; err == nil {
		t.Fatal("the Append that rotated after the failed fdatasync succeeded")
	}
	if err := j.SyncTo(endC); err == nil {
		t.Fatal("SyncTo of a batch whose pages a failed fdatasync dropped returned nil: acknowledged, and lost")
	}
	if len(j.Segments()) != 1 {
		t.Fatalf("a segment was created after the failure: %v", j.Segments())
	}
}
