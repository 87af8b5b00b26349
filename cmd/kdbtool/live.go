package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// The read-only commands (inspect, check, dump, export) take no lock: the
// process that owns the store may write and checkpoint while they read. A
// read that races with a checkpoint's in-place writes or journal GC can
// meet bytes that look damaged. So each command runs as a whole under
// retryLive: it notes the store's stamp before, and when the run found a
// problem, waits a moment and compares: if the store changed meanwhile (or
// the engine said ErrStale), the run is repeated from the new state. Only a
// problem found while nothing changed is reported. See docs/DESIGN.md,
// "Read-only opens of a live store".

// liveBudget bounds the time one command spends on runs spoiled by a
// writer's changes (a run that began before it ran to its end); liveSettle
// is the first wait before the stamp is compared again (it grows with each
// attempt, up to liveSettleMax), long enough for a checkpoint in progress to
// finish writing. A time, not a count: on a store checkpointed every few
// milliseconds, a long run is spoiled most times, and the chance that one
// fits between two checkpoints is per run.
const (
	liveBudget    = 20 * time.Second
	liveSettle    = 20 * time.Millisecond
	liveSettleMax = 500 * time.Millisecond
)

// storeStamp identifies what a writer changes: the checkpoint state
// (meta slots, db.redo) and every file's name, size and modification time
// (journal appends, db.free, segments created and removed).
type storeStamp struct {
	state pagefile.State
	files []fileStamp
}

type fileStamp struct {
	name  string
	size  int64
	mtime time.Time
}

func readStamp(dir string) (storeStamp, error) {
	var s storeStamp
	var err error
	if s.state, err = pagefile.ReadState(vfs.OS, dir); err != nil {
		return s, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return s, err
	}
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed meanwhile: the listing differs next time
			}
			return s, err
		}
		if fi.Mode().IsRegular() {
			s.files = append(s.files, fileStamp{e.Name(), fi.Size(), fi.ModTime()})
		}
	}
	return s, nil
}

func (s storeStamp) equal(o storeStamp) bool {
	return s.state == o.state && slices.Equal(s.files, o.files)
}

// retryLive runs op until it finds nothing wrong, or finds a problem while
// the store did not change, or changes spoiled its runs for liveBudget
// (then the last run's findings are returned). op reports whether its run
// was clean; its error is returned as it is, unless it is kdb.ErrStale
// (then op runs again); errInterrupted (SIGINT) is returned at once.
func retryLive[T any](dir string, op func() (out T, clean bool, err error)) (T, error) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		before, serr := readStamp(dir)
		out, clean, err := op()
		if (clean && err == nil) || serr != nil || time.Since(start) >= liveBudget || errors.Is(err, errInterrupted) {
			return out, err
		}
		if !errors.Is(err, kdb.ErrStale) && !errors.Is(err, pagefile.ErrStale) {
			time.Sleep(min(time.Duration(attempt)*liveSettle, liveSettleMax))
			after, aerr := readStamp(dir)
			if aerr != nil || after.equal(before) {
				return out, err
			}
		}
	}
}
