package kvfsm

// Tests added by mutation testing of the FSM: each guards a rule that a
// deliberate breakage of fsm.go removed without any other test failing.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestMut_BadCommandsAppliedAsNothing guards decode's checks (fsm.go, "n ==
// 0" and "delete with a value"): a put or a delete with an empty key, and
// a delete that carries a value, are answered ErrBadCommand and change
// nothing; the entries around them apply, and ApplyBatch does not panic.
func TestMut_BadCommandsAppliedAsNothing(t *testing.T) {
	db, f := open(t, filepath.Join(t.TempDir(), "a"))
	defer db.Close()
	f.ApplyBatch([]*raft.Log{put(1, "k", "v")})
	cmd := func(i uint64, data []byte) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}
	}
	deleteWithValue := append(EncodeDelete([]byte("k")), 'x')
	var resp []any
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("ApplyBatch of bad commands panicked: %v", r)
			}
		}()
		resp = f.ApplyBatch([]*raft.Log{cmd(2, EncodePut(nil, []byte("v"))), cmd(3, EncodeDelete(nil)),
			cmd(4, deleteWithValue), put(5, "j", "5")})
	}()
	for i, what := range []string{"a put with an empty key", "a delete with an empty key", "a delete with a value"} {
		if err, _ := resp[i].(error); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%s: response %v, want ErrBadCommand", what, resp[i])
		}
	}
	if resp[3] != nil {
		t.Errorf("the put after them: %v", resp[3])
	}
	if m, applied := contents(t, db); fmt.Sprint(m) != "map[j:5 k:v]" || applied != 5 || f.Applied() != 5 {
		t.Fatalf("state %v, applied %d/%d; want map[j:5 k:v] at 5", m, applied, f.Applied())
	}
}

// TestMut_ConfigurationEntryInAGapIsAHole guards checkGap (fsm.go,
// "l.Type == raft.LogConfiguration"): raft hands an FSM its configuration
// entries (the FSM records them as applied), so one in a gap before the
// next entry was never applied: a hole, like a command there.
func TestMut_ConfigurationEntryInAGapIsAHole(t *testing.T) {
	log := raft.NewInmemStore()
	if err := log.StoreLogs([]*raft.Log{put(1, "a", "1"), {Index: 2, Term: 1, Type: raft.LogConfiguration},
		put(3, "b", "3")}); err != nil {
		t.Fatal(err)
	}
	db, f := open(t, filepath.Join(t.TempDir(), "a"))
	defer db.Close()
	f.log = log
	f.ApplyBatch([]*raft.Log{put(1, "a", "1")})
	msg := mustPanic(t, "configuration entry in the gap", func() { f.ApplyBatch([]*raft.Log{put(3, "b", "3")}) })
	if !strings.Contains(msg, "entry 2 (LogConfiguration") {
		t.Fatalf("panic %q", msg)
	}
	if f.Applied() != 1 {
		t.Fatalf("applied %d after the refused batch, want 1", f.Applied())
	}
}

// TestMut_SnapshotMakesAppliesDurable guards Snapshot's synced write
// (fsm.go, "synced: every earlier NoSync apply is durable with it"):
// ApplyBatch commits NoSync, and raft, once Snapshot returns, may compact
// the log up to the snapshot; a power loss right after must not take back
// an apply the snapshot covers (the log no longer has it to replay).
func TestMut_SnapshotMakesAppliesDurable(t *testing.T) {
	mem := vfs.NewCrashableMem()
	// No background fsync of the NoSync applies within the test.
	opts := kdb.Options{FS: mem, SyncInterval: time.Hour, CheckpointInterval: -1, CheckpointBeforeServing: true}
	db, err := kdb.Open("/db", &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := Open(db, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 5; i++ {
		f.ApplyBatch([]*raft.Log{put(i, fmt.Sprintf("k%d", i), fmt.Sprint(i))})
	}
	if _, err := f.Snapshot(); err != nil {
		t.Fatal(err)
	}
	img := mem.CrashClone(vfs.CrashOptions{KeepUnsynced: 0, Seed: 1})
	opts.FS = img
	db2, err := kdb.Open("/db", &opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	m, applied := contents(t, db2)
	if len(m) != 5 || m["k5"] != "5" || applied != 5 {
		t.Fatalf("after a power loss right after Snapshot: %v, applied %d; want k1..k5 at 5", m, applied)
	}
}

// TestMut_RestoreDropsOldAndLeftoverGenerations guards Restore's handling
// of data generations (fsm.go, "b.DropIndex(dst)" and
// "b.DropIndex(dataIndex(old))"): the generation it replaces is dropped
// with the switch (not kept, a whole copy of the old state), and a tree of
// the generation it builds, left by a Restore that crashed after Open ran,
// is dropped before the copy (not merged with the snapshot's keys).
func TestMut_RestoreDropsOldAndLeftoverGenerations(t *testing.T) {
	ldb, leader := open(t, filepath.Join(t.TempDir(), "leader"))
	leader.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "b", "2")})
	snap := snapshotBytes(t, leader)
	if err := ldb.Close(); err != nil {
		t.Fatal(err)
	}
	db, f := open(t, filepath.Join(t.TempDir(), "follower"))
	defer db.Close()
	f.ApplyBatch([]*raft.Log{put(1, "mine", "x")})
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	b := ns.NewBatch()
	b.Put(dataIndex(f.gen+1), []byte("leftover"), []byte("of a crashed Restore"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	old := dataIndex(f.gen)
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if m, applied := contents(t, db); fmt.Sprint(m) != "map[a:1 b:2]" || applied != 2 {
		t.Errorf("restored state %v applied %d, want map[a:1 b:2] at 2", m, applied)
	}
	if v, err := f.Get([]byte("leftover")); !errors.Is(err, kdb.ErrNotFound) {
		t.Errorf("Get of the leftover key after Restore: %q, %v; want kdb.ErrNotFound", v, err)
	}
	if names := indexes(t, db); !slices.Equal(names, []string{dataIndex(f.gen), metaIndex}) {
		t.Errorf("trees after Restore: %v, want [%s %s] (the old generation %s dropped)", names, dataIndex(f.gen), metaIndex, old)
	}
}

// TestMut_OpenDropsStrayGenerations guards Open's cleanup (fsm.go,
// `strings.HasPrefix(n, "d")`): a data tree of another generation than the
// one in meta (a Restore that crashed before its switch) is dropped.
func TestMut_OpenDropsStrayGenerations(t *testing.T) {
	db, f := open(t, filepath.Join(t.TempDir(), "a"))
	defer db.Close()
	f.ApplyBatch([]*raft.Log{put(1, "a", "1")})
	ns, err := db.Namespace(Namespace)
	if err != nil {
		t.Fatal(err)
	}
	b := ns.NewBatch()
	b.Put(dataIndex(f.gen+1), []byte("half"), []byte("copied"))
	b.Put(dataIndex(f.gen+7), []byte("x"), []byte("y"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	f, err = Open(db, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if names := indexes(t, db); !slices.Equal(names, []string{dataIndex(f.gen), metaIndex}) {
		t.Errorf("trees after Open: %v, want [%s %s]", names, dataIndex(f.gen), metaIndex)
	}
	if m, applied := contents(t, db); fmt.Sprint(m) != "map[a:1]" || applied != 1 {
		t.Errorf("state %v applied %d", m, applied)
	}
}
