// Package index holds kdb's B-tree indexes: many named trees of byte-slice
// keys and values, ordered bytewise, living in the pages of a pagefile.File,
// with a catalog tree mapping each tree's name to its root and key count.
//
// What it owns: the node, overflow, pending-free and root page formats
// (page types 16..20), copy-on-write updates, reader snapshots, the
// deferral of page frees until no reader can see the pages, and Check.
//
// What it must not know about: the journal, recovery, the file system, or
// how the page file reaches the disk. It imports only pagefile (and
// internal/*). The database layer decides when to checkpoint.
//
// Concurrency: one writer (Update) at a time and any number of readers
// (View), concurrently with each other and with the writer. A View sees the
// state of the last Update that had committed when it began, for its whole
// duration. Checkpoint holds the writer lock only to hand the dirty pages to
// pagefile.PrepareCheckpoint; the I/O runs without it, so Views and Updates go
// on. See docs/DESIGN.md, "Index".
//
// Files: store.go (Store: View, Update, checkpoints; checkpoint_with.go),
// pager.go (what it needs of the page file), tx.go (Tx: node
// access, copy-on-write, commit and rollback), btree.go (descent, insertion
// with splits, removal with merges, freeing trees and chains), catalog.go
// (the catalog tree and a Tx's tree handles), tree.go (Tree: Get, Put,
// Delete), cursor.go, node.go (the node page codec), chain.go (overflow and
// pending-free chains), check.go.
//
// Format: docs/FORMAT.md §3 "Index pages".
package index
