package recovery

import (
	"errors"
	"fmt"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
)

// Options configures Run. PageFile, Index and Journal are passed through to
// the packages' Open.
type Options struct {
	PageFile pagefile.Options
	Index    index.Options
	Journal  journal.Options
	// Apply applies one journal record to the index inside an Update. It
	// is called in journal order for every record after the checkpoint's
	// replay position, and must do exactly what the live write path did.
	// An error aborts recovery. Records are applied in chunks, one index
	// Update each, and a chunk may end inside a journal batch: state that
	// Apply keeps between the records of one batch must live in the
	// caller's closure. No chunk is ever applied twice. Apply runs while
	// the journal is still being opened (journal.Options.Deliver): if Run
	// fails, what it applied is discarded with the page file.
	Apply func(tx *index.Tx, loc journal.Location, r journal.Record) error
	// ReplayFrom converts the checkpoint's meta into the location of the
	// last record it covers (zero: none).
	ReplayFrom func(m pagefile.Meta) journal.Location
	// Refs returns the oldest and newest journal segment holding a record
	// the opened index still refers to (0, 0: none). Optional. With the
	// replay position it tells the journal which segments must exist
	// (journal.Options.Need), so that a missing one is ErrCorrupt rather
	// than a silent loss.
	Refs func(ix *index.Store) (oldest, newest journal.SegmentID, err error)
	// NoReplay skips the replay (a read-only open sees the last
	// checkpoint).
	NoReplay bool
	// ChunkRecords bounds the records applied in one index Update.
	// Default: 4096.
	ChunkRecords int
}

// State is the opened store.
type State struct {
	PageFile *pagefile.File
	Index    *index.Store
	Journal  *journal.Journal
	// LastApplied is the location of the last record applied (the replay
	// position's record if none were replayed).
	LastApplied journal.Location
}

// Close closes the parts in reverse order of opening and returns the first
// error.
func (s *State) Close() error {
	var errs []error
	if s.Journal != nil {
		errs = append(errs, s.Journal.Close())
	}
	if s.PageFile != nil {
		errs = append(errs, s.PageFile.Close())
	}
	return errors.Join(errs...)
}

