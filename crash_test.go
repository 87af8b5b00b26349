package kdb_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/internal/kdbtest/dbtest"
	"github.com/kdb-project/kdb/internal/vfs"
	"github.com/kdb-project/kdb/pagefile"
)

// campaignOptions keeps checkpoints under the workload's control, so that a
// crash point names one step in progress, and uses small segments so that
// the journal rotates and is collected.
func campaignOptions(fs vfs.FS) *kdb.Options {
	return &kdb.Options{
		FS:                   fs,
		SegmentSize:          128 << 10,
		CheckpointInterval:   -1,
		CheckpointBytes:      1 << 40,
		CheckpointDirtyPages: 1 << 20,
	}
}

// campaignSettings are the power-loss models: drop every unsynced sector,
// keep them all, keep half, keep half with garbage.
var campaignSettings = []vfs.CrashOptions{
	{KeepUnsynced: 0},
	{KeepUnsynced: 1},
	{KeepUnsynced: 0.5},
	{KeepUnsynced: 0.5, GarbageUnsynced: 0.2},
}

type campaignCounts struct {
	points, lost, failedOpens, checkFailures, scanWithoutReason, idMismatch, second, trusted atomic.Int64
}

// verifyImage opens a crash image, requires its content to be the model
// before or after the step in progress (all of a batch or none of it), and
// runs Check. It returns a description of the first problem.
func verifyImage(img *vfs.MemFS, models []dbtest.State, step int, c *campaignCounts) string {
	c.points.Add(1)
	// What the files say before recovery touches them: recovery may trust
	// a free list only if one matches the meta it recovers to.
	in, inErr := pagefile.Inspect(img.Clone(), "/db")
	db, err := kdb.Open("/db", campaignOptions(img))
	if err != nil {
		c.failedOpens.Add(1)
		return fmt.Sprintf("open: %v", err)
	}
	defer db.Close()
	got, err := dbtest.Dump(db)
	if err != nil {
		c.failedOpens.Add(1)
		return fmt.Sprintf("dump: %v", err)
	}
	before, after := models[step], models[min(step+1, len(models)-1)]
	if d := got.Diff(before); d != "" {
		if d2 := got.Diff(after); d2 != "" {
			c.lost.Add(1)
			return fmt.Sprintf("state is neither before step %d (%s) nor after it (%s)", step, d, d2)
		}
	}
	if _, err := db.Check(); err != nil {
		c.checkFailures.Add(1)
		return fmt.Sprintf("check: %v", err)
	}
	r := db.Recovery()
	if r.FreeListPath == "scanned" && r.Reason == "" {
		c.scanWithoutReason.Add(1)
		return "free list scanned without a reason"
	}
	if inErr == nil {
		matching := false
		for _, fi := range in.FreeFiles {
			matching = matching || fi.MatchesMeta
		}
		if r.FreeListPath == "trusted" && (!matching || in.Meta.ID.String() != r.CheckpointID) {
			c.idMismatch.Add(1)
			return fmt.Sprintf("free list trusted at %s but the files say %+v", r.CheckpointID, in.FreeFiles)
		}
		if r.FreeListPath == "scanned" && matching && !strings.Contains(r.Reason, "forced") {
			c.scanWithoutReason.Add(1)
			return fmt.Sprintf("free list scanned (%s) though %+v matched", r.Reason, in.FreeFiles)
		}
		if r.FreeListPath == "trusted" {
			c.trusted.Add(1)
		}
	}
	return ""
}

// crashRecovery crashes the recovery of img at each of its mutating
// operations and verifies the image of each second crash.
func crashRecovery(img *vfs.MemFS, models []dbtest.State, step int, o vfs.CrashOptions, c *campaignCounts) string {
	// Count recovery's mutating operations on a clone.
	var n atomic.Int64
	probe := img.Clone()
	counted := vfs.Intercept(probe, func(e vfs.Event) error {
		if e.Op.Mutating() {
			n.Add(1)
		}
		return nil
	})
	db, err := kdb.Open("/db", campaignOptions(counted))
	if err != nil {
		return fmt.Sprintf("probe open: %v", err)
	}
	if err := db.Close(); err != nil {
		return fmt.Sprintf("probe close: %v", err)
	}
	for k := 1; k <= int(n.Load()); k++ {
		cr := kdbtest.CrashAt(img.Clone(), k, o)
		if db, err := kdb.Open("/db", campaignOptions(cr.FS())); err == nil {
			db.Close()
		}
		c.second.Add(1)
		if msg := verifyImage(cr.Image(), models, step, c); msg != "" {
			return fmt.Sprintf("second crash at recovery op %d: %s", k, msg)
		}
	}
	return ""
}

