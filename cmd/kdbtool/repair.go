package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

func init() {
	register("repair", command{
		summary: "say what would be repaired; --apply rebuilds db.free, cuts a torn journal tail, --rebuild-index",
		run:     runRepair,
	})
}

// Repair actions (the "action" field of the JSON output).
const (
	actRebuildFreeList = "rebuild_free_list"
	actTruncateTail    = "truncate_torn_tail"
	actApplyRedo       = "apply_redo"
	actRebuildIndex    = "rebuild_index"
	actMoveAside       = "move_aside"
)

type repairAction struct {
	Action string `json:"action"`
	Detail string `json:"detail"`
}

type repairOut struct {
	Dir       string          `json:"dir"`
	Apply     bool            `json:"apply"`
	Problems  []problem       `json:"problems"`  // what check found before
	Actions   []repairAction  `json:"actions"`   // what repair does (or would do)
	Unfixable []string        `json:"unfixable"` // what it cannot fix
	Saved     []string        `json:"saved"`     // .broken copies written
	Done      bool            `json:"done"`      // apply: the actions were carried out (the store was opened and closed)
	Recovery  map[string]any  `json:"recovery"`
	After     *repairAfterOut `json:"after"`
	OK        bool            `json:"ok"`
	// Lost says which journal records the repair loses (dry run: would
	// lose), "" if none: a journal cut short at or before the replay
	// position (journalLoss), cut by a plan that can be carried out;
	// LostBytes is a lower bound of their size (0: unknown or none).
	Lost      string `json:"lost"`
	LostBytes int64  `json:"lost_bytes"`
	// Leftovers: the partial .broken copies (brokenLeftovers) a repair
	// --apply killed while saving left: removed with --apply, before
	// anything else, under the store's lock; listed in a dry run.
	Leftovers []leftoverOut `json:"leftovers"`
	// Error: what stopped the repair after it made its plan (the report
	// says what was done before it).
	Error string `json:"error"`
}

type repairAfterOut struct {
	OK                  bool      `json:"ok"`
	Problems            []problem `json:"problems"`
	FreeListMatchesMeta bool      `json:"free_list_matches_meta"`
	FreeListFreePages   uint64    `json:"free_list_free_pages"`
}

