package kdb_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// readingHandler is a slog handler that reads the DB on every record (its
// Err, Stats and Recovery), as an alerting handler would.
type readingHandler struct {
	db   atomic.Pointer[kdb.DB]
	seen atomic.Int32
}

func (h *readingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *readingHandler) Handle(_ context.Context, r slog.Record) error {
	if db := h.db.Load(); db != nil {
		_ = db.Err()
		_ = db.Stats()
		_ = db.Recovery()
		if r.Level >= slog.LevelError {
			h.seen.Add(1)
		}
	}
	return nil
}
func (h *readingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *readingHandler) WithGroup(string) slog.Handler      { return h }

// TestLogger_MayReadTheDB: a Logger whose handler reads the DB (Err,
// Stats, Recovery) when an event is logged. The handle's failure was
// logged under the DB's lock, and the journal's under its own: the
// handler's call blocked on the lock its caller held, and the write that
// failed, every later one and Close hung (an outside tester, 2026-12-07).
func TestLogger_MayReadTheDB(t *testing.T) {
	cases := []struct {
		name string
		// fail is the operation the injected sync failure fails.
		fail func(db *kdb.DB) error
		path string
	}{
		{"journal sync", func(db *kdb.DB) error { return db.Put("a", []byte("k2"), []byte("v")) }, ".log"},
		{"db.data sync at a checkpoint", func(db *kdb.DB) error {
			if err := db.Put("a", []byte("k2"), []byte("v")); err != nil {
				return err
			}
			return db.Checkpoint()
		}, "db.data"},
		{"a deferred function's panic", func(db *kdb.DB) error {
			if err := db.Defer(func(*kdb.Txn) error { panic("boom") }, nil); err != nil {
				return err
			}
			return db.Sync()
		}, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var failSyncs atomic.Bool
			fsys := errfs.Wrap(vfs.NewMem(), errfs.OnPath(tc.path, func(op vfs.Op, _ string, _ int) error {
				if failSyncs.Load() && op == vfs.OpSync {
					return errfs.ErrInjected
				}
				return nil
			}))
			h := &readingHandler{}
			db, err := kdb.Open("/db", &kdb.Options{FS: fsys, Logger: slog.New(h)})
			if err != nil {
				t.Fatal(err)
			}
			h.db.Store(db)
			if err := db.Put("a", []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			failSyncs.Store(true)
			ferr := within(t, 10*time.Second, "the failing call (an event logged under a lock the handler's read takes?)", func() error { return tc.fail(db) })
			if tc.path != "no such file" && !errors.Is(ferr, kdb.ErrFailed) && !errors.Is(ferr, errfs.ErrInjected) {
				t.Errorf("the failing call: %v, want the injected failure", ferr)
			}
			if h.seen.Load() == 0 {
				t.Error("nothing logged at level Error: the case tests nothing")
			}
			_ = within(t, 10*time.Second, "Close", db.Close)
		})
	}
}
