package kvfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// snapshotBytes returns a snapshot of f, as raft would persist it.
func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	fs, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := fs.Persist(&s); err != nil {
		t.Fatal(err)
	}
	return s.Bytes()
}

// indexes returns the FSM's trees in db (namespace kv).
func indexes(t *testing.T, db *kdb.DB) []string {
	t.Helper()
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if err := ns.View(func(s *kdb.Snapshot) error {
		var err error
		names, err = s.Indexes()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return names
}

// setMeta sets the FSM meta key in db to v, or deletes it if v is nil,
// behind the FSM's back: a store, or a snapshot, as an older kvfsm (which
// recorded no MaxPutSize) or damage left it.
func setMeta(t *testing.T, db *kdb.DB, key string, v []byte) {
	t.Helper()
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	b := ns.NewBatch()
	if v == nil {
		b.Delete(metaIndex, []byte(key))
	} else {
		b.Put(metaIndex, []byte(key), v)
	}
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestFSM_RestoreValueOverFollowersBatch: a leader on a default store
// (kdb batches of 8 MiB, the default MaxPutSize) applies a put of 300 KiB;
// a follower whose store has 1 MiB segments (batches of 256 KiB), opened
// with a MaxPutSize of 250 KiB, is not of that cluster. Every Restore it
// refuses must be refused with kdb.ErrInvalid before anything is written:
// its data, applied index, limit and trees are as they were.
//
// The leader's snapshots carry its MaxPutSize, which the follower's
// batches cannot hold: refused, naming both figures, even the one whose
// values each fit (adopting the limit would make the follower refuse the
// leader's next 300 KiB put; keeping its own would make it refuse it too).
//
// Snapshots of a leader that recorded no limit (an older kvfsm): Restore
// checks each value against the follower's batch. One holding the 300 KiB
// value is refused naming the key and the sizes (it left a half-copied
// generation, and said only "value record of 307200 bytes (max 262144):
// split the batch"); one whose values each fit (200 KiB each, 8 MiB in
// all, more than any one batch of the follower) restores, and the follower
// keeps its MaxPutSize.
func TestFSM_RestoreValueOverFollowersBatch(t *testing.T) {
	ldb, leader := open(t, filepath.Join(t.TempDir(), "leader"))
	defer ldb.Close()
	var logs []*raft.Log
	for i := 1; i <= 40; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand,
			Data: EncodePut(fmt.Appendf(nil, "v%02d", i), bytes.Repeat([]byte{byte(i)}, 200<<10))})
	}
	logs = append(logs, put(41, "a", "1"), put(42, "z", "2"))
	for _, r := range leader.ApplyBatch(logs) {
		if r != nil {
			t.Fatal(r)
		}
	}
	fitting := snapshotBytes(t, leader)
	setMeta(t, ldb, "maxput", nil)
	fittingOld := snapshotBytes(t, leader)
	setMeta(t, ldb, "maxput", u64(DefaultMaxPutSize))
	if r := leader.Apply(&raft.Log{Index: 43, Term: 1, Type: raft.LogCommand,
		Data: EncodePut([]byte("big"), make([]byte, 300<<10))}); r != nil {
		t.Fatalf("leader's put of 300 KiB: %v", r)
	}
	tooBig := snapshotBytes(t, leader)
	setMeta(t, ldb, "maxput", nil)
	tooBigOld := snapshotBytes(t, leader)

	fdb, err := kdb.Open(filepath.Join(t.TempDir(), "follower"), &kdb.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer fdb.Close()
	f, err := Open(fdb, nil, Options{MaxPutSize: 250 << 10})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch([]*raft.Log{put(1, "mine", "x")})
	before := indexes(t, fdb)

	for _, tc := range []struct {
		name string
		snap []byte
		says []string
	}{
		{"limit, values fit", fitting, []string{"MaxPutSize 8388512 (the snapshot's)", "(262144,", "at applied index 42"}},
		{"limit, value too big", tooBig, []string{"MaxPutSize 8388512 (the snapshot's)", "(262144,", "at applied index 43"}},
		{"no limit, value too big", tooBigOld, []string{`key "big"`, "307200 bytes", "(262144,"}},
	} {
		err = f.Restore(io.NopCloser(bytes.NewReader(tc.snap)))
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("%s: restore on the follower: %v, want kdb.ErrInvalid", tc.name, err)
		}
		for _, want := range tc.says {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: restore's error %q does not say %s", tc.name, err, want)
			}
		}
		if m, applied := contents(t, fdb); fmt.Sprint(m) != "map[mine:x]" || applied != 1 || f.Applied() != 1 || f.Restores() != 0 {
			t.Errorf("%s: after the refused restore: %v applied %d/%d, restores %d", tc.name, m, applied, f.Applied(), f.Restores())
		}
		if f.MaxPutSize() != 250<<10 {
			t.Errorf("%s: after the refused restore: MaxPutSize %d", tc.name, f.MaxPutSize())
		}
		if after := indexes(t, fdb); !slices.Equal(after, before) {
			t.Errorf("%s: the refused restore left trees %v, had %v", tc.name, after, before)
		}
		if _, err := fdb.Check(); err != nil {
			t.Fatal(err)
		}
	}

	if err := f.Restore(io.NopCloser(bytes.NewReader(fittingOld))); err != nil {
		t.Fatalf("restore of values that each fit the follower's batch, no limit recorded: %v", err)
	}
	m, applied := contents(t, fdb)
	if len(m) != 42 || m["a"] != "1" || m["v17"] != string(bytes.Repeat([]byte{17}, 200<<10)) || applied != 42 {
		t.Fatalf("after the restore: %d keys, applied %d", len(m), applied)
	}
	if f.MaxPutSize() != 250<<10 {
		t.Fatalf("after restoring a snapshot without a limit: MaxPutSize %d, want the follower's own", f.MaxPutSize())
	}
}

