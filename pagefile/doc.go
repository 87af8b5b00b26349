// Package pagefile owns the page file of a kdb store: db.data (a header, two
// checksummed metadata slots and fixed-size checksummed pages), db.redo (the
// double-write batch of the last checkpoint) and db.free (the free-page list
// as of a checkpoint, tagged with that checkpoint's unique ID).
//
// It keeps a cache of dirty pages and the free list in memory, writes both at
// a checkpoint (db.free, then db.redo, then in place into db.data, each
// synced), and on Open recovers the newest whole checkpoint: it applies a
// complete newer db.redo, and trusts db.free only when it is intact and its
// store ID, checkpoint ID and page count match the metadata; otherwise it
// rebuilds the free list by one sequential scan of every page header. Open
// returns a Report saying which path was taken and why. A trusted list is
// verified as it is used: each of its pages is proven free on disk (an
// intact page stamped PageFree) before it is handed out, written or freed;
// a page that is not is never written, and the rest of the list is set
// aside and proven in the background (proof.go, FreeListProof).
//
// It must not know about the journal or the index: page payloads and page
// types >= 16 are opaque to it; the journal replay position in Meta is two
// plain integers.
//
// Concurrency: Read, PageSize, PayloadSize, PageCount, Meta, FreeCount,
// FreeRanges, DirtyCount, FreeListProof, WaitFreeListProof and Err are safe
// for concurrent use with each other and with everything else. Mutations
// (Write, Allocate, AllocateRun, Free, PrepareCheckpoint) must be
// serialized by the caller (one mutator at a time). CommitCheckpoint needs no caller lock and may run concurrently with
// reads and mutations; only one CommitCheckpoint runs at a time.
//
// The on-disk format is specified in docs/FORMAT.md §2 "Page file"; the
// design in docs/DESIGN.md, "Page file".
package pagefile
