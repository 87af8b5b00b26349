package pagefile

import "time"

// Free-list paths of a Report.
const (
	FreeListTrusted = "trusted" // db.free intact and matching the meta
	FreeListScanned = "scanned" // rebuilt by a scan of every page header
	FreeListCreated = "created" // a new store
)

// Report says what Open did: which meta slot won, whether db.redo was
// applied, which free-list path was taken and why, and how long each phase
// took.
type Report struct {
	Created bool // Open created a new store

	MetaSlot int          // the meta slot that won (0 or 1), after redo
	MetaSeq  uint64       // its sequence
	MetaID   CheckpointID // its checkpoint ID

	RedoApplied bool   // a complete db.redo at least as new as the meta was applied (or overlaid, ReadOnly)
	RedoPages   int    // page images in it, the meta slot image included
	RedoIgnored string // why a present db.redo was not applied ("" if applied or empty)
	// RedoBasePageCount: with RedoApplied, the page count of the meta
	// db.redo follows (the newest intact slot before it). db.data held
	// that many pages before the interrupted checkpoint began (a
	// checkpoint never shrinks it), and db.redo holds only the pages that
	// checkpoint wrote: a db.data shorter than this was cut, and applying
	// db.redo cannot make it whole (Open refuses it; ReadOnly overlays it
	// and reports this for Inspect).
	RedoBasePageCount uint64

	FreeListPath string // FreeListTrusted, FreeListScanned or FreeListCreated
	Reason       string // why the scan was taken ("" when trusted or created)
	// FreeListFile names the file the trusted free list came from: db.free,
	// or db.free.prev when a crash struck a checkpoint after its db.free was
	// renamed into place but before its meta was durable.
	FreeListFile string
	PagesScanned uint64 // page headers read by the scan
	FreePages    uint64 // pages on the free list after Open
	// Damaged lists the pages the scan could not read (checksum or ID
	// mismatch, at most maxDamaged of them): neither known free nor known
	// in use, they are left off the free list, never reused, until the
	// caller tells them apart by what its index reaches (recovery frees
	// the unreachable ones, File.Free, and refuses the store if its index
	// reaches one). Empty unless FreeListPath is FreeListScanned.
	Damaged []DamagedPage

	MetaDuration     time.Duration // header and meta slots
	RedoDuration     time.Duration // reading (and applying) db.redo
	FreeListDuration time.Duration // loading db.free or scanning
	TotalDuration    time.Duration
}

// DamagedPage is a page the free-list scan could not read.
type DamagedPage struct {
	ID  PageID
	Err error // wraps ErrCorrupt, naming the file and offset
}
