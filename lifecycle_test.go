package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// within runs fn and fails the test if it has not returned after d: a
// deadlock shows as a failure, not as a hung test binary.
func within(t *testing.T, d time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v (deadlock)", what, d)
		return nil
	}
}

// lifeValue is the value of key i in round r: journal-kept (> 512 bytes)
// for even i, inline for odd i, and telling round and key apart.
func lifeValue(i, r int) []byte {
	n := 40
	if i%2 == 0 {
		n = 900
	}
	v := bytes.Repeat([]byte{byte(i), byte(r)}, n/2)
	return fmt.Appendf(v, "|%d|%d", i, r)
}

func lifeKey(i int) []byte { return fmt.Appendf(nil, "k%05d", i) }

// TestDB_CloseDuringViewsNeverFaults runs Close against 8 goroutines that
// read and iterate (values inline and kept in the journal, on the OS file
// system so reads go through the mmap), 1,000 rounds (100 under -race or
// -short). Half the rounds give Close no wait at all (CloseWait < 0), so
// Views outlive it mid-iteration: they must get ErrClosed, never a fault
// or a wrong value; the other half let Close wait for them. Each reader also
// keeps an iterator and a snapshot past their View and uses them after
// Close: ErrInvalid, no fault.
func TestDB_CloseDuringViewsNeverFaults(t *testing.T) {
	rounds := 1000
	if raceEnabled || testing.Short() {
		rounds = 100
	}
	const keys = 64
	dir := t.TempDir()
	setup, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := kdb.NewBatch()
	for i := 0; i < keys; i++ {
		b.Put("x", lifeKey(i), lifeValue(i, 0))
	}
	if err := setup.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := setup.Close(); err != nil {
		t.Fatal(err)
	}
	var closedMid, completed, escaped int
	for round := 0; round < rounds; round++ {
		wait := -time.Nanosecond
		if round%2 == 1 {
			wait = 10 * time.Second
		}
		db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1, NoCheckpointOnClose: true,
			Sync: kdb.UnsafeSyncNever, CloseWait: wait})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		type result struct {
			mid, done, esc int
			err            error
		}
		results := make([]result, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := &results[g]
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				var keptIt *kdb.Iter
				var keptSnap *kdb.Snapshot
				<-start
				for {
					var err error
					if rng.IntN(4) == 0 {
						i := rng.IntN(keys)
						var v []byte
						v, err = db.Get("x", lifeKey(i))
						if err == nil && !bytes.Equal(v, lifeValue(i, 0)) {
							res.err = fmt.Errorf("Get %d: wrong value", i)
							return
						}
					} else {
						err = db.View(func(s *kdb.Snapshot) error {
							it := s.Iter("x")
							n := 0
							for ok := it.First(); ok; ok = it.Next() {
								i := n
								k, v := it.Key(), it.Value()
								if k == nil || v == nil {
									break // Close gave up: Err says so
								}
								if !bytes.Equal(k, lifeKey(i)) {
									return fmt.Errorf("key %d: %q", i, k)
								}
								if !bytes.Equal(v, lifeValue(i, 0)) {
									return fmt.Errorf("key %d: wrong value", i)
								}
								n++
							}
							if err := it.Err(); err != nil {
								if errors.Is(err, kdb.ErrClosed) {
									res.mid++
								}
								return err
							}
							if n != keys {
								return fmt.Errorf("iterated %d keys, want %d", n, keys)
							}
							if keptIt == nil {
								keptIt, keptSnap = s.Iter("x"), s
								keptIt.First()
							}
							return nil
						})
					}
					switch {
					case err == nil:
						res.done++
						continue
					case errors.Is(err, kdb.ErrClosed):
					default:
						res.err = err
						return
					}
					break
				}
				// The kept iterator and snapshot outlived their View (and
				// now the DB): refused, no memory of the store touched.
				// ErrInvalid says their View ended; ErrClosed that Close cut
				// it first (their View was the one cut, after or while its
				// function returned).
				refused := func(err error) bool { return errors.Is(err, kdb.ErrInvalid) || errors.Is(err, kdb.ErrClosed) }
				if keptIt != nil {
					if keptIt.Next() || keptIt.Key() != nil || keptIt.Value() != nil || !refused(keptIt.Err()) {
						res.err = fmt.Errorf("escaped iterator: key %q, err %v", keptIt.Key(), keptIt.Err())
						return
					}
					if _, err := keptSnap.Get("x", lifeKey(0)); !refused(err) {
						res.err = fmt.Errorf("escaped snapshot Get: %v", err)
						return
					}
					res.esc++
				}
			}()
		}
		close(start)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		if err := db.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		wg.Wait()
		for g, r := range results {
			if r.err != nil {
				t.Fatalf("round %d, reader %d: %v", round, g, r.err)
			}
			closedMid += r.mid
			completed += r.done
			escaped += r.esc
		}
	}
	t.Logf("%d rounds: %d reads completed, %d Views cut by Close mid-iteration (ErrClosed), %d escaped iterators refused", rounds, completed, closedMid, escaped)
	if closedMid == 0 {
		t.Fatal("no View was cut mid-iteration: the test does not exercise Close under a running View")
	}
}

