package recovery

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// Options configures Run. PageFile, Index and Journal are passed through to
// the packages' Open (Run sets their FS and ReadOnly from its own).
type Options struct {
	// FS is the file system of every part of the store, the lock file
	// included. Default: vfs.OS.
	FS vfs.FS
	// ReadOnly opens without the lock and without writing anything: no
	// directory is created, the page file and the journal are opened
	// read-only (the replay goes to memory), and no checkpoint is taken
	// or asked for. Setting PageFile.ReadOnly or Journal.ReadOnly means
	// the same.
	ReadOnly bool
	PageFile pagefile.Options
	Index    index.Options
	Journal  journal.Options
	// Apply applies one journal record to the index inside an Update. It
	// is called in journal order for every record after the checkpoint's
	// replay position (ReplayPosition), and must do exactly what the live
	// write path did: what a record means is the caller's. An error aborts
	// recovery. Records are applied in chunks, one index Update each, and
	// a chunk may end inside a journal batch: state that Apply keeps
	// between the records of one batch must live in the caller's closure.
	// No chunk is ever applied twice. Apply runs while the journal is
	// still being opened (journal.Options.Deliver): if Run fails, what it
	// applied is discarded with the page file.
	Apply func(tx *index.Tx, loc journal.Location, r journal.Record) error
	// Refs returns the oldest and newest journal segment holding a record
	// the opened index still refers to (0, 0: none). Optional. With the
	// replay position it tells the journal which segments must exist
	// (journal.Options.Need), so that a missing one is ErrCorrupt rather
	// than a silent loss.
	Refs func(ix *index.Store) (oldest, newest journal.SegmentID, err error)
	// NoReplay skips the replay (the store is seen as of its last
	// checkpoint).
	NoReplay bool
	// ChunkRecords bounds the records applied in one index Update.
	// Default: 4096.
	ChunkRecords int

	// Recovered, if set, is called once the store is recovered and before
	// the recovery checkpoint: the caller takes the State over (what
	// Checkpoint then works on) and may refuse it. Its error fails Run as
	// it is, and everything is closed again.
	Recovered func(st *State, rep *Report) error
	// Checkpoint takes a checkpoint of the recovered store; how is the
	// caller's. Run calls it when the Report says NeedsCheckpoint and
	// CheckpointBeforeServing is set; else the caller takes that checkpoint
	// in the background after Run returned (Report.NeedsCheckpoint and not
	// Report.Checkpointed). Required with CheckpointBeforeServing.
	Checkpoint func() error
	// CheckpointBeforeServing makes Run take the checkpoint recovery asks
	// for before it returns. Ignored when ReadOnly (nothing is asked for).
	CheckpointBeforeServing bool
}

// State is the opened store.
type State struct {
	// Lock is the store's lock file, held until Close (nil when ReadOnly).
	Lock     vfs.Locker
	PageFile *pagefile.File
	Index    *index.Store
	Journal  *journal.Journal
	// LastApplied is the location of the last record applied (the replay
	// position's record if none were replayed).
	LastApplied journal.Location
}

// Close closes the parts in reverse order of opening, releasing the lock
// last, and returns their errors.
func (s *State) Close() error {
	var errs []error
	if s.Journal != nil {
		errs = append(errs, s.Journal.Close())
		s.Journal = nil
	}
	if s.PageFile != nil {
		errs = append(errs, s.PageFile.Close())
		s.PageFile = nil
	}
	if s.Lock != nil {
		errs = append(errs, s.Lock.Close())
		s.Lock = nil
	}
	return errors.Join(errs...)
}

