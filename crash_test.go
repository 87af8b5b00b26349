package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/internal/kdbtest/dbtest"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

type campaignCounts struct {
	points, lost, failedOpens, checkFailures, scanWithoutReason, idMismatch, second, trusted, lies, proven atomic.Int64
}

// expectation is what a crash image must hold: for each writer, the state
// before or after the step it had in progress.
type expectation struct {
	models [][]dbtest.State // per writer: dbtest.Models of its steps
	steps  []int            // per writer: the step in progress
}

// single is the expectation of a one-writer workload at step.
func single(models []dbtest.State, step int) expectation {
	return expectation{models: [][]dbtest.State{models}, steps: []int{step}}
}

// writerPrefix is the prefix of writer g's index names when several
// writers run (each on its own indexes, so each has its own model).
func writerPrefix(g int) string { return fmt.Sprintf("w%d.", g) }

// check describes the first way got differs from e, or "".
func (e expectation) check(got dbtest.State) string {
	many := len(e.models) > 1
	for g, models := range e.models {
		sub := got
		if many {
			sub = dbtest.State{}
			for idx, m := range got {
				if strings.HasPrefix(idx, writerPrefix(g)) {
					sub[idx] = m
				}
			}
		}
		step := e.steps[g]
		before, after := models[step], models[min(step+1, len(models)-1)]
		if d := sub.Diff(before); d != "" {
			if d2 := sub.Diff(after); d2 != "" {
				return fmt.Sprintf("writer %d: state is neither before step %d (%s) nor after it (%s)", g, step, d, d2)
			}
		}
	}
	if many {
		for idx := range got {
			if !strings.HasPrefix(idx, "w") || !strings.Contains(idx, ".") {
				return fmt.Sprintf("index %q belongs to no writer", idx)
			}
		}
	}
	return ""
}

// verifyImage opens a crash image with opts, requires its content to match
// e (all of a batch or none of it), and runs Check. It also checks the
// free-list decision against what the files said before recovery touched
// them: a trusted free list must come from a file whose store, checkpoint
// ID and page count match the meta recovered to, and hold as many free
// pages as recovery reports. It returns a description of the first problem.
func verifyImage(img *vfs.MemFS, e expectation, opts func(vfs.FS) *kdb.Options, c *campaignCounts) string {
	c.points.Add(1)
	in, inErr := pagefile.Inspect(img.Clone(), "/db")
	db, err := kdb.Open("/db", opts(img))
	if err != nil {
		c.failedOpens.Add(1)
		return fmt.Sprintf("open: %v", err)
	}
	defer db.Close()
	// The free-list decision first: a wrong one shows up as lost data
	// below, and the message should say why.
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
		var matching []pagefile.FreeFileInfo
		for _, fi := range in.FreeFiles {
			// Decided here, not by Inspect's MatchesMeta: the rule itself.
			if fi.Intact && fi.StoreOK && fi.ID == in.Meta.ID && fi.PageCount == in.Meta.PageCount {
				matching = append(matching, fi)
			}
		}
		if r.FreeListPath == "trusted" {
			if len(matching) != 1 || in.Meta.ID.String() != r.CheckpointID {
				c.idMismatch.Add(1)
				return fmt.Sprintf("free list trusted at %s but the files say %+v", r.CheckpointID, in.FreeFiles)
			}
			// Which file recovery trusted is not in its report; the
			// opener's decision on the same files (pagefile.Inspect runs
			// the code recovery runs) must name the matching one, and
			// recovery's free-page count must be that file's.
			if in.TrustedFile != matching[0].Name {
				c.idMismatch.Add(1)
				return fmt.Sprintf("the free-list rule trusts %q, but the file that matches the meta (%s) is %s: %+v", in.TrustedFile, in.Meta.ID, matching[0].Name, in.FreeFiles)
			}
			if matching[0].FreePages != r.FreePages {
				c.idMismatch.Add(1)
				return fmt.Sprintf("free list trusted with %d free pages, but %s (the file that matches the meta) holds %d", r.FreePages, matching[0].Name, matching[0].FreePages)
			}
			c.trusted.Add(1)
		}
		if r.FreeListPath == "scanned" && len(matching) > 0 && !strings.Contains(r.Reason, "forced") {
			c.scanWithoutReason.Add(1)
			return fmt.Sprintf("free list scanned (%s) though %+v matched", r.Reason, in.FreeFiles)
		}
	}
	got, err := dbtest.Dump(db)
	if err != nil {
		c.failedOpens.Add(1)
		return fmt.Sprintf("dump: %v", err)
	}
	if msg := e.check(got); msg != "" {
		c.lost.Add(1)
		return msg
	}
	if _, err := db.Check(); err != nil {
		c.checkFailures.Add(1)
		return fmt.Sprintf("check: %v", err)
	}
	return ""
}

