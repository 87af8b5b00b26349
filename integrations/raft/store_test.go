package raftkdb

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func openMem(t testing.TB, fs vfs.FS, o *kdb.Options) *Store {
	t.Helper()
	opts := kdb.Options{}
	if o != nil {
		opts = *o
	}
	opts.FS = fs
	s, err := Open("/db", &opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entry(i, term uint64, n int) *raft.Log {
	d := make([]byte, n)
	for k := range d {
		d[k] = byte(i + uint64(k))
	}
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: d}
}

func bounds(t testing.TB, s *Store) (uint64, uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return f, l
}

func TestStore_Basics(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, nil)
	if f, l := bounds(t, s); f != 0 || l != 0 {
		t.Fatalf("empty store: first %d last %d", f, l)
	}
	var got raft.Log
	if err := s.GetLog(1, &got); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog on empty store: %v", err)
	}
	at := time.Date(2026, 12, 1, 10, 11, 12, 13, time.UTC)
	want := &raft.Log{Index: 7, Term: 3, Type: raft.LogConfiguration, Data: []byte("cfg"),
		Extensions: []byte{}, AppendedAt: at}
	if err := s.StoreLog(want); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{entry(8, 3, 10), entry(9, 4, 2000), entry(10, 4, 0)}); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		if f, l := bounds(t, s); f != 7 || l != 10 {
			t.Fatalf("first %d last %d, want 7 10", f, l)
		}
		if err := s.GetLog(7, &got); err != nil {
			t.Fatal(err)
		}
		if got.Index != 7 || got.Term != 3 || got.Type != raft.LogConfiguration || string(got.Data) != "cfg" ||
			got.Extensions == nil || len(got.Extensions) != 0 || !got.AppendedAt.Equal(at) {
			t.Fatalf("entry 7 came back as %+v", got)
		}
		for _, i := range []uint64{8, 9, 10} {
			if err := s.GetLog(i, &got); err != nil {
				t.Fatal(err)
			}
			w := entry(i, 0, 0)
			if i == 8 {
				w = entry(8, 3, 10)
			} else if i == 9 {
				w = entry(9, 4, 2000)
			} else {
				w = entry(10, 4, 0)
			}
			if got.Index != w.Index || got.Term != w.Term || !bytes.Equal(got.Data, w.Data) ||
				(got.Data == nil) != (w.Data == nil) || !got.AppendedAt.IsZero() || got.Extensions != nil {
				t.Fatalf("entry %d came back as %+v", i, got)
			}
		}
	}
	check(s)
	// Stable state.
	if _, err := s.Get([]byte("nope")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get of a missing key: %v (raft expects the text \"not found\")", err)
	}
	if _, err := s.GetUint64([]byte("nope")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 of a missing key: %v", err)
	}
	if err := s.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(nil, nil); err != nil {
		t.Fatalf("empty key and value: %v", err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1<<40+5); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(make([]byte, MaxStableKeySize+1), []byte("x")); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("oversized key: %v", err)
	}
	checkStable := func(s *Store) {
		t.Helper()
		if v, err := s.Get([]byte("k")); err != nil || string(v) != "v" {
			t.Fatalf("Get k: %q %v", v, err)
		}
		if v, err := s.Get(nil); err != nil || len(v) != 0 {
			t.Fatalf("Get of the empty key: %q %v", v, err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 1<<40+5 {
			t.Fatalf("GetUint64: %d %v", v, err)
		}
		if _, err := s.GetUint64([]byte("k")); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("GetUint64 of a 1-byte value: %v", err)
		}
	}
	checkStable(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs, nil)
	defer s.Close()
	check(s)
	checkStable(s)

	// DeleteRange: the middle, the bottom, then everything.
	if err := s.DeleteRange(8, 8); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(8, &got); err != raft.ErrLogNotFound {
		t.Fatalf("deleted entry 8: %v", err)
	}
	if f, l := bounds(t, s); f != 7 || l != 10 {
		t.Fatalf("after deleting 8: %d %d", f, l)
	}
	if err := s.DeleteRange(0, 7); err != nil {
		t.Fatal(err)
	}
	if f, l := bounds(t, s); f != 9 || l != 10 {
		t.Fatalf("after deleting 0..7: %d %d (the gap at 8 skipped)", f, l)
	}
	if err := s.DeleteRange(9, 100); err != nil {
		t.Fatal(err)
	}
	if f, l := bounds(t, s); f != 0 || l != 0 {
		t.Fatalf("after deleting all: %d %d", f, l)
	}
	if err := s.StoreLog(entry(20, 5, 1)); err != nil {
		t.Fatal(err)
	}
	if f, l := bounds(t, s); f != 20 || l != 20 {
		t.Fatalf("after a store into an emptied log: %d %d", f, l)
	}
}

