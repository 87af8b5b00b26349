package kdb_test

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/kdbtest/dbtest"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// sweepOptions keeps every file-system operation under the workload's
// control (no timed or size-triggered background checkpoint), so that an
// operation index names the same operation in every run, and uses the
// smallest segments so that the journal rotates and is collected.
func sweepOptions(fs vfs.FS) *kdb.Options {
	return &kdb.Options{
		FS:                   fs,
		SegmentSize:          64 << 10,
		CheckpointInterval:   -1,
		CheckpointBytes:      1 << 40,
		CheckpointDirtyPages: 1 << 20,
		// The sweep counts operations: the recovery checkpoint must not
		// race the workload.
		CheckpointBeforeServing: true,
	}
}

// sweepFault records the first operation an injected rule failed, and the
// workload step in progress when it did.
type sweepFault struct {
	mu   sync.Mutex
	step int // workload step in progress; -1 during Open, len(steps) during Close
	hit  bool
	op   vfs.Op
	path string
	n    int
	at   int // step in progress at the first failure
}

func (f *sweepFault) setStep(i int) {
	f.mu.Lock()
	f.step = i
	f.mu.Unlock()
}

// rule wraps r, noting the first operation it fails.
func (f *sweepFault) rule(r errfs.Rule) errfs.Rule {
	return func(op vfs.Op, path string, n int) error {
		err := r(op, path, n)
		if err != nil {
			f.mu.Lock()
			if !f.hit {
				f.hit, f.op, f.path, f.n, f.at = true, op, path, n, f.step
			}
			f.mu.Unlock()
		}
		return err
	}
}

func (f *sweepFault) first() (hit bool, op vfs.Op, path string, at int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hit, f.op, f.path, f.at
}

type sweepCounts struct {
	points, panics, lost, checkFailures, problems int
	openFailed                                    int // the fault hit Open and Open returned it
	failedHandles                                 int // a step returned ErrFailed
	stepErrors                                    int // a step returned an error that did not fail the handle
	closeErrors                                   int // the workload passed; the fault hit Close and Close returned it
	tolerated                                     int // the fault was absorbed (e.g. a failed close of a finished file)
	readErrors                                    int // the read-back after a reopen returned the error
	wrongReads                                    int // the read-back returned wrong content and no error
}

// TestErrSweep_EveryOperation fails every file-system operation of a mixed
// workload in turn, with EIO and with ENOSPC, once and from then on. Two runs
// are swept: a fresh store (Open, the dbtest workload, Close), and a store
// holding the first half of the workload without a final checkpoint (Open
// with journal replay, a read-back of everything, a few more steps, Close).
//
// For each point: nothing panics; the error reaches the caller (the injected
// errno is in its chain); a failed write or sync fails the handle (ErrFailed,
// db.Err, and later writes are refused), while a failed read may just return
// its error; a read never returns wrong content instead of an error; an
// injected failure of a write, sync, rename or directory sync is never
// swallowed; Close does not panic; and reopening both the crash image
// (unsynced data dropped) and the files as they are, on a clean FS, succeeds
// with every acknowledged step present (the failed step wholly there or
// wholly absent) and Check passing. A failed Open must return the error, and
// the store must then reopen with its previous content.
//
// KDB_SWEEP_STEPS (default 80, 16 under -race) and KDB_SWEEP_SEEDS (default
// 1) size it; KDB_LONG=1 runs 4 seeds of 150 steps.
func TestErrSweep_EveryOperation(t *testing.T) {
	steps, seeds := 80, 1
	if raceEnabled {
		steps = 16
	}
	if os.Getenv("KDB_LONG") != "" {
		steps, seeds = 150, 4
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_SWEEP_STEPS")); err == nil {
		steps = v
	}
	if v, err := strconv.Atoi(os.Getenv("KDB_SWEEP_SEEDS")); err == nil {
		seeds = v
	}
	var c sweepCounts
	var failures []string
	for seed := 1; seed <= seeds; seed++ {
		failures = append(failures, runErrSweep(t, uint64(seed), steps, &c)...)
	}
	t.Logf("points=%d panics=%d lost=%d check-failures=%d (wrong-reads=%d problems=%d; open-failed=%d failed-handles=%d step-errors-without-failing=%d read-errors=%d close-errors=%d tolerated=%d; %d seeds x %d steps)",
		c.points, c.panics, c.lost, c.checkFailures, c.wrongReads, c.problems, c.openFailed, c.failedHandles, c.stepErrors, c.readErrors, c.closeErrors, c.tolerated, seeds, steps)
	for i, f := range failures {
		if i == 30 {
			t.Errorf("... and %d more", len(failures)-i)
			break
		}
		t.Error(f)
	}
}

