package raftkdb

// Calls the way raft or a careless user makes them, probed by an outside
// tester; each held, and is kept here so that it keeps holding.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestStore_OutOfOrderAndDuplicateIndexes: within one StoreLogs call the
// last entry of an index wins, whether the call is one batch or split in
// transactions and whether the two entries sit in the journal or inline;
// out-of-order calls, index 0 and math.MaxUint64 give the right bounds, and
// DeleteRange with min > max, beyond the ends or of everything does what
// raft expects. Reopened and after a checkpoint, the same.
func TestStore_OutOfOrderAndDuplicateIndexes(t *testing.T) {
	fs := vfs.NewMem()
	opts := &kdb.Options{SegmentSize: 1 << 20} // MaxBatchSize 256 KiB: the second call splits
	s := openMem(t, fs, opts)
	check := func(what string, i, term uint64, n int) {
		t.Helper()
		var g raft.Log
		if err := s.GetLog(i, &g); err != nil || g.Term != term || len(g.Data) != n {
			t.Errorf("%s: entry %d: %v, term %d, %d bytes; want term %d, %d bytes", what, i, err, g.Term, len(g.Data), term, n)
		}
	}
	wantBounds := func(what string, f, l uint64) {
		t.Helper()
		if gf, gl := bounds(t, s); gf != f || gl != l {
			t.Errorf("%s: first %d last %d, want %d %d", what, gf, gl, f, l)
		}
	}
	if err := s.StoreLogs([]*raft.Log{entry(3, 1, 10), entry(1, 1, 4000), entry(1, 2, 10), entry(2, 1, 10), entry(2, 2, 4000)}); err != nil {
		t.Fatal(err)
	}
	var call []*raft.Log
	for i := uint64(10); i < 50; i++ {
		call = append(call, entry(i, 1, 20000))
	}
	call = append(call, entry(10, 3, 10), entry(49, 3, 10), entry(48, 3, 30000))
	if err := s.StoreLogs(call); err != nil {
		t.Fatal(err)
	}
	all := func(what string) {
		t.Helper()
		check(what+", one batch, journal then inline", 1, 2, 10)
		check(what+", one batch, inline then journal", 2, 2, 4000)
		check(what+", split, another transaction", 10, 3, 10)
		check(what+", split, same transaction", 49, 3, 10)
		check(what+", split, larger", 48, 3, 30000)
		wantBounds(what, 1, 49)
	}
	all("stored")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs, opts)
	defer s.Close()
	all("reopened")
	if err := s.DB().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	all("checkpointed")

	var g raft.Log
	if err := s.GetLog(5, &g); err != raft.ErrLogNotFound {
		t.Errorf("GetLog of a gap: %v, want raft.ErrLogNotFound", err)
	}
	if err := s.StoreLogs([]*raft.Log{entry(0, 1, 5), entry(math.MaxUint64, 1, 5)}); err != nil {
		t.Fatal(err)
	}
	wantBounds("index 0 and MaxUint64", 0, math.MaxUint64)
	for _, r := range [][2]uint64{{5, 4}, {math.MaxUint64, 0}} {
		if err := s.DeleteRange(r[0], r[1]); err != nil {
			t.Fatalf("DeleteRange(%d, %d): %v", r[0], r[1], err)
		}
	}
	wantBounds("DeleteRange with min > max", 0, math.MaxUint64)
	if err := s.DeleteRange(3, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	wantBounds("suffix deleted", 0, 2)
	if err := s.GetLog(3, &g); err != raft.ErrLogNotFound {
		t.Errorf("GetLog of a deleted entry: %v, want raft.ErrLogNotFound", err)
	}
	if err := s.DeleteRange(0, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	wantBounds("all deleted", 0, 0)
	if err := s.GetLog(1, &g); err != raft.ErrLogNotFound {
		t.Errorf("GetLog after deleting all: %v, want raft.ErrLogNotFound", err)
	}
}

// TestStore_ConcurrentCallers: StoreLogs, DeleteRange and GetLog from four
// goroutines, over overlapping ranges: no error other than
// raft.ErrLogNotFound, no race, and the bounds held in memory at the end
// equal the ones a reopen reads from the tree.
func TestStore_ConcurrentCallers(t *testing.T) {
	fs := vfs.NewMem()
	opts := &kdb.Options{SegmentSize: 256 << 10}
	s := openMem(t, fs, opts)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				base := uint64(i*10 + 1)
				switch (g + i) % 3 {
				case 0:
					var call []*raft.Log
					for k := range uint64(10) {
						call = append(call, entry(base+k, uint64(g), 300*g))
					}
					if err := s.StoreLogs(call); err != nil {
						t.Error(err)
					}
				case 1:
					if err := s.DeleteRange(base+2, base+5+uint64(g)*20); err != nil {
						t.Error(err)
					}
				case 2:
					var l raft.Log
					if err := s.GetLog(base, &l); err != nil && err != raft.ErrLogNotFound {
						t.Error(err)
					}
				}
				if f, l := bounds(t, s); f > l {
					t.Errorf("first %d > last %d", f, l)
				}
			}
		}()
	}
	wg.Wait()
	f, l := bounds(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs, opts)
	defer s.Close()
	if f2, l2 := bounds(t, s); f != f2 || l != l2 {
		t.Fatalf("bounds in memory %d..%d, reopened %d..%d", f, l, f2, l2)
	}
}

