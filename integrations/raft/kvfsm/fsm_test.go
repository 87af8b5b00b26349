package kvfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

type sink struct {
	bytes.Buffer
	cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }
func (s *sink) Close() error  { return nil }

func put(i uint64, k, v string) *raft.Log {
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: EncodePut([]byte(k), []byte(v))}
}

func contents(t *testing.T, db *kdb.DB) (map[string]string, uint64) {
	t.Helper()
	m := map[string]string{}
	applied, err := All(db, func(k, v []byte) error { m[string(k)] = string(v); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return m, applied
}

func open(t *testing.T, dir string) (*kdb.DB, *FSM) {
	t.Helper()
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(db, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db, f
}

func TestFSM_ApplySkipReplaySnapshotRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	db, f := open(t, dir)
	resp := f.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "b", "2"),
		{Index: 3, Type: raft.LogConfiguration}, {Index: 4, Type: raft.LogCommand, Data: []byte{9, 1, 'x'}},
		{Index: 5, Type: raft.LogCommand, Data: EncodeDelete([]byte("a"))}})
	if resp[0] != nil || resp[1] != nil || resp[2] != nil || !errors.Is(resp[3].(error), ErrBadCommand) || resp[4] != nil {
		t.Fatalf("responses %v", resp)
	}
	if f.Applied() != 5 {
		t.Fatalf("applied %d", f.Applied())
	}
	// A replay of applied entries (raft after a restart) changes nothing.
	f.ApplyBatch([]*raft.Log{put(2, "b", "stale"), put(5, "c", "stale"), put(6, "c", "3")})
	m, applied := contents(t, db)
	if fmt.Sprint(m) != "map[b:2 c:3]" || applied != 6 {
		t.Fatalf("state %v applied %d", m, applied)
	}
	var snap sink
	fs, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Persist(&snap); err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch([]*raft.Log{put(7, "d", "after the snapshot")})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, f = open(t, dir)
	if f.Applied() != 7 {
		t.Fatalf("applied %d after reopen", f.Applied())
	}
	db.Close()

	// Restore into another store that has state of its own.
	db2, f2 := open(t, filepath.Join(t.TempDir(), "b"))
	defer db2.Close()
	f2.ApplyBatch([]*raft.Log{put(1, "zz", "mine"), put(2, "b", "mine")})
	if err := f2.Restore(io.NopCloser(bytes.NewReader(snap.Bytes()))); err != nil {
		t.Fatal(err)
	}
	m, applied = contents(t, db2)
	if fmt.Sprint(m) != "map[b:2 c:3]" || applied != 6 || f2.Applied() != 6 || f2.Restores() != 1 {
		t.Fatalf("restored state %v applied %d/%d", m, applied, f2.Applied())
	}
	if v, err := f2.Get([]byte("c")); err != nil || string(v) != "3" {
		t.Fatalf("Get after restore: %q %v", v, err)
	}
	f2.ApplyBatch([]*raft.Log{put(6, "c", "skipped"), put(7, "e", "5")})
	m, _ = contents(t, db2)
	if fmt.Sprint(m) != "map[b:2 c:3 e:5]" {
		t.Fatalf("after restore and apply: %v", m)
	}
	// A damaged snapshot is an error and leaves the state alone.
	bad := bytes.Clone(snap.Bytes())
	bad[len(bad)/2] ^= 0xff
	if err := f2.Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
		t.Fatal("restore of a damaged snapshot succeeded")
	}
	m, _ = contents(t, db2)
	if fmt.Sprint(m) != "map[b:2 c:3 e:5]" {
		t.Fatalf("after a failed restore: %v", m)
	}
	if _, err := db2.Check(); err != nil {
		t.Fatal(err)
	}
}

// mustPanic runs fn and returns the text it panicked with, failing the test
// if it returns normally.
func mustPanic(t *testing.T, what string, fn func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s: applied past a hole without a panic", what)
		}
		msg = fmt.Sprint(r)
	}()
	fn()
	return ""
}

