package kdb

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// TestImport_TwoAtOnceIntoOneDir: two Imports into the same directory at
// once, on the OS file system (real flock locks), round after round:
// exactly one succeeds, the other fails at once with the clear error
// (ErrLocked: an import into the directory is running; or ErrNotEmpty: it
// holds the store now), neither deletes the other's files, and the store
// imported is whole; nothing is left beside it.
func TestImport_TwoAtOnceIntoOneDir(t *testing.T) {
	t.Parallel()
	snap, want := importSnapshot(t)
	rounds := 40
	if testing.Short() {
		rounds = 15
	}
	for round := range rounds {
		parent := t.TempDir()
		dir := filepath.Join(parent, "dst")
		if round%2 == 1 {
			if err := os.Mkdir(dir, 0o750); err != nil { // an existing empty directory
				t.Fatal(err)
			}
		}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  [2]error
		)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = Import(dir, bytes.NewReader(snap), nil)
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrLocked) || errors.Is(err, ErrNotEmpty):
			default:
				t.Fatalf("round %d: import %d failed with %v; want ErrLocked or ErrNotEmpty", round, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d imports succeeded (%v, %v); want exactly one", round, ok, errs[0], errs[1])
		}
		requireImported(t, vfs.OS, dir, want)
		names, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 {
			t.Fatalf("round %d: %v beside the store; want only dst", round, names)
		}
	}
}