// TestStore_SplitCallFailsAtEachSync: a StoreLogs split in transactions
// whose n-th fsync fails (n = 1..8) returns the error, FirstIndex and
// LastIndex report it, and a power-loss image taken then reopens to a
// contiguous log holding a prefix of the call.
func TestStore_SplitCallFailsAtEachSync(t *testing.T) {
	for n := int64(1); n <= 8; n++ {
		var syncs atomic.Int64
		var fail atomic.Bool
		mem := vfs.NewCrashableMem()
		fs := vfs.Intercept(mem, func(e vfs.Event) error {
			if fail.Load() && e.Op == vfs.OpSync && syncs.Add(1) >= n {
				return errors.New("injected fsync failure")
			}
			return nil
		})
		opts := kdb.Options{SegmentSize: 1 << 20, CheckpointInterval: -1}
		s := openMem(t, fs, &opts)
		if err := s.StoreLog(entry(1, 1, 100)); err != nil {
			t.Fatal(err)
		}
		var call []*raft.Log
		for i := uint64(2); i <= 60; i++ {
			call = append(call, entry(i, 1, 20000))
		}
		fail.Store(true)
		err := s.StoreLogs(call)
		_, lerr := s.LastIndex()
		if (err == nil) != (lerr == nil) {
			t.Errorf("sync %d fails: StoreLogs %v, LastIndex %v", n, err, lerr)
		}
		s.Close() // its error is the injected one
		opts.FS = mem.CrashClone(vfs.CrashOptions{})
		s2, err := Open("/db", &opts)
		if err != nil {
			t.Fatalf("sync %d fails: reopen: %v", n, err)
		}
		f, l := bounds(t, s2)
		if f != 1 || l < 1 {
			t.Errorf("sync %d fails: reopened %d..%d", n, f, l)
		}
		for i := f; i <= l; i++ {
			want := entry(1, 1, 100)
			if i > 1 {
				want = call[i-2]
			}
			var g raft.Log
			if err := s2.GetLog(i, &g); err != nil || !sameLog(&g, want) {
				t.Errorf("sync %d fails: entry %d of %d..%d: %v", n, i, f, l, err)
				break
			}
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStore_GetLogDuringWholeLogDrops: GetLog racing StoreLogs and a
// DeleteRange of the whole log (a drop of its tree), with entries in the
// journal and inline by turns, answers the entry or raft.ErrLogNotFound,
// never another error.
func TestStore_GetLogDuringWholeLogDrops(t *testing.T) {
	s := openMem(t, vfs.NewMem(), &kdb.Options{SegmentSize: 1 << 20})
	defer s.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer stop.Store(true)
		for i := range 200 {
			var call []*raft.Log
			for k := uint64(1); k <= 10; k++ {
				call = append(call, entry(k, uint64(i), 700*(i%2)))
			}
			if err := s.StoreLogs(call); err != nil {
				t.Error(err)
			}
			if err := s.DeleteRange(0, math.MaxUint64); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for !stop.Load() {
			var l raft.Log
			if err := s.GetLog(5, &l); err != nil && err != raft.ErrLogNotFound {
				t.Errorf("GetLog during drops: %v", err)
				return
			}
		}
	}()
	wg.Wait()
}

// TestStore_PageDamage: a damaged B-tree page under inline entries (a
// checksum mismatch kdb finds on read, not at open): GetLog of an entry on
// it is ErrCorrupt naming the index and kdb.ErrCorrupt; entries on other
// pages read; DeleteRange and StoreLogs over it return kdb.ErrCorrupt,
// never a panic.
func TestStore_PageDamage(t *testing.T) {
	fs := vfs.NewMem()
	opts := &kdb.Options{ValueThreshold: -1, CheckpointInterval: -1}
	s := openMem(t, fs, opts)
	var call []*raft.Log
	for i := uint64(1); i <= 2000; i++ {
		e := entry(i, 7, 100)
		binary.BigEndian.PutUint64(e.Data, 0xfeedface00000000|i)
		call = append(call, e)
	}
	if err := s.StoreLogs(call); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // a checkpoint: the entries are on pages
		t.Fatal(err)
	}
	b, err := vfs.ReadFile(fs, "/db/db.data")
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, binary.BigEndian.AppendUint64(nil, 0xfeedface00000000|1000))
	if at < 0 {
		t.Fatal("entry 1000 not found in db.data")
	}
	f, err := fs.OpenFile("/db/db.data", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x5a, 0x5a}, int64(at+20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs, opts)
	defer s.Close() // its error is the damage
	var got raft.Log
	if err := s.GetLog(1, &got); err != nil || !sameLog(&got, call[0]) {
		t.Fatalf("entry 1, on another page: %v", err)
	}
	err = s.GetLog(1000, &got)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "index 1000") {
		t.Fatalf("GetLog of an entry on a damaged page: %v", err)
	}
	if err := s.DeleteRange(1, 1500); !errors.Is(err, kdb.ErrCorrupt) {
		t.Errorf("DeleteRange over a damaged page: %v", err)
	}
	if err := s.StoreLog(entry(1000, 8, 10)); !errors.Is(err, kdb.ErrCorrupt) {
		t.Errorf("StoreLog onto a damaged page: %v", err)
	}
}
