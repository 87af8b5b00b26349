package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kdb-project/kdb"
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
	Recovery  map[string]any  `json:"recovery,omitempty"`
	After     *repairAfterOut `json:"after,omitempty"`
	OK        bool            `json:"ok"`
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
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	dir, ok := oneArg(fs)
	if !ok {
		return exitUsage
	}
	out, err := repairStore(dir, *apply, *rebuild, stderr)
	if out == nil {
		fmt.Fprintf(stderr, "kdbtool repair: %v\n", err)
		return exitFor(err)
	}
	if *asJSON {
		if writeJSON(stdout, out) != exitOK {
			return exitIO
		}
	} else {
		printRepair(stdout, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kdbtool repair: %v\n", err)
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
func repairStore(dir string, apply, rebuild bool, stderr io.Writer) (*repairOut, error) {
	in, err := inspectStore(dir)
	if err != nil {
		return nil, err
	}
	chk, ioErr := checkStore(dir, stderr)
	if ioErr != nil {
		return nil, ioErr
	}
	out := &repairOut{Dir: dir, Apply: apply, Problems: chk.Problems, Actions: []repairAction{}, Unfixable: []string{}, Saved: []string{}}
	if in.raw.TrustedFile != "db.free" || in.raw.Lies > 0 {
		why := in.raw.Reason
		switch {
		case in.raw.Lies > 0:
			why = fmt.Sprintf("%s lists %d pages in use as free, the first %v; kdbtool recover --force-scan does the same",
				in.raw.TrustedFile, in.raw.Lies, in.raw.FirstLie)
		case in.raw.TrustedFile != "":
			why = "db.free does not match the meta; " + in.raw.TrustedFile + " does"
		}
		out.Actions = append(out.Actions, repairAction{actRebuildFreeList,
			"rebuild the free list by a scan of every page header and write a matching db.free (" + why + ")"})
	}
	if in.Redo.WouldApply {
		out.Actions = append(out.Actions, repairAction{actApplyRedo,
			fmt.Sprintf("apply db.redo (%d page images) to complete an interrupted checkpoint", in.Redo.Pages)})
	}
	if in.jerr == nil && in.Journal.TornBytes > 0 {
		out.Actions = append(out.Actions, repairAction{actTruncateTail,
			fmt.Sprintf("truncate the torn journal tail: %d bytes at %s", in.Journal.TornBytes, in.Journal.TornAt)})
	}
	indexBroken := false
	for _, p := range chk.Problems {
		// A store that fails to open because of the journal is the
		// journal's problem, reported below.
		if p.Severity == "error" && (p.Area == "index" || p.Area == "store") && in.jerr == nil {
			indexBroken = true
		}
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
				"cannot rebuild the index: the journal starts at %s, not db-1.log (older segments were removed after checkpoints), so it no longer holds every write", first))
		} else {
			out.Actions = []repairAction{{actRebuildIndex,
				"move db.data, db.redo, db.free and db.free.prev aside as .broken and rebuild them by replaying the whole journal"}}
			if in.Journal.TornBytes > 0 {
				out.Actions = append(out.Actions, repairAction{actTruncateTail,
					fmt.Sprintf("truncate the torn journal tail: %d bytes at %s", in.Journal.TornBytes, in.Journal.TornAt)})
			}
			indexBroken = false
		}
	} else if indexBroken {
		out.Unfixable = append(out.Unfixable, "the index or store is damaged; rerun with --rebuild-index to rebuild it from the journal")
	}
	if in.jerr != nil {
		out.Unfixable = append(out.Unfixable, "the journal is damaged before its tail: "+in.jerr.Error()+
			" (kdbtool recover --skip-damaged opens the store accepting the loss)")
	}
	if !apply || len(out.Unfixable) > 0 || len(out.Actions) == 0 {
		// A dry run, a refusal, or nothing to do: the store is sound only
		// if there is nothing to do and check found no error.
		out.OK = len(out.Actions) == 0 && len(out.Unfixable) == 0 && chk.OK
		return out, nil
	}

	rebuilding := out.Actions[0].Action == actRebuildIndex
	// Every file an Open for writing may change: the page-file files and
	// the last journal segment.
	files := []string{"db.data", "db.redo", "db.free", "db.free.prev"}
	if n := len(in.Journal.Segments); n > 0 {
		files = append(files, in.Journal.Segments[n-1].Name)
	}
	for _, name := range files {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		move := rebuilding && strings.HasPrefix(name, "db.")
		saved, err := saveBroken(p, move)
		if err != nil {
			return out, err
		}
		out.Saved = append(out.Saved, filepath.Base(saved))
	}
	if err := syncDir(dir); err != nil {
		return out, err
	}
	db, err := kdb.Open(dir, &kdb.Options{ForceFreeListScan: true})
	if err != nil {
		return out, err
	}
	out.Recovery = recoveryJSON(db.Recovery())
	if err := db.Close(); err != nil {
		return out, err
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

// saveBroken saves path as path.broken (or path.broken.N if that exists),
// by a synced copy, or by a rename if move. It returns the saved name.
// The caller syncs the directory.
func saveBroken(path string, move bool) (string, error) {
	dst := path + ".broken"
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		dst = fmt.Sprintf("%s.broken.%d", path, i)
	}
	if move {
		return dst, os.Rename(path, dst)
	}
	if err := copyFile(path, dst); err != nil {
		return dst, err
	}
	f, err := os.Open(dst)
	if err != nil {
		return dst, err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return dst, err
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
	verb := "would"
	if o.Apply {
		verb = "did"
	}
	if len(o.Actions) == 0 && len(o.Unfixable) == 0 {
		fmt.Fprintf(w, "nothing to repair\n")
	}
	if o.Apply && len(o.Unfixable) > 0 {
		verb = "would (refused, nothing changed)"
	}
	for _, a := range o.Actions {
		fmt.Fprintf(w, "%s: %s\n", verb, a.Detail)
	}
	for _, u := range o.Unfixable {
		fmt.Fprintf(w, "cannot repair: %s\n", u)
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
	if !o.Apply && len(o.Actions) > 0 {
		fmt.Fprintf(w, "dry run: rerun with --apply to make these changes\n")
	}
}
