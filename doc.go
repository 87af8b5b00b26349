// Package kdb is an embedded storage engine for message brokers: a
// checksummed write-ahead journal feeding B-tree indexes in an mmap'd page
// file, checkpointed through a double-write file, with the free-page list
// saved at every checkpoint so that reopening after a crash costs the journal
// written since the last checkpoint, not the size of the database.
//
// See docs/DESIGN.md for how it works and docs/FORMAT.md for every byte it
// writes.
package kdb
