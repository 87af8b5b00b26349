package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
	"github.com/kdb-project/kdb/pagefile"
)

func init() {
	register("check", command{
		summary: "full read-only consistency check: pages, B-trees, free list, journal, broker counts",
		run:     runCheck,
	})
}

type checkOut struct {
	Dir            string           `json:"dir"`
	OK             bool             `json:"ok"`
	Problems       []problem        `json:"problems"`
	Index          *kdb.CheckReport `json:"index"`
	JournalRecords int64            `json:"journal_records"`
	JournalBytes   int64            `json:"journal_bytes"`
	// JournalChecked: every record of the journal was read, which
	// verifies each checksum and the chain; if not, JournalNotChecked
	// says why (db.data could not be read, so the check stopped there;
	// the journal could not be opened; an error stopped the read).
	JournalChecked    bool   `json:"journal_checked"`
	JournalNotChecked string `json:"journal_not_checked"`
	// incomplete: an error that is not damage (out of file descriptors,
	// memory, a permission) stopped a part of the check (exit 3).
	incomplete bool
	// leakedOnly: the index's only problems are leaked pages (intact, in
	// no tree and not free), which a free-list rebuild gives back.
	leakedOnly bool
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", "DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	dir, err := oneArg(fs)
	if err != nil {
		return argsFailed(fs, stdout, err)
	}
	type result struct {
		out   *checkOut
		ioErr error
	}
	res, _ := retryLive(dir, func() (result, bool, error) {
		out, ioErr := checkStore(dir, stderr)
		return result{out, ioErr}, out != nil && ioErr == nil && len(out.Problems) == 0, ioErr
	})
	out, ioErr := res.out, res.ioErr
	if out == nil {
		return failed(stdout, stderr, "check", *asJSON, "", ioErr, exitFor(ioErr))
	}
	if *asJSON {
		if writeJSON(stdout, out) != exitOK {
			return exitIO
		}
	} else {
		printCheck(stdout, out)
	}
	switch {
	case ioErr != nil:
		fmt.Fprintf(stderr, "kdbtool check: %s\n", errLine(ioErr))
		return exitIO
	case !out.OK:
		return exitProblems
	}
	return exitOK
}

// checkStore runs every check, read-only. It returns a nil out only when
// db.data cannot be read at all; ioErr is the first error that was not
// about damaged bytes (the check is then incomplete: exit 3).
func checkStore(dir string, stderr io.Writer) (out *checkOut, ioErr error) {
	in, err := (*inspectOut)(nil), error(nil)
	lost, why := dataLost(dir)
	if st, err := os.Stat(filepath.Join(dir, "db.redo")); !lost && err == nil && !st.Mode().IsRegular() {
		// Not db.data's damage: the page file cannot be opened past it,
		// and it holds nothing of the store (repair moves it aside).
		return &checkOut{Dir: dir, Problems: []problem{{"error", "pagefile", fmt.Sprintf(
			"db.redo is not a regular file (%v): an open refuses the store; kdbtool repair --apply moves it aside (it holds nothing of the store); then check again",
			st.Mode().Type())}},
			JournalNotChecked: "db.redo is not a regular file, and the check stops at the page file"}, nil
	}
	if !lost {
		in, err = inspectStore(dir)
		// A db.data whose header or meta slots cannot be read is, for
		// repair, as good as lost.
		lost, why = errors.Is(err, pagefile.ErrCorrupt), err
	}
	if lost {
		// Say what repair could do: rebuild db.data from a journal that
		// still begins at db-1.log, else nothing.
		r, err := repairLostData(context.Background(), dir, false, true, why, nil, stderr)
		if err != nil {
			return nil, err
		}
		msg := why.Error()
		for _, a := range r.Actions {
			if a.Action == actRebuildIndex {
				msg += "; kdbtool repair --apply --rebuild-index can rebuild it: the journal still begins at db-1.log"
			}
		}
		for _, u := range r.Unfixable {
			msg += "; cannot repair: " + u
		}
		out := &checkOut{Dir: dir, Problems: append([]problem{{"error", "pagefile", msg}}, r.Problems[1:]...),
			JournalNotChecked: dataNotRead(dir)}
		return out, nil
	}
	if err != nil {
		if !isCorrupt(err) {
			return nil, err
		}
		out := &checkOut{Dir: dir, Problems: []problem{{"error", "pagefile", err.Error()}}, JournalNotChecked: dataNotRead(dir)}
		return out, nil
	}
	out = &checkOut{Dir: dir, Problems: []problem{}}
	out.Problems = append(out.Problems, in.Problems...)
	note := func(area string, err error) {
		if !isCorrupt(err) && ioErr == nil {
			ioErr = err
		}
	}
	if in.serr != nil {
		note("store", in.serr)
	} else if err := checkIndex(dir, in.FreeList.LiedPages > 0, out, stderr); err != nil {
		out.Problems = append(out.Problems, readProblem("index", err))
		out.leakedOnly = errors.Is(err, index.ErrLeaked)
		note("index", err)
	} else if r := out.Index; r != nil && r.DamagedPages > 0 {
		out.Problems = append(out.Problems, problem{"warning", "index", fmt.Sprintf(
			"%d damaged pages that no tree reaches (first page %d: %s): nothing of the index is lost (free pages damaged on disk, set aside); kdbtool repair --apply (or recover --force-scan) frees them for reuse",
			r.DamagedPages, r.FirstDamagedPage, r.DamagedReason)})
	}
	if in.jerr != nil {
		note("journal", in.jerr)
		out.JournalNotChecked = "the journal cannot be opened (see the journal problem)"
	} else if err := checkJournal(dir, out, stderr); err != nil {
		out.Problems = append(out.Problems, readProblem("journal", err))
		note("journal", err)
		out.JournalNotChecked = fmt.Sprintf("an error stopped the read after %d records (%d payload bytes) (see the journal problem)",
			out.JournalRecords, out.JournalBytes)
	} else {
		out.JournalChecked = true
	}
	out.Problems = dropRepeated(out.Problems)
	out.OK = true
	out.incomplete = ioErr != nil
	for _, p := range out.Problems {
		if p.Severity == "error" {
			out.OK = false
		}
	}
	return out, ioErr
}

