package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

func init() {
	register("inspect", command{
		summary: "show meta slots, db.free, db.redo, journal segments, indexes (read-only, no recovery)",
		run:     runInspect,
	})
}

// Inspect output, field names after docs/FORMAT.md.
type inspectOut struct {
	Dir      string `json:"dir"`
	PageSize int    `json:"page_size"`
	StoreID  string `json:"store_id"`
	DataSize int64  `json:"data_size"`
	// RecoveryPending: db.data is shorter than its page count and the
	// db.redo Open would apply writes the rest (an interrupted checkpoint
	// that grew db.data): a warning, not damage.
	RecoveryPending bool        `json:"recovery_pending"`
	Meta            metaOut     `json:"meta"`
	MetaSlots       []slotOut   `json:"meta_slots"`
	FreeList        freeListOut `json:"free_list"`
	Redo            redoOut     `json:"redo"`
	Journal         journalOut  `json:"journal"`
	Store           storeOut    `json:"store"`
	// Leftovers: partial .broken copies a killed repair --apply left
	// (brokenLeftovers), each also a warning; repair --apply removes them.
	Leftovers []leftoverOut `json:"leftovers"`
	Problems  []problem     `json:"problems"`
	raw       *pagefile.Inspection
	jerr      error // opening the journal read-only
	serr      error // opening or reading the store read-only
}

type metaOut struct {
	CheckpointID  string `json:"checkpoint_id"`
	Seq           uint64 `json:"seq"`
	PageSize      uint32 `json:"page_size"`
	PageCount     uint64 `json:"page_count"`
	Root          uint64 `json:"root"`
	ReplaySegment uint64 `json:"replay_segment"`
	ReplayOffset  uint64 `json:"replay_offset"`
	AppLen        int    `json:"app_len"`
}

type slotOut struct {
	Slot         int    `json:"slot"`
	Intact       bool   `json:"intact"`
	Unwritten    bool   `json:"unwritten"`
	Error        string `json:"error"`
	Seq          uint64 `json:"seq"`
	CheckpointID string `json:"checkpoint_id"`
	PageCount    uint64 `json:"page_count"`
}

type freeFileOut struct {
	Name         string `json:"name"`
	Present      bool   `json:"present"`
	Intact       bool   `json:"intact"`
	Error        string `json:"error"`
	StoreOK      bool   `json:"store_ok"`
	CheckpointID string `json:"checkpoint_id"`
	PageCount    uint64 `json:"page_count"`
	FreePages    uint64 `json:"free_pages"`
	Ranges       int    `json:"ranges"`
	MatchesMeta  bool   `json:"matches_meta"`
}

type freeListOut struct {
	// MatchesMeta, FreePages, Ranges and CheckpointID describe db.free.
	Present      bool   `json:"present"`
	Intact       bool   `json:"intact"`
	CheckpointID string `json:"checkpoint_id"`
	MatchesMeta  bool   `json:"matches_meta"`
	FreePages    uint64 `json:"free_pages"`
	Ranges       int    `json:"ranges"`
	// OpenWould is "trusted" (TrustedFile names the file) or "scanned"
	// (Reason says why).
	OpenWould   string        `json:"open_would"`
	TrustedFile string        `json:"trusted_file"`
	Reason      string        `json:"reason"`
	Files       []freeFileOut `json:"files"`
	// LiedPages counts the pages the trusted file lists as free that are
	// not stamped free in db.data (in use: reachable, or at least written
	// since they were freed); FirstLiedPage is the first, LieReason what
	// it holds. Open would trust such a list and set it aside at the
	// first such page it is about to use (writing none of them).
	LiedPages     uint64 `json:"lied_pages"`
	FirstLiedPage uint64 `json:"first_lied_page"`
	LieReason     string `json:"lie_reason"`
	// DamagedLiedPages counts those of LiedPages that are damaged (their
	// checksum or ID fails) rather than holding another page: the list
	// may be right about them; check says whether a tree reaches them.
	DamagedLiedPages uint64 `json:"damaged_lied_pages"`
	// BeyondEndPages counts those of LiedPages beyond the end of a cut
	// db.data: missing, not in use.
	BeyondEndPages uint64 `json:"beyond_end_lied_pages"`
}

type redoOut struct {
	Present    bool   `json:"present"`
	Size       int64  `json:"size"`
	WouldApply bool   `json:"would_apply"`
	Pages      int    `json:"pages"`
	Ignored    string `json:"ignored"`
}

