package kvfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// state is what a node's FSM holds, for comparing nodes: every key and
// value, and the applied index.
type state struct {
	data    map[string]string
	applied uint64
}

func stateOf(t *testing.T, db *kdb.DB) state {
	t.Helper()
	m, applied := contents(t, db)
	return state{m, applied}
}

func (s state) equal(o state) bool { return s.applied == o.applied && maps.Equal(s.data, o.data) }

func (s state) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "applied %d, %d keys:", s.applied, len(s.data))
	for _, k := range slices.Sorted(maps.Keys(s.data)) {
		fmt.Fprintf(&b, " %s(%d bytes)", k, len(s.data[k]))
	}
	return b.String()
}

// answer renders an ApplyBatch response for comparing nodes.
func answer(r any) string {
	if err, ok := r.(error); ok && errors.Is(err, kdb.ErrInvalid) {
		return "ErrInvalid"
	}
	return fmt.Sprint(r)
}

// TestFSM_TwoNodesDifferentSegmentSize: two nodes of one cluster, one
// store with kdb's default SegmentSize (32 MiB: batches of 8 MiB), one
// with 1 MiB segments (batches of 256 KiB), fed the same log entries,
// among them a put of 300 KiB. Whether a put is applied must not depend on
// the node's store: with the default MaxPutSize the small store is refused
// at Open (before, it opened, refused the 300 KiB put the other applied,
// and the replicas differed from then on); with a MaxPutSize both hold
// (200 KiB, the same on both), both answer every entry alike and end in
// equal states.
func TestFSM_TwoNodesDifferentSegmentSize(t *testing.T) {
	segs := []int64{0, 1 << 20} // 0: kdb's default
	openNode := func(t *testing.T, seg int64, opts Options) (*kdb.DB, *FSM, error) {
		db, err := kdb.Open(filepath.Join(t.TempDir(), fmt.Sprint("seg", seg)), &kdb.Options{SegmentSize: seg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		})
		f, err := Open(db, nil, opts)
		return db, f, err
	}

	t.Run("default MaxPutSize", func(t *testing.T) {
		if _, _, err := openNode(t, segs[0], Options{}); err != nil {
			t.Fatalf("the default store: %v", err)
		}
		_, _, err := openNode(t, segs[1], Options{})
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("Open of a store with 1 MiB segments (batches of 256 KiB) under the default MaxPutSize (8 MiB less 96 bytes): %v, want kdb.ErrInvalid", err)
		}
		for _, want := range []string{"MaxPutSize 8388512 (the default)", "8388608 bytes", "(262144,", "SegmentSize at least 33554432", "at most 262048"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open's error %q does not say %s", err, want)
			}
		}
	})

	t.Run("MaxPutSize 200KiB", func(t *testing.T) {
		const limit = 200 << 10
		big := func(i uint64, k string, n int) *raft.Log {
			return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: EncodePut([]byte(k), bytes.Repeat([]byte{byte(i)}, n))}
		}
		batches := [][]*raft.Log{
			{put(1, "a", "1"), big(2, "big", 300<<10), put(3, "b", "2")},
			{big(4, "at", limit-2), big(5, "over", limit-3)},
			{big(6, "x", 100<<10), {Index: 7, Term: 1, Type: raft.LogCommand, Data: EncodeDelete([]byte("a"))}, big(8, "big2", 257<<10)},
		}
		var states []state
		var answers []string
		for _, seg := range segs {
			db, f, err := openNode(t, seg, Options{MaxPutSize: limit})
			if err != nil {
				t.Fatalf("segment size %d: %v", seg, err)
			}
			var as []string
			for _, b := range batches {
				for _, r := range f.ApplyBatch(b) {
					as = append(as, answer(r))
				}
			}
			states = append(states, stateOf(t, db))
			answers = append(answers, fmt.Sprint(as))
		}
		if !states[0].equal(states[1]) {
			t.Fatalf("the replicas diverged:\n  default segments: %v\n  1 MiB segments:   %v", states[0], states[1])
		}
		if answers[0] != answers[1] {
			t.Fatalf("the nodes answered the same entries differently:\n  %s\n  %s", answers[0], answers[1])
		}
		want := "[<nil> ErrInvalid <nil> <nil> ErrInvalid <nil> <nil> ErrInvalid]"
		if answers[0] != want || states[0].applied != 8 || len(states[0].data) != 3 {
			t.Fatalf("answers %s, state %v; want %s and keys at, b, x", answers[0], states[0], want)
		}
	})
}