// crashRecovery crashes the recovery of img at each of its mutating
// operations and verifies the image of each second crash.
func crashRecovery(img *vfs.MemFS, e expectation, opts func(vfs.FS) *kdb.Options, o vfs.CrashOptions, c *campaignCounts) string {
	// Count recovery's mutating operations on a clone.
	var n atomic.Int64
	probe := img.Clone()
	counted := vfs.Intercept(probe, func(e vfs.Event) error {
		if e.Op.Mutating() {
			n.Add(1)
		}
		return nil
	})
	db, err := kdb.Open("/db", opts(counted))
	if err != nil {
		return fmt.Sprintf("probe open: %v", err)
	}
	if err := db.Close(); err != nil {
		return fmt.Sprintf("probe close: %v", err)
	}
	for k := 1; k <= int(n.Load()); k++ {
		o.Seed++
		cr := kdbtest.CrashAt(img.Clone(), k, o)
		if db, err := kdb.Open("/db", opts(cr.FS())); err == nil {
			db.Close()
		}
		c.second.Add(1)
		if msg := verifyImage(cr.Image(), e, opts, c); msg != "" {
			return fmt.Sprintf("second crash at recovery op %d: %s", k, msg)
		}
	}
	return ""
}

// campaign is one shape of the crash campaign.
type campaign struct {
	name    string
	writers int // concurrent writers, each with its own workload on its own indexes
	steps   int // per writer
	gen     func(seed uint64, n int) []dbtest.Step
	opts    func(vfs.FS) *kdb.Options
	// every: a crash point every this many mutating operations.
	every int
	// recoveryEvery: every this many crash points, the recovery of one
	// image (the settings take turns) is itself crashed at each of its
	// mutating operations.
	recoveryEvery int
}

// campaigns returns the campaign's shapes, sized for the mode: -short (or
// -race), default, or KDB_LONG=1. KDB_CRASH_STEPS sets the steps of the
// first (sequential) one.
func campaigns() []campaign {
	mode := 1 // default
	switch {
	case os.Getenv("KDB_LONG") != "":
		mode = 2
	case raceEnabled || testing.Short():
		mode = 0
	}
	pick := func(v [3]int) int { return v[mode] }
	cs := []campaign{
		{name: "sequential", writers: 1, steps: pick([3]int{60, 300, 1500}), gen: dbtest.Workload, opts: dbtest.CampaignOptions,
			every: 1, recoveryEvery: 30},
		// Several writers: the commit leader groups their batches into one
		// journal batch, and the crash points fall inside those groups.
		{name: "writers=4", writers: 4, steps: pick([3]int{12, 30, 200}), gen: dbtest.Workload, opts: dbtest.CampaignOptions,
			every: pick([3]int{3, 2, 1}), recoveryEvery: 25},
		// A store with deep trees and overflow chains: values inline,
		// up to a few pages long, over thousands of keys.
		{name: "large", writers: 1, steps: pick([3]int{20, 60, 600}), gen: largeWorkload, opts: largeOptions,
			every: pick([3]int{12, 8, 2}), recoveryEvery: 8},
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_CRASH_STEPS")); err == nil {
		cs[0].steps = v
	}
	return cs
}

// largeOptions are dbtest.CampaignOptions with values kept in the B-tree.
func largeOptions(fs vfs.FS) *kdb.Options {
	o := dbtest.CampaignOptions(fs)
	o.ValueThreshold = -1
	o.SegmentSize = 1 << 20
	return o
}

// largeWorkload returns n steps of batches of 10-40 puts and deletes over
// 4,000 keys with values from a few bytes to three pages, and a checkpoint
// every dozen steps or so.
func largeWorkload(seed uint64, n int) []dbtest.Step {
	rng := rand.New(rand.NewPCG(seed, 0x6c61726765))
	steps := make([]dbtest.Step, 0, n)
	for len(steps) < n {
		if rng.IntN(12) == 0 {
			steps = append(steps, dbtest.Step{Kind: dbtest.StepCheckpoint})
			continue
		}
		var ops []dbtest.Op
		for range 10 + rng.IntN(31) {
			key := fmt.Sprintf("key-%06d-%x", rng.IntN(4000), seed)
			if rng.IntN(100) < 10 {
				ops = append(ops, dbtest.Op{Index: "big", Key: key, Delete: true})
				continue
			}
			size := 8 + rng.IntN(300)
			if rng.IntN(100) < 20 {
				size = 1000 + rng.IntN(11000) // an overflow chain
			}
			v := make([]byte, size)
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			ops = append(ops, dbtest.Op{Index: "big", Key: key, Value: v})
		}
		steps = append(steps, dbtest.Step{Kind: dbtest.StepWrite, Ops: ops})
	}
	return steps
}