// TestDB_CloseWaitsForRunningViews: Close waits for a running View up to
// CloseWait; past it, the View's next calls return ErrClosed and the pages
// it is iterating stay mapped until it returns.
func TestDB_CloseWaitsForRunningViews(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{{"waits", 5 * time.Second}, {"gives-up", 50 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1, CloseWait: tc.wait})
			if err != nil {
				t.Fatal(err)
			}
			b := kdb.NewBatch()
			for i := 0; i < 2000; i++ {
				b.Put("x", lifeKey(i), lifeValue(i, 0))
				if b.Len() == 100 {
					if err := db.Write(b); err != nil {
						t.Fatal(err)
					}
					b.Reset()
				}
			}
			if err := db.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			inView, resume := make(chan struct{}), make(chan struct{})
			viewErr := make(chan error, 1)
			go func() {
				viewErr <- db.View(func(s *kdb.Snapshot) error {
					it := s.Iter("x")
					for i := 0; i < 1000; i++ {
						if !it.Next() && !(i == 0 && it.First()) {
							return fmt.Errorf("iterator ended at %d: %v", i, it.Err())
						}
					}
					close(inView)
					<-resume
					n := 1000
					for it.Next() {
						if v := it.Value(); v != nil && !bytes.Equal(v, lifeValue(n, 0)) {
							return fmt.Errorf("key %d: wrong value", n)
						}
						n++
					}
					if tc.wait > time.Second {
						if n != 2000 || it.Err() != nil {
							return fmt.Errorf("after a waiting Close: %d keys, %v", n, it.Err())
						}
						return nil
					}
					if !errors.Is(it.Err(), kdb.ErrClosed) || n != 1000 {
						return fmt.Errorf("after Close gave up: %d keys, err %v (want ErrClosed)", n, it.Err())
					}
					if _, err := s.Get("x", lifeKey(0)); !errors.Is(err, kdb.ErrClosed) {
						return fmt.Errorf("Snapshot.Get after Close gave up: %v", err)
					}
					return nil
				})
			}()
			<-inView
			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- db.Close() }()
			time.Sleep(20 * time.Millisecond)
			// Close has begun: new Views and reads are refused at once.
			if _, err := db.Get("x", lifeKey(1)); !errors.Is(err, kdb.ErrClosed) {
				t.Fatalf("Get while Close waits: %v", err)
			}
			if tc.wait > time.Second {
				select {
				case err := <-closed:
					t.Fatalf("Close returned (%v) while a View ran, CloseWait %v", err, tc.wait)
				case <-time.After(100 * time.Millisecond):
				}
				close(resume)
				if err := <-closed; err != nil {
					t.Fatal(err)
				}
			} else {
				if err := <-closed; err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d < tc.wait {
					t.Fatalf("Close returned after %v, before CloseWait %v", d, tc.wait)
				}
				close(resume)
			}
			if err := <-viewErr; err != nil && !(tc.wait < time.Second && errors.Is(err, kdb.ErrClosed)) {
				t.Fatal(err)
			}
			db2, err := kdb.Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := db2.Get("x", lifeKey(1999)); err != nil || !bytes.Equal(v, lifeValue(1999, 0)) {
				t.Fatalf("after reopen: %v", err)
			}
			if err := db2.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDB_NestedCallsNeverDeadlock calls Get, View, Update, Write, Put,
