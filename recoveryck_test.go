package kdb_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// crashedWithJournal returns a store on a MemFS whose last 200 puts are
// only in the journal (closed without a checkpoint, as a crash between
// checkpoints leaves it), and the options that keep further checkpoints
// from happening on their own.
func crashedWithJournal(t *testing.T) (*vfs.MemFS, kdb.Options) {
	t.Helper()
	mem := vfs.NewMem()
	o := kdb.Options{FS: mem, SegmentSize: 64 << 10, CheckpointInterval: -1,
		CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20}
	first := o
	first.NoCheckpointOnClose = true
	db, err := kdb.Open("/db", &first)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := db.Put("t", fmt.Appendf(nil, "k%04d", i), make([]byte, 100+i%3*400)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return mem, o
}

// waitRecoveryCheckpoint waits until the checkpoint recovery asked for has
// run, or the handle failed.
func waitRecoveryCheckpoint(t *testing.T, db *kdb.DB) kdb.RecoveryReport {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := db.Recovery()
		if r.Checkpointed || db.Err() != nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatal("the recovery checkpoint did not run")
		}
		time.Sleep(time.Millisecond)
	}
}

func requireKeys(t *testing.T, db *kdb.DB, n int) {
	t.Helper()
	for i := range n {
		v, err := db.Get("t", fmt.Appendf(nil, "k%04d", i))
		if err != nil || len(v) != 100+i%3*400 {
			t.Fatalf("key %d: %d bytes, %v", i, len(v), err)
		}
	}
}

func TestOpen_RecoveryCheckpointRunsInBackground(t *testing.T) {
	mem, o := crashedWithJournal(t)
	db, err := kdb.Open("/db", &o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := db.Recovery(); r.RecordsReplayed < 200 {
		t.Fatalf("replayed %d records, want at least 200", r.RecordsReplayed)
	}
	requireKeys(t, db, 200) // served while the checkpoint may still run
	r := waitRecoveryCheckpoint(t, db)
	if !r.Checkpointed || r.CheckpointTime <= 0 || db.Stats().Checkpoints != 1 {
		t.Fatalf("after the recovery checkpoint: %+v, %d checkpoints (err %v)", r, db.Stats().Checkpoints, db.Err())
	}
	// It made the next crash cheap: a power loss now replays nothing and
	// trusts the free list.
	img := mem.CrashClone(vfs.CrashOptions{})
	o.FS = img
	db2, err := kdb.Open("/db", &o)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if r := db2.Recovery(); r.RecordsReplayed != 0 || r.FreeListPath != "trusted" {
		t.Fatalf("open after the recovery checkpoint: %+v", r)
	}
	requireKeys(t, db2, 200)
}

func TestOpen_CheckpointBeforeServing(t *testing.T) {
	_, o := crashedWithJournal(t)
	o.CheckpointBeforeServing = true
	db, err := kdb.Open("/db", &o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := db.Recovery(); !r.Checkpointed || r.RecordsReplayed < 200 || db.Stats().Checkpoints != 1 {
		t.Fatalf("report %+v, %d checkpoints", r, db.Stats().Checkpoints)
	}
	requireKeys(t, db, 200)
}

// A failed background recovery checkpoint fails the handle like any other
// checkpoint, and loses nothing.
func TestOpen_RecoveryCheckpointFailureFailsHandle(t *testing.T) {
	mem, o := crashedWithJournal(t)
	o.FS = errfs.Wrap(mem, func(op vfs.Op, path string, n int) error {
		if op.Mutating() && strings.Contains(path, "db.free") {
			return errfs.ErrInjected
		}
		return nil
	})
	db, err := kdb.Open("/db", &o)
	if err != nil {
		t.Fatal(err)
	}
	waitRecoveryCheckpoint(t, db)
	if err := db.Err(); !errors.Is(err, kdb.ErrFailed) {
		t.Fatalf("Err after a failed recovery checkpoint: %v", err)
	}
	if err := db.Put("t", []byte("x"), []byte("y")); !errors.Is(err, kdb.ErrFailed) {
		t.Fatalf("Put on the failed handle: %v", err)
	}
	if err := db.Close(); err == nil {
		t.Fatal("Close of a failed handle returned nil")
	}
	o.FS = mem
	db2, err := kdb.Open("/db", &o)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	requireKeys(t, db2, 200)
}
