package kvfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
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
	f, err := Open(db)
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