// dataNotRead is why check did not read the journal of dir when db.data
// is missing or cannot be read: the check stops at the page file.
func dataNotRead(dir string) string {
	state := "db.data is missing"
	if _, err := os.Lstat(filepath.Join(dir, "db.data")); err == nil {
		state = "db.data cannot be read"
	}
	return state + ", and the check stops at the page file"
}

// dropRepeated drops an index problem that is the journal's damage found
// again: the store's own check (kdb Check) verifies the journal as well, and
// the operator should see that damage once, under journal, not as damage of
// the index. What kdb Check adds after it (the keys whose values that
// damage took) stays, under index, without the journal's message.
func dropRepeated(ps []problem) []problem {
	var journalMsgs []string
	for _, p := range ps {
		if p.Area == "journal" && p.Severity == "error" {
			journalMsgs = append(journalMsgs, p.Message)
		}
	}
	out := ps[:0]
	for _, p := range ps {
		if p.Area == "index" && slices.ContainsFunc(journalMsgs, func(m string) bool { return strings.HasSuffix(p.Message, m) }) {
			continue
		}
		if p.Area == "index" {
			for _, m := range journalMsgs {
				if i := strings.Index(p.Message, m+"; "); i >= 0 {
					p.Message = p.Message[i+len(m)+2:]
					break
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// checkIndex runs the index check (kdb Check, then the broker's Check) on
// the store opened read-only. When the free-list file Open would trust lists pages in use
// (a problem inspect already reported under free_list), the free list is
// rebuilt in memory by a scan instead, so that the index is judged on its
// own: the lie is one problem of the free list, not of the index.
func checkIndex(dir string, freeListLies bool, out *checkOut, stderr io.Writer) error {
	db, err := kdb.Open(dir, &kdb.Options{ReadOnly: true, ForceFreeListScan: freeListLies})
	if err != nil {
		return err
	}
	pages, keys := newProgress(stderr, "index pages checked"), newProgress(stderr, "keys checked")
	var lastPages, lastKeys uint64
	rep, err := db.CheckProgress(func(phase string, done uint64) {
		if phase == "keys" {
			if lastKeys == 0 {
				pages.done()
			}
			keys.add(done - lastKeys)
			lastKeys = done
			return
		}
		pages.add(done - lastPages)
		lastPages = done
	})
	pages.done()
	keys.done()
	if err == nil {
		// The broker's trees against a recount: what the engine's Check
		// leaves to the layer that keeps them.
		err = brokerOf(db).Check()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	out.Index = rep
	return err
}

// checkJournal reads every record of the journal, which verifies each
// record's checksum and the chain.
func checkJournal(dir string, out *checkOut, stderr io.Writer) error {
	j, _, err := journal.Open(dir, journal.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	p := newProgress(stderr, "journal records")
	err = j.Iterate(journal.Location{}, func(_ journal.Location, r journal.Record) error {
		out.JournalRecords++
		out.JournalBytes += int64(len(r.Payload))
		p.add(1)
		return nil
	})
	p.done()
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	return err
}

func printCheck(w io.Writer, o *checkOut) {
	if o.Index != nil {
		r := o.Index
		fmt.Fprintf(w, "index: %d indexes, %d keys, depth %d; %d pages (%d reachable, %d free); %d journal values verified\n",
			r.Indexes, r.Keys, r.Depth, r.Pages, r.ReachablePages, r.FreePages, r.JournalValues)
	}
	if o.JournalChecked {
		fmt.Fprintf(w, "journal: %d records (%d payload bytes) verified\n", o.JournalRecords, o.JournalBytes)
	} else {
		fmt.Fprintf(w, "journal: not checked: %s\n", oneLine(o.JournalNotChecked))
	}
	printProblems(w, o.Problems)
	switch {
	case o.OK:
		fmt.Fprintf(w, "ok\n")
	case o.incomplete:
		fmt.Fprintf(w, "check incomplete: an I/O or resource error stopped it (see above)\n")
	default:
		fmt.Fprintf(w, "problems found\n")
	}
}