// TestFSM_RestoreOnSmallStores: leader and follower on the same small
// store (64 KiB segments: kdb batches of 16 KiB), random puts of every
// size ApplyBatch takes there, up to exactly the largest (and one over,
// refused at Apply): the follower restores the leader's snapshot whole.
// Restore packs several values per batch; none may overflow one.
func TestFSM_RestoreOnSmallStores(t *testing.T) {
	for _, opts := range []kdb.Options{
		{SegmentSize: 64 << 10},
		{SegmentSize: 64 << 10, ValueThreshold: -1}, // every value inline in the batch record
	} {
		t.Run(fmt.Sprintf("threshold=%d", opts.ValueThreshold), func(t *testing.T) {
			o := opts
			ldb, err := kdb.Open(filepath.Join(t.TempDir(), "leader"), &o)
			if err != nil {
				t.Fatal(err)
			}
			defer ldb.Close()
			leader, err := Open(ldb, nil, Options{MaxPutSize: ldb.MaxBatchSize() - putOverhead})
			if err != nil {
				t.Fatal(err)
			}
			max := ldb.MaxBatchSize()
			rng := rand.New(rand.NewPCG(1, 2))
			want := map[string]string{}
			var idx uint64
			for round := 0; round < 20; round++ {
				var logs []*raft.Log
				for range 40 {
					idx++
					k := fmt.Appendf(nil, "k%05d", rng.IntN(400))
					if rng.IntN(8) == 0 {
						k = append(k, bytes.Repeat([]byte{'x'}, rng.IntN(kdb.MaxKeySize-len(k)))...)
					}
					n := 1 + rng.IntN(max-putOverhead-len(k))
					switch rng.IntN(6) {
					case 0:
						n = max - putOverhead - len(k) // the largest put that fits
					case 1:
						n = 1 + rng.IntN(600) // around ValueThreshold
					case 2:
						n = max - putOverhead - len(k) + 1 // refused at Apply
					}
					v := bytes.Repeat([]byte{byte(idx)}, n)
					logs = append(logs, &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: EncodePut(k, v)})
					if putCost(k, v) <= max {
						want[string(k)] = string(v)
					}
				}
				leader.ApplyBatch(logs)
			}
			snap := snapshotBytes(t, leader)

			o = opts
			fdb, err := kdb.Open(filepath.Join(t.TempDir(), "follower"), &o)
			if err != nil {
				t.Fatal(err)
			}
			defer fdb.Close()
			f, err := Open(fdb, nil, Options{MaxPutSize: fdb.MaxBatchSize() - putOverhead})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatalf("restore on a store like the leader's: %v", err)
			}
			m, applied := contents(t, fdb)
			if applied != idx || len(m) != len(want) {
				t.Fatalf("restored %d keys applied %d, want %d keys applied %d", len(m), applied, len(want), idx)
			}
			for k, v := range want {
				if m[k] != v {
					t.Fatalf("key %q: %d bytes, want %d", k, len(m[k]), len(v))
				}
			}
		})
	}
}