// Run opens the store in dir: the page file (newest intact meta, db.redo,
// the free list trusted or rebuilt), the index, the journal (verified from
// the replay position, torn tail truncated), replaying the journal after
// the checkpoint's replay position during the journal's own verifying pass
// (each record is read once). It does not checkpoint: the caller
// starts serving and checkpoints in the background when
// Report.NeedsCheckpoint says so (the store is consistent and durable
// without it; the checkpoint only makes the next crash cheap). On error
// everything opened is closed again.
func Run(dir string, o Options) (*State, *Report, error) {
	if o.Apply == nil || o.ReplayFrom == nil {
		return nil, nil, errors.New("recovery: Apply and ReplayFrom are required")
	}
	if o.ChunkRecords <= 0 {
		o.ChunkRecords = 4096
	}
	start := time.Now()
	rep := &Report{}
	st := &State{}
	fail := func(err error) (*State, *Report, error) {
		_ = st.Close()
		return nil, rep, err
	}

	t := time.Now()
	pf, prep, err := pagefile.Open(dir, o.PageFile)
	rep.PageFileDuration = time.Since(t)
	if prep != nil {
		rep.PageFile = *prep
	}
	if err != nil {
		return fail(fmt.Errorf("recovery: page file: %w", err))
	}
	st.PageFile = pf

	t = time.Now()
	ix, err := index.Open(pf, o.Index)
	rep.IndexDuration = time.Since(t)
	if err != nil {
		return fail(fmt.Errorf("recovery: index: %w", err))
	}
	st.Index = ix

	// The journal is verified from the replay position on; the segments
	// before it hold only values the index still points to, and each is
	// verified when read (or by journal.Verify, which DB.Check runs). The
	// records after the replay position are applied as the journal's Open
	// verifies them. They stay in memory (index Updates are committed to
	// the page file's dirty pages, which only a checkpoint writes): if the
	// Open fails further on, fail discards them; if it succeeds, it has
	// synced the tail it found before returning, so the records are
	// durable before anything built from them is served or checkpointed.
	from := o.ReplayFrom(pf.Meta())
	rep.ReplayFrom = from
	st.LastApplied = from
	jo := o.Journal
	jo.VerifyFrom = from
	if jo.Need, err = need(ix, from, o.Refs); err != nil {
		return fail(fmt.Errorf("recovery: index: %w", err))
	}
	jo.Deliver = nil
	var rp *replayer
	if !o.NoReplay {
		rp = &replayer{st: st, o: o, rep: rep}
		defer rp.abandon() // on a failure or a panic: the chunk's Update rolls back and its goroutine ends
		jo.Deliver = rp.deliver
	}
	t = time.Now()
	j, jrep, err := journal.Open(dir, jo)
	rep.JournalDuration = time.Since(t)
	if err == nil && rp != nil {
		// The records' pass is the replay's time, and the journal's the
		// rest of its open (segments, headers, the tail and its sync).
		t = time.Now()
		err = rp.commit()
		rep.ReplayDuration = rp.span() + time.Since(t)
		rep.JournalDuration -= rp.span()
	}
	if jrep != nil {
		rep.Journal = *jrep
	}
	if j != nil {
		st.Journal = j
	}
	switch {
	case rp != nil && rp.err != nil:
		return fail(rp.err) // Apply's or a chunk's error, passed back through the journal's Open
	case err != nil:
		return fail(fmt.Errorf("recovery: journal: %w", err))
	}

	// The oldest segment the index refers to is judged after the replay:
	// journal GC runs on the live index, which may have dropped its last
	// reference to a segment that the checkpointed index still names (a
	// value overwritten since). The replay drops that reference again, so
	// such a segment is not missing; one the replayed index still refers
	// to is.
	if rp != nil && o.Refs != nil {
		if err := checkOldest(st, o, rep); err != nil {
			return fail(err)
		}
	}

	rep.FreeListProof = pf.FreeListProof()
	rep.NeedsCheckpoint = !o.PageFile.ReadOnly && (rep.RecordsReplayed > 0 || rep.PageFile.RedoApplied ||
		rep.PageFile.FreeListPath == pagefile.FreeListScanned || rep.Journal.TornBytesTruncated > 0 ||
		rep.FreeListProof.Lies > 0)
	rep.TotalDuration = time.Since(start)
	return st, rep, nil
}

// need returns the segments the store requires of its journal: from the
// replay position's segment (the first segment if the replay position is
// zero: nothing was ever checkpointed, so nothing was collected) through
// itself, widened to the newest segment holding a record the index refers
// to (the oldest is judged after the replay: checkOldest).
func need(ix *index.Store, from journal.Location, refs func(*index.Store) (journal.SegmentID, journal.SegmentID, error)) (journal.Need, error) {
	n := journal.Need{First: from.Segment, Last: from.Segment}
	if from.IsZero() {
		n.First = 1
	}
	if refs == nil {
		return n, nil
	}
	oldest, newest, err := refs(ix)
	if err != nil {
		return n, err
	}
	_ = oldest // judged after the replay: checkOldest
	n.Last = max(n.Last, newest)
	return n, nil
}

// checkOldest requires the journal to begin at or before the oldest segment
// the replayed index refers to. A missing one is ErrCorrupt naming it, or,
// with SkipDamaged, listed in the report's skipped damage.
func checkOldest(st *State, o Options, rep *Report) error {
	oldest, _, err := o.Refs(st.Index)
	if err != nil {
		return fmt.Errorf("recovery: index: %w", err)
	}
	segs := st.Journal.Segments()
	if oldest == 0 || (len(segs) > 0 && segs[0].ID <= oldest) {
		return nil
	}
	to := oldest
	if len(segs) > 0 {
		to = segs[0].ID - 1
	}
	d := journal.Damage{From: journal.Location{Segment: oldest}, To: journal.Location{Segment: to + 1},
		Reason: fmt.Sprintf("segments %s to %s are missing: the journal begins after them, but the index refers to values in %s", oldest, to, oldest)}
	if !o.Journal.SkipDamaged {
		return fmt.Errorf("recovery: journal: %w: %s: %s", journal.ErrCorrupt, d.From, d.Reason)
	}
	rep.Journal.Skipped = append(rep.Journal.Skipped, d)
	return nil
}
