package recovery

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// Errors of the steps before the replay. The caller maps them onto its own
// sentinels (the root: ErrLocked, ErrCorrupt).
var (
	// ErrLocked: the store's lock file is held by another handle. The
	// error also wraps vfs.ErrLocked, whose message names the holder (this
	// process or another one).
	ErrLocked = errors.New("recovery: store is locked")
	// ErrCorrupt: the store's files contradict each other in a way no
	// crash leaves (a lost db.data beside its journal). Damage inside one
	// file is that package's ErrCorrupt (pagefile, index, journal).
	ErrCorrupt = errors.New("recovery: corrupt")
)

// ReplayPosition is the replay position of a checkpoint: the location of
// the last journal record its pages reflect (zero: none, nothing was ever
// checkpointed), from the plain integers the meta slot keeps. Replay starts
// after it. This is the one place that reads the meta's replay fields.
func ReplayPosition(m pagefile.Meta) journal.Location {
	return journal.Location{Segment: journal.SegmentID(m.ReplaySegment), Offset: int64(m.ReplayOffset)}
}

// lock creates dir if needed and takes its lock (the lock file and the
// directory, vfs.LockStore). The lock is taken
// before anything of the store is read, so that two handles never recover
// the same store at once.
func lock(fsys vfs.FS, dir string) (vfs.Locker, error) {
	if err := createDir(fsys, dir); err != nil {
		return nil, fmt.Errorf("recovery: create %s: %w", dir, err)
	}
	lk, err := vfs.LockStore(fsys, dir)
	if err != nil {
		if errors.Is(err, vfs.ErrLocked) {
			return nil, fmt.Errorf("%w: %w", ErrLocked, err)
		}
		return nil, fmt.Errorf("recovery: lock %s: %w", dir, err)
	}
	return lk, nil
}

// createDir creates dir and its missing parents, durably
// (vfs.MkdirAllDurable), so that a store created under a new directory tree
// does not vanish with it in a power loss.
func createDir(fsys vfs.FS, dir string) error { return vfs.MkdirAllDurable(fsys, dir, 0o750) }

// checkNotLost decides whether the page file may create a new store in
// dir: only where no store exists yet. A directory without db.data that
// holds what only an existing store leaves (a journal segment, db.free,
// db.free.prev, db.redo) is a store whose page file was lost: ErrCorrupt
// naming what is missing and what remains, never a new, empty store over
// the old journal.
//
// The rule is sound for a crash during creation because creation writes
// db.data first (header and meta, written to db.data.tmp, synced, renamed,
// the directory synced) and every other file only after it is durable: a
// crash before that leaves at most the lock file and db.data.tmp, which
// count for nothing, and the store is created afresh.
func checkNotLost(fsys vfs.FS, dir string) error {
	data := filepath.Join(dir, "db.data")
	exists, err := vfs.Exists(fsys, data)
	if err != nil {
		return fmt.Errorf("recovery: %s: %w", dir, err)
	}
	if exists {
		return nil
	}
	names, err := fsys.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recovery: %s: %w", dir, err)
	}
	var found []string
	var segs []journal.SegmentID
	for _, n := range names {
		if id, ok := journal.ParseSegmentName(n); ok {
			segs = append(segs, id)
		} else if n == "db.free" || n == "db.free.prev" || n == "db.redo" {
			found = append(found, n)
		}
	}
	switch {
	case len(segs) == 1:
		found = append([]string{segs[0].String()}, found...)
	case len(segs) > 1:
		slices.Sort(segs)
		found = append([]string{fmt.Sprintf("%d journal segments %s to %s", len(segs), segs[0], segs[len(segs)-1])}, found...)
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s is missing, but %s remain: an existing store lost its page file (this is not a new store; kdbtool check and repair say what can be done)",
		ErrCorrupt, data, strings.Join(found, ", "))
}
