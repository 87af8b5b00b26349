package kdb

import (
	"errors"
	"fmt"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/recovery"
)

// Errors. Use errors.Is: every error the package returns wraps at most one
// of these, plus the lower layer's own error for detail.
var (
	// ErrCorrupt reports damaged bytes on disk; the message names the file
	// and offset. It wraps the journal's, page file's or index's ErrCorrupt.
	ErrCorrupt = errors.New("kdb: corrupt")
	// ErrVersionMismatch reports a file written by an unknown format version.
	ErrVersionMismatch = errors.New("kdb: format version mismatch")
	// ErrLocked is returned by Open when the store is held by another
	// handle: the message says whether of this process or of another one.
	ErrLocked = errors.New("kdb: store is locked")
	// ErrClosed is returned by calls on a closed DB.
	ErrClosed = errors.New("kdb: closed")
	// ErrReadOnly is returned by writing calls on a DB opened ReadOnly.
	ErrReadOnly = errors.New("kdb: read-only")
	// ErrFailed is returned by every call once a write or fsync failed: the
	// handle is dead and must be closed and the store reopened. Nothing is
	// retried and nothing unacknowledged is assumed written.
	ErrFailed = errors.New("kdb: handle failed")
	// ErrNotFound is returned by Get for a missing key or index.
	ErrNotFound = errors.New("kdb: not found")
	// ErrInvalid reports bad input from the caller: an empty or oversized
	// key or index name (to a read as to a write: a read of a key no write
	// can store is the caller's bug, not a miss), an oversized value or
	// batch (MaxValueSize, Options.SegmentSize), bad Options, or a call
	// made where it would wait for itself (inside an Update's or a
	// Submit's function, see DB.Update). An empty value is valid.
	ErrInvalid = errors.New("kdb: invalid argument")
	// ErrStale is returned by a DB opened ReadOnly when the process that
	// writes the store checkpointed while a read ran, so that the read met
	// pages or journal segments of a newer state: not damage. Close the
	// handle and open it again (Open itself retries).
	ErrStale = errors.New("kdb: the store changed under the read-only handle")
)

// wrapErr maps an error of a lower layer onto the root's sentinels, adding
// context once. Errors that already carry a root sentinel pass through.
func wrapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrCorrupt, ErrVersionMismatch, ErrLocked, ErrClosed, ErrReadOnly, ErrFailed, ErrNotFound, ErrInvalid, ErrStale} {
		if errors.Is(err, s) {
			return err
		}
	}
	switch {
	case errors.Is(err, pagefile.ErrStale):
		return fmt.Errorf("%w: %w", ErrStale, err)
	case errors.Is(err, recovery.ErrLocked):
		return fmt.Errorf("%w: %w", ErrLocked, err)
	case errors.Is(err, journal.ErrCorrupt), errors.Is(err, journal.ErrTornTail),
		errors.Is(err, pagefile.ErrCorrupt), errors.Is(err, index.ErrCorrupt), errors.Is(err, recovery.ErrCorrupt):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	case errors.Is(err, journal.ErrVersionMismatch), errors.Is(err, pagefile.ErrVersionMismatch),
		errors.Is(err, index.ErrVersionMismatch):
		return fmt.Errorf("%w: %w", ErrVersionMismatch, err)
	case errors.Is(err, journal.ErrReadOnly), errors.Is(err, pagefile.ErrReadOnly):
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	case errors.Is(err, journal.ErrClosed), errors.Is(err, pagefile.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, index.ErrKeyTooLarge), errors.Is(err, index.ErrValueTooLarge),
		errors.Is(err, journal.ErrRecordTooLarge), errors.Is(err, journal.ErrBatchTooLarge):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}