// sweepCase is a run to sweep: from the files of base (nil: an empty FS),
// Open, optionally read everything back, run steps, Close. models[i] is the
// content before steps[i] (models[0]: the content of base).
type sweepCase struct {
	name   string
	base   *vfs.MemFS
	steps  []dbtest.Step
	models []dbtest.State
	dump   bool
}

func (sc sweepCase) mem() *vfs.MemFS {
	if sc.base == nil {
		return vfs.NewMem()
	}
	return sc.base.Clone()
}

// sweepCases are a fresh store running the whole workload, and a store
// holding the first half of it, closed without a checkpoint (so that Open
// replays the journal), reopened, read back and given a few more steps.
func sweepCases(t *testing.T, seed uint64, n int) []sweepCase {
	steps := dbtest.Workload(seed, n)
	models := dbtest.Models(steps)
	half := n / 2
	base := vfs.NewMem()
	o := sweepOptions(base)
	o.NoCheckpointOnClose = true
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps[:half] {
		if err := dbtest.Exec(db, st); err != nil {
			t.Fatalf("base, step %d: %v", i, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	extra := 12
	if raceEnabled {
		extra = 4
	}
	more := min(half+extra, n)
	return []sweepCase{
		{name: "fresh", steps: steps, models: models},
		{name: "reopen", base: base, steps: steps[half:more], models: models[half : more+1], dump: true},
	}
}

func runErrSweep(t *testing.T, seed uint64, n int, c *sweepCounts) []string {
	var failures []string
	for _, sc := range sweepCases(t, seed, n) {
		// A clean run, counted, twice: the sweep relies on operation
		// indexes naming the same operation in every run.
		total := 0
		for range 2 {
			efs := errfs.Wrap(sc.mem())
			db, err := kdb.Open("/db", sweepOptions(efs))
			if err != nil {
				t.Fatal(err)
			}
			if sc.dump {
				if got, err := dbtest.Dump(db); err != nil || got.Diff(sc.models[0]) != "" {
					t.Fatalf("%s: clean run: dump: %v, %v", sc.name, err, got.Diff(sc.models[0]))
				}
			}
			for i, st := range sc.steps {
				if err := dbtest.Exec(db, st); err != nil {
					t.Fatalf("%s: clean run, step %d: %v", sc.name, i, err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if total != 0 && efs.Count() != total {
				t.Fatalf("%s: clean runs counted %d then %d operations: the sweep needs a deterministic run", sc.name, total, efs.Count())
			}
			total = efs.Count()
		}
		t.Logf("seed %d, %s: %d steps, %d operations", seed, sc.name, len(sc.steps), total)
		for _, e := range []error{errfs.ErrInjected, errfs.ErrNoSpace} {
			for _, from := range []bool{false, true} {
				for k := 1; k <= total; k++ {
					c.points++
					if msg := sweepPoint(sc, k, e, from, c); msg != "" {
						mode := "once"
						if from {
							mode = "from"
						}
						failures = append(failures, fmt.Sprintf("seed %d, %s, %s at op %d (%s): %s", seed, sc.name, errno(e), k, mode, msg))
					}
				}
			}
		}
	}
	return failures
}

func errno(e error) syscall.Errno {
	var n syscall.Errno
	errors.As(e, &n)
	return n
}

// readOnlyOp reports whether a failure of op can leave the files as they
// were, so that the engine may return the error without failing the handle.
func readOnlyOp(op vfs.Op) bool {
	switch op {
	case vfs.OpRead, vfs.OpOpen, vfs.OpStat, vfs.OpReadDir, vfs.OpMmap, vfs.OpLock:
		return true
	}
	return false
}

// sweepPoint runs the workload with operation k failing with e (once, or
// from k on) and returns a description of the first problem, or "".
func sweepPoint(sc sweepCase, k int, e error, from bool, c *sweepCounts) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			c.panics++
			msg = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	want := errno(e)
	steps, models := sc.steps, sc.models
	mem := sc.mem()
	f := &sweepFault{step: -1}
	rule := errfs.OnIndex(k, e)
	if from {
		rule = errfs.FromIndex(k, e)
	}
	efs := errfs.Wrap(mem, f.rule(rule))

	var problems []string
	problem := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	failedStep := len(steps) // the first step that failed; len(steps) if none did
	readFailed := false      // the read-back failed; no step ran

	db, err := kdb.Open("/db", sweepOptions(efs))
	if err != nil {
		hit, op, path, _ := f.first()
		switch {
		case !hit:
			problem("open failed without an injected fault: %v", err)
		case !errors.Is(err, want):
			problem("open failed (fault on %s %s) but the error does not carry %v: %v", op, path, want, err)
		}
		c.openFailed++
		failedStep = -1
	} else {
		if sc.dump {
			f.setStep(readBack)
			got, err := dbtest.Dump(db)
			hit, op, path, _ := f.first()
			switch {
			case err != nil:
				// A failed read is reported and changes nothing.
				c.readErrors++
				readFailed = true
				if !hit {
					problem("read-back failed without an injected fault: %v", err)
				} else if !errors.Is(err, want) {
					problem("read-back failed (fault on %s %s) but the error does not carry %v: %v", op, path, want, err)
				}
			case got.Diff(models[0]) != "":
				c.wrongReads++
				problem("read-back returned a wrong state without an error: %s", got.Diff(models[0]))
			}
		}
		for i, st := range steps {
			if readFailed {
				failedStep = 0
				break
			}
			f.setStep(i)
			err := dbtest.Exec(db, st)
			if err == nil {
				continue
			}
			failedStep = i
			hit, op, path, at := f.first()
			switch {
			case !hit:
				problem("step %d failed without an injected fault: %v", i, err)
			case !errors.Is(err, want):
				problem("step %d failed (fault on %s %s during step %d) but the error does not carry %v: %v", i, op, path, at, want, err)
			}
			if errors.Is(err, kdb.ErrFailed) {
				c.failedHandles++
				if db.Err() == nil {
					problem("step %d returned ErrFailed but db.Err() is nil", i)
				}
				if perr := db.Put("a", []byte("after-failure"), []byte("x")); !errors.Is(perr, kdb.ErrFailed) {
					problem("write after the handle failed at step %d: %v, want ErrFailed", i, perr)
				}
			} else {
				c.stepErrors++
				// A failed close changes nothing on disk: the journal closes
				// only descriptors whose writes were synced (a sealed
				// segment's, which its descriptor cache may close during a
				// step, and with faults from then on the step then fails on
				// a read), and Close's failed closes are tolerated below.
				if hit && !readOnlyOp(op) && op != vfs.OpRemove && op != vfs.OpClose {
					problem("step %d: a failed %s of %s returned %v without failing the handle", i, op, path, err)
				}
				if db.Err() != nil {
					problem("step %d returned %v but the handle failed with %v", i, err, db.Err())
				}
			}
			break
		}
		f.setStep(len(steps))
		cerr := db.Close()
		hit, op, path, at := f.first()
		switch {
		case readFailed:
		case failedStep < len(steps):
			if cerr == nil && db.Err() != nil {
				problem("Close of the failed handle returned nil")
			}
		case hit && cerr != nil:
			c.closeErrors++
			if !errors.Is(cerr, want) {
				problem("close failed (fault on %s %s) but the error does not carry %v: %v", op, path, want, cerr)
			}
		case hit && !readOnlyOp(op) && op != vfs.OpClose:
			problem("a failed %s of %s during %s was swallowed: every step and Close returned nil", op, path, stepName(at, len(steps)))
		case hit:
			c.tolerated++
		case cerr != nil:
			problem("close failed without an injected fault: %v", cerr)
		default:
			problem("the fault at operation %d never fired: the run is not deterministic", k)
		}
	}

	// Reopen on a clean FS: the power-loss image first (it must be taken
	// before the reopen of mem changes it), then the files as they are.
	before := models[max(failedStep, 0)]
	after := models[min(failedStep+1, len(models)-1)]
	if failedStep < 0 || readFailed {
		after = before
	}
	for _, img := range []struct {
		name string
		fs   *vfs.MemFS
	}{
		{"crash image", mem.CrashClone(vfs.CrashOptions{KeepUnsynced: 0})},
		{"files as left", mem},
	} {
		db, err := kdb.Open("/db", sweepOptions(img.fs))
		if err != nil {
			c.lost++
			problem("%s: reopen: %v", img.name, err)
			continue
		}
		got, err := dbtest.Dump(db)
		if err != nil {
			c.lost++
			problem("%s: dump: %v", img.name, err)
		} else if d := got.Diff(before); d != "" {
			if d2 := got.Diff(after); d2 != "" {
				c.lost++
				problem("%s: state is neither before step %d (%s) nor after it (%s)", img.name, failedStep, d, d2)
			}
		}
		if _, err := db.Check(); err != nil {
			c.checkFailures++
			problem("%s: check: %v", img.name, err)
		}
		if err := db.Close(); err != nil {
			problem("%s: close: %v", img.name, err)
		}
	}
	if len(problems) == 0 {
		return ""
	}
	c.problems++
	hit, op, path, at := f.first()
	where := "never fired"
	if hit {
		where = fmt.Sprintf("fault on %s %s during %s", op, path, stepName(at, len(steps)))
	}
	return fmt.Sprintf("%s: %v", where, problems)
}

// readBack is the step number of sweepCase.dump's read-back, for stepName.
const readBack = -2

func stepName(i, n int) string {
	switch {
	case i == readBack:
		return "the read-back"
	case i < 0:
		return "Open"
	case i >= n:
		return "Close"
	}
	return fmt.Sprintf("step %d", i)
}