func runRepair(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("repair", "DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	apply := fs.Bool("apply", false, "make the changes (default: a dry run that only says what it would do)")
	rebuild := fs.Bool("rebuild-index", false, "rebuild db.data from the whole journal (only if it still starts at db-1.log)")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	// ctrl-C (or SIGTERM): --apply stops at its next safe point (stepDone,
	// carryOut) and says what it changed; a dry run writes nothing and
	// stops at once.
	ctx, stop := onInterrupt()
	defer stop()
	if !*apply {
		defer stopReadOnly(ctx, "repair", "a dry run: nothing was changed", stderr)()
	}
	if testHookFlagsParsed != nil {
		testHookFlagsParsed(ctx)
	}
	dir, err := oneArg(fs)
	if err != nil {
		return argsFailed(fs, stdout, err)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w before the repair began: nothing was changed", errInterrupted)
		return failed(stdout, stderr, "repair", *asJSON, "", err, exitInterrupted)
	}
	var out *repairOut
	if *apply {
		out, err = repairStore(ctx, dir, true, *rebuild, stderr)
	} else {
		// A dry run takes no lock and writes nothing: like check, it may
		// read a store another process writes and checkpoints, and a run
		// that raced with a checkpoint or journal GC is repeated
		// (retryLive) rather than reported as damage.
		out, err = retryLive(dir, func() (*repairOut, bool, error) {
			out, err := repairStore(ctx, dir, false, *rebuild, stderr)
			return out, out != nil && err == nil && out.OK, err
		})
	}
	if out == nil {
		return failed(stdout, stderr, "repair", *asJSON, "", err, exitFor(err))
	}
	out.Error = errString(err)
	if *asJSON {
		if writeJSON(stdout, out) != exitOK {
			return exitIO
		}
	} else {
		printRepair(stdout, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool repair: %s\n", errLine(err))
		if errors.Is(err, errInterrupted) {
			return exitInterrupted
		}
		return exitFor(err)
	}
	if !out.OK {
		return exitProblems
	}
	return exitOK
}

var errRefused = errors.New("refused")

// repairStore plans the repair and, with apply, carries it out. out.OK
// says whether the store is (dry run: already) sound afterwards.
//
// With apply it first takes the store's lock, before it reads, moves or
// writes any file, and holds it until the store is closed again: on a live
// store it returns ErrLocked having touched nothing, and no writer can open
// the store while files are moved aside.
//
// The partial .broken copies a killed repair --apply left (leftovers) are
// removed first, under that lock (a dry run lists them, and has something
// to do).
func repairStore(ctx context.Context, dir string, apply, rebuild bool, stderr io.Writer) (*repairOut, error) {
	var fsys vfs.FS = vfs.OS
	if apply {
		lk, lfs, err := lockStore(dir)
		if err != nil {
			return nil, err
		}
		defer lk.Close()
		fsys = lfs
	}
	left := brokenLeftovers(dir)
	if apply {
		if err := removeLeftovers(dir, left); err != nil {
			return nil, err
		}
	}
	out, err := planRepair(ctx, dir, apply, rebuild, fsys, stderr)
	if out != nil {
		out.Leftovers = left
		if !apply && len(left) > 0 {
			out.OK = false
		}
	}
	return out, err
}

// planRepair is repairStore once the leftovers are dealt with: with
// apply, fsys runs under the store's lock, which the caller holds.
func planRepair(ctx context.Context, dir string, apply, rebuild bool, fsys vfs.FS, stderr io.Writer) (*repairOut, error) {
	if lost, why := dataLost(dir); lost {
		return repairLostData(ctx, dir, apply, rebuild, why, fsys, stderr)
	}
	// A name of the page file's that is not a regular file (a directory,
	// a FIFO) holds nothing of the store, and an open refuses it: it is
	// moved aside first, so that the rest can be inspected.
	var moved []repairAction
	var notRegular []problem
	saved := []string{} // JSON: an empty list, never null
	for _, name := range []string{"db.redo", "db.free", "db.free.prev", "db.free.tmp"} {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p) // through a link, as kdb opens it
		if name == "db.free.tmp" {
			// Never through a link: a checkpoint writes there, and a
			// writable open refuses anything but a regular file. The
			// link itself is moved aside.
			st, err = os.Lstat(p)
		}
		if err != nil || st.Mode().IsRegular() {
			continue
		}
		moved = append(moved, repairAction{actMoveAside,
			fmt.Sprintf("move %s aside as .broken: it is not a regular file (%v)", name, st.Mode().Type())})
		notRegular = append(notRegular, problem{"error", "pagefile",
			fmt.Sprintf("%s is not a regular file (%v): an open refuses the store", name, st.Mode().Type())})
		if !apply {
			continue
		}
		dst, err := saveBroken(ctx, p, true)
		if err != nil {
			return nil, err
		}
		saved = append(saved, filepath.Base(dst))
	}
	if len(saved) > 0 {
		if err := syncDir(dir); err != nil {
			return nil, err
		}
	} else if len(moved) > 0 {
		// A dry run: the store cannot be inspected past such a name.
		return &repairOut{Dir: dir, Problems: notRegular, Actions: moved, Unfixable: []string{}, Saved: saved}, nil
	}
	in, err := inspectStore(dir)
	if errors.Is(err, pagefile.ErrCorrupt) {
		// db.data's header or meta slots cannot be read (or the db.redo
		// Open would apply contradicts them): only the journal can
		// rebuild it, as when db.data is lost.
		return repairLostData(ctx, dir, apply, rebuild, err, fsys, stderr)
	}
	if err != nil {
		return nil, err
	}
	chk, ioErr := checkStore(dir, stderr)
	if ioErr != nil {
		return nil, ioErr
	}
	out := &repairOut{Dir: dir, Apply: apply, Problems: chk.Problems, Actions: []repairAction{}, Unfixable: []string{}, Saved: saved}
	out.Problems = append(out.Problems, notRegular...)
	// A db.data shorter than its page count: Open refuses it, so only a
	// rebuild of the index from the journal can help. Unless the db.redo
	// Open would apply writes the pages beyond its end (a checkpoint that
	// grew db.data, interrupted): then applying it, as recovery does, is
	// the repair (apply_redo below).
	short := in.raw.DataSizeAfterRedo < int64(in.Meta.PageCount)*int64(in.PageSize)
	if !short && (in.raw.TrustedFile != "db.free" || in.raw.Lies > 0) {
		why := in.raw.Reason
		switch {
		case in.raw.Lies > 0 && in.raw.DamagedLies == in.raw.Lies:
			why = fmt.Sprintf("%s lists %d damaged pages, the first %v, which the scan frees again if no tree reaches them; kdbtool recover --force-scan does the same",
				in.raw.TrustedFile, in.raw.Lies, in.raw.FirstLie)
		case in.raw.Lies > 0:
			why = fmt.Sprintf("%s lists %d pages in use as free, the first %v; kdbtool recover --force-scan does the same",
				in.raw.TrustedFile, in.raw.Lies, in.raw.FirstLie)
		case in.raw.TrustedFile != "":
			why = "db.free does not match the meta; " + in.raw.TrustedFile + " does"
		}
		out.Actions = append(out.Actions, repairAction{actRebuildFreeList,
			"rebuild the free list by a scan of every page header and write a matching db.free (" + why + ")"})
	}
	if chk.leakedOnly && !short && !hasAction(out.Actions, actRebuildFreeList) {
		// Intact pages in no tree and not free (a free list that lied,
		// set aside, then checkpointed): nothing of the index is lost.
		out.Actions = append(out.Actions, repairAction{actRebuildFreeList,
			"rebuild the free list by a scan of every page header and write a matching db.free (pages neither reachable nor free, leaked: the scan gives them back; kdbtool recover --force-scan does the same)"})
	}
	if len(out.Actions) == 0 && !short && chk.Index != nil && chk.Index.DamagedPages > 0 {
		out.Actions = append(out.Actions, repairAction{actRebuildFreeList, fmt.Sprintf(
			"rebuild the free list by a scan of every page header and write a matching db.free (%d damaged pages no tree reaches, the first page %d, are set aside; the scan frees them for reuse)",
			chk.Index.DamagedPages, chk.Index.FirstDamagedPage)})
	}
	out.Actions = append(out.Actions, moved...)
	if in.Redo.WouldApply && !short {
		// (Short, db.data was cut below the checkpoint db.redo follows:
		// Open refuses to apply it, and only a rebuild can help.)
		out.Actions = append(out.Actions, repairAction{actApplyRedo,
			fmt.Sprintf("apply db.redo (%d page images) to complete an interrupted checkpoint", in.Redo.Pages)})
	}
	if in.jerr == nil {
		if a, ok := tailCut(in.Journal); ok {
			out.Actions = append(out.Actions, a)
		}
	}
	indexBroken := short
	cutBeforeReplay := false // the store's open is refused only for its journal cut before the replay position
	for _, p := range chk.Problems {
		// A store that fails to open because of the journal is the
		// journal's problem, reported below.
		if p.Severity == "error" && (p.Area == "index" && !chk.leakedOnly || p.Area == "store") && in.jerr == nil {
			if p.Area == "store" && in.Journal.TornBeforeReplay && !short {
				cutBeforeReplay = true
				continue
			}
			indexBroken = true
		}
	}
	if cutBeforeReplay && !indexBroken && !rebuild {
		// The cut alone does not make the store open: not planned.
		out.Actions = slices.DeleteFunc(out.Actions, func(a repairAction) bool { return a.Action == actTruncateTail })
		// Not the index's damage: db.data holds every write up to its
		// checkpoint. A rebuild would replace it with what the cut
		// journal holds (nothing past the cut); recover --skip-damaged
		// keeps it.
		out.Unfixable = append(out.Unfixable,
			"the store does not open: its journal ends before the checkpoint's replay position (the journal problem above), while db.data holds every write up to that checkpoint;"+
				" kdbtool recover --skip-damaged opens it as db.data holds it, accepting the loss of the journal's cut part (a key whose value was kept there then reads as damaged);"+
				" --rebuild-index would instead rebuild db.data from what is left of the journal only, losing every write past the cut that db.data holds")
	}
	if rebuild {
		if in.jerr != nil {
			out.Unfixable = append(out.Unfixable, "cannot rebuild the index: the journal is damaged: "+in.jerr.Error())
		} else if len(in.Journal.Segments) == 0 || in.Journal.Segments[0].ID != 1 {
			first := "none"
			if len(in.Journal.Segments) > 0 {
				first = in.Journal.Segments[0].Name
			}
			out.Unfixable = append(out.Unfixable, fmt.Sprintf(
				"cannot rebuild the index: the journal starts at %s, not db-1.log (older segments were removed after checkpoints), so it no longer holds every write%s",
				first, skipDamagedHint(in)))
		} else if why := dataLinkRefusal(dir); why != "" {
			out.Unfixable = append(out.Unfixable, why)
		} else {
			out.Actions = []repairAction{{actRebuildIndex,
				"move db.data, db.redo, db.free and db.free.prev aside as .broken and rebuild them by replaying the whole journal"}}
			if a, ok := tailCut(in.Journal); ok {
				out.Actions = append(out.Actions, a)
			}
			indexBroken = false
		}
	} else if indexBroken {
		if ok, _ := journalFromStart(in.Journal, in.jerr); ok && dataLinkRefusal(dir) != "" {
			out.Unfixable = append(out.Unfixable, "the index or store is damaged; "+dataLinkRefusal(dir))
		} else if ok, first := journalFromStart(in.Journal, in.jerr); ok {
			out.Unfixable = append(out.Unfixable, "the index or store is damaged; rerun with --rebuild-index to rebuild it from the journal, which still begins at db-1.log")
		} else {
			out.Unfixable = append(out.Unfixable, fmt.Sprintf(
				"the index or store is damaged, and --rebuild-index cannot rebuild it: the journal starts at %s, not db-1.log, so it no longer holds every write%s",
				first, skipDamagedHint(in)))
		}
	}
	switch {
	case in.jerr != nil && in.serr == nil:
		// The store opens: the damage lies before the replay position,
		// which recover --skip-damaged does not read either.
		out.Unfixable = append(out.Unfixable, "the journal is damaged before the replay position: "+in.jerr.Error()+
			" (the store opens as it is: the damaged records' changes are in db.data (unless an earlier recover --skip-damaged"+
			" skipped them, when they were after the replay position then: those writes are lost), but a key whose value the index keeps"+
			" in them reads as ErrCorrupt, and export stops at it; delete or rewrite such keys (export names them one at a"+
			" time) and export and import into a new store, or restore from a backup; recover --skip-damaged changes nothing here)")
	case in.jerr != nil && errors.Is(in.jerr, vfs.ErrNotRegular):
		out.Unfixable = append(out.Unfixable, "the journal is damaged: "+in.jerr.Error()+
			" (once it is moved out, the segment is missing: kdbtool recover --skip-damaged then opens the store accepting the loss)")
	case errors.Is(in.jerr, errHugeSegment):
		// Nothing is lost and nothing to skip: the file is too long.
		out.Unfixable = append(out.Unfixable, in.jerr.Error())
	case in.jerr != nil:
		out.Unfixable = append(out.Unfixable, "the journal is damaged before its tail: "+in.jerr.Error()+
			" (kdbtool recover --skip-damaged opens the store accepting the loss, for that open only: while the damage stays in the journal,"+
			" every later open needs it too (the application's Options.SkipDamagedJournal); for a store that opens as any other,"+
			" kdbtool export --skip-damaged DIR FILE and kdbtool import FILE NEWDIR)")
	}
	if in.jerr == nil && in.Journal.TornBeforeReplay && len(out.Unfixable) == 0 {
		// The plan cuts the journal there (with --rebuild-index: the
		// store does not open otherwise).
		out.Lost, out.LostBytes = journalLoss(in.Journal)
	}
	if !apply || len(out.Unfixable) > 0 || len(out.Actions) == 0 {
		// A dry run, a refusal, or nothing to do: the store is sound only
		// if there is nothing to do and check found no error.
		out.OK = len(out.Actions) == 0 && len(out.Unfixable) == 0 && chk.OK
		return out, nil
	}

	lastSeg := ""
	if n := len(in.Journal.Segments); n > 0 {
		lastSeg = in.Journal.Segments[n-1].Name
	}
	return carryOut(ctx, dir, out, lastSeg, in.PageSize, fsys, stderr)
}

// tailCut is the action that cuts the journal's tail, if jo has one to
// cut: a crash's torn tail (bytes of the last, unsynced write: nothing
// acknowledged is lost), or a journal cut short at or before the
// checkpoint's replay position (TornBeforeReplay), which is no torn tail:
// the durable records from the cut on are lost (journalLoss), and the
// action says so.
func tailCut(jo journalOut) (repairAction, bool) {
	if jo.TornBeforeReplay {
		torn := ""
		if jo.TornBytes > 0 {
			torn = fmt.Sprintf(" (%d torn bytes there)", jo.TornBytes)
		}
		return repairAction{actTruncateTail, fmt.Sprintf(
			"cut the journal at %s%s: it ends short of the checkpoint's replay position %s, so this is not a crash's torn tail, and the durable records from %s on are lost",
			jo.TornAt, torn, jo.replayed, jo.TornAt)}, true
	}
	if jo.TornBytes > 0 {
		return repairAction{actTruncateTail,
			fmt.Sprintf("truncate the torn journal tail: %d bytes at %s", jo.TornBytes, jo.TornAt)}, true
	}
	return repairAction{}, false
}

// journalLoss says what is lost with a journal cut short at or before the
// checkpoint's replay position (jo.TornBeforeReplay): every record from
// the cut on, which were durable. bytes is a lower bound of their size
// (the bytes from the cut to the replay position, in the same segment;
// the record there and any after it were lost too, of a size the journal
// no longer holds), 0 if unknown. Their number is unknown: their bytes
// are gone.
func journalLoss(jo journalOut) (what string, bytes int64) {
	const which = "how many records is unknown, their bytes are gone; kdbtool verify --acked, or the application's own checks, find which keys"
	if jo.tornAt.Segment == jo.replayed.Segment && jo.tornAt.Offset <= jo.replayed.Offset {
		bytes = jo.replayed.Offset - jo.tornAt.Offset
		return fmt.Sprintf("the journal's durable records from %s on: more than %d bytes (%d up to the replay position %s, then the record there and any after it); %s",
			jo.TornAt, bytes, bytes, jo.replayed, which), bytes
	}
	return fmt.Sprintf("the journal's durable records from %s on, up to and past the replay position %s (their size is unknown); %s",
		jo.TornAt, jo.replayed, which), 0
}

// dataLinkRefusal is why the index of the store in dir cannot be rebuilt
// when its db.data is a symbolic link (to a file on another disk), else "":
// the rebuild moves db.data aside and creates a new one by a rename in dir,
// which would replace the link with a regular file in the store's directory
// and leave the file it points to as it was.
func dataLinkRefusal(dir string) string {
	p := filepath.Join(dir, "db.data")
	if st, err := os.Lstat(p); err != nil || st.Mode()&os.ModeSymlink == 0 {
		return ""
	}
	target, err := linkTarget(p)
	if err != nil {
		target = "(" + err.Error() + ")"
	}
	return fmt.Sprintf("cannot rebuild the index: db.data is a symbolic link to %s, and the rebuild creates a new db.data in %s, "+
		"which would replace the link; replace the link by the file (move the file into %s, or the store to where the file is) and rerun",
		target, dir, dir)
}

// skipDamagedHint is what to do about a store whose open fails because
// of its journal (segments the index needs are missing) when the index
// cannot be rebuilt: open it accepting the loss, or else restore it.
func skipDamagedHint(in *inspectOut) string {
	if in.serr != nil && isJournalDamage(in.serr) {
		return "; kdbtool recover --skip-damaged opens the store accepting the loss of what the missing or damaged journal held (its report lists it)," +
			" for that open only; for a store that opens as any other: kdbtool export --skip-damaged DIR FILE, then kdbtool import FILE NEWDIR"
	}
	return "; restore the store from a backup"
}

// isJournalDamage reports whether err is about the journal's bytes or
// segments (ErrCorrupt of the journal), which recover --skip-damaged skips.
func isJournalDamage(err error) bool {
	return errors.Is(err, journal.ErrCorrupt) || errors.Is(err, journal.ErrTornTail)
}

// repairLostData plans (and with apply carries out) the repair of a store
// whose db.data is lost or cannot be read (its header or meta slots are
// damaged; why says which): the index can be rebuilt only from a journal
// that still begins at db-1.log, and only with --rebuild-index. A damaged
// db.data is moved aside as .broken with the other page-file files.
func repairLostData(ctx context.Context, dir string, apply, rebuild bool, why error, fsys vfs.FS, stderr io.Writer) (*repairOut, error) {
	out := &repairOut{Dir: dir, Apply: apply, Problems: []problem{{"error", "pagefile", why.Error()}},
		Actions: []repairAction{}, Unfixable: []string{}, Saved: []string{}}
	state := "db.data is missing"
	if _, err := os.Lstat(filepath.Join(dir, "db.data")); err == nil {
		state = "db.data cannot be read"
	}
	jo, jerr := inspectJournal(dir, nil)
	switch {
	case errors.Is(jerr, errHugeSegment):
		out.Problems = append(out.Problems, problem{"error", "journal", jerr.Error()})
		out.Unfixable = append(out.Unfixable, state+", and the journal, which could rebuild it, was not read: "+jerr.Error())
	case jerr != nil:
		out.Problems = append(out.Problems, problem{"error", "journal", jerr.Error()})
		out.Unfixable = append(out.Unfixable, state+" and the journal is damaged ("+jerr.Error()+
			"), so the index cannot be rebuilt from it: restore db.data from a backup")
	case len(jo.Segments) == 0 || jo.Segments[0].ID != 1:
		first := "no segment"
		if len(jo.Segments) > 0 {
			first = jo.Segments[0].Name
		}
		out.Unfixable = append(out.Unfixable, fmt.Sprintf("%s and the journal starts at %s, not db-1.log "+
			"(older segments were removed after checkpoints had written their changes to db.data), so it no longer holds "+
			"every write and the index cannot be rebuilt from it: restore db.data from a backup", state, first))
	case dataLinkRefusal(dir) != "":
		out.Unfixable = append(out.Unfixable, state+"; "+dataLinkRefusal(dir))
	case !rebuild:
		out.Unfixable = append(out.Unfixable, state+"; the journal still begins at db-1.log, "+
			"so rerun with --rebuild-index to rebuild db.data by replaying the whole journal")
	case state == "db.data is missing":
		out.Actions = append(out.Actions, repairAction{actRebuildIndex,
			"db.data is missing: move db.redo, db.free and db.free.prev aside as .broken, create an empty db.data and rebuild it by replaying the whole journal"})
	default:
		out.Actions = append(out.Actions, repairAction{actRebuildIndex,
			"db.data cannot be read: move db.data, db.redo, db.free and db.free.prev aside as .broken, create an empty db.data and rebuild it by replaying the whole journal"})
	}
	if len(out.Actions) > 0 && jo.TornBytes > 0 {
		out.Actions = append(out.Actions, repairAction{actTruncateTail,
			fmt.Sprintf("truncate the torn journal tail: %d bytes at %s", jo.TornBytes, jo.TornAt)})
	}
	if !apply || len(out.Unfixable) > 0 {
		return out, nil
	}
	return carryOut(ctx, dir, out, jo.Segments[len(jo.Segments)-1].Name, 0, fsys, stderr)
}

// carryOut makes the changes out.Actions plan, under the store's lock
// (fsys shares it with kdb.Open): it saves every file an Open for writing
// may change, opens and closes the store, and re-inspects and re-checks it.
// A rebuild of the index (rebuildIndex) replaces the page-file files
// instead, starting from an empty db.data of pageSize (0: the default).
//
// Until the store is opened nothing of it has changed but the .broken
// copies made beside it: a failure (a full disk while copying), a kill or
// ctrl-C (ctx; checked between the steps) before that point leaves the
// store as it was, and the error says so. The open is the repair itself,
// as safe to kill as any open (the next one recovers); an interrupt during
// it stops the repair once the store is closed again, before the checks.
func carryOut(ctx context.Context, dir string, out *repairOut, lastSeg string, pageSize int, fsys vfs.FS, stderr io.Writer) (*repairOut, error) {
	rebuilding := out.Actions[0].Action == actRebuildIndex
	if rebuilding {
		if err := rebuildIndex(ctx, dir, out, lastSeg, pageSize, fsys); err != nil {
			return out, err
		}
	} else {
		// Every file an Open for writing may change: the page-file files
		// and the last journal segment.
		files := []string{"db.data", "db.redo", "db.free", "db.free.prev"}
		if lastSeg != "" {
			files = append(files, lastSeg)
		}
		for _, name := range files {
			p := filepath.Join(dir, name)
			st, err := os.Stat(p)
			if err != nil {
				if _, lerr := os.Lstat(p); lerr != nil {
					continue
				}
				st = nil // a dangling link: moved aside below
			}
			// A name that is not a regular file (a directory, a FIFO, a
			// link to a device) holds nothing of the store: it is moved
			// aside, not copied, so the Open below can write the file there.
			move := st == nil || !st.Mode().IsRegular()
			saved, err := saveBroken(ctx, p, move)
			if err != nil {
				return out, unchanged(err, out.Saved)
			}
			out.Saved = append(out.Saved, filepath.Base(saved))
		}
		if err := syncDir(dir); err != nil {
			return out, unchanged(err, out.Saved)
		}
		if err := stepDone(ctx, "saved"); err != nil {
			return out, unchanged(err, out.Saved)
		}
	}
	db, err := kdb.Open(dir, &kdb.Options{ForceFreeListScan: true, FS: fsys})
	if err != nil && rebuilding {
		err = fmt.Errorf("%w; db.data was replaced by an empty one, which an open rebuilds from the journal (the old files are saved: %s): rerun kdbtool repair --apply --rebuild-index %s once the cause is fixed",
			err, strings.Join(out.Saved, ", "), dir)
	}
	if err != nil {
		return out, err
	}
	out.Recovery = recoveryJSON(db.Recovery())
	if err := db.Close(); err != nil {
		return out, err
	}
	out.Done = true
	if ctx.Err() != nil {
		return out, fmt.Errorf("%w: the repair was carried out and the store closed (the report above), but not re-checked: run kdbtool check %s", errInterrupted, dir)
	}
	after, err := inspectStore(dir)
	if err != nil {
		return out, err
	}
	chk2, ioErr := checkStore(dir, stderr)
	if ioErr != nil {
		return out, ioErr
	}
	out.After = &repairAfterOut{OK: chk2.OK && after.FreeList.MatchesMeta && after.FreeList.LiedPages == 0, Problems: chk2.Problems,
		FreeListMatchesMeta: after.FreeList.MatchesMeta, FreeListFreePages: after.FreeList.FreePages}
	out.OK = out.After.OK
	return out, nil
}

// rebuildTmp is the directory in the store's where a rebuild of the index
// makes its new, empty db.data before it puts it in place. A kill leaves
// it; the next rebuild removes it.
const rebuildTmp = ".rebuild.tmp"

// rebuildIndex replaces the page-file files of the store in dir with an
// empty db.data, which the Open that follows fills by replaying the whole
// journal. Everything slow or that may fail for space is done first, while
// the store is still as it was: the copy of the last journal segment
// (saved as .broken, as every repair saves it), and the new db.data, made
// in rebuildTmp and synced there. Then, in a row of renames with nothing
// in between that can fail for space or take long, db.redo and db.free*
// are moved aside as .broken, the old db.data is linked as db.data.broken
// and the new one renamed over it, and the directory is synced. That rename
// is the commit point: before it the store opens as before; from it on,
// any open (this repair's, or the next one's after a kill) rebuilds the
// index from the journal, which is the repair. A failed rename moves the
// files already moved back, and the error says what state is left.
func rebuildIndex(ctx context.Context, dir string, out *repairOut, lastSeg string, pageSize int, fsys vfs.FS) error {
	tmp := filepath.Join(dir, rebuildTmp)
	if err := os.RemoveAll(tmp); err != nil {
		return unchanged(err, out.Saved)
	}
	if lastSeg != "" {
		saved, err := saveBroken(ctx, filepath.Join(dir, lastSeg), false)
		if err != nil {
			return unchanged(err, out.Saved)
		}
		out.Saved = append(out.Saved, filepath.Base(saved))
	}
	if err := stepDone(ctx, "copied"); err != nil {
		return unchanged(err, out.Saved)
	}
	// kdb.Open never creates a store over a journal (that would be a
	// store that lost db.data): the empty page file is made here, and the
	// Open that follows replays the whole journal into it. It takes the
	// store ID the journal's segments carry (a rebuild replays a journal
	// that begins at db-1.log): it is their store's, rebuilt, and Open
	// refuses segments of another store.
	err := func() error {
		id, err := journal.SegmentStoreID(fsys, filepath.Join(dir, "db-1.log"))
		if err != nil {
			return err
		}
		if err := os.Mkdir(tmp, 0o750); err != nil {
			return err
		}
		// pagefile.Open syncs the new db.data and tmp; tmp's own entry is
		// synced with dir below.
		pf, _, err := pagefile.Open(tmp, pagefile.Options{FS: fsys, PageSize: pageSize, StoreID: id})
		if err != nil {
			return err
		}
		return pf.Close()
	}()
	if err == nil {
		err = stepDone(ctx, "made")
	}
	if err != nil {
		if rerr := os.RemoveAll(tmp); rerr != nil {
			err = fmt.Errorf("%w (and removing %s: %w)", err, tmp, rerr)
		}
		return unchanged(err, out.Saved)
	}
	// The swap. db.redo goes before db.data: an old db.redo beside the new
	// db.data could be applied to it.
	type move struct{ from, to string }
	var moves []move
	linked := "" // db.data's second name, until the new one replaces it
	undo := func(err error) error {
		if linked != "" {
			os.Remove(linked)
		}
		for i := len(moves) - 1; i >= 0; i-- {
			if rerr := os.Rename(moves[i].to, moves[i].from); rerr != nil {
				return fmt.Errorf("%w; moving %s back to %s failed too (%w): move it back by hand, the store may not open until then", err, moves[i].to, moves[i].from, rerr)
			}
		}
		os.RemoveAll(tmp)
		return unchanged(err, out.Saved)
	}
	for _, name := range []string{"db.redo", "db.free", "db.free.prev"} {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		dst, err := saveBroken(ctx, p, true)
		if err != nil {
			return undo(err)
		}
		moves = append(moves, move{p, dst})
	}
	data := filepath.Join(dir, "db.data")
	if st, err := os.Lstat(data); err == nil {
		dst := brokenName(data)
		if st.Mode().IsRegular() {
			// A second name, so that db.data is never missing: the
			// rename below replaces it in one step.
			err = os.Link(data, dst)
			linked = dst
		} else {
			err = os.Rename(data, dst) // it holds nothing of the store
			moves = append(moves, move{data, dst})
		}
		if err != nil {
			if linked != "" {
				linked = ""
			} else {
				moves = moves[:len(moves)-1]
			}
			return undo(fmt.Errorf("saving %s as %s: %w", data, filepath.Base(dst), err))
		}
	}
	// The moves made durable before the new db.data appears: after a power
	// loss the old db.redo is never found beside it.
	if err := syncDir(dir); err != nil {
		return undo(err)
	}
	if err := os.Rename(filepath.Join(tmp, "db.data"), data); err != nil {
		return undo(fmt.Errorf("putting the new db.data in place: %w", err))
	}
	// Committed.
	if linked != "" {
		out.Saved = append(out.Saved, filepath.Base(linked))
	}
	for _, m := range moves {
		out.Saved = append(out.Saved, filepath.Base(m.to))
	}
	err = syncDir(dir)
	if rerr := os.RemoveAll(tmp); err == nil {
		err = rerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("%w; db.data was replaced by an empty one, which the next open rebuilds from the journal: rerun kdbtool repair --apply --rebuild-index %s", err, dir)
	}
	if testHookRepairStep != nil {
		// From here on an interrupt waits for the Open, which carries
		// the rebuild out: stopped in between, it would be left to the
		// next open.
		testHookRepairStep(ctx, "swapped")
	}
	return nil
}

// unchanged adds to err, which stopped a repair before it changed the
// store, that the store is as it was, and which .broken copies it saved.
func unchanged(err error, saved []string) error {
	what := "no .broken copy was kept"
	if len(saved) > 0 {
		what = "the .broken copies made: " + strings.Join(saved, ", ")
	}
	return fmt.Errorf("%w; the repair stopped before it changed the store, which is as it was (%s)", err, what)
}

// testHookRepairStep, if set (by tests only: TestMain sets it in a child
// that a test kills or interrupts), runs after each step of repair --apply
// that leaves the store consistent: "saved" (the .broken copies made),
// "copied" and "made" (a rebuild's copy of the last segment and its new
// db.data, not yet in place), "swapped" (the new db.data in place).
var testHookRepairStep func(ctx context.Context, step string)

// stepDone ends a step of repair --apply before its commit point: it runs
// testHookRepairStep, then returns errInterrupted if ctx is done (SIGINT).
func stepDone(ctx context.Context, step string) error {
	if testHookRepairStep != nil {
		testHookRepairStep(ctx, step)
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	return nil
}

// lockStore takes the lock of the store in dir (which must be a directory:
// nothing is created elsewhere) and returns it with a file system for
// kdb.Open that runs under it (lockedFS).
func lockStore(dir string) (vfs.Locker, vfs.FS, error) {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err != nil {
		return nil, nil, err
	} else if !st.IsDir() {
		return nil, nil, fmt.Errorf("%s is not a directory", dir)
	}
	name := filepath.Join(dir, "lock")
	// Lock creates the lock file if it is missing, as Open does; in a
	// directory that holds neither it nor db.data (not a store) nothing is
	// created.
	_, lerr := os.Stat(name)
	if _, derr := os.Stat(filepath.Join(dir, "db.data")); errors.Is(lerr, os.ErrNotExist) && errors.Is(derr, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s is not a kdb store: %w", dir, derr)
	}
	lk, err := vfs.LockStore(vfs.OS, dir)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, nil, fmt.Errorf("%w: %s: the store is open in another process (or handle); close it first: %w", kdb.ErrLocked, dir, err)
	}
	if err != nil {
		return nil, nil, err
	}
	return lk, lockedFS{FS: vfs.OS, lock: name}, nil
}

// lockedFS is the OS file system for a store whose lock this process
// already holds: its Lock of that lock file returns a no-op Locker, so that
// kdb.Open runs under the lock taken first, with no gap in between.
type lockedFS struct {
	vfs.FS
	lock string
}

func (l lockedFS) Lock(name string) (vfs.Locker, error) {
	if filepath.Clean(name) == l.lock {
		return nopLocker{}, nil
	}
	return l.FS.Lock(name)
}

type nopLocker struct{}

func (nopLocker) Close() error { return nil }

// saveBroken saves path as path.broken (or path.broken.N if that exists),
// by a copy, or by a rename if move. It returns the saved name.
//
// The copy is written to a temporary name beside it (the saved name plus
// ".tmp"; one a killed repair left is overwritten), fsynced, renamed to the
// saved name, and the directory is fsynced: a .broken file is always a
// whole copy. On failure the temporary copy is removed and nothing is
// saved. A move is not synced here; the caller syncs the directory.
func saveBroken(ctx context.Context, path string, move bool) (string, error) {
	dst := brokenName(path)
	if move {
		return dst, os.Rename(path, dst)
	}
	tmp := dst + ".tmp"
	err := copySynced(ctx, path, tmp)
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = fmt.Errorf("%w (and removing the partial copy: %w)", err, rerr)
		}
		return dst, fmt.Errorf("saving %s as %s: %w", path, filepath.Base(dst), err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return dst, fmt.Errorf("saving %s as %s: %w", path, filepath.Base(dst), err)
	}
	return dst, nil
}

