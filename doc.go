// Package kdb is an embedded key-value storage engine built for message
// brokers: a checksummed write-ahead journal feeding B-tree indexes in an
// mmap'd page file, checkpointed through a double-write file, with the
// free-page list saved at every checkpoint so that reopening after a crash
// costs the journal written since the last checkpoint, not the size of the
// database.
//
// What it owns: the store's public API (Open, Put/Get/Delete, Batch and
// Write, Update and Submit transactions, View and iterators, namespaces,
// Checkpoint, Compact, Stats, Check, Export/Import); the database records it
// journals and the index values it stores (docs/FORMAT.md, "Database
// records"); the commit queue and its leader (commit.go), the writes in
// flight (ordered.go), checkpoints and journal GC (checkpoint.go), journal
// compaction (compact.go) and the handle's lifecycle (lifecycle.go). The
// opening algorithm is the recovery package's; pages, trees and the journal
// are pagefile's, index's and journal's. What a layer above keeps in a
// namespace is that layer's: the message store of a broker is package
// github.com/kdb-project/kdb/broker, built on this API alone.
//
// Concurrency: a DB is safe for concurrent use. Writes (Write, Put, Delete)
// run concurrently and share journal writes and fsyncs (group commit);
// Submit transactions run their functions one at a time and commit in that
// order, overlapping each other's fsyncs; an Update runs alone, after the
// writes in flight are applied. Views run concurrently with everything and
// never hold up a writer, a checkpoint or journal GC. A reader sees a write
// only once it is durable, except a transaction marked NoSync, which is
// seen once applied.
//
// Lock order: compaction.mu → DB.writeMu → DB.txMu → the commit queue's
// locks (cq.mu, then cq.ap) → the in-flight overlay's fl.mu → DB.mu → the
// journal's, index's and page file's own locks; compaction.mu → ckMu. The
// View registry's lock (views.mu) and the commit queue's async timer lock
// are leaves. No lock is held across an fsync except writeMu (shared, by
// Write while its batch commits; exclusive, by Update and Close), ckMu (one
// checkpoint at a time), compaction.mu (one compaction pass at a time,
// which commits its moves and takes a checkpoint while holding it), and
// cq.ap with the active mem table's lock, held by a follower that applied
// its group while the leader syncs it (applyJob, commit.go) until that
// sync ends: the leader takes neither between its write and the end of
// its sync.
//
// See docs/DESIGN.md for how it works and docs/FORMAT.md for every byte it
// writes.
package kdb
