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
	userTreePrefix = "u/"        // + the index name
	segRefsTree    = "k/segrefs" // journal segment (u32 big-endian) -> live values in it (u64 LE), bytes (u64 LE)
)

// Broker trees, docs/FORMAT.md §5.6. <id> is a
// destination's or subscription's id, u64 big-endian; seq keys are u64
// big-endian so that trees iterate in sequence order.
const (
	brokerPrefix     = "b/"
	brokerDestsTree  = "b/dests" // kind u8 + name -> id u64, nextSeq u64, count u64, bytes u64 (LE)
	brokerCtrTree    = "b/ctr"   // "ids" -> the next destination or subscription id u64 (LE)
	brokerSubsTree   = "b/subs"  // dest id + sub name -> sub id u64, start seq u64 (LE)
	brokerTxTree     = "b/tx"    // xid -> a prepared transaction (brokerTxVersion encoding)
	brokerMsgPrefix  = "b/m/"    // + dest id: seq -> message (brokerMsgVersion encoding)
	brokerHdrPrefix  = "b/h/"    // + dest id: seq -> refs u32, size u32 (LE), message ID
	brokerIDPrefix   = "b/x/"    // + dest id: message ID -> seq u64 (LE)
	brokerProdPrefix = "b/p/"    // + dest id: producer ID -> highest producer sequence u64 (LE)
	brokerPendPrefix = "b/q/"    // + sub id: seq -> empty (the subscription's pending messages)

	brokerMsgVersion = 1
	brokerTxVersion  = 1
	destRecSize      = 32
)