// TestFSM_ApplyBatchRefusesHole: ApplyBatch applies over a gap only when
// raft's log shows every entry in it is one raft does not hand an FSM (a
// no-op, a barrier), and panics, applying nothing, on a hole: a command in
// the gap, or an entry raft's log no longer has.
func TestFSM_ApplyBatchRefusesHole(t *testing.T) {
	log := raft.NewInmemStore()
	store := func(ls ...*raft.Log) {
		if err := log.StoreLogs(ls); err != nil {
			t.Fatal(err)
		}
	}
	store(put(1, "a", "1"), put(2, "b", "2"), &raft.Log{Index: 3, Term: 2, Type: raft.LogNoop},
		&raft.Log{Index: 4, Term: 2, Type: raft.LogBarrier}, put(5, "c", "5"), put(6, "d", "6"), put(7, "e", "7"))
	db, f := open(t, filepath.Join(t.TempDir(), "a"))
	defer db.Close()
	f.log = log
	f.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "b", "2")})
	// 3 and 4 are a no-op and a barrier, which raft does not pass on.
	if resp := f.ApplyBatch([]*raft.Log{put(5, "c", "5")}); resp[0] != nil || f.Applied() != 5 {
		t.Fatalf("apply after a no-op and a barrier: %v, applied %d", resp, f.Applied())
	}
	// 6 is a command that never reached the FSM.
	msg := mustPanic(t, "command in the gap", func() { f.ApplyBatch([]*raft.Log{put(7, "e", "7")}) })
	if !strings.Contains(msg, "hole before entry 7") || !strings.Contains(msg, "entry 6") {
		t.Fatalf("panic %q", msg)
	}
	// Entries no longer in the log (compacted below a snapshot the FSM never
	// restored, say).
	if err := log.DeleteRange(6, 7); err != nil {
		t.Fatal(err)
	}
	msg = mustPanic(t, "entry missing from the log", func() { f.ApplyBatch([]*raft.Log{put(5, "c", "5"), put(9, "f", "9")}) })
	if !strings.Contains(msg, "entry 6 was never applied and is not in raft's log") {
		t.Fatalf("panic %q", msg)
	}
	store(put(6, "d", "6"), put(7, "e", "7"))
	// Without a log, any gap is a hole.
	f.log = nil
	mustPanic(t, "no log", func() { f.ApplyBatch([]*raft.Log{put(7, "e", "7")}) })
	m, applied := contents(t, db)
	if fmt.Sprint(m) != "map[a:1 b:2 c:5]" || applied != 5 || f.Applied() != 5 {
		t.Fatalf("after refused batches: %v applied %d/%d", m, applied, f.Applied())
	}
	// Replays at or below the applied index, then the next entry, still apply.
	f.ApplyBatch([]*raft.Log{put(5, "c", "stale"), put(6, "d", "6")})
	if m, applied = contents(t, db); fmt.Sprint(m) != "map[a:1 b:2 c:5 d:6]" || applied != 6 {
		t.Fatalf("after the next entry: %v applied %d", m, applied)
	}
}

// snapshotAt persists a snapshot of f into snaps under raft index idx.
func snapshotAt(t *testing.T, f *FSM, snaps raft.SnapshotStore, idx uint64) {
	t.Helper()
	fs, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, idx, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Persist(sink); err != nil {
		t.Fatal(err)
	}
}

