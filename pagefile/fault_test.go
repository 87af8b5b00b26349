package pagefile

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// TestFile_CheckpointFaultAtEveryOp injects EIO and ENOSPC at every
// operation of one checkpoint: the error comes back, the handle refuses
// further mutations, and a reopen (as is, and after a power loss) finds the
// previous checkpoint if the fault hit before db.redo was fully written, the
// new one if it hit after the db.redo sync returned, and either, whole, in
// between.
func TestFile_CheckpointFaultAtEveryOp(t *testing.T) {
	base := newBase(t, crashTestOpts, 20)
	// Two rounds to set up, the third is the faulted checkpoint.
	setup := func(fsys vfs.FS) *File {
		f, _ := mustOpen(t, fsys, crashTestOpts)
		if err := workload(f, 2, 5, nil); err != nil {
			t.Fatalf("setup: %v", err)
		}
		return f
	}
	// Reference: op indexes of the third checkpoint and its db.redo sync.
	var ref reference
	var first, last, redoWrite, redoSync int
	{
		// States from a run without op counting (captureState reads)...
		f := setup(base.Clone())
		ref.states = append(ref.states, captureState(t, f))
		if err := workload(f, 1, 6, nil); err != nil {
			t.Fatal(err)
		}
		ref.states = append(ref.states, captureState(t, f))
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// ...and op indexes from one that does nothing else.
		efs := errfs.Wrap(base.Clone(), func(op vfs.Op, path string, n int) error {
			if op == vfs.OpSync && strings.HasSuffix(path, redoFileName) {
				redoSync = n
			}
			if op == vfs.OpTruncate && strings.HasSuffix(path, redoFileName) {
				redoWrite = n - 1 // the trailer write precedes the truncate
			}
			return nil
		})
		f = setup(efs)
		first = efs.Count() + 1
		if err := workload(f, 1, 6, func(int) { last = efs.Count() }); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if !(first <= redoSync && redoSync <= last) {
		t.Fatalf("reference: checkpoint ops [%d, %d], redo sync %d", first, last, redoSync)
	}
	for _, inj := range []error{errfs.ErrInjected, errfs.ErrNoSpace} {
		for n := first; n <= last; n++ {
			what := fmt.Sprintf("%v at op %d", inj, n)
			mem := base.Clone()
			var failed vfs.Op
			efs := errfs.Wrap(mem, func(op vfs.Op, path string, i int) error {
				if i == n {
					failed = op
					return inj
				}
				return nil
			})
			f := setup(efs)
			err := workload(f, 1, 6, nil)
			if err == nil {
				t.Fatalf("%s (%v): workload succeeded", what, failed)
			}
			if !errors.Is(err, ErrFailed) || !errors.Is(err, inj) {
				t.Fatalf("%s (%v): error %v does not wrap ErrFailed and the injected error", what, failed, err)
			}
			if !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("%s: errno lost: %v", what, err)
			}
			if !errors.Is(f.Err(), ErrFailed) {
				t.Fatalf("%s: Err() = %v", what, f.Err())
			}
			// The handle refuses further mutations.
			if _, err := f.Allocate(); !errors.Is(err, ErrFailed) {
				t.Fatalf("%s: Allocate after failure: %v", what, err)
			}
			if err := f.Write(FirstDataPage, testType, nil); !errors.Is(err, ErrFailed) {
				t.Fatalf("%s: Write after failure: %v", what, err)
			}
			if err := f.Free(FirstDataPage); !errors.Is(err, ErrFailed) {
				t.Fatalf("%s: Free after failure: %v", what, err)
			}
			if err := f.Checkpoint(MetaUpdate{}); !errors.Is(err, ErrFailed) {
				t.Fatalf("%s: Checkpoint after failure: %v", what, err)
			}
			_ = f.Close() // may fail too; the handle is dead either way
			// Before the last db.redo write: the batch is incomplete. After
			// the db.redo sync: it is durable. In between (a failed
			// truncate or sync) the batch may or may not be whole.
			want := []int{0}
			switch {
			case n > redoSync:
				want = []int{1}
			case n > redoWrite:
				want = []int{0, 1}
			}
			img := mem.CrashClone(vfs.CrashOptions{KeepUnsynced: 0.5, Seed: int64(n)})
			checkRecovered(t, mem, ref, want, what+", reopened as is")
			checkRecovered(t, img, ref, want, what+", reopened after a power loss")
		}
	}
}