// TestFSM_OpenRefusesStoreTooSmall: Open refuses (kdb.ErrInvalid, naming
// both figures, writing nothing) a MaxPutSize that one kdb batch of the
// store cannot hold, to the byte, and a MaxPutSize out of range.
func TestFSM_OpenRefusesStoreTooSmall(t *testing.T) {
	db, err := kdb.Open(filepath.Join(t.TempDir(), "a"), &kdb.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	largest := db.MaxBatchSize() - putOverhead // 262048
	for _, n := range []int{largest + 1, -1, kdb.MaxValueSize + 1} {
		if _, err := Open(db, nil, Options{MaxPutSize: n}); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprint("MaxPutSize ", n)) {
			t.Fatalf("Open with MaxPutSize %d on a store whose batches take %d: %v, want kdb.ErrInvalid naming it", n, db.MaxBatchSize(), err)
		}
	}
	// Nothing was recorded: the store takes the largest it holds.
	f, err := Open(db, nil, Options{MaxPutSize: largest})
	if err != nil {
		t.Fatal(err)
	}
	if f.MaxPutSize() != largest {
		t.Fatalf("MaxPutSize %d, want %d", f.MaxPutSize(), largest)
	}
	// A put of exactly that size fits the store's batch.
	resp := f.ApplyBatch([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand, Data: EncodePut([]byte("k"), make([]byte, largest-1))}})
	if resp[0] != nil {
		t.Fatalf("a put of MaxPutSize: %v", resp[0])
	}
}

// TestFSM_OpenRecordsMaxPutSize: the first Open records the FSM's
// MaxPutSize in the store; a later Open without one uses the recorded one
// (it took the default: a node restarted without its flag would apply by
// another limit), and one with another is refused, naming both (it was
// taken: a node alone changed the cluster's limit). A store written before
// the limit was recorded gets the configured one, or the default, and
// keeps its data; a damaged record is kdb.ErrCorrupt.
func TestFSM_OpenRecordsMaxPutSize(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	reopen := func(opts Options) (*FSM, error) {
		t.Helper()
		db, err := kdb.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Open(db, nil, opts)
		if err == nil {
			f.ApplyBatch([]*raft.Log{put(f.Applied()+1, "k", "v")})
		}
		if cerr := db.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		return f, err
	}
	if _, err := reopen(Options{MaxPutSize: 1000}); err != nil {
		t.Fatal(err)
	}
	f, err := reopen(Options{})
	if err != nil || f.MaxPutSize() != 1000 {
		t.Fatalf("reopen without a MaxPutSize: %v, MaxPutSize %d, want the recorded 1000", err, f.MaxPutSize())
	}
	_, err = reopen(Options{MaxPutSize: 2000})
	if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "MaxPutSize 2000 differs from the MaxPutSize 1000 recorded") {
		t.Fatalf("reopen with MaxPutSize 2000 over a store recorded with 1000: %v, want kdb.ErrInvalid naming both", err)
	}
	if f, err := reopen(Options{MaxPutSize: 1000}); err != nil || f.Applied() != 3 {
		t.Fatalf("reopen with the recorded MaxPutSize: %v", err)
	}

	// Stores an older kvfsm wrote: no limit recorded.
	older := func(t *testing.T, seg int64) string {
		dir := filepath.Join(t.TempDir(), "old")
		db, err := kdb.Open(dir, &kdb.Options{SegmentSize: seg})
		if err != nil {
			t.Fatal(err)
		}
		f, err := Open(db, nil, Options{MaxPutSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		f.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "b", "2")})
		setMeta(t, db, "maxput", nil)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	openAt := func(t *testing.T, dir string, seg int64, opts Options) (*FSM, error) {
		db, err := kdb.Open(dir, &kdb.Options{SegmentSize: seg})
		if err != nil {
			t.Fatal(err)
		}
		f, err := Open(db, nil, opts)
		if cerr := db.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		return f, err
	}
	t.Run("older store, default segments", func(t *testing.T) {
		dir := older(t, 0)
		f, err := openAt(t, dir, 0, Options{})
		if err != nil || f.MaxPutSize() != DefaultMaxPutSize || f.Applied() != 2 {
			t.Fatalf("Open: %v, MaxPutSize %d applied %d", err, f.MaxPutSize(), f.Applied())
		}
		if _, err := openAt(t, dir, 0, Options{MaxPutSize: 1000}); !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("the default was not recorded: %v", err)
		}
	})
	t.Run("older store, 1 MiB segments", func(t *testing.T) {
		dir := older(t, 1<<20)
		if _, err := openAt(t, dir, 1<<20, Options{}); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "(262144,") {
			t.Fatalf("Open with the default MaxPutSize: %v, want kdb.ErrInvalid", err)
		}
		f, err := openAt(t, dir, 1<<20, Options{MaxPutSize: 100 << 10})
		if err != nil || f.MaxPutSize() != 100<<10 || f.Applied() != 2 {
			t.Fatalf("Open with MaxPutSize 100 KiB: %v", err)
		}
		if f, err := openAt(t, dir, 1<<20, Options{}); err != nil || f.MaxPutSize() != 100<<10 {
			t.Fatalf("reopen: %v", err)
		}
	})
	t.Run("damaged", func(t *testing.T) {
		for _, v := range [][]byte{u64(0), u64(kdb.MaxValueSize + 1), make([]byte, 9)} {
			dir := older(t, 0)
			db, err := kdb.Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			setMeta(t, db, "maxput", v)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := openAt(t, dir, 0, Options{}); !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), `meta "maxput"`) {
				t.Fatalf("maxput %x: %v, want kdb.ErrCorrupt", v, err)
			}
		}
	})
}

