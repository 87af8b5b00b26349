package kdb_test

import (
	"bytes"
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
	points, lost, failedOpens, checkFailures, scanWithoutReason, idMismatch, second, trusted, lies, proven atomic.Int64
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
	st := db.Stats()
	c.proven.Add(int64(st.FreeListProven))
	if st.FreeListLies != 0 || r.FreeListLied {
		// A free list a checkpoint wrote never fails its proof.
		c.lies.Add(1)
		return fmt.Sprintf("free list lied: %d pages, first page %d: %s", st.FreeListLies, r.FreeListLiedPage, r.FreeListLieReason)
	}
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
// recovers each (the first points fall in the creation of the store: see
// also TestOpen_CrashDuringCreation): every acknowledged write must be there, the batch in
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
	t.Logf("crash-points=%d acknowledged-lost=%d failed-opens=%d check-failures=%d free-list-lies=%d (loaded free pages proven: %d; second crashes during recovery: %d; free list trusted at %d points; %d seeds x %d steps)",
		c.points.Load(), c.lost.Load(), c.failedOpens.Load(), c.checkFailures.Load(), c.lies.Load(), c.proven.Load(), c.second.Load(), c.trusted.Load(), seeds, steps)
	if c.lost.Load()+c.failedOpens.Load()+c.checkFailures.Load()+c.scanWithoutReason.Load()+c.idMismatch.Load()+c.lies.Load() != 0 {
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
	// A View holds its snapshot from a third of the way to two thirds,
	// paused mid-iteration: journal GC postpones the segments it reads
	// across the checkpoints meanwhile, and the crash images taken then
	// hold them.
	held := newHeldView(db, n/3, 2*n/3)
	for i, st := range steps {
		cur.Store(int64(i))
		held.at(i)
		if err := dbtest.Exec(db, st); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	cur.Store(int64(len(steps)))
	if err := held.wait(models[n/3]); err != nil {
		t.Fatalf("the View held from step %d to %d: %v", n/3, 2*n/3, err)
	}
	st := db.Stats()
	if st.FreeListLies != 0 {
		t.Errorf("seed %d: the free list lied %d times in a normal run", seed, st.FreeListLies)
	}
	t.Logf("seed %d: %d journal bytes, %d segments now, %d removed by GC (%d GCs postponed for the held View), %d checkpoints, %d pages", seed, st.JournalBytes, st.JournalSegments, st.SegmentsRemoved, st.GCPostponed, st.Checkpoints, st.PageCount)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
}

// heldView is a View that begins before step from and reads half of the
// store, pauses until step to, then reads the rest.
type heldView struct {
	db                *kdb.DB
	from, to          int
	started, resume   chan struct{}
	done              chan error
	got               dbtest.State
	began, resumedYet bool
}

func newHeldView(db *kdb.DB, from, to int) *heldView {
	return &heldView{db: db, from: from, to: to, started: make(chan struct{}), resume: make(chan struct{}), done: make(chan error, 1)}
}

// at is called before step i runs.
func (h *heldView) at(i int) {
	switch {
	case i == h.from && !h.began:
		h.began = true
		go func() { h.done <- h.run() }()
		<-h.started
	case i == h.to && h.began && !h.resumedYet:
		h.resumedYet = true
		close(h.resume)
	}
}

func (h *heldView) run() error {
	h.got = dbtest.State{}
	return h.db.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		paused := false
		pause := func() {
			if !paused {
				paused = true
				close(h.started)
				<-h.resume
			}
		}
		for i, idx := range names {
			m := map[string][]byte{}
			it := s.Iter(idx)
			for ok := it.First(); ok; ok = it.Next() {
				m[string(it.Key())] = bytes.Clone(it.Value())
				if i == len(names)/2 && len(m) == 1 {
					pause()
				}
			}
			if err := it.Err(); err != nil {
				return fmt.Errorf("index %q: %w", idx, err)
			}
			if len(m) > 0 {
				h.got[idx] = m
			}
		}
		pause()
		return nil
	})
}

// wait waits for the View (resuming it if the workload was shorter than to)
// and compares what it read with want.
func (h *heldView) wait(want dbtest.State) error {
	if !h.began {
		return nil
	}
	if !h.resumedYet {
		close(h.resume)
	}
	if err := <-h.done; err != nil {
		return err
	}
	if d := h.got.Diff(want); d != "" {
		return fmt.Errorf("read a state other than its snapshot's: %s", d)
	}
	return nil
}