// TestDB_CrashCampaign runs a mixed workload once and, before every mutating
// file-system operation, takes power-loss images under several settings and
// recovers each: every acknowledged write must be there, the batch in
// progress wholly there or wholly absent, and Check must pass. Every 40th
// point it also crashes the recovery itself at each of its writes.
//
// KDB_CRASH_STEPS (default 300; 60 under -race or -short) sets the workload length and
// KDB_CRASH_SEEDS (default 1) the number of seeds; KDB_LONG=1 runs 8 seeds of
// 1500 steps, well over 100,000 crash points.
func TestDB_CrashCampaign(t *testing.T) {
	steps, seeds := 300, 1
	if raceEnabled || testing.Short() {
		steps = 60
	}
	if os.Getenv("KDB_LONG") != "" {
		steps, seeds = 1500, 8
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_CRASH_STEPS")); err == nil {
		steps = v
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_CRASH_SEEDS")); err == nil {
		seeds = v
	}
	var c campaignCounts
	for seed := 1; seed <= seeds; seed++ {
		runCampaign(t, uint64(seed), steps, &c)
	}
	t.Logf("crash-points=%d acknowledged-lost=%d failed-opens=%d check-failures=%d (second crashes during recovery: %d; free list trusted at %d points; %d seeds x %d steps)",
		c.points.Load(), c.lost.Load(), c.failedOpens.Load(), c.checkFailures.Load(), c.second.Load(), c.trusted.Load(), seeds, steps)
	if c.lost.Load()+c.failedOpens.Load()+c.checkFailures.Load()+c.scanWithoutReason.Load()+c.idMismatch.Load() != 0 {
		t.Fatal("the crash campaign found problems")
	}
	if c.points.Load() < int64(steps) {
		t.Fatalf("only %d crash points for %d steps", c.points.Load(), steps)
	}
}

func runCampaign(t *testing.T, seed uint64, n int, c *campaignCounts) {
	steps := dbtest.Workload(seed, n)
	models := dbtest.Models(steps)
	mem := vfs.NewMem()
	var (
		cur      atomic.Int64 // the step in progress
		mutating atomic.Int64
		mu       sync.Mutex // one verification at a time
		failures []string
	)
	hook := func(e vfs.Event) error {
		if !e.Op.Mutating() {
			return nil
		}
		k := mutating.Add(1)
		step := int(cur.Load())
		mu.Lock()
		defer mu.Unlock()
		if len(failures) > 5 {
			return nil
		}
		for i, o := range campaignSettings {
			o.Seed = int64(seed)*1_000_003 + k*7 + int64(i)
			img := mem.CrashClone(o)
			if msg := verifyImage(img, models, step, c); msg != "" {
				failures = append(failures, fmt.Sprintf("seed %d, op %d (%s %s), step %d, setting %+v: %s", seed, k, e.Op, e.Path, step, o, msg))
				continue
			}
			if k%40 == 0 && i == 2 {
				if msg := crashRecovery(img, models, step, o, c); msg != "" {
					failures = append(failures, fmt.Sprintf("seed %d, op %d, step %d: %s", seed, k, step, msg))
				}
			}
		}
		return nil
	}
	db, err := kdb.Open("/db", campaignOptions(vfs.Intercept(mem, hook)))
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		cur.Store(int64(i))
		if err := dbtest.Exec(db, st); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	cur.Store(int64(len(steps)))
	st := db.Stats()
	t.Logf("seed %d: %d journal bytes, %d segments now, %d removed by GC, %d checkpoints, %d pages", seed, st.JournalBytes, st.JournalSegments, st.SegmentsRemoved, st.Checkpoints, st.PageCount)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
}