// model is the log as a map, the reference TestStore_Model checks against.
type model map[uint64]*raft.Log

func (m model) bounds() (f, l uint64) {
	first := true
	for i := range m {
		if first || i < f {
			f = i
		}
		if first || i > l {
			l = i
		}
		first = false
	}
	return f, l
}

// TestStore_Model runs random StoreLogs, DeleteRange and reopens against a
// map and compares everything after each step: the bounds, and every entry
// (present or not) in and around them.
func TestStore_Model(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			fs := vfs.NewMem()
			// A small segment makes MaxBatchSize small, so that large
			// StoreLogs and DeleteRange calls split.
			opts := &kdb.Options{SegmentSize: 256 << 10, CheckpointBytes: 256 << 10}
			s := openMem(t, fs, opts)
			defer func() { s.Close() }()
			m := model{}
			next, term := uint64(1), uint64(1)
			for step := range 60 {
				switch r := rng.IntN(10); {
				case r < 5:
					n := 1 + rng.IntN(200)
					if rng.IntN(10) == 0 {
						next += uint64(rng.IntN(50)) // a gap
					}
					var logs []*raft.Log
					for range n {
						e := entry(next, term, rng.IntN(3000))
						logs = append(logs, e)
						m[next] = e
						next++
					}
					if err := s.StoreLogs(logs); err != nil {
						t.Fatal(err)
					}
				case r < 7: // truncate a suffix, as a follower does on a conflict
					f, l := m.bounds()
					if len(m) == 0 {
						continue
					}
					from := f + uint64(rng.Int64N(int64(l-f+1)))
					if err := s.DeleteRange(from, l); err != nil {
						t.Fatal(err)
					}
					for i := from; i <= l; i++ {
						delete(m, i)
					}
					next, term = from, term+1
				case r < 9: // compact a prefix, as after a snapshot
					f, l := m.bounds()
					if len(m) == 0 {
						continue
					}
					to := f + uint64(rng.Int64N(int64(l-f+1)))
					if err := s.DeleteRange(0, to); err != nil {
						t.Fatal(err)
					}
					for i := f; i <= to; i++ {
						delete(m, i)
					}
				default:
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = openMem(t, fs, opts)
				}
				compare(t, step, s, m)
			}
			if _, err := s.DB().Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func compare(t *testing.T, step int, s *Store, m model) {
	t.Helper()
	f, l := bounds(t, s)
	wf, wl := m.bounds()
	if f != wf || l != wl {
		t.Fatalf("step %d: bounds %d..%d, model %d..%d", step, f, l, wf, wl)
	}
	lo := f
	if lo > 3 {
		lo -= 3
	}
	for i := lo; i <= l+3; i++ {
		var a raft.Log
		err := s.GetLog(i, &a)
		b, ok := m[i]
		if (err == nil) != ok || (err != nil && err != raft.ErrLogNotFound) {
			t.Fatalf("step %d: index %d: store %v, in model %v", step, i, err, ok)
		}
		if ok && (a.Index != b.Index || a.Term != b.Term || !bytes.Equal(a.Data, b.Data)) {
			t.Fatalf("step %d: index %d differs: term %d/%d, %d/%d bytes", step, i, a.Term, b.Term, len(a.Data), len(b.Data))
		}
	}
}

// TestStore_StoreLogsRefusedWhole: on a store with a small SegmentSize
// (MaxBatchSize 256 KiB), an entry over MaxEntrySize (below kdb's
// MaxValueSize) refuses the whole call before anything is written, also
// when the call would have split in several transactions; entries of
// exactly MaxEntrySize are stored, whether kdb keeps them in the journal
// or inline in the batch record.
func TestStore_StoreLogsRefusedWhole(t *testing.T) {
	for _, vt := range []int{0, -1} { // the default threshold (journal values); never (inline)
		t.Run(fmt.Sprintf("ValueThreshold=%d", vt), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := &kdb.Options{SegmentSize: 1 << 20, ValueThreshold: vt}
			s := openMem(t, fs, opts)
			max := s.MaxEntrySize()
			if max >= kdb.MaxValueSize || max > s.DB().MaxBatchSize() {
				t.Fatalf("MaxEntrySize %d, MaxBatchSize %d", max, s.DB().MaxBatchSize())
			}
			sized := func(i uint64, n int) *raft.Log { // an entry that encodes to n bytes
				l := entry(i, 1, 0)
				l.Data = make([]byte, n-encodedSize(l))               // a byte or two over: Data's length grew its varint
				l.Data = make([]byte, len(l.Data)-(encodedSize(l)-n)) // the same varint length
				if encodedSize(l) != n {
					t.Fatalf("entry of %d bytes encodes to %d", n, encodedSize(l))
				}
				return l
			}
			for _, call := range [][]*raft.Log{
				{entry(1, 1, 1), entry(2, 1, 2<<20)},
				{entry(1, 1, 1), sized(2, max), sized(3, max+1)},
				{sized(1, max+1)},
			} {
				err := s.StoreLogs(call)
				if !errors.Is(err, kdb.ErrInvalid) {
					t.Fatalf("StoreLogs with an entry over MaxEntrySize: %v", err)
				}
				var got raft.Log
				if f, l := bounds(t, s); f != 0 || l != 0 || s.GetLog(1, &got) != raft.ErrLogNotFound {
					t.Fatalf("refused call (%v) left first %d last %d", err, f, l)
				}
			}
			// At the limit: one call in several transactions.
			call := []*raft.Log{entry(1, 1, 1), sized(2, max), sized(3, max), entry(4, 1, 100)}
			if err := s.StoreLogs(call); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openMem(t, fs, opts)
			defer s.Close()
			if f, l := bounds(t, s); f != 1 || l != 4 {
				t.Fatalf("after reopen: first %d last %d", f, l)
			}
			for _, want := range call {
				var got raft.Log
				if err := s.GetLog(want.Index, &got); err != nil || !sameLog(&got, want) {
					t.Fatalf("entry %d: %v", want.Index, err)
				}
			}
		})
	}
}