// forWriter returns steps for writer g of several: its indexes renamed
// under writerPrefix(g), and without the read-modify-write steps (whose
// index dbtest fixes).
func forWriter(steps []dbtest.Step, g int) []dbtest.Step {
	var out []dbtest.Step
	for _, st := range steps {
		if st.Kind == dbtest.StepUpdate {
			continue
		}
		ops := make([]dbtest.Op, len(st.Ops))
		for i, op := range st.Ops {
			op.Index = writerPrefix(g) + op.Index
			ops[i] = op
		}
		st.Ops = ops
		out = append(out, st)
	}
	return out
}

// TestDB_CrashCampaign runs workloads once each and, before every mutating
// file-system operation (or every few, per shape; the first points fall in
// the creation of the store: see also TestOpen_CrashDuringCreation), takes power-loss images
// under several settings and recovers each: every acknowledged write must
// be there, the batch in progress wholly there or wholly absent, Check must
// pass, and a trusted free list must be the file that matches the meta.
// Every few points it also crashes the recovery itself at each of its
// writes, under each setting in turn. The shapes (see campaigns): one
// writer with the mixed dbtest workload; four concurrent writers, whose
// batches the commit leader groups; and a larger store with deep trees and
// overflow chains.
//
// The default run takes seconds; KDB_LONG=1 runs 8 seeds of much longer
// workloads (well over 100,000 crash points). KDB_CRASH_STEPS sets the
// sequential shape's steps, KDB_CRASH_SEEDS the number of seeds,
// KDB_CRASH_FIRST_SEED the first of them (1 by default: so that processes
// running seeds 1-4 and 5-8 together make one KDB_LONG run on two cores),
// and KDB_CRASH_SHAPE=name runs one shape only.
func TestDB_CrashCampaign(t *testing.T) {
	seeds := 1
	if os.Getenv("KDB_LONG") != "" {
		seeds = 8
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_CRASH_SEEDS")); err == nil {
		seeds = v
	}
	first := 1
	if v, err := strconv.Atoi(os.Getenv("KDB_CRASH_FIRST_SEED")); err == nil && v >= 1 {
		first = v
	}
	var total campaignCounts
	only, matched := os.Getenv("KDB_CRASH_SHAPE"), false
	for _, cfg := range campaigns() {
		if only != "" && only != cfg.name {
			continue
		}
		matched = true
		var c campaignCounts
		for seed := first; seed < first+seeds; seed++ {
			runCampaign(t, cfg, uint64(seed), &c)
		}
		t.Logf("%s: crash-points=%d acknowledged-lost=%d failed-opens=%d check-failures=%d free-list-wrong=%d free-list-lies=%d (loaded free pages proven: %d; second crashes during recovery: %d; free list trusted at %d points; %d seeds (%d-%d) x %d steps x %d writers, every %d ops)",
			cfg.name, c.points.Load(), c.lost.Load(), c.failedOpens.Load(), c.checkFailures.Load(), c.idMismatch.Load()+c.scanWithoutReason.Load(), c.lies.Load(), c.proven.Load(), c.second.Load(), c.trusted.Load(), seeds, first, first+seeds-1, cfg.steps, cfg.writers, cfg.every)
		if c.points.Load() < int64(cfg.steps/cfg.every) {
			t.Errorf("%s: only %d crash points for %d steps", cfg.name, c.points.Load(), cfg.steps)
		}
		if c.second.Load() == 0 {
			t.Errorf("%s: recovery was never crashed", cfg.name)
		}
		total.lost.Add(c.lost.Load() + c.failedOpens.Load() + c.checkFailures.Load() + c.scanWithoutReason.Load() + c.idMismatch.Load() + c.lies.Load())
	}
	if !matched {
		t.Fatalf("KDB_CRASH_SHAPE=%s names no shape (sequential, writers=4, large): nothing ran", only)
	}
	if total.lost.Load() != 0 {
		t.Fatal("the crash campaign found problems")
	}
}

