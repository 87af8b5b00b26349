package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// long reports whether the long sweeps run (KDB_LONG=1).
func long() bool { return os.Getenv("KDB_LONG") != "" }

// workload is a concurrent append workload whose payloads identify
// themselves: writer, batch, record index and batch length.
type workload struct {
	writers, batches int // per writer
	segSize          int64
	sync             SyncPolicy
	remove           bool // writer 0 calls RemoveBefore its own latest segment now and then

	maxCut      SegmentID // highest RemoveBefore cut requested: batches before it may be gone
	removedSeen int       // acknowledged batches found removed by verify

	mu    sync.Mutex
	acked map[[2]int][]Location // (writer, batch) -> locations
}

func wlPayload(w, b, i, n int) []byte {
	size := 16 + (w*131+b*17+i*29)%300
	p := make([]byte, size)
	binary.LittleEndian.PutUint32(p[0:], uint32(w))
	binary.LittleEndian.PutUint32(p[4:], uint32(b))
	binary.LittleEndian.PutUint32(p[8:], uint32(i))
	binary.LittleEndian.PutUint32(p[12:], uint32(n))
	for k := 16; k < size; k++ {
		p[k] = byte(w ^ b*3 ^ i*5 ^ k)
	}
	return p
}

func wlBatchLen(w, b int) int { return (w+b)%3 + 1 }

