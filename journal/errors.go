package journal

import (
	"errors"
	"fmt"
)

// Errors. Errors about bytes on disk wrap ErrCorrupt (or ErrTornTail inside
// the decoders) and name the segment and offset.
var (
	// ErrCorrupt reports damaged journal bytes: a bad checksum, a broken
	// chain or batch, an impossible length, a missing or unsealed segment.
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrOtherStore (with ErrCorrupt) marks a segment whose header names
	// another store than Options.StoreID.
	ErrOtherStore = errors.New("journal: segment of another store")
	// ErrTornTail is returned by the decoders when a frame runs past the end
	// of the available bytes. Open turns a torn tail of the last segment into
	// a truncation; anywhere else it is reported as ErrCorrupt.
	ErrTornTail = errors.New("journal: torn tail")
	// ErrVersionMismatch reports a segment header with an unknown format version.
	ErrVersionMismatch = errors.New("journal: format version mismatch")
	// ErrClosed is returned by calls on a closed Journal.
	ErrClosed = errors.New("journal: closed")
	// ErrReadOnly is returned by writing calls on a Journal opened ReadOnly.
	ErrReadOnly = errors.New("journal: read-only")
	// ErrRecordTooLarge is returned by Append for a payload larger than
	// Options.MaxRecordSize. It does not fail the journal.
	ErrRecordTooLarge = errors.New("journal: record too large")
	// ErrBatchTooLarge is returned by Append for a batch that cannot fit in
	// one segment. It does not fail the journal.
	ErrBatchTooLarge = errors.New("journal: batch too large for a segment")
	// ErrReservedType is returned by Append for a RecordType the journal
	// reserves for itself (MinReservedType and above).
	ErrReservedType = errors.New("journal: reserved record type")
	// ErrNotFound is returned for a Location that is not in the journal: in a
	// removed or unknown segment, or at or past the tail.
	ErrNotFound = errors.New("journal: no record at location")
	// ErrBadOptions is returned by Open for invalid Options.
	ErrBadOptions = errors.New("journal: invalid options")
)

// errAboveMax is the ErrCorrupt of a frame longer than the opener may read
// (Options.readMax) yet within its segment: written with a larger bound,
// or damaged, but never a torn tail.
var errAboveMax = fmt.Errorf("%w", ErrCorrupt)