// TestFSM_CatchUpRestoresSnapshotAhead is the node that stopped after raft
// saved a snapshot a leader installed and before FSM.Restore: its FSM is
// behind the newest snapshot, which raft (NoSnapshotRestoreOnStart) will
// take as applied. CatchUp restores it; an FSM at or past the snapshot is
// left alone.
func TestFSM_CatchUpRestoresSnapshotAhead(t *testing.T) {
	tmp := t.TempDir()
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(tmp, "snaps"), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// The leader's state at index 10, snapshotted as index 12 (11 and 12
	// were barriers).
	ldb, leader := open(t, filepath.Join(tmp, "leader"))
	for i := uint64(1); i <= 10; i++ {
		leader.ApplyBatch([]*raft.Log{put(i, fmt.Sprintf("k%02d", i), fmt.Sprint(i))})
	}
	snapshotAt(t, leader, snaps, 12)
	if err := ldb.Close(); err != nil {
		t.Fatal(err)
	}

	// A follower that had applied 4 entries.
	db, f := open(t, filepath.Join(tmp, "follower"))
	defer db.Close()
	for i := uint64(1); i <= 4; i++ {
		f.ApplyBatch([]*raft.Log{put(i, fmt.Sprintf("k%02d", i), fmt.Sprint(i))})
	}
	restored, err := f.CatchUp(snaps)
	if err != nil || !restored {
		t.Fatalf("CatchUp of an FSM at 4 behind a snapshot at 12: restored %v, %v", restored, err)
	}
	if f.Applied() != 10 || f.Restores() != 1 {
		t.Fatalf("after CatchUp: applied %d, restores %d", f.Applied(), f.Restores())
	}
	// raft hands it entry 13 next; 11 and 12 are covered by the snapshot
	// (and this FSM has no log to check them in).
	f.ApplyBatch([]*raft.Log{put(13, "k13", "13")})
	m, applied := contents(t, db)
	if len(m) != 11 || m["k07"] != "7" || m["k13"] != "13" || applied != 13 {
		t.Fatalf("after CatchUp and entry 13: %v applied %d", m, applied)
	}
	// Now ahead of the snapshot: CatchUp leaves it alone.
	if restored, err := f.CatchUp(snaps); err != nil || restored || f.Restores() != 1 {
		t.Fatalf("CatchUp of an FSM ahead of the snapshot: restored %v, %v", restored, err)
	}
	// A snapshot ahead that does not restore stops the node.
	db2, f2 := open(t, filepath.Join(tmp, "damaged"))
	defer db2.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, 20, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte("not an export"))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if restored, err := f2.CatchUp(snaps); err == nil || restored {
		t.Fatalf("CatchUp with a damaged snapshot: restored %v, %v", restored, err)
	}
}

