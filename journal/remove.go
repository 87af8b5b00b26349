package journal

import (
	"fmt"
	"path/filepath"

	"github.com/kdb-project/kdb/vfs"
)

// RemoveBefore deletes the segments wholly before loc's segment (ids below
// loc.Segment), oldest first, or moves them into Options.ArchiveDir if it
// is set. It never removes the active (last) segment. Which segments may go
// is the caller's decision: the journal does not know what still refers to
// them. Each removal is made durable (directory fsync) before the next, so a
// crash leaves a contiguous run of segments. It returns the ids removed,
// also when it stops on an error. The archive directory and its missing
// parents are created durably (vfs.MkdirAllDurable) before the first move.
// A failed directory fsync fails the journal, and so does a failure to
// create the archive (it may have created directories whose entries are not
// durable, which a later call would find and trust); a failed remove or
// rename is returned and changes nothing; a
// failed close of a segment already removed is logged (Options.Logger),
// not returned: the removal stands and nothing depends on the descriptor.
func (j *Journal) RemoveBefore(loc Location) (removed []SegmentID, err error) {
	if j.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	j.rmMu.Lock()
	defer j.rmMu.Unlock()
	j.mu.Lock()
	if j.mu.closing || j.mu.closed {
		j.mu.Unlock()
		return nil, ErrClosed
	}
	if err := j.mu.err; err != nil {
		j.mu.Unlock()
		return nil, err
	}
	var victims []*segment
	for _, s := range j.mu.segs[:len(j.mu.segs)-1] {
		if s.id < loc.Segment {
			victims = append(victims, s)
		}
	}
	j.mu.Unlock()
	if len(victims) == 0 {
		return nil, nil
	}
	fsys := j.opts.FS
	archive := j.opts.ArchiveDir
	if archive != "" {
		// Each new directory's entry is synced into its parent before a
		// segment is moved in: else a power loss could lose the archive
		// directory, and the segments moved into it, with it.
		if err := vfs.MkdirAllDurable(fsys, archive, 0o750); err != nil {
			return nil, j.fail(fmt.Errorf("journal: create archive %s: %w", archive, err))
		}
	}
	for _, s := range victims {
		// From here a reader that finds the file gone (reopening it after
		// the descriptor cache closed it) reads a removed segment, not
		// damage.
		s.removing.Store(true)
		if archive != "" {
			if err := fsys.Rename(s.name, filepath.Join(archive, s.id.String())); err != nil {
				s.removing.Store(false)
				return removed, fmt.Errorf("journal: archive %s: %w", s.id, err)
			}
			if err := fsys.SyncDir(archive); err != nil {
				return removed, j.fail(fmt.Errorf("journal: archive %s: sync %s: %w", s.id, archive, err))
			}
		} else if err := fsys.Remove(s.name); err != nil {
			s.removing.Store(false)
			return removed, fmt.Errorf("journal: remove %s: %w", s.id, err)
		}
		j.mu.Lock()
		j.mu.segs = j.mu.segs[1:]
		kept := j.mu.skipped[:0:0]
		for _, d := range j.mu.skipped {
			if d.To.Segment > s.id {
				kept = append(kept, d)
			}
		}
		j.mu.skipped = kept
		j.mu.stats.Removed++
		j.mu.Unlock()
		cerr := s.close()
		removed = append(removed, s.id)
		err := fsys.SyncDir(j.dir)
		j.mu.Lock()
		j.mu.stats.DirSyncs++
		j.mu.Unlock()
		if err != nil {
			return removed, j.fail(fmt.Errorf("journal: remove %s: sync dir: %w", s.id, err))
		}
		if cerr != nil && j.opts.Logger != nil {
			// The segment's name is gone (durably: the directory sync
			// above) and the descriptor is released whatever close
			// returns, so nothing the journal holds depends on it: the
			// caller's GC (and the checkpoint it ran for) succeeded.
			j.opts.Logger.Warn("journal: close of a removed segment failed; nothing is lost", "segment", s.id, "err", cerr)
		}
	}
	return removed, nil
}
