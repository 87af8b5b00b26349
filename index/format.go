package index

import "github.com/kdb-project/kdb/pagefile"

// Page types owned by the index: FORMAT.md §3.1. These values are part
// of the on-disk format; changing one requires a FormatVersion bump.
const (
	pageBranch   pagefile.PageType = 16 // B-tree interior node
	pageLeaf     pagefile.PageType = 17 // B-tree leaf node
	pageOverflow pagefile.PageType = 18 // one link of a large value's chain
	pagePending  pagefile.PageType = 19 // one link of the pending-free list chain
	pageRoot     pagefile.PageType = 20 // the index root page (pagefile Meta.Root)
)

// FormatVersion is the version of the index page formats, stored in the root
// page: FORMAT.md §3.6.
const FormatVersion = 1

// Node header and slot array: FORMAT.md §3.2.
const (
	nodeHeaderSize = 4
	offNodeCount   = 0 // uint16: number of cells
	offNodeFlags   = 2 // uint16: reserved, zero
	slotSize       = 2 // uint16 per cell: offset of the cell within the payload
)

// Leaf cell: FORMAT.md §3.3.
const (
	leafCellHeader  = 7
	offLeafKeyLen   = 0 // uint16: key length
	offLeafKind     = 2 // uint8: valueInline or valueOverflow
	offLeafValueLen = 3 // uint32: value length (whole value, also for overflow)
	valueInline     = 0 // value bytes follow the key
	valueOverflow   = 1 // an 8-byte first overflow PageID follows the key
	overflowRefSize = 8
)

// Branch cell: FORMAT.md §3.4.
const (
	branchCellHeader = 10
	offBranchChild   = 0 // uint64: child PageID
	offBranchKeyLen  = 8 // uint16: separator length (0 for cell 0)
)

// Chain page (overflow values and the pending-free list): FORMAT.md §3.5.
const (
	chainHeaderSize = 12
	offChainNext    = 0 // uint64: next PageID in the chain, 0 at the end
	offChainLen     = 8 // uint32: bytes of data on this page
)

// Root page: FORMAT.md §3.6.
const (
	rootMagic           = 0x5844494b // "KIDX" little-endian
	offRootMagic        = 0          // uint32: rootMagic
	offRootVersion      = 4          // uint16: FormatVersion
	offRootFlags        = 6          // uint16: reserved, zero
	offRootCatalog      = 8          // uint64: catalog tree root PageID (0 = no trees)
	offRootPendingHead  = 16         // uint64: first page of the pending-free chain (0 = none)
	offRootPendingCount = 24         // uint64: number of page IDs in the pending-free chain
	rootSize            = 32
)

// Catalog entry (the value stored under a tree's name): FORMAT.md §3.7.
const (
	catalogEntrySize = 16
	offCatalogRoot   = 0 // uint64: tree root PageID (0 = empty tree)
	offCatalogCount  = 8 // uint64: number of keys in the tree
)

// MaxValueSize is the largest value a tree accepts (FORMAT.md §3.3).
// Values that do not fit inline in a leaf cell go to an overflow chain.
const MaxValueSize = 16 << 20

// minPayload is the smallest page payload the index works with.
const minPayload = 256

// limits are the size limits derived from the page payload size
// (FORMAT.md §3.3).
type limits struct {
	payload int // bytes of a page's payload
	maxCell int // largest cell, so that at least 4 cells fit a node
	maxKey  int // largest key (also fits a branch cell)
	minFill int // a node smaller than this (encoded) is merged if possible
}

func newLimits(payload int) limits {
	quarter := (payload - nodeHeaderSize) / 4
	maxCell := quarter - slotSize
	return limits{
		payload: payload,
		maxCell: maxCell,
		maxKey:  maxCell - leafCellHeader - overflowRefSize,
		minFill: payload / 4,
	}
}

// maxName is the longest tree name: its catalog entry fits a cell inline.
func (l limits) maxName() int { return l.maxCell - leafCellHeader - catalogEntrySize }

// inline reports whether a key/value pair is stored inline in its leaf cell.
func (l limits) inline(klen, vlen int) bool {
	return leafCellHeader+klen+vlen <= l.maxCell
}