// TestFSM_RestoreDamagedSnapshot: a snapshot whose bytes declare a field
// of 2^62 bytes, one cut inside a field that declares 8 MiB, and
// well-formed exports whose FSM meta is damaged are refused with
// kdb.ErrCorrupt saying where (the meta's damage did not say it was in the
// snapshot: "kdb: corrupt: kvfsm meta "applied" holds 7 bytes", as if the
// follower's own store were damaged); the huge length allocates nothing
// like it (kdb.Import bounds a field by kdb.MaxValueSize), and the
// follower's state and trees are unchanged.
func TestFSM_RestoreDamagedSnapshot(t *testing.T) {
	ldb, leader := open(t, filepath.Join(t.TempDir(), "leader"))
	marker := bytes.Repeat([]byte{'Q'}, 300)
	leader.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "m", string(marker))})
	good := snapshotBytes(t, leader)
	if err := ldb.Close(); err != nil {
		t.Fatal(err)
	}
	// The value's length field (uvarint 300) just before it.
	at := bytes.Index(good, marker) - 2
	if at < 0 || !bytes.Equal(good[at:at+2], binary.AppendUvarint(nil, 300)) {
		t.Fatalf("no length field before the marker at %d", at)
	}
	withLength := func(n uint64, rest []byte) []byte {
		return append(binary.AppendUvarint(bytes.Clone(good[:at]), n), rest...)
	}
	// Exports of stores whose kv meta is damaged (checksums intact).
	badMeta := func(key string, v []byte) []byte {
		db, err := kdb.Open(filepath.Join(t.TempDir(), "bad"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		ns, err := db.Namespace(Namespace)
		if err != nil {
			t.Fatal(err)
		}
		b := ns.NewBatch()
		b.Put(metaIndex, []byte(key), v)
		b.Put(dataIndex(0), []byte("k"), []byte("v"))
		if err := db.Write(b); err != nil {
			t.Fatal(err)
		}
		var s sink
		if _, err := db.Export(&s); err != nil {
			t.Fatal(err)
		}
		return s.Bytes()
	}
	cases := []struct {
		name string
		snap []byte
		says string // where the damage is
	}{
		{"length 2^62", withLength(1<<62, good[at+2:]), "field of 4611686018427387904 bytes"},
		{"length 8 MiB, cut", withLength(8<<20, marker), "the file ends here"},
		{"applied of 7 bytes", badMeta("applied", make([]byte, 7)), `snapshot's FSM state: kdb: corrupt: kvfsm meta "applied" holds 7 bytes`},
		{"gen of 9 bytes", badMeta("gen", make([]byte, 9)), `snapshot's FSM state: kdb: corrupt: kvfsm meta "gen" holds 9 bytes`},
		{"maxput of 0", badMeta("maxput", u64(0)), `snapshot's FSM state: kdb: corrupt: kvfsm meta "maxput" holds 0, want 1 to 8388608`},
	}
	fdb, f := open(t, filepath.Join(t.TempDir(), "follower"))
	defer fdb.Close()
	f.ApplyBatch([]*raft.Log{put(1, "mine", "x")})
	before := indexes(t, fdb)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			err := f.Restore(io.NopCloser(bytes.NewReader(tc.snap)))
			runtime.ReadMemStats(&ms1)
			if !errors.Is(err, kdb.ErrCorrupt) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("restore: %v, want kdb.ErrCorrupt saying %q", err, tc.says)
			}
			if a := ms1.TotalAlloc - ms0.TotalAlloc; a > 64<<20 {
				t.Errorf("restore allocated %d MiB", a>>20)
			}
			if m, applied := contents(t, fdb); fmt.Sprint(m) != "map[mine:x]" || applied != 1 || f.Applied() != 1 {
				t.Errorf("after the refused restore: %v applied %d/%d", m, applied, f.Applied())
			}
			if after := indexes(t, fdb); !slices.Equal(after, before) {
				t.Errorf("the refused restore left trees %v, had %v", after, before)
			}
		})
	}
}