// TestDB_ProcessCrashThenPowerLoss kills the writing process at mutating
// operations of the campaign's workload (the kernel keeps every byte it
// wrote, synced or not: vfs.MemFS.ProcessCrashClone), recovers in a second
// process that checkpoints before serving (so the checkpoint moves the
// replay position past whatever recovery replayed), then cuts the power
// under each of the campaign's settings while that process still runs. The
// third process must open the store, find every write acknowledged before
// the first crash (the state before or after the step in progress) and
// pass Check. A recovery that replays journal bytes found only in the OS
// cache and checkpoints past them without syncing them first leaves an
// index pointing at records that the power loss took away.
//
// By default 80 steps and every second mutating operation is a crash point
// (40 steps, every third under -short or -race; 600 steps, every operation
// with KDB_LONG=1); KDB_PCRASH_EVERY overrides the stride.
func TestDB_ProcessCrashThenPowerLoss(t *testing.T) {
	steps, every := 80, 2
	if raceEnabled || testing.Short() {
		steps, every = 40, 3
	}
	if os.Getenv("KDB_LONG") != "" {
		steps, every = 600, 1
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_PCRASH_EVERY")); err == nil && v > 0 {
		every = v
	}
	var c campaignCounts
	var unsyncedJournal atomic.Int64
	for seed := uint64(1); seed <= 2; seed++ {
		wl := dbtest.Workload(seed, steps)
		models := dbtest.Models(wl)
		mem := vfs.NewMem()
		var (
			cur, mutating atomic.Int64
			mu            sync.Mutex
			failures      []string
		)
		hook := func(e vfs.Event) error {
			if !e.Op.Mutating() {
				return nil
			}
			k := mutating.Add(1)
			if k%int64(every) != 0 {
				return nil
			}
			step := int(cur.Load())
			mu.Lock()
			defer mu.Unlock()
			if len(failures) > 3 {
				return nil
			}
			if e.Op == vfs.OpSync && strings.Contains(e.Path, ".log") {
				unsyncedJournal.Add(1) // the journal's records of this round are in the OS cache only
			}
			proc := mem.ProcessCrashClone()
			o := campaignOptions(proc)
			o.CheckpointBeforeServing = true
			db2, err := kdb.Open("/db", o)
			if err != nil {
				failures = append(failures, fmt.Sprintf("seed %d, op %d (%s %s), step %d: second process: open: %v", seed, k, e.Op, e.Path, step, err))
				return nil
			}
			for i, so := range campaignSettings {
				so.Seed = int64(seed)<<32 + k<<4 + int64(i)
				if msg := verifyImage(proc.CrashClone(so), models, step, &c); msg != "" {
					failures = append(failures, fmt.Sprintf("seed %d, op %d (%s %s), step %d, power loss %+v after the second process recovered: %s", seed, k, e.Op, e.Path, step, so, msg))
					break
				}
			}
			_ = db2.Close()
			return nil
		}
		db, err := kdb.Open("/db", campaignOptions(vfs.Intercept(mem, hook)))
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range wl {
			cur.Store(int64(i))
			if err := dbtest.Exec(db, st); err != nil {
				t.Fatalf("seed %d, step %d: %v", seed, i, err)
			}
		}
		cur.Store(int64(len(wl)))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		for _, f := range failures {
			t.Error(f)
		}
	}
	t.Logf("process-crash-points=%d (%d at a journal sync) acknowledged-lost=%d failed-opens=%d check-failures=%d (%d steps, every %d mutating ops, 2 seeds, %d power-loss settings each)",
		c.points.Load()/int64(len(campaignSettings)), unsyncedJournal.Load(), c.lost.Load(), c.failedOpens.Load(), c.checkFailures.Load(), steps, every, len(campaignSettings))
	if unsyncedJournal.Load() == 0 {
		t.Fatal("no crash point fell between a journal write and its sync: the test does not exercise the sync at open")
	}
}