// leftoverOut is a partial .broken copy that a repair --apply killed while
// saving it left (brokenLeftovers).
type leftoverOut struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// isBrokenTmp reports whether name is one that saveBroken writes a copy to
// before it renames it: <f>.broken.tmp or <f>.broken.N.tmp, f a file that
// repair saves by a copy (db.data, db.redo, db.free, db.free.prev, a
// journal segment).
func isBrokenTmp(name string) bool {
	rest, ok := strings.CutSuffix(name, ".tmp")
	if !ok {
		return false
	}
	if i := strings.LastIndex(rest, ".broken."); i >= 0 {
		n := rest[i+len(".broken."):]
		if v, err := strconv.ParseUint(n, 10, 64); err == nil && v > 0 && strconv.FormatUint(v, 10) == n {
			rest = rest[:i+len(".broken")]
		}
	}
	f, ok := strings.CutSuffix(rest, ".broken")
	if !ok {
		return false
	}
	switch f {
	case "db.data", "db.redo", "db.free", "db.free.prev":
		return true
	}
	_, ok = journal.ParseSegmentName(f)
	return ok
}

// brokenLeftovers lists the regular files of dir that saveBroken writes
// its copies to (isBrokenTmp), sorted by name: a repair --apply killed
// while it saved one left it, partial (one running now is writing it). The
// store never reads them. A dir that cannot be read has none listed (what
// reads it next says why).
func brokenLeftovers(dir string) []leftoverOut {
	left := []leftoverOut{} // JSON: an empty list, never null
	ents, err := os.ReadDir(dir)
	if err != nil {
		return left
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !isBrokenTmp(e.Name()) {
			continue
		}
		if st, err := e.Info(); err == nil {
			left = append(left, leftoverOut{e.Name(), st.Size()})
		}
	}
	return left
}

