package kdb_test

// Outside tester (root-package misuse): Close racing every other call.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// closeRaceOpts: small segments and checkpoint triggers so that the
// background checkpointer, GC and the journal's rotation all run during
// the race.
func closeRaceOpts() *kdb.Options {
	return &kdb.Options{
		SegmentSize:     64 << 10,
		CheckpointBytes: 128 << 10,
		ValueThreshold:  64,
		SyncInterval:    time.Millisecond,
		CloseWait:       20 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// waitGroupWithin waits for wg up to d.
func waitGroupWithin(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

type raceErrs struct {
	mu   sync.Mutex
	errs map[string]int
}

func (r *raceErrs) note(call string, err error) {
	if err == nil || errors.Is(err, kdb.ErrClosed) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs == nil {
		r.errs = map[string]int{}
	}
	r.errs[fmt.Sprintf("%s: %v", call, err)]++
}

// REGRESSION (holds): TestMisuse_CloseRacesEveryCall: goroutines keep calling Put, Write,
// Submit+Wait, Defer, Update, View (with iterators), Get, Checkpoint,
// Sync, Check, Compact and Export while Close runs. The contract: calls
// that start after Close began return ErrClosed (errors.Is); a call Close
// waited for succeeds; nothing panics; every write acknowledged (nil) is
// in the store after reopening. Any other error is reported with its call.
func TestMisuse_CloseRacesEveryCall(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	var all raceErrs
	for round := 0; round < rounds; round++ {
		dir := t.TempDir()
		db, err := kdb.Open(dir, closeRaceOpts())
		if err != nil {
			t.Fatal(err)
		}
		var acked sync.Map // key -> value acknowledged
		var seq atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		val := func(k int64) []byte { return []byte(strings.Repeat(fmt.Sprint(k%10), 20+int(k%200))) }
		key := func(k int64) string { return fmt.Sprintf("k%08d", k) }
		loop := func(name string, f func(r *rand.Rand) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(len(name))))
				for {
					select {
					case <-stop:
						return
					default:
					}
					err := f(r)
					all.note(name, err)
					if errors.Is(err, kdb.ErrClosed) {
						return
					}
				}
			}()
		}
		for w := 0; w < 2; w++ {
			loop("Put", func(*rand.Rand) error {
				k := seq.Add(1)
				err := db.Put("t", []byte(key(k)), val(k))
				if err == nil {
					acked.Store(key(k), string(val(k)))
				}
				return err
			})
		}
		loop("Write", func(*rand.Rand) error {
			b := kdb.NewBatch()
			var ks []int64
			for i := 0; i < 5; i++ {
				k := seq.Add(1)
				ks = append(ks, k)
				b.Put("t", []byte(key(k)), val(k))
			}
			err := db.Write(b)
			if err == nil {
				for _, k := range ks {
					acked.Store(key(k), string(val(k)))
				}
			}
			return err
		})
		loop("Submit", func(*rand.Rand) error {
			k := seq.Add(1)
			c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte(key(k)), val(k)) })
			if err != nil {
				return err
			}
			err = c.Wait()
			if err == nil {
				acked.Store(key(k), string(val(k)))
			}
			return err
		})
		dns, err := db.Namespace("d")
		if err != nil {
			t.Fatal(err)
		}
		loop("Defer", func(*rand.Rand) error {
			// Throttled: Defer has no back-pressure, and a tight loop
			// queues hundreds of thousands that Close must then run.
			time.Sleep(50 * time.Microsecond)
			k := seq.Add(1)
			// In a namespace of its own: not folded into the Submits
			// (TestMisuse_FoldedDefersFailUnrelatedSubmit).
			return dns.Defer(func(tx *kdb.Txn) error { return tx.Put("d", []byte(key(k)), val(k)) }, func(err error) {
				all.note("Defer done", err)
			})
		})
		loop("Update", func(*rand.Rand) error {
			k := seq.Add(1)
			err := db.Update(func(tx *kdb.Txn) error { return tx.Put("t", []byte(key(k)), val(k)) })
			if err == nil {
				acked.Store(key(k), string(val(k)))
			}
			return err
		})
		loop("View", func(*rand.Rand) error {
			return db.View(func(s *kdb.Snapshot) error {
				it := s.Iter("t")
				n := 0
				for ok := it.First(); ok && n < 200; ok = it.Next() {
					_ = append([]byte(nil), it.Value()...)
					n++
				}
				return it.Err()
			})
		})
		loop("Get", func(r *rand.Rand) error {
			_, err := db.Get("t", []byte(key(1+r.Int64N(seq.Load()+1))))
			if errors.Is(err, kdb.ErrNotFound) {
				return nil
			}
			return err
		})
		loop("Checkpoint", func(*rand.Rand) error { return db.Checkpoint() })
		loop("Sync", func(*rand.Rand) error { return db.Sync() })
		loop("Check", func(*rand.Rand) error { _, err := db.Check(); return err })
		loop("Compact", func(*rand.Rand) error { _, err := db.Compact(); return err })
		loop("Export", func(*rand.Rand) error { _, err := db.Export(io.Discard); return err })

		time.Sleep(time.Duration(20+round*7) * time.Millisecond)
		t0 := time.Now()
		cerr := db.Close()
		all.note("Close", cerr)
		t1 := time.Now()
		close(stop)
		if !waitGroupWithin(&wg, 30*time.Second) {
			t.Fatalf("round %d: callers still blocked 30 s after Close returned", round)
		}
		t.Logf("round %d: Close %v, callers done %v after it, %d writes", round, t1.Sub(t0), time.Since(t1), seq.Load())
		// After Close returned, every call is ErrClosed.
		for name, f := range map[string]func() error{
			"Put after Close":        func() error { return db.Put("t", []byte("x"), []byte("y")) },
			"Sync after Close":       db.Sync,
			"Checkpoint after Close": db.Checkpoint,
			"Check after Close":      func() error { _, err := db.Check(); return err },
			"Compact after Close":    func() error { _, err := db.Compact(); return err },
			"View after Close":       func() error { return db.View(func(*kdb.Snapshot) error { return nil }) },
			"Get after Close":        func() error { _, err := db.Get("t", []byte("x")); return err },
			"Close after Close":      db.Close,
		} {
			if err := f(); !errors.Is(err, kdb.ErrClosed) {
				all.note(name, fmt.Errorf("got %v, want ErrClosed", err))
			}
		}
		// Everything acknowledged is in the store.
		db2, err := kdb.Open(dir, closeRaceOpts())
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		missing := 0
		acked.Range(func(k, v any) bool {
			got, err := db2.Get("t", []byte(k.(string)))
			if err != nil || string(got) != v.(string) {
				if missing < 5 {
					t.Errorf("round %d: acknowledged %s: %v (len %d, want %d)", round, k, err, len(got), len(v.(string)))
				}
				missing++
			}
			return true
		})
		if missing > 0 {
			t.Errorf("round %d: %d acknowledged writes lost", round, missing)
		}
		if _, err := db2.Check(); err != nil {
			t.Errorf("round %d: Check after reopen: %v", round, err)
		}
		if err := db2.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for k, n := range all.errs {
		lines = append(lines, fmt.Sprintf("%5d× %s", n, k))
	}
	sort.Strings(lines)
	for _, l := range lines {
		t.Errorf("error that is neither nil nor ErrClosed: %s", l)
	}
}

