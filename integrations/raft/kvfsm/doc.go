// Package kvfsm is the state machine of the example replicated key-value
// service (cmd/kdb-raft-kv): a raft.BatchingFSM whose data lives in a kdb
// store, in namespace "kv", beside the raft log that raftkdb keeps in the
// same store.
//
// Trees in namespace "kv":
//
//	meta    "applied": the index of the last raft entry applied (8 bytes
//	        big-endian), written in the same transaction as the entry's
//	        effect; "gen": the generation of the data tree; "maxput": the
//	        cluster's MaxPutSize (8 bytes big-endian; see "Sizes");
//	        "restored": the applied index the last Restore took from its
//	        snapshot (8 bytes big-endian; absent before the first).
//	d<gen>  the data: key -> value, as the clients put them.
//
// Because the applied index commits atomically with the data, the FSM's
// state is always exactly the state after entry "applied": Apply skips the
// entries at or below it, so raft can replay its log after a restart (the
// node runs with Config.NoSnapshotRestoreOnStart) without re-applying
// anything. Applies are committed without an fsync of their own (Txn.NoSync):
// the raft log is the durable record, and a crash that loses the last
// applies loses them whole, with their applied index, so the replay redoes
// exactly them. A batch too large for one kdb transaction commits in
// several, in order, each with the applied index of its last entry.
// Snapshot first makes every apply durable (one synced write),
// so that no snapshot raft records is ahead of the FSM on disk.
//
// A snapshot that a leader installs is the exception: raft saves it before
// it calls Restore, so a node that stops in between restarts with a
// snapshot ahead of its FSM, which raft (NoSnapshotRestoreOnStart) takes as
// applied. CatchUp, called before raft.NewRaft, restores such a snapshot;
// it refuses an FSM that has applied past both the end of raft's log and
// the newest snapshot (a log other than the one it applied: the FSM would
// skip the new log's entries up to its applied index), unless the FSM is
// exactly what its last Restore left (meta key "restored"): a snapshot's
// content may be a little ahead of the index raft names it by (below).
// It also refuses (kdb.ErrInvalid) a raft log that starts past the entry
// after the newest snapshot and ends past it: raft compacts its log only
// behind a snapshot, so the snapshot that covered the entries in between
// was lost (its directory, or all of snapshots/, removed), and
// raft.NewRaft, which reads the log from the newest snapshot on, would
// panic ("log not found"). The error names the missing entries: put the
// snapshot back, or remove the node's data to rejoin from the cluster.
// ApplyBatch never applies past a hole: when its first new entry is not the
// one after the applied index, it checks in raft's log that every entry in
// between is one raft does not hand an FSM (a no-op or a barrier), and
// panics otherwise, rather than apply over missing writes.
//
// The snapshot is kdb's portable export of the whole store (kdb.DB.Export):
// consistent, taken while applies go on, so it may be a little ahead of the
// index raft names it by; the applied index inside it says exactly where it
// is, and entries up to there are skipped after a Restore. Restore imports
// the snapshot into a scratch store beside the live one (kdb.Import), copies
// its data into a new generation of the data tree and switches "gen" and
// "applied" in one synced write, then drops the old generation: a crash
// part-way leaves the old state, and Open drops a half-copied generation.
// The scratch store lives in DIR.restore beside the store's directory DIR,
// marked with a KVFSM-RESTORE file, and is removed when Restore returns or,
// after a crash, at the next Open: everything but the mark first, then the
// mark, then the directory, so that a crash at any moment of the removal
// leaves it marked, empty or gone. A DIR.restore that is neither empty nor
// marked (an operator's copy of the store, say) is never removed: Open and
// Restore refuse (kdb.ErrInvalid), naming it.
//
// # Sizes: the cluster's MaxPutSize
//
// Whether ApplyBatch applies a put is decided by the entry and one setting
// of the cluster, never by the node's store: a put whose key and value
// together are over MaxPutSize (Options.MaxPutSize; DefaultMaxPutSize, 8
// MiB less 96 bytes, if unset) is answered with kdb.ErrInvalid and applied
// as nothing, on every node alike. (It was the store's answer: a put over
// one kdb batch, db.MaxBatchSize, a quarter of the store's SegmentSize, was
// refused, so a node whose store had smaller segments than the leader's
// refused a put the leader applied, and the replicas differed from then
// on.)
//
// The limit is part of the FSM's state, in meta ("maxput"), and so in
// every snapshot:
//
//   - Open records it at the first open. It refuses (kdb.ErrInvalid, naming
//     both figures, before it writes anything) a store whose batches cannot
//     hold a put of MaxPutSize: the default fits a store with kdb's default
//     SegmentSize (32 MiB) or larger; a store with smaller segments needs a
//     smaller MaxPutSize, given to every node. A node that would refuse
//     puts the others apply does not start. It refuses too, naming the
//     largest allowed, a MaxPutSize whose put's raft entry is over the
//     MaxEntrySize of the raft log given to Open (raftkdb.Store; at most
//     MaxEntrySize less 46 bytes, so 8 MiB less 46 with kdb's MaxValueSize
//     entries): raft could not log such a put, and the leader would step
//     down on it instead of answering it.
//   - Open refuses an Options.MaxPutSize other than the recorded one: a node
//     that changed the limit alone would apply the log differently from the
//     others, and there is no entry that changes it on every node at one
//     index. Left unset, the recorded one is used.
//   - A store an older kvfsm wrote (no limit recorded) gets
//     Options.MaxPutSize, or the default. On a store with kdb's default
//     SegmentSize the default is exactly the bound its ApplyBatch used, so
//     it answers every entry as before, beside nodes not yet upgraded too;
//     a store with smaller segments must be given a MaxPutSize it holds
//     (Open says which).
//   - Restore adopts the snapshot's limit with its state: the node the
//     snapshot came from applies the entries after it under that limit, and
//     now so does this one. A store whose batches (or raft log) cannot
//     hold a put of the snapshot's limit refuses the snapshot (kdb.ErrInvalid, naming both
//     figures) before it writes anything, as Open would refuse it. A
//     snapshot without a limit (an older kvfsm's) leaves the FSM's own. A
//     node that adopted another limit than its Options.MaxPutSize is
//     refused at its next Open until its option is changed or unset: its
//     configuration disagrees with the cluster's.
//
// Restore also checks every value of the snapshot against this store's
// batch before it writes anything (an older kvfsm's leader, with larger
// segments, may have applied larger ones): a snapshot holding a value this
// store could not have applied is refused whole (kdb.ErrInvalid, naming the
// key and the sizes) and the FSM keeps its state; any other snapshot
// restores, whatever the leader's segment size, since Restore never packs
// more into one batch than one put or half a batch.
//
// Nodes first opened with different MaxPutSize options still apply by
// different limits until one restores the other's snapshot: an FSM sees
// no other node's setting before that. Give every node the same option
// (or none).
package kvfsm
