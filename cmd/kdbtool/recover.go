package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kdb-project/kdb"
)

func init() {
	register("recover", command{
		summary: "open the store for writing (recovery runs), print the recovery report, close",
		run:     runRecover,
	})
}

// recoveryJSON is the recovery report under the JSON names of issue 7.
func recoveryJSON(r kdb.RecoveryReport) map[string]any {
	m := reportJSON(r) // demo.go: free_list_path, reason, pages_scanned, records_replayed, duration_ms, ...
	m["redo_pages"] = r.RedoPages
	m["replay_from"] = r.ReplayFrom
	m["bytes_replayed"] = r.BytesReplayed
	m["torn_at"] = r.TornAt
	skipped := r.Skipped
	if skipped == nil {
		skipped = []string{}
	}
	m["skipped"] = skipped
	m["checkpointed"] = r.Checkpointed
	m["free_list_lied"] = r.FreeListLied
	m["free_list_lies"] = r.FreeListLies
	m["free_list_lied_page"] = r.FreeListLiedPage
	m["free_list_lie_reason"] = r.FreeListLieReason
	m["page_file_ms"] = ms(r.PageFileTime)
	m["journal_ms"] = ms(r.JournalTime)
	m["checkpoint_ms"] = ms(r.CheckpointTime)
	return m
}

func printRecovery(w io.Writer, r kdb.RecoveryReport) {
	fmt.Fprintf(w, "checkpoint:    %s\n", r.CheckpointID)
	fmt.Fprintf(w, "free list:     %s", r.FreeListPath)
	if r.Reason != "" {
		fmt.Fprintf(w, " (%s)", oneLine(r.Reason))
	}
	fmt.Fprintf(w, ", %d pages scanned, %d free pages, %.1f ms\n", r.PagesScanned, r.FreePages, ms(r.FreeListTime))
	if r.FreeListLied {
		fmt.Fprintf(w, "free list LIED: %d listed pages were in use, the first page %d (%s); none was written; the rest of the list was proven again (or is rebuilt by a scan at the next open)\n",
			r.FreeListLies, r.FreeListLiedPage, r.FreeListLieReason)
	}
	if r.RedoApplied {
		fmt.Fprintf(w, "db.redo:       applied (%d page images)\n", r.RedoPages)
	} else {
		fmt.Fprintf(w, "db.redo:       not applied\n")
	}
	fmt.Fprintf(w, "journal:       replayed %d records (%d bytes) after %s in %.1f ms\n",
		r.RecordsReplayed, r.BytesReplayed, orDash(r.ReplayFrom), ms(r.ReplayTime))
	if r.TornBytesTruncated > 0 {
		fmt.Fprintf(w, "torn tail:     %d bytes truncated at %s\n", r.TornBytesTruncated, r.TornAt)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped:       %s\n", oneLine(s))
	}
	fmt.Fprintf(w, "checkpointed:  %v (%.1f ms)\n", r.Checkpointed, ms(r.CheckpointTime))
	fmt.Fprintf(w, "total:         %.1f ms\n", ms(r.TotalTime))
}

func runRecover(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("recover", "DIR", stderr)
	asJSON := fs.Bool("json", false, "print one JSON document")
	forceScan := fs.Bool("force-scan", false, "ignore db.free and rebuild the free list by a scan")
	skip := fs.Bool("skip-damaged", false, "skip damaged journal regions instead of failing (the report lists the loss)")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	// ctrl-C (or SIGTERM) while recovery runs: the open goes on to its end
	// (stopped halfway, the next open would recover again), then the store
	// is closed and recover stops, exit 130.
	ctx, stop := onInterrupt()
	defer stop()
	if testHookFlagsParsed != nil {
		testHookFlagsParsed(ctx)
	}
	dir, err := oneArg(fs)
	if err != nil {
		return argsFailed(fs, stdout, err)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w before the store was opened: nothing was changed", errInterrupted)
		return failed(stdout, stderr, "recover", *asJSON, "", err, exitInterrupted)
	}
	err = storeExists(dir)
	var db *kdb.DB
	if err == nil {
		db, err = kdb.Open(dir, &kdb.Options{ForceFreeListScan: *forceScan, SkipDamagedJournal: *skip})
	}
	if err != nil {
		return failed(stdout, stderr, "recover", *asJSON, "", err, exitFor(err))
	}
	if testHookBeforeClose != nil {
		testHookBeforeClose(ctx, dir)
	}
	// Close waits for the checkpoint recovery asked for (or takes one), so
	// the report read after it says whether and how long.
	if err := db.Close(); err != nil {
		return failed(stdout, stderr, "recover", *asJSON, "close: ", err, exitIO)
	}
	rep := db.Recovery()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: recovery ran to its end and the store was closed (checkpointed); its report was not printed: kdbtool inspect %s shows the store", errInterrupted, dir)
		return failed(stdout, stderr, "recover", *asJSON, "", err, exitInterrupted)
	}
	if *asJSON {
		return writeJSON(stdout, recoveryJSON(rep))
	}
	printRecovery(stdout, rep)
	return exitOK
}

// testHookBeforeClose, if set (by tests only: TestMain sets it in a child
// process), runs once recover (or a writable verify) has the store open,
// before its Close, with the context onInterrupt gave it.
var testHookBeforeClose func(ctx context.Context, dir string)