type segmentOut struct {
	ID     uint32 `json:"id"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	First  string `json:"first"`
	Last   string `json:"last"`
	End    string `json:"end"`
	Sealed bool   `json:"sealed"`
	// Replay: the segment holds records after the checkpoint's replay
	// position (or the position itself), so recovery reads it.
	Replay bool `json:"replay"`
}

type journalOut struct {
	Error     string       `json:"error"`
	Segments  []segmentOut `json:"segments"`
	Records   int64        `json:"records"`
	Batches   int64        `json:"batches"`
	Tail      string       `json:"tail"`
	TornBytes int64        `json:"torn_bytes"`
	TornAt    string       `json:"torn_at"`
	// TornBeforeReplay says the torn tail begins, or the journal ends
	// (then TornAt is its tail), at or before the checkpoint's replay
	// position: bytes that were durable, so not a crash's torn tail but a
	// journal cut short; recovery refuses it.
	TornBeforeReplay bool `json:"torn_before_replay"`
	// AfterCheckpoint counts the user records after the checkpoint's
	// replay position: what a recovery would replay (-1 if unknown).
	AfterCheckpoint int64 `json:"records_after_checkpoint"`
	// tornAt is TornAt as a location; replayed is the meta's replay
	// position (zero if there is no meta).
	tornAt, replayed journal.Location
}

type indexOut struct {
	// Namespace is the kdb namespace of the index (DB.Namespace: an
	// integration's, such as an MQTT hook's), "" for a user index.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Keys      uint64 `json:"keys"`
}

type subOut struct {
	Name    string `json:"name"`
	Pending uint64 `json:"pending"`
}

type destOut struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Count   uint64 `json:"count"`
	Bytes   uint64 `json:"bytes"`
	NextSeq uint64 `json:"next_seq"`
	// Subscriptions: a topic's ([] for a queue).
	Subscriptions []subOut `json:"subscriptions"`
}

// storeOut is the store as a read-only open sees it: its last checkpoint
// plus the journal written since (journal.records_after_checkpoint
// records), replayed in memory.
type storeOut struct {
	AsOf         string     `json:"as_of_checkpoint"`
	Error        string     `json:"error"`
	Indexes      []indexOut `json:"indexes"`
	Destinations []destOut  `json:"destinations"`
	Prepared     []string   `json:"prepared"`
}

// problem is one finding of inspect, check or repair.
type problem struct {
	Severity string `json:"severity"` // "error" or "warning"
	Area     string `json:"area"`     // "pagefile", "free_list", "redo", "journal", "index", "store", "leftover"
	Message  string `json:"message"`
}

func runInspect(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect", "DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	dir, err := oneArg(fs)
	if err != nil {
		return argsFailed(fs, stdout, err)
	}
	out, err := retryLive(dir, func() (*inspectOut, bool, error) {
		out, err := inspectStore(dir)
		return out, err == nil && len(out.Problems) == 0, err
	})
	if err != nil {
		return failed(stdout, stderr, "inspect", *asJSON, "", err, exitFor(err))
	}
	code := exitOK
	for _, p := range out.Problems {
		if p.Severity == "error" {
			code = exitProblems
		}
	}
	if notDamage(out.jerr) || notDamage(out.serr) {
		code = exitIO // out of file descriptors or memory, a permission: not the store's fault
	}
	if *asJSON {
		if writeJSON(stdout, out) != exitOK {
			return exitIO
		}
		return code
	}
	printInspect(stdout, out)
	return code
}

// inspectStore reads everything inspect shows. It never writes: the page
// file through pagefile.Inspect, the journal opened ReadOnly, the store
// opened ReadOnly (no lock, no recovery on disk). An error is returned only
// when db.data itself cannot be read; damage elsewhere is a Problem.
func inspectStore(dir string) (*inspectOut, error) {
	if err := storeExists(dir); err != nil {
		return nil, err
	}
	in, err := pagefile.Inspect(vfs.OS, dir)
	if err != nil {
		return nil, err
	}
	// Every slice starts empty, never nil: --json prints every documented
	// field, [] rather than null or nothing (a script reads d["problems"]).
	out := &inspectOut{Dir: dir, PageSize: in.PageSize, StoreID: in.StoreID, DataSize: in.DataSize, raw: in,
		MetaSlots: []slotOut{}, FreeList: freeListOut{Files: []freeFileOut{}}, Leftovers: []leftoverOut{}, Problems: []problem{}}
	m := in.Meta
	out.Meta = metaOut{
		CheckpointID: m.ID.String(), Seq: m.Seq, PageSize: m.PageSize, PageCount: m.PageCount,
		Root: uint64(m.Root), ReplaySegment: m.ReplaySegment, ReplayOffset: m.ReplayOffset, AppLen: len(m.App),
	}
	for i, s := range in.Slots {
		so := slotOut{Slot: i, Intact: s.Intact, Unwritten: s.Unwritten, Error: s.Err}
		if s.Intact {
			so.Seq, so.CheckpointID, so.PageCount = s.Meta.Seq, s.Meta.ID.String(), s.Meta.PageCount
		} else if !s.Unwritten {
			out.Problems = append(out.Problems, problem{"warning", "pagefile",
				fmt.Sprintf("meta slot %d not intact: %s", i, s.Err)})
		}
		out.MetaSlots = append(out.MetaSlots, so)
	}

	// The journal is read first: what can repair a short db.data depends
	// on it. Its problems are listed after the page file's.
	out.Journal, out.jerr = inspectJournal(dir, &m)
	// db.data shorter than its page count is a cut page file, unless the
	// db.redo that Open would apply writes the pages beyond its end: a
	// checkpoint that grows db.data syncs db.redo before the grow, so a
	// crash in between leaves this state, and recovery completes it.
	need := int64(m.PageCount) * int64(in.PageSize)
	short := in.DataSizeAfterRedo < need
	if short {
		out.Problems = append(out.Problems, problem{"error", "pagefile", fmt.Sprintf(
			"db.data is %d bytes, shorter than its %d pages of %d bytes (%d bytes): the page file was cut; Open refuses it and a free-list rebuild (recover --force-scan) cannot help; %s",
			in.DataSize, m.PageCount, in.PageSize, need, rebuildAdvice(out.Journal, out.jerr))})
	} else if in.DataSize < need {
		out.RecoveryPending = true
		out.Problems = append(out.Problems, problem{"warning", "pagefile", fmt.Sprintf(
			"recovery pending: db.data is %d bytes, shorter than its %d pages of %d bytes (%d bytes), and db.redo holds the pages beyond its end: a checkpoint that grows db.data was interrupted after db.redo was synced; the next open (kdbtool recover, or the application's) applies db.redo and completes it",
			in.DataSize, m.PageCount, in.PageSize, need)})
	}

	fl := &out.FreeList
	fl.TrustedFile, fl.Reason = in.TrustedFile, in.Reason
	fl.OpenWould = pagefile.FreeListScanned
	if in.TrustedFile != "" {
		fl.OpenWould = pagefile.FreeListTrusted
	}
	for _, f := range in.FreeFiles {
		fo := freeFileOut{Name: f.Name, Present: f.Present, Intact: f.Intact, Error: f.Err, StoreOK: f.StoreOK,
			PageCount: f.PageCount, FreePages: f.FreePages, Ranges: len(f.Ranges), MatchesMeta: f.MatchesMeta}
		if f.Intact {
			fo.CheckpointID = f.ID.String()
		}
		fl.Files = append(fl.Files, fo)
		if f.Name == "db.free" {
			fl.Present, fl.Intact, fl.CheckpointID = fo.Present, fo.Intact, fo.CheckpointID
			fl.MatchesMeta, fl.FreePages, fl.Ranges = fo.MatchesMeta, fo.FreePages, fo.Ranges
		}
	}
	// A writable open refuses a directory at any of these names (its
	// checkpoints write db.free.tmp and replace the others by renames),
	// and anything but a regular file at db.free.tmp, a symbolic link not
	// followed (a checkpoint would write through it, outside the store's
	// directory); a read-only one does not mind them, so say so here.
	for _, name := range []string{"db.free", "db.free.prev"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.IsDir() {
			out.Problems = append(out.Problems, problem{"error", "free_list", fmt.Sprintf(
				"%s is a directory, not a free-list file: it would fail every checkpoint, so a writable open refuses the store; kdbtool repair --apply moves it aside",
				filepath.Join(dir, name))})
		}
	}
	if st, err := os.Lstat(filepath.Join(dir, "db.free.tmp")); err == nil && !st.Mode().IsRegular() {
		out.Problems = append(out.Problems, problem{"error", "free_list", fmt.Sprintf(
			"%s is %s, not a free-list file: every checkpoint writes the free list there, so a writable open refuses the store; kdbtool repair --apply moves it aside",
			filepath.Join(dir, "db.free.tmp"), vfs.FileKind(st.Mode()))})
	}
	// Names of the journal's form that it does not read (not in canonical
	// form: db-0.log, db-042.log, a number past 2^32): a segment renamed
	// by hand is invisible to the store, so say so.
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, "db-") && strings.HasSuffix(n, ".log") {
				if _, ok := journal.ParseSegmentName(n); !ok {
					out.Problems = append(out.Problems, problem{"warning", "journal", fmt.Sprintf(
						"%s looks like a journal segment but is not named as one (db-N.log, N from 1, no leading zero): the store ignores it; if it was renamed by hand, its records are not read",
						filepath.Join(dir, n))})
				}
			}
		}
	}
	// What a repair --apply killed while saving a .broken copy left: the
	// store never reads it, but it takes space and looks like a backup.
	out.Leftovers = brokenLeftovers(dir)
	for _, l := range out.Leftovers {
		out.Problems = append(out.Problems, problem{"warning", "leftover", fmt.Sprintf(
			"%s (%d bytes) is a partial .broken copy that a kdbtool repair --apply killed while saving it left (unless a repair --apply is running now); the store does not use it: kdbtool repair --apply removes it",
			filepath.Join(dir, l.Name), l.Size)})
	}
	fl.LiedPages, fl.FirstLiedPage, fl.LieReason = in.Lies, uint64(in.FirstLie), in.LieReason
	fl.DamagedLiedPages, fl.BeyondEndPages = in.DamagedLies, in.BeyondEnd
	switch {
	case in.Lies > 0 && in.DamagedLies == in.Lies && !short:
		// Damaged pages, not pages in use: a free page damaged on disk
		// is no loss; a damaged page a tree reaches is the index's
		// problem, which check reports.
		out.Problems = append(out.Problems, problem{"warning", "free_list", fmt.Sprintf(
			"%s lists %d damaged pages (first %v: %s); Open would trust it, fail to prove the first free and set the list aside, writing none of them; a damaged page no tree reaches (check says) held nothing; kdbtool repair --apply (or recover --force-scan) rebuilds the list by a scan, which frees such pages again",
			in.TrustedFile, in.Lies, in.FirstLie, in.LieReason)})
	case in.Lies > 0:
		out.Problems = append(out.Problems, problem{"error", "free_list", freeListLie(in, short)})
	}
	if in.TrustedFile == "" {
		out.Problems = append(out.Problems, problem{"warning", "free_list",
			"no free-list file matches the meta; Open would scan every page: " + in.Reason})
	} else if in.TrustedFile != "db.free" {
		out.Problems = append(out.Problems, problem{"warning", "free_list",
			"db.free does not match the meta; Open would trust " + in.TrustedFile})
	}

	if st, err := os.Stat(filepath.Join(dir, "db.redo")); err == nil {
		out.Redo.Present, out.Redo.Size = true, st.Size()
	}
	out.Redo.WouldApply, out.Redo.Pages, out.Redo.Ignored = in.Redo.RedoApplied, in.Redo.RedoPages, in.Redo.RedoIgnored
	// INVARIANT: pagefile reports an applied batch only through this text
	// (pagefile.Report has no field for it).
	if in.Redo.RedoIgnored != "" && !strings.Contains(in.Redo.RedoIgnored, "already applied") {
		out.Problems = append(out.Problems, problem{"warning", "redo", "db.redo ignored: " + in.Redo.RedoIgnored})
	}

	if out.Journal.Error != "" {
		out.Problems = append(out.Problems, readProblem("journal", out.jerr))
	} else if out.Journal.TornBeforeReplay {
		out.Problems = append(out.Problems, problem{"error", "journal",
			fmt.Sprintf("the journal is cut or damaged at %s, at or before the checkpoint's replay position %s: those bytes were durable, so this is not a crash's torn tail (recovery refuses the store)", out.Journal.TornAt,
				journal.Location{Segment: journal.SegmentID(out.Meta.ReplaySegment), Offset: int64(out.Meta.ReplayOffset)})})
	} else if out.Journal.TornBytes > 0 || out.Journal.TornAt != "" {
		out.Problems = append(out.Problems, problem{"warning", "journal",
			fmt.Sprintf("torn tail: %d bytes at %s (recovery truncates them)", out.Journal.TornBytes, out.Journal.TornAt)})
	}

	if errors.Is(out.jerr, errHugeSegment) {
		// The store's open reads the journal too: not opened, and said
		// once, as the journal's problem.
		out.serr = out.jerr
		out.Store = storeOut{Indexes: []indexOut{}, Destinations: []destOut{}, Prepared: []string{},
			Error: "not read: its open would read the whole journal (see the journal problem)"}
	} else {
		out.Store, out.serr = inspectIndexes(dir)
	}
	out.Store.AsOf = out.Meta.CheckpointID
	if out.Store.Error != "" && !errors.Is(out.serr, errHugeSegment) {
		out.Problems = append(out.Problems, readProblem("store", out.serr))
	}
	return out, nil
}

// maxSegmentFile bounds the size of a journal segment's file: the journal
// preallocates a segment in steps up to SegmentSize, never past it, and
// SegmentSize is at most 2 GiB (FORMAT.md §4.1; offsets in a frame are
// 32-bit).
const maxSegmentFile = 1 << 31

// errHugeSegment marks a journal segment larger than maxSegmentFile.
var errHugeSegment = errors.New("larger than any segment the journal writes")

// hugeSegments returns a journal.ErrCorrupt (and errHugeSegment) naming
// the journal segments in dir whose file is larger than maxSegmentFile, or
// nil. It reads only their sizes: opening the journal, or the store, reads
// every byte of every segment (the bytes after the last record are checked
// to be zeros), and a sparse file of a terabyte took hours.
func hugeSegments(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // the journal's open says why
	}
	var huge []string
	for _, e := range ents {
		if _, ok := journal.ParseSegmentName(e.Name()); !ok {
			continue
		}
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil || !st.Mode().IsRegular() || st.Size() <= maxSegmentFile {
			continue
		}
		huge = append(huge, fmt.Sprintf("%s is %d bytes", filepath.Join(dir, e.Name()), st.Size()))
	}
	if len(huge) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s, %w (at most SegmentSize, itself at most 2 GiB: FORMAT.md §4.1), so it was extended outside kdb (a sparse copy, a truncate); not read, nor the store, whose open reads every segment whole; the journal writes nothing past 2 GiB: if every byte after that is zero, cutting the file to 2 GiB (truncate -s 2G) loses nothing",
		journal.ErrCorrupt, strings.Join(huge, ", "), errHugeSegment)
}

// readProblem is the problem of a part of the store that could not be
// read: damage, or, for any other error (out of file descriptors or
// memory, a permission), an I/O error that says it is not damage.
func readProblem(area string, err error) problem {
	if notDamage(err) {
		return problem{"error", area, "could not be read (an I/O or resource error, not damage): " + err.Error()}
	}
	return problem{"error", area, err.Error()}
}

// notDamage reports whether err is an error that is not about damaged
// bytes (exit 3).
func notDamage(err error) bool { return err != nil && !isCorrupt(err) }

// freeListLie describes a trusted free-list file that lists pages in use,
// and what fixes it: a rebuild by a scan, unless db.data is short (then
// the scan fails too, and the short page file's problem says what can
// help).
func freeListLie(in *pagefile.Inspection, short bool) string {
	fix := "rebuild it: kdbtool recover --force-scan, or kdbtool repair --apply"
	if short {
		fix = "a rebuild by a scan cannot help while db.data is shorter than its page count (see that problem)"
	}
	if in.BeyondEnd > 0 {
		// Missing pages, not pages in use; and Open refuses the store
		// before it could prove one.
		what := fmt.Sprintf("%d pages beyond the end of db.data", in.Lies)
		if in.BeyondEnd < in.Lies {
			what = fmt.Sprintf("%d pages that are not free (%d beyond the end of db.data, %d in use or damaged)", in.Lies, in.BeyondEnd, in.Lies-in.BeyondEnd)
		}
		return fmt.Sprintf("%s lists %s as free (first %v: %s): db.data was cut short; %s",
			in.TrustedFile, what, in.FirstLie, in.LieReason, fix)
	}
	return fmt.Sprintf("%s lists %d pages in use as free (first %v: %s); Open would trust it, prove each page before use and set the list aside at the first lie, writing none of them; %s",
		in.TrustedFile, in.Lies, in.FirstLie, in.LieReason, fix)
}

// journalFromStart reports whether the journal jo (jerr: its open) still
// begins at db-1.log, so that it holds every write and repair
// --rebuild-index can replay it into a new db.data; else it returns the
// first segment's name ("no segment" if none; "" if the journal is damaged).
func journalFromStart(jo journalOut, jerr error) (bool, string) {
	switch {
	case jerr != nil:
		return false, ""
	case len(jo.Segments) == 0:
		return false, "no segment"
	case jo.Segments[0].ID != 1:
		return false, jo.Segments[0].Name
	}
	return true, ""
}

// rebuildAdvice says whether db.data can be rebuilt from the journal.
func rebuildAdvice(jo journalOut, jerr error) string {
	ok, first := journalFromStart(jo, jerr)
	switch {
	case ok:
		return "kdbtool repair --apply --rebuild-index rebuilds it from the journal, which still begins at db-1.log"
	case first == "":
		return "the journal is damaged too, so db.data cannot be rebuilt from it: restore it from a backup"
	}
	return fmt.Sprintf("the journal starts at %s, not db-1.log, so it no longer holds every write and db.data cannot be rebuilt from it: restore it from a backup", first)
}

// inspectJournal opens the journal read-only. With m from db.data it
// requires the segments m's replay position needs; a nil m requires none
// (db.data is lost).
func inspectJournal(dir string, m *pagefile.Meta) (journalOut, error) {
	jo := journalOut{Segments: []segmentOut{}}
	if err := hugeSegments(dir); err != nil {
		jo.Error = err.Error()
		return jo, err
	}
	// The segments the meta's replay position requires (the values the
	// index keeps in the journal are checked by the store's open).
	var need journal.Need
	if m != nil {
		need = journal.Need{First: journal.SegmentID(m.ReplaySegment), Last: journal.SegmentID(m.ReplaySegment)}
		if need.First == 0 {
			need.First = 1
		}
	} else {
		m = &pagefile.Meta{}
	}
	j, rep, err := journal.Open(dir, journal.Options{ReadOnly: true, Need: need})
	if err != nil {
		jo.Error = err.Error()
		return jo, err
	}
	defer j.Close()
	jo.Records, jo.Batches, jo.Tail = rep.Records, rep.Batches, rep.TailLocation.String()
	jo.TornBytes = rep.TornBytesTruncated
	if rep.TornBytesTruncated > 0 || !rep.TornAt.IsZero() {
		jo.TornAt = rep.TornAt.String()
	}
	replayed := journal.Location{Segment: journal.SegmentID(m.ReplaySegment), Offset: int64(m.ReplayOffset)}
	jo.tornAt = rep.TornAt
	switch {
	case jo.TornAt != "" && !replayed.IsZero() && !replayed.Less(rep.TornAt):
		jo.TornBeforeReplay = true
	case jo.TornAt == "" && !replayed.IsZero() && !replayed.Less(rep.TailLocation):
		// Cut at a record's boundary: no torn bytes, but the journal
		// ends at or before the record at the replay position, which
		// was durable. It is cut where it ends.
		jo.TornBeforeReplay, jo.TornAt, jo.tornAt = true, rep.TailLocation.String(), rep.TailLocation
	}
	jo.replayed = replayed
	jo.AfterCheckpoint = 0
	if err := j.Iterate(journal.Location{Segment: replayed.Segment}, func(loc journal.Location, _ journal.Record) error {
		if replayed.Less(loc) {
			jo.AfterCheckpoint++
		}
		return nil
	}); err != nil {
		jo.AfterCheckpoint = -1
	}
	for _, s := range j.Segments() {
		so := segmentOut{ID: uint32(s.ID), Name: s.ID.String(), Size: s.Size, First: s.First.String(),
			End: s.End.String(), Sealed: s.Sealed, Replay: uint64(s.ID) >= m.ReplaySegment}
		if !s.Last.IsZero() {
			so.Last = s.Last.String()
		}
		jo.Segments = append(jo.Segments, so)
	}
	return jo, nil
}

func inspectIndexes(dir string) (storeOut, error) {
	so := storeOut{Indexes: []indexOut{}, Destinations: []destOut{}, Prepared: []string{}}
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true})
	if err != nil {
		so.Error = err.Error()
		return so, err
	}
	defer db.Close()
	err = db.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		for _, n := range names {
			k, err := s.Len(n)
			if err != nil {
				return err
			}
			so.Indexes = append(so.Indexes, indexOut{Name: n, Keys: k})
		}
		// The other namespaces' indexes (an integration's); the broker's
		// trees are shown as its destinations below.
		nss, err := s.Namespaces()
		if err != nil {
			return err
		}
		for _, ns := range nss {
			if ns == broker.Namespace {
				continue
			}
			n, err := db.Namespace(ns)
			if err != nil {
				return err
			}
			if err := n.View(func(s *kdb.Snapshot) error {
				names, err := s.Indexes()
				for _, ix := range names {
					k, lerr := s.Len(ix)
					if lerr != nil {
						return lerr
					}
					so.Indexes = append(so.Indexes, indexOut{Namespace: ns, Name: ix, Keys: k})
				}
				return err
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		var ds []broker.DestInfo
		if ds, err = brokerOf(db).Destinations(); err == nil {
			for _, d := range ds {
				do := destOut{Kind: d.Kind.String(), Name: d.Name, Count: d.Count, Bytes: d.Bytes, NextSeq: d.NextSeq, Subscriptions: []subOut{}}
				if d.Kind == broker.Topic {
					subs, serr := brokerOf(db).Subscriptions(d.Name)
					if serr != nil {
						err = serr
						break
					}
					for _, s := range subs {
						do.Subscriptions = append(do.Subscriptions, subOut{s.Name, s.Pending})
					}
				}
				so.Destinations = append(so.Destinations, do)
			}
		}
	}
	if err == nil {
		var p []string
		if p, err = brokerOf(db).Prepared(); err == nil && p != nil {
			so.Prepared = p
		}
	}
	if err != nil {
		so.Error = err.Error()
	}
	return so, err
}

func printInspect(w io.Writer, o *inspectOut) {
	fmt.Fprintf(w, "store %s\n", o.Dir)
	fmt.Fprintf(w, "  page size %d, store ID %s, db.data %d bytes\n", o.PageSize, o.StoreID, o.DataSize)
	fmt.Fprintf(w, "meta (Open would use): checkpoint %s, PageCount %d, Root %d, replay db-%d.log@%d\n",
		o.Meta.CheckpointID, o.Meta.PageCount, o.Meta.Root, o.Meta.ReplaySegment, o.Meta.ReplayOffset)
	for _, s := range o.MetaSlots {
		if s.Intact {
			fmt.Fprintf(w, "  slot %d: intact, seq %d, checkpoint %s, PageCount %d\n", s.Slot, s.Seq, s.CheckpointID, s.PageCount)
		} else if s.Unwritten {
			fmt.Fprintf(w, "  slot %d: never written\n", s.Slot)
		} else {
			fmt.Fprintf(w, "  slot %d: NOT intact: %s\n", s.Slot, oneLine(s.Error))
		}
	}
	if o.FreeList.TrustedFile != "" {
		fmt.Fprintf(w, "free list: Open would trust %s", o.FreeList.TrustedFile)
		switch fl := o.FreeList; {
		case fl.LiedPages > 0 && fl.DamagedLiedPages == fl.LiedPages:
			fmt.Fprintf(w, ", which lists %d damaged pages (first page %d)", fl.LiedPages, fl.FirstLiedPage)
		case fl.LiedPages > 0 && fl.BeyondEndPages == fl.LiedPages:
			fmt.Fprintf(w, ", which LIES: %d listed pages are beyond the end of db.data (first page %d)", fl.LiedPages, fl.FirstLiedPage)
		case fl.LiedPages > 0 && fl.BeyondEndPages > 0:
			fmt.Fprintf(w, ", which LIES: %d listed pages are beyond the end of db.data, %d in use or damaged (first page %d)",
				fl.BeyondEndPages, fl.LiedPages-fl.BeyondEndPages, fl.FirstLiedPage)
		case fl.LiedPages > 0:
			fmt.Fprintf(w, ", which LIES: %d listed pages are in use or damaged (first page %d)", fl.LiedPages, fl.FirstLiedPage)
		}
		fmt.Fprintf(w, "\n")
	} else {
		fmt.Fprintf(w, "free list: Open would scan every page (%s)\n", oneLine(o.FreeList.Reason))
	}
	for _, f := range o.FreeList.Files {
		switch {
		case !f.Present:
			fmt.Fprintf(w, "  %s: absent\n", f.Name)
		case !f.Intact:
			fmt.Fprintf(w, "  %s: NOT intact: %s\n", f.Name, oneLine(f.Error))
		default:
			fmt.Fprintf(w, "  %s: checkpoint %s, page count %d, free pages %d, ranges %d, matches meta %v\n",
				f.Name, f.CheckpointID, f.PageCount, f.FreePages, f.Ranges, f.MatchesMeta)
		}
	}
	switch {
	case !o.Redo.Present:
		fmt.Fprintf(w, "db.redo: absent\n")
	case o.Redo.WouldApply:
		fmt.Fprintf(w, "db.redo: %d bytes, Open would apply it (%d page images)\n", o.Redo.Size, o.Redo.Pages)
	case strings.Contains(o.Redo.Ignored, "already applied"):
		fmt.Fprintf(w, "db.redo: %d bytes, already applied\n", o.Redo.Size)
	case o.Redo.Ignored != "":
		fmt.Fprintf(w, "db.redo: %d bytes, ignored: %s\n", o.Redo.Size, oneLine(o.Redo.Ignored))
	default:
		fmt.Fprintf(w, "db.redo: %d bytes, already applied\n", o.Redo.Size)
	}
	if o.Journal.Error != "" {
		fmt.Fprintf(w, "journal: ERROR %s\n", oneLine(o.Journal.Error))
	} else {
		fmt.Fprintf(w, "journal: %d segments, %d records in %d batches, tail %s", len(o.Journal.Segments),
			o.Journal.Records, o.Journal.Batches, o.Journal.Tail)
		switch {
		case o.Journal.TornBeforeReplay:
			fmt.Fprintf(w, ", cut short at %s (%d torn bytes), before the replay position", o.Journal.TornAt, o.Journal.TornBytes)
		case o.Journal.TornBytes > 0:
			fmt.Fprintf(w, ", torn tail %d bytes at %s", o.Journal.TornBytes, o.Journal.TornAt)
		}
		fmt.Fprintf(w, "; %d records after the checkpoint\n", o.Journal.AfterCheckpoint)
		for _, s := range o.Journal.Segments {
			fmt.Fprintf(w, "  %s: %d bytes, first %s, last %s, sealed %v, replay %v\n",
				s.Name, s.Size, s.First, orDash(s.Last), s.Sealed, s.Replay)
		}
	}
	if o.Store.Error != "" {
		fmt.Fprintf(w, "store: ERROR %s\n", oneLine(o.Store.Error))
	} else {
		fmt.Fprintf(w, "checkpoint %s plus the journal after it, replayed in memory:\n", o.Store.AsOf)
		fmt.Fprintf(w, "indexes: %d\n", len(o.Store.Indexes))
		for _, ix := range o.Store.Indexes {
			if ix.Namespace != "" {
				fmt.Fprintf(w, "  %s (namespace %s): %d keys\n", esc(ix.Name), ix.Namespace, ix.Keys)
				continue
			}
			fmt.Fprintf(w, "  %s: %d keys\n", esc(ix.Name), ix.Keys)
		}
		fmt.Fprintf(w, "destinations: %d\n", len(o.Store.Destinations))
		for _, d := range o.Store.Destinations {
			fmt.Fprintf(w, "  %s %s: %d messages, %d bytes, next seq %d\n", d.Kind, esc(d.Name), d.Count, d.Bytes, d.NextSeq)
			for _, s := range d.Subscriptions {
				fmt.Fprintf(w, "    subscription %s: %d pending\n", esc(s.Name), s.Pending)
			}
		}
		if len(o.Store.Prepared) > 0 {
			xids := make([]string, len(o.Store.Prepared))
			for i, x := range o.Store.Prepared {
				xids[i] = esc(x)
			}
			fmt.Fprintf(w, "prepared transactions: %s\n", strings.Join(xids, " "))
		}
	}
	printProblems(w, o.Problems)
}

// esc returns a name (index, destination, subscription, key, transaction
// ID) for the human output: as it is if it is plain (non-empty valid UTF-8,
// every rune printable in the sense of strconv.IsPrint, so no control
// character, newline or tab, and not starting with a double quote), else
// Go-quoted with escapes. So a name never forges a line of a report, and a
// quoted name is never mistaken for a plain one. The JSON output is exact.
func esc(s string) string {
	if s == "" || s[0] == '"' || !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// escBytes is esc for a byte string.
func escBytes(b []byte) string { return esc(string(b)) }

func printProblems(w io.Writer, ps []problem) {
	for _, p := range ps {
		fmt.Fprintf(w, "%s: %s: %s\n", p.Severity, p.Area, oneLine(p.Message))
	}
}
