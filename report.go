package kdb

import (
	"time"

	"github.com/kdb-project/kdb/recovery"
)

// RecoveryReport says what Open did to bring the store back.
type RecoveryReport struct {
	// FreeListPath is "trusted" (db.free intact and matching the
	// metadata), "scanned" (rebuilt by reading every page header) or
	// "created" (a new store). Reason says why the scan was taken.
	FreeListPath string
	Reason       string // why the free list was scanned ("" if not)
	PagesScanned uint64 // page headers read by the scan
	FreePages    uint64 // pages on the free list after recovery
	// DamagedFreePages counts pages the scan could not read (a checksum
	// or page-ID mismatch) and the index does not reach: free pages with
	// damaged bytes, freed again, so the next checkpoint stamps them free.
	// A damaged page the index reaches fails Open with ErrCorrupt.
	DamagedFreePages int
	// FreeListLied reports that the trusted free list listed pages in use:
	// every page taken from a list loaded from db.free is first proven free
	// on disk (stamped PageFree by the checkpoint that freed it), and
	// FreeListLies pages failed that proof, the first FreeListLiedPage
	// (FreeListLieReason says what it held). None of them was written:
	// nothing acknowledged is lost or changed. The rest of the list was
	// set aside and proven in the background; checkpoints write no db.free
	// until that is done, so a reopen meanwhile rebuilds the list by a
	// scan. It is updated while the store runs: a lie shows when a page is
	// first used, during replay or later.
	FreeListLied      bool
	FreeListLies      uint64 // pages listed free that were in use
	FreeListLiedPage  uint64 // the first of them
	FreeListLieReason string // what that page held
	// CheckpointID is the checkpoint the store was opened at.
	CheckpointID string
	// RedoApplied reports that db.redo completed an interrupted
	// checkpoint (RedoPages page images).
	RedoApplied bool
	RedoPages   int // page images db.redo wrote back
	// RedoIgnored says why a db.redo present was not applied ("" if it
	// was, or there was none): already applied, incomplete (a crash while
	// it was written), or not this db.data's (another store's, another
	// page size, older than the meta, or further ahead of it than a crash
	// leaves it: db.data put back from an earlier copy).
	RedoIgnored string

	// ReplayFrom is the last journal record the checkpoint covered.
	ReplayFrom      string
	RecordsReplayed int64 // journal records replayed after ReplayFrom
	BytesReplayed   int64 // their bytes
	// TornBytesTruncated bytes of a torn journal tail were cut at TornAt.
	TornBytesTruncated int64
	TornAt             string // where the torn tail began ("" if none)
	// Skipped lists journal regions lost to damage (SkipDamagedJournal).
	Skipped []string
	// Checkpointed reports that the checkpoint recovery asked for has
	// completed (CheckpointTime is its duration). Recovery asks for one
	// when records were replayed, db.redo applied, the free list rebuilt,
	// a torn journal tail cut or damage skipped: unless
	// Options.CheckpointBeforeServing makes Open take it before returning,
	// it runs in the background as soon as Open returns, and until then
	// the next crash recovers the same way again; Close waits for it (or
	// checkpoints itself). A store never checkpointed (a new one
	// included) always gets its first checkpoint inside Open.
	Checkpointed bool

	PageFileTime   time.Duration // meta, redo and free list
	FreeListTime   time.Duration // of which the free list
	JournalTime    time.Duration // journal open: segments, headers, the tail found and synced
	ReplayTime     time.Duration // reading, verifying and applying the records replayed (one pass, in the journal's open)
	CheckpointTime time.Duration // the background checkpoint, once done
	TotalTime      time.Duration // Open's recovery, until it serves
}

func newRecoveryReport(r *recovery.Report) RecoveryReport {
	out := RecoveryReport{
		FreeListPath:       r.PageFile.FreeListPath,
		Reason:             r.PageFile.Reason,
		PagesScanned:       r.PageFile.PagesScanned,
		FreePages:          r.PageFile.FreePages,
		DamagedFreePages:   r.DamagedFreed,
		CheckpointID:       r.PageFile.MetaID.String(),
		RedoApplied:        r.PageFile.RedoApplied,
		RedoPages:          r.PageFile.RedoPages,
		RedoIgnored:        r.PageFile.RedoIgnored,
		ReplayFrom:         r.ReplayFrom.String(),
		RecordsReplayed:    r.RecordsReplayed,
		BytesReplayed:      r.BytesReplayed,
		TornBytesTruncated: r.Journal.TornBytesTruncated,
		PageFileTime:       r.PageFileDuration,
		FreeListTime:       r.PageFile.FreeListDuration,
		JournalTime:        r.JournalDuration,
		ReplayTime:         r.ReplayDuration,
		TotalTime:          r.TotalDuration,
	}
	if r.Journal.TornBytesTruncated > 0 {
		out.TornAt = r.Journal.TornAt.String()
	}
	if p := r.FreeListProof; p.Lies > 0 {
		out.FreeListLied, out.FreeListLies = true, p.Lies
		out.FreeListLiedPage, out.FreeListLieReason = uint64(p.FirstLie), p.LieReason
	}
	for _, d := range r.Journal.Skipped {
		out.Skipped = append(out.Skipped, d.From.String()+".."+d.To.String()+": "+d.Reason)
	}
	return out
}

// logAttrs returns the report as slog attributes.
func (r RecoveryReport) logAttrs() []any {
	return []any{
		"free_list_path", r.FreeListPath, "reason", r.Reason, "pages_scanned", r.PagesScanned,
		"damaged_free_pages", r.DamagedFreePages,
		"free_list_lied", r.FreeListLied,
		"checkpoint", r.CheckpointID, "redo_applied", r.RedoApplied,
		"records_replayed", r.RecordsReplayed, "bytes_truncated", r.TornBytesTruncated,
		"duration", r.TotalTime,
	}
}
