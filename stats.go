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

	Checkpoints        uint64        // checkpoints taken since Open began (a new store's first, inside Open, included)
	CheckpointPages    uint64        // dirty pages handed to checkpoints
	CheckpointTime     time.Duration // total
	LastCheckpointTime time.Duration // the last checkpoint's

	JournalBytes    int64  // bytes written to the journal since Open
	JournalFsyncs   int64  // journal fsyncs since Open
	JournalRecords  int64  // journal records written since Open
	JournalSegments int    // segments on disk now
	SegmentsRemoved uint64 // removed or archived by journal GC since Open
	// SegmentReopens counts the sealed segments closed to stay within
	// Options.MaxOpenSegments and opened again by a read.
	SegmentReopens int64
	// GCPostponed counts the journal GCs that left segments they could
	// otherwise remove because a running View may still read them; the
	// first GC after that View ends removes them. Views is the number of
	// Views running now (Get, View, Update, Export, broker reads).
	GCPostponed uint64
	Views       int // Views running now

	// MemBytes is the memory the mem tables hold for the changes applied
	// since the last checkpoint (estimated); MemVersions their versions.
	MemBytes    int64
	MemVersions int // versions of keys in the mem tables
	DirtyPages  int // pages changed and not yet checkpointed
	// HeldPages is the number of page images held in memory for
	// checkpoints: the dirty pages with contents, and the old images a
	// running checkpoint is still writing. Writers wait while it is at
	// twice Options.CheckpointDirtyPages.
	HeldPages int
	FreePages uint64 // pages on the free list
	PageCount uint64 // pages in db.data, including the header and meta pages

	// FreeListProven counts the pages of the free list loaded from db.free
	// that were proven free on disk before their first use; FreeListLies
	// those that failed the proof (they were in use: never written, see
	// RecoveryReport.FreeListLied); FreeListHeld the loaded pages held out
	// of allocation until the background proof after a lie gets to them.
	FreeListProven uint64
	FreeListLies   uint64 // loaded pages that failed the proof
	FreeListHeld   uint64 // loaded pages held out of allocation

	// PinnedSegments and PinnedBytes are the journal segments wholly
	// before the last checkpoint's replay position, kept only because a
	// live value (a message body never acked, for instance) is in them or
	// in an older one, and their size on disk. Compactions counts the
	// journal compaction passes that moved values (CompactedValues of them,
	// including copies found stale when applied) out of sparsely used
	// segments; see compact.go.
	PinnedSegments  int
	PinnedBytes     int64  // PinnedSegments' size on disk
	Compactions     uint64 // compaction passes that moved values
	CompactedValues uint64 // values those passes moved

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
	s.SegmentReopens = js.SegmentReopens
	s.DirtyPages = db.pf.DirtyCount()
	s.MemBytes, s.MemVersions = db.mem.bytes(), db.mem.versions()
	s.HeldPages = db.pf.HeldPages()
	s.FreePages = db.pf.FreeCount()
	p := db.pf.FreeListProof()
	s.FreeListProven, s.FreeListLies, s.FreeListHeld = p.Proven, p.Lies, p.Quarantined
	s.PageCount = uint64(db.pf.PageCount())
	s.Recovery = db.Recovery()
	s.PinnedSegments, s.PinnedBytes = db.pinned()
	s.Views = db.runningViews()
	s.Compactions, s.CompactedValues = db.compaction.compactions.Load(), db.compaction.movedValues.Load()
	return s
}

// Recovery returns the report of the recovery that Open ran.
func (db *DB) Recovery() RecoveryReport {
	db.mu.Lock()
	defer db.mu.Unlock()
	r := db.mu.recovery
	r.Skipped = append([]string(nil), r.Skipped...)
	if p := db.pf.FreeListProof(); p.Lies > 0 {
		r.FreeListLied, r.FreeListLies = true, p.Lies
		r.FreeListLiedPage, r.FreeListLieReason = uint64(p.FirstLie), p.LieReason
	}
	return r
}