// run appends until done or the first error of each writer; it returns
// the errors seen.
func (wl *workload) run(j *Journal) []error {
	wl.acked = map[[2]int][]Location{}
	wl.maxCut = 0
	var wg sync.WaitGroup
	errs := make([]error, wl.writers)
	for w := 0; w < wl.writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < wl.batches; b++ {
				n := wlBatchLen(w, b)
				recs := make([]Record, n)
				for i := range recs {
					recs[i] = Record{Type: RecordType(1 + i), Payload: wlPayload(w, b, i, n)}
				}
				locs, err := j.Append(recs...)
				if err != nil {
					errs[w] = err
					// Sticky: the next append must fail too.
					if _, err2 := j.Append(recs...); err2 == nil {
						errs[w] = fmt.Errorf("append succeeded after %v", err)
					}
					return
				}
				wl.mu.Lock()
				wl.acked[[2]int{w, b}] = locs
				cut := wl.remove && w == 0 && b%3 == 2
				if cut {
					wl.maxCut = max(wl.maxCut, locs[0].Segment)
				}
				wl.mu.Unlock()
				if cut {
					if _, err := j.RemoveBefore(Location{locs[0].Segment, 0}); err != nil {
						errs[w] = err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// verify opens fs (no fault) and checks: every acknowledged batch is
// present and equal; every batch present is whole and was attempted.
func (wl *workload) verify(t *testing.T, fs vfs.FS, what string) *OpenReport {
	t.Helper()
	// Open as recovery does, verifying only from a replay position (an
	// acknowledged batch end); iterating from the start below then
	// verifies the earlier segments lazily.
	var ends []Location
	for _, locs := range wl.acked {
		ends = append(ends, locs[len(locs)-1])
	}
	slices.SortFunc(ends, func(a, b Location) int {
		if a.Less(b) {
			return -1
		}
		if b.Less(a) {
			return 1
		}
		return 0
	})
	var from Location
	if len(ends) > 0 {
		from = ends[len(ends)/2]
	}
	j, rep, err := Open(testDir, Options{FS: fs, SegmentSize: wl.segSize, VerifyFrom: from})
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			t.Fatalf("%s: close: %v", what, err)
		}
	}()
	found := map[[2]int][]Location{}
	var cur [2]int
	curLeft := 0
	err = j.Iterate(Location{}, func(loc Location, r Record) error {
		p := r.Payload
		if len(p) < 16 {
			return fmt.Errorf("short payload at %v", loc)
		}
		w, b := int(binary.LittleEndian.Uint32(p[0:])), int(binary.LittleEndian.Uint32(p[4:]))
		i, n := int(binary.LittleEndian.Uint32(p[8:])), int(binary.LittleEndian.Uint32(p[12:]))
		if w >= wl.writers || b >= wl.batches || n != wlBatchLen(w, b) || i >= n {
			return fmt.Errorf("unknown record at %v", loc)
		}
		if !bytes.Equal(p, wlPayload(w, b, i, n)) || r.Type != RecordType(1+i) {
			return fmt.Errorf("record at %v differs", loc)
		}
		key := [2]int{w, b}
		if i == 0 {
			if curLeft != 0 {
				return fmt.Errorf("batch %v cut short before %v", cur, loc)
			}
			if _, dup := found[key]; dup {
				return fmt.Errorf("batch %v twice", key)
			}
			cur, curLeft = key, n
		} else if key != cur || curLeft != n-i {
			return fmt.Errorf("record %v out of its batch at %v", key, loc)
		}
		curLeft--
		found[key] = append(found[key], loc)
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if curLeft != 0 {
		t.Fatalf("%s: partial batch %v at the end", what, cur)
	}
	for key, locs := range wl.acked {
		got, ok := found[key]
		if !ok && locs[0].Segment < wl.maxCut {
			wl.removedSeen++
			continue // removed, or not yet durably removed: both fine
		}
		if !ok {
			t.Fatalf("%s: acknowledged batch %v at %v lost", what, key, locs[0])
		}
		for i := range locs {
			if got[i] != locs[i] {
				t.Fatalf("%s: batch %v record %d at %v, acknowledged at %v", what, key, i, got[i], locs[i])
			}
		}
	}
	// The recovered journal accepts appends.
	if _, err := j.Append(Record{Type: 1, Payload: []byte("after recovery")}); err != nil {
		t.Fatalf("%s: append after recovery: %v", what, err)
	}
	return rep
}

func TestJournal_CrashAtEveryWrite(t *testing.T) {
	settings := []vfs.CrashOptions{
		{KeepUnsynced: 0, GarbageUnsynced: 0},
		{KeepUnsynced: 1, GarbageUnsynced: 0},
		{KeepUnsynced: 0.5, GarbageUnsynced: 0},
		{KeepUnsynced: 0.5, GarbageUnsynced: 0.2},
	}
	wl := &workload{writers: 4, batches: 8, segSize: 4096, remove: true}
	seeds := 1
	if long() {
		wl.batches, seeds = 30, 4
	}
	for _, policy := range []SyncPolicy{SyncAlways, UnsafeSyncNever} {
		for _, so := range settings {
			for seed := 1; seed <= seeds; seed++ {
				name := fmt.Sprintf("sync=%s/keep=%g/garbage=%g/seed=%d", policy, so.KeepUnsynced, so.GarbageUnsynced, seed)
				t.Run(name, func(t *testing.T) {
					wl.sync = policy
					crashes, torn, acked, doubled := 0, 0, 0, 0
					wl.removedSeen = 0
					for k := 1; ; k++ {
						// A fresh seed per crash point: the same seed would
						// make every image draw the same keep/drop sequence.
						so := so
						so.Seed = int64(seed)<<20 + int64(k)
						c := kdbtest.CrashAt(vfs.NewMem(), k, so)
						j, _, err := Open(testDir, Options{FS: c.FS(), SegmentSize: wl.segSize, Sync: policy})
						if err == nil {
							errs := wl.run(j)
							for _, e := range errs {
								if e != nil && !errors.Is(e, kdbtest.ErrCrashed) {
									t.Fatalf("k=%d: append: %v", k, e)
								}
							}
							_ = j.Close() // may fail: crashed
						} else if !errors.Is(err, kdbtest.ErrCrashed) {
							t.Fatalf("k=%d: open: %v", k, err)
						} else {
							wl.acked = nil
						}
						if !c.Crashed() {
							break
						}
						crashes++
						if policy != SyncAlways {
							// Acknowledged is not durable: check only that
							// the image opens and no batch is partial.
							wl.acked = nil
						}
						acked += len(wl.acked)
						img := c.Image()
						pristine := img.Clone()
						if rep := wl.verify(t, img, fmt.Sprintf("k=%d", k)); rep.TornBytesTruncated > 0 {
							torn++
							if torn%4 == 1 || long() {
								doubled += wl.crashRecovery(t, pristine, so, fmt.Sprintf("k=%d", k))
							}
						}
					}
					t.Logf("%d crash points, %d torn tails truncated, %d acknowledged batches checked, %d crashes during recovery", crashes, torn, acked, doubled)
					if crashes < 20 {
						t.Fatalf("only %d crash points", crashes)
					}
					if so.KeepUnsynced > 0 && so.KeepUnsynced < 1 && torn == 0 {
						t.Fatalf("no crash image had a torn tail: the sweep does not test truncation")
					}
					if policy == SyncAlways && wl.removedSeen == 0 {
						t.Fatalf("no crash image showed a removal: RemoveBefore is not exercised")
					}
					if policy == SyncAlways && acked == 0 {
						t.Fatalf("no acknowledged batch was checked")
					}
				})
			}
		}
	}
}

func TestJournal_InjectedErrorAtEveryOp(t *testing.T) {
	wl := &workload{writers: 3, batches: 6, segSize: 4096}
	// Count the operations of a clean run.
	probe := errfs.Wrap(vfs.NewMem())
	j, _, err := Open(testDir, Options{FS: probe, SegmentSize: wl.segSize})
	if err != nil {
		t.Fatal(err)
	}
	wl.run(j)
	mustClose(t, j)
	total := probe.Count()
	if total < 30 {
		t.Fatalf("clean run made only %d ops", total)
	}
	type mode struct {
		name string
		rule func(n int, err error) errfs.Rule
	}
	modes := []mode{{"once", errfs.OnIndex}, {"from", errfs.FromIndex}}
	for _, injected := range []error{errfs.ErrInjected, errfs.ErrNoSpace} {
		for _, m := range modes {
			t.Run(fmt.Sprintf("%v/%s", injected, m.name), func(t *testing.T) {
				for n := 1; n <= total+5; n++ {
					mem := vfs.NewMem()
					efs := errfs.Wrap(mem, m.rule(n, injected))
					what := fmt.Sprintf("op %d", n)
					j, _, err := Open(testDir, Options{FS: efs, SegmentSize: wl.segSize})
					if err != nil {
						if !errors.Is(err, injected) {
							t.Fatalf("%s: open: %v", what, err)
						}
						wl.acked = nil
					} else {
						errs := wl.run(j)
						failed := false
						for _, e := range errs {
							if e != nil {
								failed = true
								if !errors.Is(e, injected) && !errors.Is(e, ErrClosed) {
									t.Fatalf("%s: append error %v, want the injected one", what, e)
								}
							}
						}
						if failed && !errors.Is(j.Err(), injected) {
							t.Fatalf("%s: appends failed but Err() = %v", what, j.Err())
						}
						cerr := j.Close()
						if failed && cerr == nil {
							t.Fatalf("%s: Close after failure returned nil", what)
						}
					}
					wl.verify(t, mem.Clone(), what+": reopen")
					wl.verify(t, mem.CrashClone(vfs.CrashOptions{Seed: int64(n)}), what+": crash image")
				}
			})
		}
	}
}

// crashRecovery crashes the recovery of img (a crash image with a torn
// tail) at each of its mutating operations in turn, and verifies the image
// of that second crash. It returns the number of crash points.
func (wl *workload) crashRecovery(t *testing.T, img *vfs.MemFS, so vfs.CrashOptions, what string) int {
	t.Helper()
	n := 0
	for k := 1; ; k++ {
		so.Seed++
		c := kdbtest.CrashAt(img.Clone(), k, so)
		j, _, err := Open(testDir, Options{FS: c.FS(), SegmentSize: wl.segSize})
		if err == nil {
			_ = j.Close()
		} else if !errors.Is(err, kdbtest.ErrCrashed) {
			t.Fatalf("%s: recovery crashed at %d: open: %v", what, k, err)
		}
		if !c.Crashed() {
			return n
		}
		n++
		wl.verify(t, c.Image(), fmt.Sprintf("%s, recovery crashed at %d", what, k))
	}
}

// TestJournal_ProcessCrashThenPowerLoss kills the writing process at every
// mutating operation of a concurrent workload (the kernel keeps every byte
// written, synced or not), opens the journal in a second process, reads it
// and appends a batch, then cuts the power: the third process must find
// every record the second one read, every batch acknowledged by either, and
// no partial batch. This is the journal's promise that on return from Open
// its existing records are durable: a caller (the database's recovery)
// acts on what it read, for instance checkpoints past it, and a power loss
// must not take those records away again.
func TestJournal_ProcessCrashThenPowerLoss(t *testing.T) {
	wl := &workload{writers: 3, batches: 6, segSize: 4096, sync: SyncAlways}
	settings := []vfs.CrashOptions{{KeepUnsynced: 0}, {KeepUnsynced: 0.5}, {KeepUnsynced: 0.5, GarbageUnsynced: 0.2}}
	if long() {
		wl.batches = 20
	}
	points, unsyncedSeen := 0, 0
	for k := 1; ; k++ {
		c := kdbtest.ProcessCrashAt(vfs.NewMem(), k)
		j, _, err := Open(testDir, Options{FS: c.FS(), SegmentSize: wl.segSize, Sync: wl.sync})
		if err == nil {
			for _, e := range wl.run(j) {
				if e != nil && !errors.Is(e, kdbtest.ErrCrashed) {
					t.Fatalf("k=%d: append: %v", k, e)
				}
			}
			_ = j.Close()
		} else if !errors.Is(err, kdbtest.ErrCrashed) {
			t.Fatalf("k=%d: open: %v", k, err)
		} else {
			wl.acked = nil
		}
		if !c.Crashed() {
			break
		}
		points++
		img := c.Image()
		if n := len(readAll(t, img.CrashClone(vfs.CrashOptions{}), wl.segSize, fmt.Sprintf("k=%d: power loss without recovery", k))); n < len(readAll(t, img.Clone(), wl.segSize, "")) {
			unsyncedSeen++ // this point has records only in the OS cache
		}
		for i, so := range settings {
			so.Seed = int64(k)<<8 + int64(i)
			what := fmt.Sprintf("k=%d, setting %+v", k, so)
			// The second process: recover, read, then (every other
			// setting) append; the power fails before it closes.
			live := img.Clone()
			j2, _, err := Open(testDir, Options{FS: live, SegmentSize: wl.segSize, Sync: wl.sync})
			if err != nil {
				t.Fatalf("%s: second process: open: %v", what, err)
			}
			seen := collect(t, j2)
			if i%2 == 1 {
				locs, err := j2.Append(Record{Type: 1, Payload: []byte("second process")})
				if err != nil {
					t.Fatalf("%s: second process: append: %v", what, err)
				}
				seen = append(seen, entry{locs[0], Record{Type: 1, Payload: []byte("second process")}})
			}
			lost := live.CrashClone(so)
			_ = j2.Close()
			got := readAll(t, lost, wl.segSize, what+": after the power loss")
			at := map[Location]Record{}
			for _, e := range got {
				at[e.loc] = e.rec
			}
			for _, e := range seen {
				r, ok := at[e.loc]
				if !ok || r.Type != e.rec.Type || !bytes.Equal(r.Payload, e.rec.Payload) {
					t.Fatalf("%s: the record at %v that the second process read (and acted on) is gone after the power loss", what, e.loc)
				}
			}
			for key, locs := range wl.acked {
				for _, loc := range locs {
					if _, ok := at[loc]; !ok {
						t.Fatalf("%s: batch %v acknowledged by the first process lost at %v", what, key, loc)
					}
				}
			}
		}
	}
	t.Logf("%d process-crash points (%d with records only in the OS cache), each recovered and power-cut under %d settings", points, unsyncedSeen, len(settings))
	if points < 20 || unsyncedSeen == 0 {
		t.Fatalf("only %d crash points, %d with unsynced records: the test does not exercise the sync at open", points, unsyncedSeen)
	}
}

// readAll opens fs and returns every record of the journal (an empty
// journal if the directory is missing).
func readAll(t *testing.T, fs vfs.FS, segSize int64, what string) []entry {
	t.Helper()
	j, _, err := Open(testDir, Options{FS: fs, SegmentSize: segSize})
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	defer j.Close()
	return collect(t, j)
}
