package broker

// The broker's part of the on-disk format: the trees it keeps in namespace
// "b" (tree "b/<index>") and their values, docs/FORMAT.md (broker trees).
// <id> is a destination's or subscription's id, u64 big-endian; seq keys
// are u64 big-endian so that trees iterate in sequence order. These values
// are part of the on-disk format.
const (
	destsTree  = "dests" // kind u8 + name -> id u64, nextSeq u64, count u64, bytes u64 (LE)
	ctrTree    = "ctr"   // "ids" -> the next destination or subscription id u64 (LE)
	subsTree   = "subs"  // dest id + sub name -> sub id u64, start seq u64 (LE)
	txTree     = "tx"    // xid -> a prepared transaction (txVersion encoding)
	goneTree   = "gone"  // topic id + sub id (u64 BE each) -> topic name: unsubscribed, pending still to remove
	msgPrefix  = "m/"    // + dest id: seq -> message (msgVersion encoding)
	hdrPrefix  = "h/"    // + dest id: seq -> refs u32, size u32 (LE), message ID
	idPrefix   = "x/"    // + dest id: message ID -> seq u64 (LE)
	prodPrefix = "p/"    // + dest id: producer ID -> highest producer sequence u64 (LE)
	pendPrefix = "q/"    // + sub id: seq -> empty (the subscription's pending messages)

	msgVersion  = 1
	txVersion   = 1
	destRecSize = 32
)
