package pagefile

// FormatVersion is the version of the page-file format written in the
// db.data header, db.free and db.redo. FORMAT.md §2.
const FormatVersion = 1

// Layout of db.data: FORMAT.md §2.1. Page i lives at
// byte offset i*pageSize. Page 0 holds the file header, pages 1 and 2 the two
// metadata slots; data pages start at FirstDataPage.
const (
	headerPage   = 0 // page index of the file header
	metaSlotPage = 1 // page index of meta slot 0; slot 1 follows
	numMetaSlots = 2

	// FirstDataPage is the first allocatable page ID.
	FirstDataPage PageID = 3

	minPageSize     = 512
	maxPageSize     = 65536
	defaultPageSize = 4096
)

// File header (page 0): FORMAT.md §2.2.
const (
	hdrChecksum = 0  // uint64: xxhash64 of bytes [8, hdrSize)
	hdrMagic    = 8  // [8]byte: "KDBDATA\x00"
	hdrVersion  = 16 // uint32: FormatVersion
	hdrPageSize = 20 // uint32: page size in bytes
	hdrStoreID  = 24 // [16]byte: random store ID
	hdrSize     = 64 // bytes [40, 64) are zero
)

var dataMagic = [8]byte{'K', 'D', 'B', 'D', 'A', 'T', 'A', 0}

// Meta slot (pages 1 and 2): FORMAT.md §2.3.
const (
	metaChecksum  = 0   // uint64: xxhash64 of bytes [8, metaFixedSize+appLen)
	metaMagicOff  = 8   // uint32: metaMagic
	metaSlot      = 12  // uint16: slot number (0 or 1), must equal the position
	metaAppLen    = 14  // uint16: length of App, <= MaxAppMeta
	metaSeq       = 16  // uint64: checkpoint sequence
	metaRand      = 24  // [8]byte: checkpoint random part
	metaPageSize  = 32  // uint32: page size, equals the header's
	metaPageCount = 40  // uint64: exclusive upper bound of page IDs
	metaRoot      = 48  // uint64: index catalog root page (0 = none)
	metaReplaySeg = 56  // uint64: journal replay segment
	metaReplayOff = 64  // uint64: journal replay offset
	metaStoreID   = 72  // [16]byte: store ID, equals the header's
	metaFixedSize = 128 // bytes [88, 128) are zero; App follows

	metaMagic = 0x4d42444b // "KDBM"

	// MaxAppMeta is the largest Meta.App, so that a meta slot fits the
	// smallest page size (512).
	MaxAppMeta = minPageSize - metaFixedSize
)

// Page header: FORMAT.md §2.4. These values are part of
// the on-disk format; changing one requires a FormatVersion bump.
const (
	pgChecksum   = 0  // uint64: xxhash64 of bytes [8, pageSize)
	pgID         = 8  // uint64: must equal the page's position
	pgType       = 16 // uint8: PageType, never 0
	pgFlags      = 17 // uint8: zero
	pgReserved   = 18 // uint16: zero
	pgPayloadLen = 20 // uint32: payload length, <= pageSize - pageHeaderSize
	pgCheckpoint = 24 // uint64: sequence of the checkpoint that wrote the page

	pageHeaderSize = 32
)

// db.free: FORMAT.md §2.5.
const (
	freeChecksum   = 0  // uint64: xxhash64 of bytes [8, end of file)
	freeMagicOff   = 8  // uint32: freeMagic
	freeVersion    = 12 // uint32: FormatVersion
	freeStoreID    = 16 // [16]byte: store ID
	freeSeq        = 32 // uint64: checkpoint sequence
	freeRand       = 40 // [8]byte: checkpoint random part
	freePageCount  = 48 // uint64: page count the list describes
	freeRangeCount = 56 // uint64: number of ranges that follow
	freeFreePages  = 64 // uint64: sum of the ranges' lengths
	freeHeaderSize = 72 // ranges follow: freeRangeSize bytes each

	freeRangeStart = 0 // uint64: first free page
	freeRangeLen   = 8 // uint64: number of pages, > 0
	freeRangeSize  = 16

	freeMagic = 0x4642444b // "KDBF"
)

// db.redo: FORMAT.md §2.6.
const (
	redoMagicOff   = 0  // uint32: redoMagic
	redoVersion    = 4  // uint32: FormatVersion
	redoStoreID    = 8  // [16]byte: store ID
	redoSeq        = 24 // uint64: checkpoint sequence
	redoRand       = 32 // [8]byte: checkpoint random part
	redoPageSize   = 40 // uint32: page size
	redoCount      = 48 // uint64: number of page images
	redoPageCount  = 56 // uint64: the new meta's page count
	redoHeaderSize = 64
	// Then redoCount uint64 positions (page indexes in db.data, strictly
	// increasing), then redoCount page images of pageSize bytes, then the
	// trailer.

	trailerMagicOff = 0 // uint32: redoTrailerMagic
	trailerApplied  = 4 // uint32: redoAppliedMagic once db.data holds the batch durably, else 0; not checksummed
	trailerChecksum = 8 // uint64: xxhash64 of every byte before the trailer
	redoTrailerSize = 16

	redoMagic        = 0x5242444b // "KDBR"
	redoTrailerMagic = 0x4542444b // "KDBE"
	redoAppliedMagic = 0x454e4f44 // "DONE"
)

// File names inside the store directory.
const (
	dataFileName = "db.data"
	redoFileName = "db.redo"
	freeFileName = "db.free"
	// prevSuffix names the previous checkpoint's free list, kept so that a
	// crash inside a checkpoint still finds a trusted one (FORMAT.md §2.5).
	prevSuffix = ".prev"
	// tmpSuffix names a db.free being written.
	tmpSuffix = ".tmp"
)