func runCampaign(t *testing.T, cfg campaign, seed uint64, c *campaignCounts) {
	nw := max(cfg.writers, 1)
	work := make([][]dbtest.Step, nw)
	exp := expectation{models: make([][]dbtest.State, nw)}
	for g := range nw {
		if nw == 1 {
			work[g] = cfg.gen(seed, cfg.steps)
		} else {
			work[g] = forWriter(cfg.gen(seed*1000+uint64(g), cfg.steps), g)
		}
		exp.models[g] = dbtest.Models(work[g])
	}
	mem := vfs.NewMem()
	var (
		cur      = make([]atomic.Int64, nw) // each writer's step in progress
		mutating atomic.Int64
		mu       sync.Mutex // one verification at a time
		failures []string
	)
	hook := func(e vfs.Event) error {
		if !e.Op.Mutating() {
			return nil
		}
		k := mutating.Add(1)
		if k%int64(cfg.every) != 0 {
			return nil
		}
		point := k / int64(cfg.every)
		// The FS is serialized (kdbtest.Serialize): every operation that
		// returned is in the image, and a writer's step counter moves on
		// only after its acknowledgement, so the steps read here are at
		// most one behind the image.
		ex := expectation{models: exp.models, steps: make([]int, nw)}
		for g := range cur {
			ex.steps[g] = int(cur[g].Load())
		}
		mu.Lock()
		defer mu.Unlock()
		if len(failures) > 5 {
			return nil
		}
		for i, o := range dbtest.CampaignSettings {
			o.Seed = int64(seed)*1_000_003 + k*7 + int64(i)
			img := mem.CrashClone(o)
			if msg := verifyImage(img, ex, cfg.opts, c); msg != "" {
				failures = append(failures, fmt.Sprintf("%s: seed %d, op %d (%s %s), steps %v, setting %+v: %s", cfg.name, seed, k, e.Op, e.Path, ex.steps, o, msg))
				continue
			}
			if point%int64(cfg.recoveryEvery) == 0 && i == int(point/int64(cfg.recoveryEvery))%len(dbtest.CampaignSettings) {
				if msg := crashRecovery(img, ex, cfg.opts, o, c); msg != "" {
					failures = append(failures, fmt.Sprintf("%s: seed %d, op %d, steps %v, setting %+v: %s", cfg.name, seed, k, ex.steps, o, msg))
				}
			}
		}
		return nil
	}
	db, err := kdb.Open("/db", cfg.opts(kdbtest.Serialize(vfs.Intercept(mem, hook))))
	if err != nil {
		t.Fatal(err)
	}
	// With one writer, a View holds its snapshot from a third of the way
	// to two thirds, paused mid-iteration: journal GC postpones the
	// segments it reads across the checkpoints meanwhile, and the crash
	// images taken then hold them.
	var held *heldView
	if nw == 1 {
		held = newHeldView(db, cfg.steps/3, 2*cfg.steps/3)
	}
	var wg sync.WaitGroup
	errs := make([]error, nw)
	for g := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, st := range work[g] {
				cur[g].Store(int64(i))
				if held != nil {
					held.at(i)
				}
				if err := dbtest.Exec(db, st); err != nil {
					errs[g] = fmt.Errorf("writer %d, step %d: %w", g, i, err)
					return
				}
			}
			cur[g].Store(int64(len(work[g])))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if held != nil {
		if err := held.wait(exp.models[0][cfg.steps/3]); err != nil {
			t.Fatalf("%s: the View held from step %d to %d: %v", cfg.name, cfg.steps/3, 2*cfg.steps/3, err)
		}
	}
	st := db.Stats()
	if st.FreeListLies != 0 {
		t.Errorf("%s: seed %d: the free list lied %d times in a normal run", cfg.name, seed, st.FreeListLies)
	}
	t.Logf("%s: seed %d: %d journal bytes, %d segments now, %d removed by GC, %d checkpoints, %d pages, %d batches in %d journal commits, %d GCs postponed for a running View",
		cfg.name, seed, st.JournalBytes, st.JournalSegments, st.SegmentsRemoved, st.Checkpoints, st.PageCount, st.Batches, st.Commits, st.GCPostponed)
	if nw > 1 && st.Batches <= st.Commits {
		t.Errorf("%s: no group commit carried several batches (%d batches, %d commits): the crash points are not inside groups", cfg.name, st.Batches, st.Commits)
	}
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
			o := dbtest.CampaignOptions(proc)
			o.CheckpointBeforeServing = true
			db2, err := kdb.Open("/db", o)
			if err != nil {
				failures = append(failures, fmt.Sprintf("seed %d, op %d (%s %s), step %d: second process: open: %v", seed, k, e.Op, e.Path, step, err))
				return nil
			}
			for i, so := range dbtest.CampaignSettings {
				so.Seed = int64(seed)<<32 + k<<4 + int64(i)
				if msg := verifyImage(proc.CrashClone(so), single(models, step), dbtest.CampaignOptions, &c); msg != "" {
					failures = append(failures, fmt.Sprintf("seed %d, op %d (%s %s), step %d, power loss %+v after the second process recovered: %s", seed, k, e.Op, e.Path, step, so, msg))
					break
				}
			}
			_ = db2.Close()
			return nil
		}
		db, err := kdb.Open("/db", dbtest.CampaignOptions(vfs.Intercept(mem, hook)))
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
		c.points.Load()/int64(len(dbtest.CampaignSettings)), unsyncedJournal.Load(), c.lost.Load(), c.failedOpens.Load(), c.checkFailures.Load(), steps, every, len(dbtest.CampaignSettings))
	if unsyncedJournal.Load() == 0 {
		t.Fatal("no crash point fell between a journal write and its sync: the test does not exercise the sync at open")
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
