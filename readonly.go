package kdb

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// A ReadOnly handle takes no lock, so the process that writes the store may
// checkpoint while it reads: the checkpoint rewrites pages of db.data in
// place (pages the handle's older tree may still refer to) and removes
// journal segments the handle's older tree may still refer to. Such a read
// fails, and is then ErrStale, not ErrCorrupt: see docs/DESIGN.md,
// "Read-only opens of a live store".

// readOnlyOpenAttempts bounds how often Open retries a ReadOnly open that a
// concurrent checkpoint spoiled.
const readOnlyOpenAttempts = 20

// openReadOnly is Open with Options.ReadOnly: it reads the store's State
// (pagefile.ReadState), opens, and if the open failed (in any way: a replay
// over a page of a newer state can fail as a bad index operation too) while
// the State changed (a checkpoint ran), or a read met a page of a newer checkpoint
// (ErrStale), opens again from the new state, up to readOnlyOpenAttempts
// times. Damage that persists while nothing changes is reported as it is.
func openReadOnly(dir string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	for attempt := 1; ; attempt++ {
		before, serr := readOnlyStamp(o.FS, dir)
		db, err := open(dir, opts)
		if err == nil || serr != nil || errors.Is(err, ErrInvalid) {
			return db, err
		}
		if !errors.Is(err, ErrStale) {
			after, aerr := readOnlyStamp(o.FS, dir)
			if aerr == nil && after.equal(before) {
				return nil, err // nothing changed: the damage is real
			}
			err = fmt.Errorf("%w: %v", ErrStale, err)
		}
		if attempt == readOnlyOpenAttempts {
			return nil, fmt.Errorf("%w (after %d attempts)", err, attempt)
		}
		time.Sleep(time.Duration(attempt) * time.Millisecond)
	}
}

// roStamp is what openReadOnly compares: the page file's State, and the
// names in the directory (journal GC removes segments just after the meta
// slot is written, so a State read after that write does not see it).
type roStamp struct {
	state pagefile.State
	names []string
}

func readOnlyStamp(fsys vfs.FS, dir string) (roStamp, error) {
	var s roStamp
	var err error
	if s.state, err = pagefile.ReadState(fsys, dir); err != nil {
		return s, err
	}
	s.names, err = fsys.ReadDir(dir)
	return s, err
}

func (s roStamp) equal(o roStamp) bool { return s.state == o.state && slices.Equal(s.names, o.names) }

// maybeStale reports whether err may come from a read that raced with a
// checkpoint of another process: damaged-looking bytes, or a journal
// segment or record that is gone.
func maybeStale(err error) bool {
	return errors.Is(err, ErrStale) || errors.Is(err, ErrCorrupt) || errors.Is(err, journal.ErrNotFound) ||
		errors.Is(err, fs.ErrNotExist)
}

// staleOr returns err, or for a ReadOnly handle whose store changed since
// Open (pagefile.File.Changed) an ErrStale naming err. err is already
// mapped by wrapErr.
func (db *DB) staleOr(err error) error {
	if err == nil || !db.opts.ReadOnly || errors.Is(err, ErrStale) || !maybeStale(err) || !db.pf.Changed() {
		return err
	}
	return fmt.Errorf("%w: %v", ErrStale, err)
}
