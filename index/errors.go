package index

import "errors"

// Errors returned by the index. Errors about bytes on disk wrap ErrCorrupt
// and name the page (and key or offset) concerned.
var (
	// ErrCorrupt reports an index page or structure that fails validation.
	// When the cause is a page that fails its pagefile checksum, the error
	// also wraps pagefile.ErrCorrupt.
	ErrCorrupt = errors.New("index: corrupt")
	// ErrLeaked marks a Check error whose every problem is a page neither
	// reachable nor free (intact, but in no tree and not in the free
	// list): nothing of the index is lost, and a free-list rebuild by a
	// scan gives the pages back. Such an error wraps ErrCorrupt too.
	ErrLeaked = errors.New("index: leaked pages only")
	// ErrExists is returned by CreateTree for a name already in the catalog.
	ErrExists = errors.New("index: tree exists")
	// ErrNotFound is returned by DropTree for a name not in the catalog.
	ErrNotFound = errors.New("index: tree not found")
	// ErrKeyTooLarge is returned for a key (or tree name) longer than
	// Store.MaxKeySize.
	ErrKeyTooLarge = errors.New("index: key too large")
	// ErrValueTooLarge is returned for a value longer than MaxValueSize.
	ErrValueTooLarge = errors.New("index: value too large")
	// ErrTxReadOnly is returned by a mutation attempted in a View.
	ErrTxReadOnly = errors.New("index: read-only transaction")
	// ErrTxClosed is returned when a Tx, Tree or Cursor is used after its
	// View or Update returned.
	ErrTxClosed = errors.New("index: transaction closed")
	// ErrTreeDropped is returned by a Tree handle whose tree was dropped.
	ErrTreeDropped = errors.New("index: tree dropped")
	// ErrPageSize is returned by Open for a page file whose payload is too
	// small to hold index nodes.
	ErrPageSize = errors.New("index: page size too small")
)

// ErrVersionMismatch is returned by Open for an index root page of an
// unknown FormatVersion.
var ErrVersionMismatch = errors.New("index: format version mismatch")

// leakedOnly is a Check error made only of leaked pages: errors.Is finds
// ErrLeaked, and the ErrCorrupt it wraps.
type leakedOnly struct{ error }

func (e leakedOnly) Is(target error) bool { return target == ErrLeaked }
func (e leakedOnly) Unwrap() error        { return e.error }