// Delete, Checkpoint and Close from inside View and Update functions: each
// works or returns ErrInvalid at once (broker writes inside an Update:
// broker/lifecycle_test.go). A Write from another goroutine while an Update
// runs simply waits for it.
func TestDB_NestedCallsNeverDeadlock(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 200; i++ {
		if err := db.Put("x", lifeKey(i), lifeValue(i, 0)); err != nil {
			t.Fatal(err)
		}
	}
	const d = 10 * time.Second
	misuse := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("%s inside Update: %v, want ErrInvalid", what, err)
		}
	}

	t.Run("inside-Update", func(t *testing.T) {
		err := within(t, d, "Update", func() error {
			return db.Update(func(tx *kdb.Txn) error {
				if err := tx.Put("x", []byte("own"), []byte("1")); err != nil {
					return err
				}
				v, err := db.Get("x", lifeKey(2))
				if err != nil || !bytes.Equal(v, lifeValue(2, 0)) {
					return fmt.Errorf("Get: %v", err)
				}
				// Get and View see the committed state, not tx's writes.
				if _, err := db.Get("x", []byte("own")); !errors.Is(err, kdb.ErrNotFound) {
					return fmt.Errorf("Get of the Update's own write: %v", err)
				}
				if err := db.View(func(s *kdb.Snapshot) error { _, err := s.Get("x", lifeKey(3)); return err }); err != nil {
					return fmt.Errorf("View: %v", err)
				}
				if err := db.Checkpoint(); err != nil {
					return fmt.Errorf("Checkpoint: %v", err)
				}
				misuse("Update", db.Update(func(*kdb.Txn) error { return nil }))
				b := kdb.NewBatch()
				b.Put("x", []byte("y"), []byte("z"))
				misuse("Write", db.Write(b))
				misuse("Put", db.Put("x", []byte("y"), []byte("z")))
				misuse("Delete", db.Delete("x", lifeKey(1)))
				misuse("Close", db.Close())
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := db.Get("x", []byte("own")); err != nil || string(v) != "1" {
			t.Fatalf("the Update's write: %q %v", v, err)
		}
		if _, err := db.Get("x", []byte("y")); !errors.Is(err, kdb.ErrNotFound) {
			t.Fatalf("a refused nested Write was applied: %v", err)
		}
	})

	t.Run("inside-View", func(t *testing.T) {
		removed := db.Stats().SegmentsRemoved
		err := within(t, d, "View", func() error {
			return db.View(func(s *kdb.Snapshot) error {
				it := s.Iter("x")
				if !it.First() {
					return fmt.Errorf("empty: %v", it.Err())
				}
				// Overwrite every journal-kept value, so GC would remove
				// the segments this View reads.
				for r := 1; r <= 3; r++ {
					b := kdb.NewBatch()
					for i := 0; i < 200; i++ {
						b.Put("x", lifeKey(i), lifeValue(i, r))
						if b.Len() == 20 {
							if err := db.Write(b); err != nil {
								return fmt.Errorf("Write: %v", err)
							}
							b.Reset()
						}
					}
					if err := db.Checkpoint(); err != nil {
						return fmt.Errorf("Checkpoint: %v", err)
					}
				}
				if err := db.Update(func(tx *kdb.Txn) error { return tx.Put("x", []byte("u"), []byte("v")) }); err != nil {
					return fmt.Errorf("Update: %v", err)
				}
				if err := db.Put("x", []byte("p"), []byte("v")); err != nil {
					return fmt.Errorf("Put: %v", err)
				}
				if v, err := db.Get("x", []byte("p")); err != nil || string(v) != "v" {
					return fmt.Errorf("Get: %q %v", v, err)
				}
				// This View still reads its own snapshot, journal values
				// included.
				n := 0
				for ok := true; ok && n < 200; ok = it.Next() {
					if !bytes.Equal(it.Value(), lifeValue(n, 0)) {
						return fmt.Errorf("key %d: wrong value (%v)", n, it.Err())
					}
					n++
				}
				if n != 200 || it.Err() != nil {
					return fmt.Errorf("%d keys, %v", n, it.Err())
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if st := db.Stats(); st.GCPostponed == 0 {
			t.Fatalf("no GC postponed for the View: %+v", st)
		}
		if err := db.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		if st := db.Stats(); st.SegmentsRemoved == removed {
			t.Fatalf("no segment removed after the View ended: %+v", st)
		}
	})

	t.Run("other-goroutine-waits", func(t *testing.T) {
		inFn, release := make(chan struct{}), make(chan struct{})
		upd := make(chan error, 1)
		go func() {
			upd <- db.Update(func(tx *kdb.Txn) error {
				close(inFn)
				<-release
				return tx.Put("x", []byte("first"), []byte("1"))
			})
		}()
		<-inFn
		wrote := make(chan error, 1)
		go func() { wrote <- db.Put("x", []byte("second"), []byte("2")) }()
		select {
		case err := <-wrote:
			t.Fatalf("Write from another goroutine did not wait for the Update: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if err := <-upd; err != nil {
			t.Fatal(err)
		}
		if err := within(t, d, "the waiting Write", func() error { return <-wrote }); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDB_LongViewPostponesGC holds an iterator mid-way over journal-kept
// values (> 512 bytes) while writers overwrite them and several checkpoints
// run: writers and checkpoints never wait for the View, GC keeps the
// segments it reads, the View reads every value correctly, and the segments
// are removed by the first checkpoint after it ends. With and without
// Options.ArchiveDir.
func TestDB_LongViewPostponesGC(t *testing.T) {
	for _, archive := range []string{"", "archive"} {
		t.Run("archive="+archive, func(t *testing.T) {
			dir := t.TempDir()
			db, err := kdb.Open(dir, &kdb.Options{SegmentSize: 64 << 10, ArchiveDir: archive, CheckpointInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			const keys = 300
			write := func(r int) error {
				b := kdb.NewBatch()
				for i := 0; i < keys; i++ {
					b.Put("x", lifeKey(i), lifeValue(i, r))
					if b.Len() == 25 {
						if err := db.Write(b); err != nil {
							return err
						}
						b.Reset()
					}
				}
				return nil
			}
			if err := write(0); err != nil {
				t.Fatal(err)
			}
			segFiles := func() map[string]bool {
				m := map[string]bool{}
				names, _ := filepath.Glob(filepath.Join(dir, "db-*.log"))
				for _, n := range names {
					m[filepath.Base(n)] = true
				}
				return m
			}
			before := segFiles()
			inView, resume := make(chan struct{}), make(chan struct{})
			var resumeOnce sync.Once
			defer resumeOnce.Do(func() { close(resume) }) // on failure, before Close
			viewErr := make(chan error, 1)
			go func() {
				viewErr <- db.View(func(s *kdb.Snapshot) error {
					it := s.Iter("x")
					n := 0
					check := func() error {
						if !bytes.Equal(it.Value(), lifeValue(n, 0)) {
							return fmt.Errorf("key %d: wrong value (%v)", n, it.Err())
						}
						n++
						return nil
					}
					for ok := it.First(); ok; ok = it.Next() {
						if err := check(); err != nil {
							return err
						}
						if n == keys/2 {
							close(inView)
							<-resume
						}
					}
					if n != keys || it.Err() != nil {
						return fmt.Errorf("%d keys, %v", n, it.Err())
					}
					return nil
				})
			}()
			<-inView
			// Writers and checkpoints run while the View holds its
			// iterator: none of them may wait for it.
			var st kdb.Stats
			err = within(t, 30*time.Second, "writers and checkpoints beside a long View", func() error {
				for r := 1; r <= 4; r++ {
					if err := write(r); err != nil {
						return err
					}
					if err := db.Checkpoint(); err != nil {
						return err
					}
				}
				st = db.Stats()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if st.GCPostponed == 0 || st.Views != 1 {
				t.Fatalf("GC postponed %d times, %d Views running", st.GCPostponed, st.Views)
			}
			for name := range before {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Fatalf("segment %s the View reads was removed: %v", name, err)
				}
			}
			resumeOnce.Do(func() { close(resume) })
			if err := <-viewErr; err != nil {
				t.Fatal(err)
			}
			// No checkpoint is due: the View's end wakes the checkpointer,
			// which runs GC again.
			waitFor(t, "GC after the View ended", func() bool { return db.Stats().SegmentsRemoved > st.SegmentsRemoved })
			if ck := db.Stats().Checkpoints; ck != st.Checkpoints {
				t.Fatalf("%d checkpoints after the View ended, want none", ck-st.Checkpoints)
			}
			gone := 0
			for name := range before {
				if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
					continue
				}
				gone++
				if archive != "" {
					if _, err := os.Stat(filepath.Join(dir, archive, name)); err != nil {
						t.Fatalf("segment %s neither in place nor archived: %v", name, err)
					}
				}
			}
			if gone == 0 {
				t.Fatalf("none of the View's %d segments removed after it ended", len(before))
			}
			for i := 0; i < keys; i += 37 {
				if v, err := db.Get("x", lifeKey(i)); err != nil || !bytes.Equal(v, lifeValue(i, 4)) {
					t.Fatalf("key %d after GC: %v", i, err)
				}
			}
			if _, err := db.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDB_ExportOutlivingCloseWait: an Export that Close gives up waiting
// for returns ErrClosed.
func TestDB_ExportOutlivingCloseWait(t *testing.T) {
	dir := t.TempDir()
	db, err := kdb.Open(dir, &kdb.Options{CheckpointInterval: -1, CloseWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// More than Export's 1 MiB buffer, so its first Write comes mid-View.
	b := kdb.NewBatch()
	for i := 0; i < 3000; i++ {
		b.Put("x", lifeKey(i), lifeValue(i, 0))
		if b.Len() == 100 {
			if err := db.Write(b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	w := &stallWriter{stall: make(chan struct{}), started: make(chan struct{})}
	exp := make(chan error, 1)
	go func() {
		_, err := db.Export(w)
		exp <- err
	}()
	<-w.started
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	close(w.stall)
	if err := <-exp; !errors.Is(err, kdb.ErrClosed) {
		t.Fatalf("Export after Close gave up: %v, want ErrClosed", err)
	}
}

// stallWriter blocks its first Write until stall is closed.
type stallWriter struct {
	stall, started chan struct{}
	once           sync.Once
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started); <-w.stall })
	return io.Discard.Write(p)
}