// Run opens (or creates) the store in dir and recovers it, in this order
// (docs/DESIGN.md, "Opening and recovery"):
//
//  1. Unless ReadOnly, it creates dir (new parents made durable) and takes
//     its lock file: ErrLocked at once if another handle holds it.
//  2. It refuses a directory whose page file was lost while the rest of
//     the store remains (ErrCorrupt), rather than create a new store over
//     the old journal.
//  3. It opens the page file (newest intact meta, db.redo, the free list
//     trusted or rebuilt) and the index on the meta's root.
//  4. It computes the replay position from the meta (ReplayPosition) and
//     opens the journal, verified from that position (torn tail
//     truncated), replaying every record after it through Apply during
//     the journal's own verifying pass (each record is read once).
//  5. It decides whether a checkpoint is due (Report.NeedsCheckpoint),
//     hands the State to Recovered, and takes that checkpoint through
//     Checkpoint before returning if CheckpointBeforeServing; else the
//     caller starts serving and takes it in the background (the store is
//     consistent and durable without it; it only makes the next crash
//     cheap).
//
// On error everything opened is closed again and the lock released.
func Run(dir string, o Options) (*State, *Report, error) {
	if o.Apply == nil {
		return nil, nil, errors.New("recovery: Apply is required")
	}
	if o.CheckpointBeforeServing && o.Checkpoint == nil {
		return nil, nil, errors.New("recovery: CheckpointBeforeServing needs Checkpoint")
	}
	if o.ChunkRecords <= 0 {
		o.ChunkRecords = 4096
	}
	if o.FS == nil {
		o.FS = vfs.OS
	}
	o.ReadOnly = o.ReadOnly || o.PageFile.ReadOnly || o.Journal.ReadOnly
	o.PageFile.FS, o.Journal.FS = o.FS, o.FS
	o.PageFile.ReadOnly, o.Journal.ReadOnly = o.ReadOnly, o.ReadOnly
	dir = filepath.Clean(dir)
	start := time.Now()
	rep := &Report{}
	st := &State{}
	fail := func(err error) (*State, *Report, error) {
		_ = st.Close()
		return nil, rep, err
	}

	if !o.ReadOnly {
		lk, err := lock(o.FS, dir)
		if err != nil {
			return nil, rep, err
		}
		st.Lock = lk
	}
	if err := checkNotLost(o.FS, dir); err != nil {
		return fail(err)
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
	if err := settleDamaged(pf, ix, rep, o.ReadOnly); err != nil {
		return fail(err)
	}

	// The journal is verified from the replay position on; the segments
	// before it hold only values the index still points to, and each is
	// verified when read (or by journal.Verify, which DB.Check runs). The
	// records after the replay position are applied as the journal's Open
	// verifies them. They stay in memory (index Updates are committed to
	// the page file's dirty pages, which only a checkpoint writes): if the
	// Open fails further on, fail discards them; if it succeeds, it has
	// synced the tail it found before returning, so the records are
	// durable before anything built from them is served or checkpointed.
	from := ReplayPosition(pf.Meta())
	rep.ReplayFrom = from
	st.LastApplied = from
	jo := o.Journal
	jo.VerifyFrom = from
	jo.StoreID = pf.StoreID() // a segment from another store is ErrCorrupt, not replayed
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
	if jo.SkipDamaged {
		// Skipping every segment as another store's would drop the whole
		// journal and serve the foreign db.data's index.
		if err := otherStoresJournal(o.FS, dir, jo.StoreID); err != nil {
			return fail(err)
		}
	}
	t = time.Now()
	j, jrep, err := journal.Open(dir, jo)
	if errors.Is(err, journal.ErrOtherStore) {
		if oerr := otherStoresJournal(o.FS, dir, jo.StoreID); oerr != nil {
			err = oerr
		}
	}
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

	// Damage skipped (SkipDamaged): the journal's replay position may
	// still lie before it, or name the damaged batch itself (the last one
	// a checkpoint reflects), and every later Open without SkipDamaged,
	// verifying from that position, would fail on it again: a store the
	// operator accepted the loss for, and still cannot open. Everything
	// else was replayed, so a journal mark after it all is the replay
	// position of the recovery checkpoint.
	marked := false
	if !o.ReadOnly && rp != nil && len(rep.Journal.Skipped) > 0 {
		loc, err := j.Mark()
		if err != nil {
			return fail(fmt.Errorf("recovery: journal: a mark after the damage skipped: %w", err))
		}
		st.LastApplied, marked = loc, true
	}

	// Never checkpointed (a new store, or one whose first checkpoint a
	// crash prevented): the meta's replay position is zero, which also
	// stands for a crash during the store's creation, after db.data and
	// before db-1.log was made; so a journal with no segment at all
	// passes. Once the journal exists, a checkpoint before serving stamps
	// a replay position in it (a mark after what was replayed), and from
	// then on a lost db-1.log, or any segment, is ErrCorrupt: nothing
	// acknowledged is written before the meta names the journal.
	first := false
	if !o.ReadOnly && rp != nil && from.IsZero() && o.Checkpoint != nil {
		if !marked {
			loc, err := j.Mark()
			if err != nil {
				return fail(fmt.Errorf("recovery: journal: a mark for the first checkpoint: %w", err))
			}
			st.LastApplied, marked = loc, true
		}
		first = true
	}

	rep.FreeListProof = pf.FreeListProof()
	rep.NeedsCheckpoint = !o.ReadOnly && (rep.RecordsReplayed > 0 || rep.PageFile.RedoApplied ||
		rep.PageFile.FreeListPath == pagefile.FreeListScanned || rep.Journal.TornBytesTruncated > 0 ||
		rep.FreeListProof.Lies > 0 || marked)
	rep.TotalDuration = time.Since(start)

	if o.Recovered != nil {
		if err := o.Recovered(st, rep); err != nil {
			return fail(err)
		}
	}
	if rep.NeedsCheckpoint && (o.CheckpointBeforeServing || first) {
		t = time.Now()
		if err := o.Checkpoint(); err != nil {
			return fail(fmt.Errorf("recovery: checkpoint after recovery: %w", err))
		}
		rep.Checkpointed, rep.CheckpointDuration = true, time.Since(t)
	}
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
	reason := fmt.Sprintf("%s: the journal begins after it, but the index refers to values in %s", journal.MissingSegments(oldest, to), oldest)
	if from := rep.ReplayFrom; !from.IsZero() && oldest < from.Segment && len(segs) > 0 {
		// Journal GC removes a segment the checkpointed index still
		// names once later writes replaced its values: their records,
		// after the replay position, drop the references again. If they
		// are gone, the index names a segment GC rightly removed, and the
		// damage is at the journal's end, which a cut at a record's
		// boundary or a removed last segment leaves no trace of.
		reason += fmt.Sprintf(" (removed outside kdb; or removed by journal GC after later writes replaced those values, and their records after the replay position %s are missing: the journal's end, from %s on, cut short or removed)",
			from, from.Segment)
	}
	d := journal.Damage{From: journal.Location{Segment: oldest}, To: journal.Location{Segment: to + 1}, Reason: reason}
	if !o.Journal.SkipDamaged {
		return fmt.Errorf("recovery: journal: %w: %s: %s", journal.ErrCorrupt, d.From, d.Reason)
	}
	rep.Journal.Skipped = append(rep.Journal.Skipped, d)
	return nil
}

// settleDamaged decides the pages the free-list scan could not read
// (pagefile.Report.Damaged): one the index reaches is a damaged store,
// ErrCorrupt as the scan found it; the others were free (a page is in use
// only if the index reaches it, which is what Check holds too), and are
// freed again, so that the next checkpoint stamps them free and reuses
// them. A read-only open leaves them aside: nothing reads them.
func settleDamaged(pf *pagefile.File, ix *index.Store, rep *Report, readOnly bool) error {
	damaged := rep.PageFile.Damaged
	if len(damaged) == 0 {
		return nil
	}
	ids := make([]pagefile.PageID, len(damaged))
	for i, d := range damaged {
		ids[i] = d.ID
	}
	owned, err := ix.Owns(ids)
	if err != nil {
		return fmt.Errorf("recovery: index: %w", err)
	}
	if len(owned) > 0 {
		for _, d := range damaged {
			if d.ID == owned[0] {
				return fmt.Errorf("recovery: page file: %w (a page the index reaches)", d.Err)
			}
		}
	}
	if readOnly {
		return nil
	}
	for _, id := range ids {
		if err := pf.Free(id); err != nil {
			return fmt.Errorf("recovery: page file: free the damaged, unreachable %v: %w", id, err)
		}
	}
	rep.DamagedFreed = len(ids)
	return nil
}

// otherStoresJournal returns an error naming db.data when no journal
// segment in dir names the page file's store (want) and those whose
// header can be read (one at least) all name one and the same other
// store: the segments agree with one another, so the page file is the
// odd one out (another store's db.data copied in), or the journal was
// replaced whole. A segment whose header cannot be read (damaged, cut,
// empty) does not decide it either way, so that it cannot turn the refusal
// into SkipDamagedJournal dropping the whole journal. It returns nil
// otherwise (a segment of this store, or of several stores: the journal's
// own error says which).
func otherStoresJournal(fsys vfs.FS, dir string, want [16]byte) error {
	if want == ([16]byte{}) {
		return nil
	}
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ids []journal.SegmentID
	for _, n := range names {
		if id, ok := journal.ParseSegmentName(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var other [16]byte
	var theirs []journal.SegmentID
	for _, id := range ids {
		st, err := journal.SegmentStoreID(fsys, filepath.Join(dir, id.String()))
		switch {
		case err != nil || st == ([16]byte{}):
			continue // unreadable, or a version 1 segment: no store to compare
		case st == want || len(theirs) > 0 && st != other:
			return nil
		}
		other = st
		theirs = append(theirs, id)
	}
	if len(theirs) == 0 {
		return nil
	}
	which := theirs[0].String()
	if n := len(theirs); n > 1 {
		which = fmt.Sprintf("%d of them, %s to %s", n, theirs[0], theirs[n-1])
	}
	return fmt.Errorf("%w: %s belongs to store %x, but every journal segment whose header reads (%s; %d segments in all) belongs to store %x: "+
		"db.data was copied in from another store (or the whole journal was); put this store's own db.data back. "+
		"Skipping the segments as damage (SkipDamagedJournal, kdbtool recover --skip-damaged) would drop the whole journal: refused",
		ErrCorrupt, filepath.Join(dir, "db.data"), want, which, len(ids), other)
}