// TestFSM_GapCoveredByAnInstalledSnapshot: a leader's snapshot is named by
// raft's index (7) while the applied index inside it is its last command's
// (5): 6 and 7 are a no-op and a barrier. A follower that installs it
// (raft saves it, then calls Restore) never gets entries 6 and 7 in its
// log; its next entry, 8, must apply. It panicked ("entry 6 was never
// applied and is not in raft's log"), and again at every restart.
func TestFSM_GapCoveredByAnInstalledSnapshot(t *testing.T) {
	dbA, leader := open(t, filepath.Join(t.TempDir(), "a"))
	defer dbA.Close()
	leader.ApplyBatch([]*raft.Log{put(1, "a", "1"), put(2, "b", "2"), put(5, "c", "5")})
	snaps := raft.NewInmemSnapshotStore()

	dbB, follower := open(t, filepath.Join(t.TempDir(), "b"))
	defer dbB.Close()
	follower.log = raft.NewInmemStore() // the follower's log holds nothing up to the snapshot
	if _, err := follower.CatchUp(snaps); err != nil {
		t.Fatal(err)
	}
	snapshotAt(t, leader, snaps, 7) // raft saves the installed snapshot...
	metas, err := snaps.List()
	if err != nil || len(metas) != 1 {
		t.Fatal(metas, err)
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := follower.Restore(rc); err != nil { // ...then restores it
		t.Fatal(err)
	}
	if resp := follower.ApplyBatch([]*raft.Log{put(8, "d", "8")}); resp[0] != nil || follower.Applied() != 8 {
		t.Fatalf("entry 8 after the installed snapshot: %v, applied %d", resp, follower.Applied())
	}
	// A command missing above the snapshot is still a hole.
	msg := mustPanic(t, "a hole above the snapshot", func() { follower.ApplyBatch([]*raft.Log{put(10, "e", "10")}) })
	if !strings.Contains(msg, "entry 9") {
		t.Fatalf("panic %q", msg)
	}
}

// TestFSM_CatchUpRefusesALogBehindTheFSM is a node restarted with another
// raft log store than the one it ran with (kdb-raft-kv -store boltdb, then
// -store kdb): the new log is empty, the FSM has applied 12 entries. raft
// would bootstrap a log from index 1 and ApplyBatch skip every entry up to
// 12: acknowledged writes lost. CatchUp refuses, before raft starts; a log
// that reaches the applied index, or a snapshot that covers it, is fine.
func TestFSM_CatchUpRefusesALogBehindTheFSM(t *testing.T) {
	db, f := open(t, filepath.Join(t.TempDir(), "a"))
	defer db.Close()
	for i := uint64(1); i <= 12; i++ {
		f.ApplyBatch([]*raft.Log{put(i, fmt.Sprintf("k%02d", i), fmt.Sprint(i))})
	}
	log := raft.NewInmemStore()
	f, err := Open(db, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	snaps := raft.NewInmemSnapshotStore()
	if _, err := f.CatchUp(snaps); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "applied up to index 12") {
		t.Fatalf("CatchUp of an FSM at 12 over an empty log and no snapshot: %v, want kdb.ErrInvalid naming index 12", err)
	}
	// A log that ends before 12 (the new log, bootstrapped) is refused too.
	for i := uint64(1); i <= 3; i++ {
		if err := log.StoreLog(put(i, "x", "y")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.CatchUp(snaps); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("CatchUp of an FSM at 12 over a log ending at 3: %v, want kdb.ErrInvalid", err)
	}
	// A snapshot at 12 covers it (raft compacted the log behind it).
	snapshotAt(t, f, snaps, 12)
	if restored, err := f.CatchUp(snaps); err != nil || restored {
		t.Fatalf("CatchUp with a snapshot at the applied index: restored %v, %v", restored, err)
	}
	// So does a log that reaches 12, without a snapshot.
	for i := uint64(4); i <= 12; i++ {
		if err := log.StoreLog(put(i, "x", "y")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.CatchUp(raft.NewInmemSnapshotStore()); err != nil {
		t.Fatalf("CatchUp with a log that reaches the applied index: %v", err)
	}
	if m, applied := contents(t, db); len(m) != 12 || applied != 12 {
		t.Fatalf("state %v applied %d", m, applied)
	}
}

// TestFSM_CatchUpRefusesALogPastItsSnapshots: raft compacts its log only
// behind a snapshot, so a log that starts past the entry after the newest
// snapshot is one whose snapshot was lost (its directory removed, or all of
// snapshots/). raft.NewRaft reads the log from that snapshot on and
// panicked ("log not found"); CatchUp refuses, naming the missing entries
// and what to do. With the snapshot back, it starts.
func TestFSM_CatchUpRefusesALogPastItsSnapshots(t *testing.T) {
	tmp := t.TempDir()
	db, err := kdb.Open(filepath.Join(tmp, "kdb"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	log := raft.NewInmemStore()
	f, err := Open(db, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(tmp, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 25; i++ {
		l := put(i, fmt.Sprintf("k%02d", i), fmt.Sprint(i))
		if err := log.StoreLog(l); err != nil {
			t.Fatal(err)
		}
		f.ApplyBatch([]*raft.Log{l})
		if i == 9 || i == 19 {
			snapshotAt(t, f, snaps, i)
		}
	}
	if err := log.DeleteRange(1, 14); err != nil { // compacted behind 19, 5 trailing
		t.Fatal(err)
	}
	if _, err := f.CatchUp(snaps); err != nil {
		t.Fatalf("CatchUp with the log at 15..25 and snapshots at 9 and 19: %v", err)
	}
	metas, err := snaps.List()
	if err != nil || len(metas) != 2 || metas[0].Index != 19 {
		t.Fatal(metas, err)
	}
	newest := filepath.Join(tmp, "snapshots", metas[0].ID)
	if err := os.Rename(newest, filepath.Join(tmp, "aside")); err != nil {
		t.Fatal(err)
	}
	_, err = f.CatchUp(snaps)
	if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "entries 10..14 are in neither") ||
		!strings.Contains(err.Error(), "put the missing snapshot back") {
		t.Fatalf("CatchUp with the log at 15..25 and the snapshot at 19 gone: %v, want kdb.ErrInvalid naming entries 10..14", err)
	}
	// All of snapshots/ gone: raft makes a new, empty one.
	if err := os.Rename(filepath.Join(tmp, "snapshots"), filepath.Join(tmp, "snapshots.aside")); err != nil {
		t.Fatal(err)
	}
	empty, err := raft.NewFileSnapshotStore(tmp, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = f.CatchUp(empty); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "entries 1..14 are in neither") {
		t.Fatalf("CatchUp with the log at 15..25 and no snapshot: %v, want kdb.ErrInvalid naming entries 1..14", err)
	}
	// Put back, the node starts.
	if err := os.RemoveAll(filepath.Join(tmp, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "snapshots.aside"), filepath.Join(tmp, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "aside"), newest); err != nil {
		t.Fatal(err)
	}
	if restored, err := f.CatchUp(snaps); err != nil || restored {
		t.Fatalf("CatchUp with the snapshot at 19 back: restored %v, %v", restored, err)
	}
}

// TestFSM_CatchUpAcceptsARestoreAheadOfItsSnapshotIndex: a snapshot is
// taken while applies go on, so its content can be ahead of the index raft
// names it by. A follower that a leader rebuilt from such a snapshot and
// that stopped before its log got the entries after that index restarts
// with the FSM at the snapshot's own applied index, past both its log's end
// and the snapshot's index: consistent, and CatchUp takes it (a cluster
// test's killed follower was refused restart). Once it applies an entry of
// its own past that, the log must hold it again.
func TestFSM_CatchUpAcceptsARestoreAheadOfItsSnapshotIndex(t *testing.T) {
	tmp := t.TempDir()
	dbA, a := open(t, filepath.Join(tmp, "a"))
	defer dbA.Close()
	for i := uint64(1); i <= 12; i++ {
		a.ApplyBatch([]*raft.Log{put(i, fmt.Sprintf("k%02d", i), fmt.Sprint(i))})
	}
	snaps := raft.NewInmemSnapshotStore()
	snapshotAt(t, a, snaps, 8) // named 8, holding 12
	metas, err := snaps.List()
	if err != nil || len(metas) != 1 {
		t.Fatal(metas, err)
	}
	dbB, err := kdb.Open(filepath.Join(tmp, "b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	log := raft.NewInmemStore()
	for i := uint64(1); i <= 5; i++ { // what the follower logged before it fell behind
		if err := log.StoreLog(put(i, "x", "y")); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Open(dbB, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if b.Applied() != 12 {
		t.Fatalf("restored FSM at %d, want 12 (the snapshot's content)", b.Applied())
	}
	// The node stops here and restarts.
	if b, err = Open(dbB, log, Options{}); err != nil {
		t.Fatal(err)
	}
	if restored, err := b.CatchUp(snaps); err != nil || restored {
		t.Fatalf("CatchUp of an FSM restored to 12 from a snapshot named 8, log ending at 5: restored %v, %v; want it taken as is", restored, err)
	}
	// An entry applied after the restore came from the log: a log that
	// lacks it is not the one applied.
	for i := uint64(6); i <= 13; i++ {
		if err := log.StoreLog(put(i, fmt.Sprintf("k%02d", i), fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	b.ApplyBatch([]*raft.Log{put(13, "k13", "13")})
	if b, err = Open(dbB, raft.NewInmemStore(), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CatchUp(snaps); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("CatchUp of an FSM at 13 (one past its restore) over an empty log: %v, want kdb.ErrInvalid", err)
	}
}
