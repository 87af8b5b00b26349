package recovery

import (
	"time"

	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
)

// Report says what recovery did and how long each phase took. The same
// report feeds kdbtool and the benchmarks.
type Report struct {
	// PageFile is the page file's own report: meta slot, redo, free-list
	// path and reason, pages scanned.
	PageFile pagefile.Report
	// Journal is the journal's open report: tail, torn bytes truncated,
	// damaged regions skipped.
	Journal journal.OpenReport

	// ReplayFrom is the last record the checkpoint already covered (zero:
	// none); replay starts after it.
	ReplayFrom journal.Location
	// RecordsReplayed and BytesReplayed count the journal records applied
	// (and their payload bytes).
	RecordsReplayed int64
	BytesReplayed   int64
	// FreeListProof is the proof of a free list loaded from db.free as of
	// the end of replay: a Lies count above 0 means the trusted list listed
	// pages in use (none was written; pagefile.File.FreeListProof).
	FreeListProof pagefile.FreeListProof
	// DamagedFreed counts the pages the free-list scan could not read
	// that the index does not reach: free pages with damaged bytes, freed
	// again (the next checkpoint stamps them free). A damaged page the
	// index reaches fails Run with ErrCorrupt.
	DamagedFreed int
	// NeedsCheckpoint says the caller should checkpoint soon, so that the
	// next crash is cheap: records were replayed, db.redo applied, the free
	// list rebuilt, a lie of the loaded free list found (the checkpoint
	// replaces the lying db.free), a torn journal tail cut, damage skipped,
	// or the store never checkpointed (a new one included). Never set when
	// read-only.
	NeedsCheckpoint bool
	// Checkpointed says Run took that checkpoint before returning
	// (Options.CheckpointBeforeServing, and always for a store never
	// checkpointed: its first checkpoint names the journal), in
	// CheckpointDuration. If NeedsCheckpoint is set and Checkpointed is
	// not, the caller owes it.
	Checkpointed       bool
	CheckpointDuration time.Duration

	PageFileDuration time.Duration // pagefile.Open: meta, redo, free list
	IndexDuration    time.Duration // index.Open
	// ReplayDuration is the replay's pass over the records after the
	// replay position: reading, verifying and applying them (the journal's
	// Open reads them once for both), from the first record to the last
	// one applied. JournalDuration is the rest of the journal's Open:
	// opening the segments, checking headers, finding and syncing the tail.
	JournalDuration time.Duration
	ReplayDuration  time.Duration
	// TotalDuration is Run's time until the store was recovered: the
	// recovery checkpoint (CheckpointDuration) is not in it.
	TotalDuration time.Duration
}

// ReplayRate returns the replay throughput in bytes per second, or 0 when too
// little was replayed to tell.
func (r *Report) ReplayRate() float64 {
	if r.BytesReplayed < 1<<20 || r.ReplayDuration <= 0 {
		return 0
	}
	return float64(r.BytesReplayed) / r.ReplayDuration.Seconds()
}
