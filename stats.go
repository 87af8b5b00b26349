package kdb

import (
	"time"
)

// Stats are counters since Open and current sizes.
type Stats struct {
	// Commits counts journal batches written by the commit leaders; Batches the
	// writes (Write, Put, Delete, Update) they carried.
	Commits, Batches uint64
	// WriteStalls counts the times a writer waited for a checkpoint because
	// too many pages were dirty.
	WriteStalls uint64

	Checkpoints        uint64
	CheckpointPages    uint64        // dirty pages handed to checkpoints
	CheckpointTime     time.Duration // total
	LastCheckpointTime time.Duration

	JournalBytes    int64 // bytes written to the journal since Open
	JournalFsyncs   int64
	JournalRecords  int64
	JournalSegments int    // segments on disk now
	SegmentsRemoved uint64 // removed or archived by journal GC since Open

	DirtyPages int // pages changed since the last checkpoint
	// HeldPages is the number of page images held in memory for
	// checkpoints: the dirty pages with contents, and the old images a
	// running checkpoint is still writing. Writers wait while it is at
	// twice Options.CheckpointDirtyPages.
	HeldPages int
	FreePages uint64 // pages on the free list
	PageCount uint64 // pages in db.data, including the header and meta pages

	// PinnedSegments and PinnedBytes are the journal segments wholly
	// before the last checkpoint's replay position, kept only because a
	// live value (a message body never acked, for instance) is in them or
	// in an older one, and their size on disk. Compactions counts the broker compaction
	// passes that moved values (CompactedValues of them) out of sparsely
	// used segments; see compact.go.
	PinnedSegments  int
	PinnedBytes     int64
	Compactions     uint64
	CompactedValues uint64

	// Recovery is the report of the recovery Open ran.
	Recovery RecoveryReport
}

// Stats returns the current counters.
func (db *DB) Stats() Stats {
	db.mu.Lock()
	s := db.mu.stats
	db.mu.Unlock()
	js := db.j.Stats()
	s.JournalBytes, s.JournalFsyncs, s.JournalRecords = js.Bytes, js.Fsyncs, js.Records
	s.JournalSegments = len(db.j.Segments())
	s.DirtyPages = db.pf.DirtyCount()
	s.HeldPages = db.pf.HeldPages()
	s.FreePages = db.pf.FreeCount()
	s.PageCount = uint64(db.pf.PageCount())
	s.Recovery = db.Recovery()
	s.PinnedSegments, s.PinnedBytes = db.pinned()
	s.Compactions, s.CompactedValues = db.broker.compactions.Load(), db.broker.movedValues.Load()
	return s
}

// Recovery returns the report of the recovery that Open ran.
func (db *DB) Recovery() RecoveryReport {
	db.mu.Lock()
	defer db.mu.Unlock()
	r := db.mu.recovery
	r.Skipped = append([]string(nil), r.Skipped...)
	return r
}
