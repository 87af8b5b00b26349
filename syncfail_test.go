package kdb_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// TestSync_FailureFailsTheHandle: a failed fdatasync in DB.Sync is fatal
// for the handle, as every fsync error is: Sync returns it, Err says the
// handle failed, and every later write is refused. (The journal may have
// dropped the unsynced pages; a retried sync would then succeed without
// them, and a write acknowledged after it would sit on a hole.)
func TestSync_FailureFailsTheHandle(t *testing.T) {
	var armed atomic.Bool
	efs := errfs.Wrap(vfs.NewMem(), func(op vfs.Op, path string, _ int) error {
		if armed.Load() && op == vfs.OpSync && strings.Contains(path, "db-") {
			return errfs.ErrInjected
		}
		return nil
	})
	opts := misuseOpts()
	opts.FS = efs
	opts.Sync = kdb.SyncInterval
	opts.SyncInterval = time.Hour // nothing syncs but Sync
	db, err := kdb.Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := db.Sync(); err == nil {
		t.Fatal("Sync with the journal's fdatasync failing: nil")
	}
	armed.Store(false)
	if err := db.Err(); !errors.Is(err, kdb.ErrFailed) {
		t.Errorf("Err after a failed Sync: %v, want ErrFailed", err)
	}
	if err := db.Put("t", []byte("k2"), []byte("v")); !errors.Is(err, kdb.ErrFailed) {
		t.Errorf("Put after a failed Sync: %v, want ErrFailed", err)
	}
	if err := db.Sync(); !errors.Is(err, kdb.ErrFailed) {
		t.Errorf("Sync again after a failed Sync: %v, want ErrFailed (no retry)", err)
	}
}
