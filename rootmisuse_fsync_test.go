package kdb_test

// Outside tester (root-package misuse): writers that go on after an
// injected I/O failure. The contract: a failed write or fsync fails the
// handle (ErrFailed: nothing is retried), every later write returns an
// error, and nothing acknowledged is lost by a power cut.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// REGRESSION (holds): TestMisuse_WritersAfterInjectedFailure.
func TestMisuse_WritersAfterInjectedFailure(t *testing.T) {
	cases := []struct {
		name string
		rule errfs.Rule
	}{
		{"journal-sync-once", errfs.OnPath("db-", errfs.OnNth(vfs.OpSync, 1, errfs.ErrInjected))},
		{"journal-write-once", errfs.OnPath("db-", errfs.OnNth(vfs.OpWrite, 1, errfs.ErrInjected))},
		{"journal-enospc", errfs.OnPath("db-", errfs.FromNth(vfs.OpWrite, 3, errfs.ErrNoSpace))},
		{"data-sync-once", errfs.OnPath("db.data", errfs.OnNth(vfs.OpSync, 1, errfs.ErrInjected))},
		{"redo-write-once", errfs.OnPath("db.redo", errfs.OnNth(vfs.OpWrite, 1, errfs.ErrInjected))},
		{"any-sync-5th", errfs.OnNth(vfs.OpSync, 5, errfs.ErrInjected)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			efs := errfs.Wrap(mem)
			opts := misuseOpts()
			opts.FS = efs
			opts.SyncInterval = time.Millisecond
			opts.ValueThreshold = 32
			db, err := kdb.Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			var acked sync.Map
			var nacked, afterFail atomic.Int64
			var badErrs sync.Map
			var failedKeys sync.Map // writes that returned an error
			var wg sync.WaitGroup
			stop := make(chan struct{})
			note := func(err error) {
				if err != nil && !errors.Is(err, kdb.ErrFailed) {
					badErrs.Store(err.Error(), true)
				}
			}
			for w := 0; w < 4; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						k := fmt.Sprintf("w%d-%06d", w, i)
						v := []byte(fmt.Sprintf("value-%s-%040d", k, i))
						// Failed before the call began: the call must fail.
						wasFailed := db.Err() != nil
						var err error
						switch w {
						case 0:
							err = db.Put("t", []byte(k), v)
						case 1:
							b := kdb.NewBatch()
							b.Put("t", []byte(k), v)
							b.Put("t", []byte(k+"b"), v)
							err = db.Write(b)
						case 2:
							var c *kdb.Commit
							c, err = db.Submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte(k), v) })
							if err == nil {
								err = c.Wait()
							}
						case 3:
							err = db.Update(func(tx *kdb.Txn) error { return tx.Put("t", []byte(k), v) })
						}
						note(err)
						if err != nil {
							failedKeys.Store(k, true)
						}
						if err == nil {
							if wasFailed {
								afterFail.Add(1)
							}
							acked.Store(k, string(v))
							if w == 1 {
								acked.Store(k+"b", string(v))
							}
							nacked.Add(1)
						}
					}
				}()
			}
			wg.Add(1)
			go func() { // checkpoints, so that page-file rules fire
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					note(db.Checkpoint())
				}
			}()
			for nacked.Load() < 100 {
				time.Sleep(time.Millisecond)
			}
			efs.AddRule(tc.rule)
			deadline := time.Now().Add(3 * time.Second)
			for db.Err() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if db.Err() == nil {
				t.Logf("the rule never fired (skipped): %d acks", nacked.Load())
			}
			time.Sleep(50 * time.Millisecond)
			close(stop)
			wg.Wait()
			if db.Err() != nil {
				if !errors.Is(db.Err(), kdb.ErrFailed) {
					t.Errorf("Err() = %v, want ErrFailed", db.Err())
				}
				if err := db.Put("t", []byte("late"), []byte("v")); !errors.Is(err, kdb.ErrFailed) {
					t.Errorf("Put on the failed handle: %v, want ErrFailed", err)
				}
				if n := afterFail.Load(); n > 0 {
					t.Errorf("%d writes that began after the handle failed were acknowledged", n)
				}
			}
			badErrs.Range(func(k, _ any) bool {
				t.Errorf("error that is not ErrFailed: %v", k)
				return true
			})
			// "A reader sees a write only once it is durable": a write that
			// failed and that a reader of the failed handle still sees must
			// survive the power cut.
			seen := map[string]bool{}
			failedKeys.Range(func(k, _ any) bool {
				if _, err := db.Get("t", []byte(k.(string))); err == nil {
					seen[k.(string)] = true
				}
				return true
			})
			img := mem.CrashClone(vfs.CrashOptions{})
			_ = db.Close()
			for _, im := range []*vfs.MemFS{img, mem.CrashClone(vfs.CrashOptions{})} {
				o := misuseOpts()
				o.FS = im
				db2, err := kdb.Open("/db", o)
				if err != nil {
					t.Fatalf("reopen after the power cut: %v", err)
				}
				lost := 0
				acked.Range(func(k, v any) bool {
					got, err := db2.Get("t", []byte(k.(string)))
					if err != nil || string(got) != v.(string) {
						if lost < 5 {
							t.Errorf("acknowledged %s lost: %v", k, err)
						}
						lost++
					}
					return true
				})
				if lost > 0 {
					t.Errorf("%d of %d acknowledged writes lost", lost, nacked.Load())
				}
				gone := 0
				for k := range seen {
					if _, err := db2.Get("t", []byte(k)); err != nil {
						gone++
					}
				}
				if gone > 0 {
					t.Errorf("%d of the %d failed writes a reader saw on the failed handle are gone after the power cut", gone, len(seen))
				}
				if _, err := db2.Check(); err != nil {
					t.Errorf("Check after reopen: %v", err)
				}
				_ = db2.Close()
			}
		})
	}
}