// TestFSM_RestoreAdoptsMaxPutSize: a node opened with another MaxPutSize
// (2000) than the leader's (1000) restores the leader's snapshot and
// adopts its limit with its state, durably: fed the same entries after the
// snapshot (a put of 1500 bytes), both answer alike and stay equal (it kept
// its own limit and applied the put the leader refused).
func TestFSM_RestoreAdoptsMaxPutSize(t *testing.T) {
	tmp := t.TempDir()
	ldb, err := kdb.Open(filepath.Join(tmp, "leader"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ldb.Close()
	leader, err := Open(ldb, nil, Options{MaxPutSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	leader.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "b", strings.Repeat("x", 1200))})
	snap := snapshotBytes(t, leader)

	fdir := filepath.Join(tmp, "follower")
	fdb, err := kdb.Open(fdir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(fdb, nil, Options{MaxPutSize: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if f.MaxPutSize() != 1000 {
		t.Errorf("after Restore: MaxPutSize %d, want the snapshot's 1000", f.MaxPutSize())
	}
	next := []*raft.Log{put(3, "c", strings.Repeat("y", 1500)), put(4, "d", "4")}
	la, fa := leader.ApplyBatch(next), f.ApplyBatch(next)
	if ls, fs := stateOf(t, ldb), stateOf(t, fdb); !ls.equal(fs) {
		t.Fatalf("the replicas diverged after the restore:\n  leader:   %v\n  follower: %v", ls, fs)
	}
	if answer(la[0]) != "ErrInvalid" || answer(fa[0]) != "ErrInvalid" {
		t.Fatalf("answers to a put of 1500 bytes: leader %v, follower %v", la[0], fa[0])
	}
	if err := fdb.Close(); err != nil {
		t.Fatal(err)
	}
	fdb, err = kdb.Open(fdir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fdb.Close()
	if f, err := Open(fdb, nil, Options{}); err != nil || f.MaxPutSize() != 1000 {
		t.Fatalf("reopen of the follower: %v, want MaxPutSize 1000 (recorded with the restored state)", err)
	}
	if _, err := Open(fdb, nil, Options{MaxPutSize: 2000}); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("reopen of the follower with its old MaxPutSize 2000: %v, want kdb.ErrInvalid", err)
	}
}
