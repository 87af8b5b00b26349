package kvfsm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
)

// TestFSM_RestoreDirNotOurs: Restore works in a directory beside the
// store (DIR.restore), which Open removes as an interrupted Restore's
// leftover. A directory of that name that Restore did not make (an
// operator's copy of the store, say) is not removed: Open and Restore
// refuse, naming it, and its files stay. An empty one, or one that holds
// Restore's mark, is Restore's to remove.
func TestFSM_RestoreDirNotOurs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "node")
	db, f := open(t, dir)
	f.ApplyBatch([]*raft.Log{put(1, "a", "1")})
	snap := snapshotBytes(t, f)
	theirs := filepath.Join(dir+".restore", "backup.tar")
	if err := os.MkdirAll(filepath.Dir(theirs), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(theirs, []byte("an operator's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := f.Restore(io.NopCloser(bytes.NewReader(snap)))
	if !errors.Is(err, kdb.ErrInvalid) {
		t.Errorf("Restore with %s holding an operator's file: %v, want kdb.ErrInvalid", filepath.Dir(theirs), err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Fatalf("Restore removed a directory it did not make: %v", err)
	}
	if _, err := Open(db, nil, Options{}); !errors.Is(err, kdb.ErrInvalid) {
		t.Errorf("Open with %s holding an operator's file: %v, want kdb.ErrInvalid", filepath.Dir(theirs), err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Fatalf("Open removed a directory Restore did not make: %v", err)
	}
	// Moved away: Restore works, and leaves nothing behind.
	if err := os.RemoveAll(filepath.Dir(theirs)); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + ".restore"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Restore: %v, want %s gone", err, dir+".restore")
	}
	// A leftover of a Restore (its mark, the scratch store) and an empty
	// directory are removed by Open.
	for _, mark := range []bool{true, false} {
		if err := os.Mkdir(dir+".restore", 0o750); err != nil {
			t.Fatal(err)
		}
		if mark {
			if err := os.WriteFile(filepath.Join(dir+".restore", restoreMark), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir+".restore", "snapshot"), 0o750); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Open(db, nil, Options{}); err != nil {
			t.Fatalf("Open over a leftover (mark %v): %v", mark, err)
		}
		if _, err := os.Stat(dir + ".restore"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after Open over a leftover (mark %v): %v, want it gone", mark, err)
		}
	}
}
