package kdb

// The root package's part of the on-disk format: the journal records it
// writes and the values it stores in the index. FORMAT.md §5 ("Database
// records"). These values are part of the on-disk format; changing one
// requires a FormatVersion bump.

// Journal record types (journal.RecordType), FORMAT.md §5.1.
const (
	recValue = 1 // payload: one value's bytes, referenced by the batch record that follows
	recBatch = 2 // payload: a batch of operations, FORMAT.md §5.2
)

// Batch record, FORMAT.md §5.2.
const (
	batchVersion = 1 // first byte of a batch record's payload

	opPut        = 1 // put with the value inline in the batch record
	opPutJournal = 2 // put whose value is the k-th value record before this batch record
	opDelete     = 3 // delete a key
	opDropTree   = 4 // drop a whole tree
	// opMoveJournal: compaction's move: put the k-th value record as the
	// key's value, but only if the key's value is still the journal
	// reference it names (same segment, offset and size); else nothing.
	opMoveJournal = 5
)

// Index values, FORMAT.md §5.3: the first byte says where the value is.
const (
	valInline  = 0 // the rest is the value
	valJournal = 1 // the value is a journal record: segment u32, offset u64, length u32
	valRefSize = 1 + 4 + 8 + 4
)

// Tree names, FORMAT.md §5.4. User indexes are prefixed so that the engine's
// own trees can never collide with them.
const (
	userTreePrefix   = "u/"        // + the index name
	engineTreePrefix = "k/"        // the engine's own trees
	segRefsTree      = "k/segrefs" // journal segment (u32 big-endian) -> live values in it (u64 LE), bytes (u64 LE)
	// maxTreeName bounds a tree name: "u/" and an index name of at most
	// MaxIndexNameSize bytes, or a namespace's prefix and a shorter one.
	maxTreeName = len(userTreePrefix) + MaxIndexNameSize
)