// TestStore_GetLogJournalDamage: damage to the journal record that holds an
// entry is raftkdb's ErrCorrupt naming the index, and still kdb's.
func TestStore_GetLogJournalDamage(t *testing.T) {
	fs := vfs.NewMem()
	opts := &kdb.Options{CheckpointInterval: -1}
	s := openMem(t, fs, opts)
	want := entry(7, 1, 4096) // over ValueThreshold: its bytes stay in the journal
	for i := range want.Data {
		want.Data[i] = 0xa5
	}
	if err := s.StoreLogs([]*raft.Log{entry(6, 1, 10), want}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // a checkpoint: reopening does not replay the entry
		t.Fatal(err)
	}
	names, err := fs.ReadDir("/db")
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		b, err := vfs.ReadFile(fs, "/db/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if at := bytes.Index(b, want.Data); at >= 0 {
			f, err := fs.OpenFile("/db/"+name, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0x5a}, int64(at+100)); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("entry 7's bytes not found in the journal")
	}
	s = openMem(t, fs, opts)
	defer s.Close()
	var got raft.Log
	if err := s.GetLog(6, &got); err != nil {
		t.Fatalf("undamaged entry 6: %v", err)
	}
	err = s.GetLog(7, &got)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), "index 7") {
		t.Fatalf("GetLog of a damaged entry: %v", err)
	}
	t.Log(err)
}