// removeLeftovers removes the leftovers left of the store in dir (from
// brokenLeftovers) and syncs dir. The caller must hold the store's lock:
// no repair is writing them then.
func removeLeftovers(dir string, left []leftoverOut) error {
	for _, l := range left {
		p := filepath.Join(dir, l.Name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s, a partial .broken copy a killed repair left: %w", p, err)
		}
	}
	if len(left) == 0 {
		return nil
	}
	return syncDir(dir)
}

// leftoverList is left as "NAME (N bytes), ..." for the human output.
func leftoverList(left []leftoverOut) string {
	s := make([]string, len(left))
	for i, l := range left {
		s[i] = fmt.Sprintf("%s (%d bytes)", esc(l.Name), l.Size)
	}
	return strings.Join(s, ", ")
}

// brokenName is the name saveBroken saves path as: path.broken, or
// path.broken.N if that exists.
func brokenName(path string) string {
	dst := path + ".broken"
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			return dst
		}
		dst = fmt.Sprintf("%s.broken.%d", path, i)
	}
}

// testHookSaving, if set (by tests only: TestMain sets it in a child that
// a test kills), runs in the middle of saving a .broken copy, once the
// first part of the copy is written; name is the file being written.
var testHookSaving func(name string)

// copySynced copies src to dst (created, or truncated if it exists, mode
// 0600) and fsyncs dst. On return dst's bytes are durable; its name is
// not (the caller renames it and syncs the directory).
func copySynced(ctx context.Context, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// O_NOFOLLOW: a symbolic link planted at dst (a .broken.tmp name in
	// the store's directory) would have the copy written wherever it
	// points, outside the store.
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, in, 64<<10); err != nil && !errors.Is(err, io.EOF) {
		out.Close()
		return err
	}
	if testHookSaving != nil {
		testHookSaving(dst)
	}
	if _, err := io.Copy(out, ctxReader{ctx, in}); err != nil {
		out.Close()
		return err
	}
	err = out.Sync()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func printRepair(w io.Writer, o *repairOut) {
	printProblems(w, o.Problems)
	// Only work that was carried out is "did": a repair that failed
	// before (or while) opening the store says its actions were not done.
	verb := "would"
	switch {
	case o.Apply && o.Done:
		verb = "did"
	case o.Apply && o.Recovery != nil:
		verb = "not completed (the repair failed; see the error)"
	case o.Apply:
		verb = "not done (the repair failed; see the error)"
	}
	if len(o.Leftovers) > 0 {
		what := "would remove"
		if o.Apply {
			what = "removed"
		}
		which := "partial .broken copies a killed repair --apply left"
		if len(o.Leftovers) == 1 {
			which = "a partial .broken copy a killed repair --apply left"
		}
		fmt.Fprintf(w, "%s: %s: %s\n", what, leftoverList(o.Leftovers), which)
	}
	switch {
	case len(o.Actions) > 0 || len(o.Unfixable) > 0:
	case len(o.Leftovers) > 0:
		fmt.Fprintf(w, "nothing else to repair\n")
	default:
		fmt.Fprintf(w, "nothing to repair\n")
	}
	if o.Apply && len(o.Unfixable) > 0 {
		verb = "would (refused, nothing changed)"
	}
	for _, a := range o.Actions {
		fmt.Fprintf(w, "%s: %s\n", verb, oneLine(a.Detail))
	}
	for _, u := range o.Unfixable {
		fmt.Fprintf(w, "cannot repair: %s\n", oneLine(u))
	}
	if o.Lost != "" {
		what := "would lose"
		if o.Done {
			what = "lost"
		}
		fmt.Fprintf(w, "%s: %s\n", what, oneLine(o.Lost))
	}
	if len(o.Saved) > 0 {
		sort.Strings(o.Saved)
		fmt.Fprintf(w, "saved: %s\n", strings.Join(o.Saved, ", "))
	}
	if o.Recovery != nil {
		fmt.Fprintf(w, "recovery: free list %v, %v pages scanned, %v records replayed, %v bytes truncated\n",
			o.Recovery["free_list_path"], o.Recovery["pages_scanned"], o.Recovery["records_replayed"], o.Recovery["bytes_truncated"])
	}
	if o.After != nil {
		fmt.Fprintf(w, "after: db.free matches meta %v (%d free pages), check ok %v\n",
			o.After.FreeListMatchesMeta, o.After.FreeListFreePages, o.After.OK)
		printProblems(w, o.After.Problems)
	}
	if !o.Apply && (len(o.Actions) > 0 || len(o.Leftovers) > 0) {
		fmt.Fprintf(w, "dry run: rerun with --apply to make these changes\n")
	}
}

// hasAction reports whether actions holds one of kind a.
func hasAction(actions []repairAction, a string) bool {
	for _, x := range actions {
		if x.Action == a {
			return true
		}
	}
	return false
}
