package kdb_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestOptions_RefusedBeforeAnythingIsCreated: option values that used to
// open and fail later (a page too small for the longest key, after the
// store's files were made, so that no later open succeeded; a
// CheckpointDirtyPages whose byte limits overflowed, so that every write
// waited for ever; a negative SyncInterval, refused as an untyped
// journal error) are ErrInvalid at Open, and nothing is created.
func TestOptions_RefusedBeforeAnythingIsCreated(t *testing.T) {
	for name, o := range map[string]kdb.Options{
		"PageSize 1024":             {PageSize: 1024},
		"PageSize 2048":             {PageSize: 2048},
		"PageSize 131072":           {PageSize: 128 << 10},
		"SyncInterval -1":           {SyncInterval: -1},
		"SyncInterval -1, interval": {Sync: kdb.SyncInterval, SyncInterval: -time.Second},
		"MaxOpenSegments -1":        {MaxOpenSegments: -1},
		"RecoveryTimeTarget -1s":    {RecoveryTimeTarget: -time.Second},
		"CheckpointDirtyPages 2^50": {CheckpointDirtyPages: 1 << 50},
		"CheckpointDirtyPages 2^31": {CheckpointDirtyPages: 1 << 31},
	} {
		dir := filepath.Join(t.TempDir(), "db")
		if db, err := kdb.Open(dir, &o); !errors.Is(err, kdb.ErrInvalid) {
			if err == nil {
				_ = db.Close()
			}
			t.Errorf("%s: Open: %v, want ErrInvalid", name, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused Open created %s (%v)", name, dir, err)
		}
	}
	// The largest values accepted work.
	for name, o := range map[string]kdb.Options{
		"PageSize 4096":             {PageSize: 4096},
		"CheckpointDirtyPages 2^30": {CheckpointDirtyPages: 1 << 30},
	} {
		db, err := kdb.Open(filepath.Join(t.TempDir(), "db"), &o)
		if err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
		done := make(chan error, 1)
		go func() { done <- db.Put("t", []byte("k"), []byte("v")) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Put: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Put still waiting after 10 s", name)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOptions_ArchiveDirChecked: an ArchiveDir that names one of the
// store's files, an existing file, holds a NUL byte or leads out of the
// store through a link is ErrInvalid at Open (it opened, and then every
// checkpoint failed with an untyped error, or archived outside the store).
func TestOptions_ArchiveDirChecked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	db, err := kdb.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"db.data", "lock", "db-1.log", "db-1.log/x", "db.free/old", "db.free.tmp", "db-7.log.tmp", "db.data.broken", "notes", "a\x00b", "out", "out/x", ".."} {
		db, err := kdb.Open(dir, &kdb.Options{ArchiveDir: a})
		if !errors.Is(err, kdb.ErrInvalid) {
			if err == nil {
				_ = db.Close()
			}
			t.Errorf("ArchiveDir %q: Open: %v, want ErrInvalid", a, err)
		}
	}
	for _, a := range []string{"archive", "db-archive", "old/segments"} {
		db, err := kdb.Open(dir, &kdb.Options{ArchiveDir: a})
		if err != nil {
			t.Fatalf("ArchiveDir %q: Open: %v", a, err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// On another file system the link check does not apply, the rest does.
	mem := vfs.NewMem()
	if db, err := kdb.Open("/db", &kdb.Options{FS: mem, ArchiveDir: "db.redo"}); !errors.Is(err, kdb.ErrInvalid) {
		if err == nil {
			_ = db.Close()
		}
		t.Errorf("MemFS, ArchiveDir db.redo: %v, want ErrInvalid", err)
	}
}

// TestCompact_ValuesLargerThanTheReopenersRecords: values kept in the
// journal by a store with large segments, reopened with segments too small
// to journal them again. Compaction's moves of them failed every
// Checkpoint and Compact ("value record ...: split the batch"); it now
// leaves them (and their segments) where they are and moves the rest.
func TestCompact_ValuesLargerThanTheReopenersRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	big[0] = 7
	if err := db.Put("keep", []byte("big"), big); err != nil { // live, in the first segment
		t.Fatal(err)
	}
	for i := range 20 { // dead: overwritten
		big[0] = byte(i)
		if err := db.Put("tmp", []byte("x"), big); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for round := range 3 {
		if _, err := db.Compact(); err != nil {
			t.Fatalf("Compact: %v", err)
		}
		for i := range 100 {
			if err := db.Put("small", []byte{byte(round), byte(i)}, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Checkpoint(); err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
	}
	if v, err := db.Get("keep", []byte("big")); err != nil || len(v) != 1<<20 || v[0] != 7 {
		t.Fatalf("the value left in place: %d bytes, %v", len(v), err)
	}
	if _, err := db.Check(); err != nil {
		t.Fatal(err)
	}
}
