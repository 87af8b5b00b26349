// Package raftkdb stores the log and the stable state of a
// github.com/hashicorp/raft node in a kdb store: Store implements
// raft.LogStore and raft.StableStore on kdb's public API alone.
//
// A Store lives in one namespace of a kdb store (DefaultNamespace, "raft"),
// so the same store can hold the state machine's data beside it (see
// package kvfsm and cmd/kdb-raft-kv). Every write is one kdb Write (or, for
// a StoreLogs too large for one batch, transactions committed in order) and
// is durable on return under kdb's default SyncAlways; concurrent writers
// (the log and an FSM on the same store) share fsyncs. StoreLogs checks
// every entry against Store.MaxEntrySize before it writes anything, so a
// call refused for an entry too large stores nothing; a split call that the
// store fails part-way can leave a prefix of its entries (as a crash can),
// which FirstIndex and LastIndex show.
//
// Store does not implement raft.MonotonicLogStore: its log is a B-tree keyed
// by index, which holds gaps as well as runs, so raft's default (a gap after
// a restored snapshot marks the discontinuity) is right for it. Removing the
// whole log is nevertheless cheap (one drop of its tree).
//
// # Space
//
// Entries whose encoding is longer than kdb's Options.ValueThreshold (512
// bytes by default) stay in kdb's journal; the B-tree holds their location.
// DeleteRange after a raft snapshot deletes their keys, and kdb's journal GC
// and compaction (which work for every tree, namespaces included) give the
// journal space back: right after a checkpoint the journal is within
// 4 × live + 3 × CheckpointBytes + 3 × SegmentSize (docs/DESIGN.md, "Space:
// compaction and the factor"). TestStore_DeleteRangeFreesJournal checks it.
//
// # FORMAT
//
// Trees, in the store's namespace ns (on disk "ns/log" and "ns/stable"):
//
//	log     key: the entry's index, 8 bytes big-endian (so key order is
//	        index order); value: the entry, encoded as below.
//	stable  key: 0x01 then the caller's key (so the empty key is storable;
//	        at most MaxStableKeySize bytes); value: 0x01 then the caller's
//	        value. SetUint64 stores 8 bytes big-endian.
//
// A log entry (version 1), all integers big-endian:
//
//	offset size  field
//	0      1     version = 1
//	1      1     Type (raft.LogType)
//	2      1     flags: bit 0 AppendedAt is set; bit 1 Data is not nil;
//	             bit 2 Extensions is not nil; other bits must be 0
//	3      8     Index (must equal the key)
//	11     8     Term
//	19     12    only if flag bit 0: AppendedAt as Unix seconds (int64)
//	             and nanoseconds (uint32, < 1e9)
//	       var   uvarint len(Data), then Data
//	       var   uvarint len(Extensions), then Extensions
//	       4     CRC-32C (Castagnoli) of every byte before it
//
// Every field round-trips: AppendedAt as the same instant (time.Equal; its
// location and monotonic reading are not kept), nil and empty Data and
// Extensions apart. Decoding checks the version, the flags, the checksum,
// every length against the bytes left, that nothing trails, and the index
// against the key; a value that fails any of them is ErrCorrupt naming the
// index and the reason, never a panic (FuzzDecodeLog). Damage kdb reports
// under an entry (kdb.ErrCorrupt: its journal record, say) comes back from
// GetLog as ErrCorrupt naming the index and wrapping kdb's error, so that
// errors.Is holds for both.
//
// A later version changes the version byte; a reader of version 1 reports
// a newer entry as ErrCorrupt ("unknown encoding version") rather than
// guess.
package raftkdb