// Close called inside a View's function waited CloseWait (10 s by default)
// for that very View, then closed under it and returned nil; inside an
// Update it was refused at once. Now it is ErrInvalid at once there too,
// and the store closes after the View returns.
func TestMisuse_CloseInsideViewRefused(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CloseWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put("t", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ns, err := db.Namespace("n")
	if err != nil {
		t.Fatal(err)
	}
	for name, view := range map[string]func(func(*kdb.Snapshot) error) error{"DB.View": db.View, "Namespace.View": ns.View} {
		start := time.Now()
		err := view(func(s *kdb.Snapshot) error {
			if err := db.Close(); !errors.Is(err, kdb.ErrInvalid) {
				return fmt.Errorf("Close inside %s: %v, want ErrInvalid", name, err)
			}
			_, err := s.Get("t", []byte("k")) // the View still reads
			return err
		})
		if err != nil && !(name == "Namespace.View" && errors.Is(err, kdb.ErrNotFound)) {
			t.Error(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close inside %s took %v", name, d)
		}
	}
	// Another goroutine's View does not stop this goroutine's Close.
	started, release, ended := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() { ended <- db.View(func(*kdb.Snapshot) error { close(started); <-release; return nil }) }()
	select {
	case <-started:
	case err := <-ended:
		t.Fatalf("View after the refused Closes: %v", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	if err := db.Close(); err != nil {
		t.Fatalf("Close beside another goroutine's View: %v", err)
	}
}
