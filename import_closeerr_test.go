package kdb

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// eofHook is an io.Reader that calls onEOF the first time the reader it
// wraps returns io.EOF.
type eofHook struct {
	r     io.Reader
	onEOF func()
	done  bool
}

func (e *eofHook) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF && !e.done {
		e.done = true
		e.onEOF()
	}
	return n, err
}

// TestImport_CloseSyncFailureLeavesNoStore: with Options{Sync:
// UnsafeSyncNever} (which Import passes on to the store it builds) the
// import's writes are never synced; the closing checkpoint and journal
// sync of the store's Close are what make it durable. When those syncs fail
// (every sync in the temporary directory from the end of the snapshot on),
// Import returns an error wrapping the fault and leaves no store at dir and
// no temporary directory beside it: it must not rename a store that was
// never made durable into place and report success. An Import run again
// without the fault then succeeds.
func TestImport_CloseSyncFailureLeavesNoStore(t *testing.T) {
	snap, want := importSnapshot(t)
	mem := vfs.NewMem()
	fsys := errfs.Wrap(mem)
	var failed atomic.Int64
	r := &eofHook{r: bytes.NewReader(snap), onEOF: func() {
		// importFrom reads io.EOF once it has checked the trailer: what
		// follows is its last commit (not synced under UnsafeSyncNever)
		// and the Close.
		fsys.AddRule(func(op vfs.Op, path string, _ int) error {
			if (op == vfs.OpSync || op == vfs.OpSyncDir) && strings.Contains(path, "/.dst"+importTempInfix) {
				failed.Add(1)
				return errfs.ErrInjected
			}
			return nil
		})
	}}
	rep, err := Import("/top/dst", r, &Options{FS: fsys, Sync: UnsafeSyncNever})
	if !r.done {
		t.Fatalf("Import never read the snapshot's end (%v)", err)
	}
	if failed.Load() == 0 {
		t.Fatalf("no sync in the temporary directory after the snapshot's end (Import: %v, %v): the test injected nothing", err, fsys)
	}
	if err == nil || !errors.Is(err, errfs.ErrInjected) {
		t.Errorf("Import whose Close could not sync: %v (report %+v); want an error wrapping %v", err, rep, errfs.ErrInjected)
	}
	if exists, xerr := vfs.Exists(mem, "/top/dst"); xerr != nil || exists {
		t.Errorf("after an Import whose Close failed: /top/dst exists %v (%v); want no store there", exists, xerr)
	}
	if left := tempDirsOf(t, mem, "/top", "dst"); len(left) != 0 {
		t.Errorf("after an Import whose Close failed: %v left in /top", left)
	}

	if _, err := Import("/top/dst", bytes.NewReader(snap), &Options{FS: mem, Sync: UnsafeSyncNever}); err != nil {
		t.Fatalf("Import again without the fault: %v", err)
	}
	requireImported(t, mem, "/top/dst", want)
}
