package kdb

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/vfs"
)

// Views begun while writers run and checkpoints freeze and flush the mem
// tables, some of them delayed between reading their S and registering it
// (the window the applier's pruning must cover), each check what every
// batch keeps true: a writer's two keys a and b always hold the same
// value, its token is in exactly one of its four slots, and its counter n
// comes with log entries 1..n and no n+1.
func TestMem_ConcurrentSnapshotsConsistent(t *testing.T) {
	rounds := 3000
	if testing.Short() {
		rounds = 1000
	}
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var delayed atomic.Int64
	testHookViewRead = func() {
		if rand.IntN(8) == 0 {
			delayed.Add(1)
			runtime.Gosched()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
	}
	defer func() { testHookViewRead = nil }()
	const writers = 3
	slot := func(w, i int) []byte { return []byte(fmt.Sprintf("w%d/slot%d", w, i)) }
	for w := range writers { // the token starts in slot 0
		if err := db.Put("x", slot(w, 0), []byte("token")); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg, rg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 5))
			at := 0
			for n := 1; n <= rounds; n++ {
				b := NewBatch()
				v := []byte(fmt.Sprintf("%d", n))
				if r.IntN(4) == 0 {
					v = append(v, make([]byte, 600)...) // kept in the journal
				}
				b.Put("x", []byte(fmt.Sprintf("w%d/a", w)), v)
				b.Put("x", []byte(fmt.Sprintf("w%d/b", w)), v)
				next := r.IntN(4)
				if next != at {
					b.Delete("x", slot(w, at))
					b.Put("x", slot(w, next), []byte("token"))
					at = next
				}
				b.Put("x", []byte(fmt.Sprintf("w%d/n", w)), []byte(fmt.Sprint(n)))
				b.Put("x", []byte(fmt.Sprintf("w%d/log%06d", w, n)), []byte("x"))
				if n > 3 {
					b.Delete("x", []byte(fmt.Sprintf("w%d/log%06d", w, n-3))) // log keeps n-2..n
				}
				if err := db.Write(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var checked atomic.Int64
	fail := make(chan error, 8)
	for range 3 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for !stop.Load() {
				err := db.View(func(s *Snapshot) error {
					for w := range writers {
						a, errA := s.Get("x", []byte(fmt.Sprintf("w%d/a", w)))
						b, errB := s.Get("x", []byte(fmt.Sprintf("w%d/b", w)))
						if (errA == nil) != (errB == nil) || string(a) != string(b) {
							return fmt.Errorf("writer %d: a=%.6q (%v) b=%.6q (%v) [%s]", w, a, errA, b, errB, debugKey(s, "x", fmt.Sprintf("w%d/a", w), fmt.Sprintf("w%d/b", w)))
						}
						tokens := 0
						for i := range 4 {
							if _, err := s.Get("x", slot(w, i)); err == nil {
								tokens++
							}
						}
						if tokens != 1 {
							return fmt.Errorf("writer %d: %d tokens", w, tokens)
						}
						nv, err := s.Get("x", []byte(fmt.Sprintf("w%d/n", w)))
						if err != nil {
							continue // before its first batch
						}
						var n int
						fmt.Sscan(string(nv), &n)
						for i := max(1, n-2); i <= n+1; i++ {
							_, err := s.Get("x", []byte(fmt.Sprintf("w%d/log%06d", w, i)))
							if (err == nil) != (i <= n) {
								return fmt.Errorf("writer %d at n=%d: log %d: %v [%s]", w, n, i, err, debugKey(s, "x", fmt.Sprintf("w%d/log%06d", w, i), fmt.Sprintf("w%d/n", w)))
							}
						}
					}
					checked.Add(1)
					return nil
				})
				if err != nil {
					select {
					case fail <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // checkpoints: freeze and flush under the readers
		defer wg.Done()
		for i := 0; i < 40 && !stop.Load(); i++ {
			time.Sleep(2 * time.Millisecond)
			if err := db.Checkpoint(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	stop.Store(true)
	rg.Wait()
	select {
	case err := <-fail:
		t.Fatal(err)
	default:
	}
	if _, err := db.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d snapshots checked, %d delayed between S and registering, %d checkpoints", checked.Load(), delayed.Load(), db.Stats().Checkpoints)
}

func debugKey(s *Snapshot, ix string, keys ...string) string {
	out := fmt.Sprintf("S=%d base=%d frozen=%v seqnow=%d", s.mv.s, s.mv.st.base, s.mv.st.frozen != nil, s.db.mem.seq.Load())
	tree := string(treeName(userTreePrefix, ix))
	for _, k := range keys {
		for ti, t := range [2]*memTable{s.mv.st.active, s.mv.st.frozen} {
			if t == nil {
				continue
			}
			if n := t.find(tree, k); n != nil {
				out += fmt.Sprintf(" | %s in table %d:", k, ti)
				for v := n.vers.Load(); v != nil; v = v.older.Load() {
					out += fmt.Sprintf(" %d(%v,below=%v)", v.seq, v.val != nil, v.below)
				}
			} else {
				out += fmt.Sprintf(" | %s not in table %d", k, ti)
			}
		}
	}
	dups := 0
	prevKey := ""
	for n := s.mv.st.active.head.next[0].Load(); n != nil; n = n.next[0].Load() {
		if n.tree+"/"+n.key == prevKey {
			dups++
		}
		prevKey = n.tree + "/" + n.key
	}
	out += fmt.Sprintf(" dups=%d", dups)
	return out
}

// A key put in one group and deleted in a later one (a message sent, then
// acked) leaves no version in the mem tables once the next group begins:
// the put's version was kept only for a View that might have registered at
// the delete's group start. Left behind, such pairs filled the tables and
// made a checkpoint due every few hundred messages.
func TestMem_PutThenDeleteLeavesNothing(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ck0 := db.Stats().Checkpoints // the new store's first, in Open
	const keys = 3000
	for i := range keys {
		k := []byte(fmt.Sprintf("m-%05d", i))
		if err := db.Put("q", k, []byte("body")); err != nil {
			t.Fatal(err)
		}
		if err := db.Delete("q", k); err != nil {
			t.Fatal(err)
		}
	}
	// The last delete's group is the newest: one more group revisits it.
	if err := db.Put("other", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n := db.mem.versions(); n > 1 {
		t.Fatalf("%d versions in the mem tables after %d puts each deleted, want 1 (the last put)", n, keys)
	}
	if n := db.Stats().Checkpoints - ck0; n != 0 {
		t.Fatalf("%d checkpoints", n)
	}
	err = db.View(func(s *Snapshot) error {
		for i := range keys {
			if _, err := s.Get("q", []byte(fmt.Sprintf("m-%05d", i))); !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("key %d: %v", i, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Versions kept for a registered View are pruned once it has ended, at
// the next group's start, not left until the next checkpoint. Here a View
// always runs, each begun between a key's put and its delete and ended
// after the next key's (as with many producers each sending and acking
// while the others' transactions read): before, every put and its deletion
// stayed in the mem tables, ~100 times the versions at 16 broker producers
// and a checkpoint due every few thousand pairs.
func TestMem_VersionsKeptForAViewArePrunedAfterIt(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, CheckpointBytes: 1 << 40, CheckpointDirtyPages: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ck0 := db.Stats().Checkpoints // the new store's first, in Open
	// hold begins a View and returns the function that ends it, after
	// checking the View still reads key k with value want.
	hold := func(k []byte, want string) (end func()) {
		began, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- db.View(func(s *Snapshot) error {
				close(began)
				<-release
				v, err := s.Get("q", k)
				if err != nil || string(v) != want {
					return fmt.Errorf("View reads %q = %q, %v; want %q", k, v, err, want)
				}
				return nil
			})
		}()
		<-began
		return func() {
			close(release)
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	const keys = 1000
	end := func() {}
	maxVersions := 0
	for i := range keys {
		k := []byte(fmt.Sprintf("m-%05d", i))
		if err := db.Put("q", k, []byte("body")); err != nil {
			t.Fatal(err)
		}
		if err := db.Put("q", []byte("counter"), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		next := hold(k, "body")
		if err := db.Delete("q", k); err != nil {
			t.Fatal(err)
		}
		end()
		end = next
		maxVersions = max(maxVersions, db.mem.versions())
	}
	end()
	if t.Failed() {
		t.FailNow()
	}
	// The last View's end is seen at the next group's start.
	if err := db.Put("other", []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n := db.mem.versions(); n > 2 {
		t.Fatalf("%d versions in the mem tables after %d keys put and deleted, each read by a View since ended, want 2 (the counter's and the last put's); at most %d while they ran", n, keys, maxVersions)
	}
	if maxVersions > 20 {
		t.Fatalf("up to %d versions while one View at a time ran, want a handful", maxVersions)
	}
	if n := db.Stats().Checkpoints - ck0; n != 0 {
		t.Fatalf("%d checkpoints", n)
	}
}

// TestMem_IndexOnlyInTheFrozenTable: while a checkpoint flushes the frozen
// table, an index created since the last checkpoint (so not yet in the
// page file's index) and not written since the freeze exists only in the
// frozen table's metadata: Get, Len, Exists and Iter must still see it.
// (An outside tester's mutant: memView.tree without the frozen table's
// metadata read the whole index as missing during every flush.)
func TestMem_IndexOnlyInTheFrozenTable(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, CheckpointBytes: 1 << 40,
		CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := db.Put("fresh", []byte(k), []byte("v"+k)); err != nil {
			t.Fatal(err)
		}
	}
	st := db.mem.lockActive()
	db.mem.state.Store(&memState{active: newMemTable(), frozen: st.active, base: st.base})
	st.active.mu.Unlock()
	if v, err := db.Get("fresh", []byte("b")); err != nil || string(v) != "vb" {
		t.Fatalf("Get(fresh, b) = %q, %v; want \"vb\"", v, err)
	}
	err = db.View(func(s *Snapshot) error {
		if ok, err := s.Exists("fresh"); err != nil || !ok {
			t.Errorf("Exists(fresh) = %v, %v", ok, err)
		}
		if n, err := s.Len("fresh"); err != nil || n != 3 {
			t.Errorf("Len(fresh) = %d, %v; want 3", n, err)
		}
		n := 0
		it := s.Iter("fresh")
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if n != 3 {
			t.Errorf("Iter(fresh) saw %d keys, want 3", n)
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMem_IndexesWhileFrozen: while a checkpoint flushes the frozen table,
// the active table's verdict on a tree (created again after a drop, or
// dropped) must win over the frozen table's in Indexes (and so in Export,
// Check and compaction, which walk s.trees()).
// (An outside tester's mutant: trees() asking the active table first let
// the frozen table's older verdict win.)
func TestMem_IndexesWhileFrozen(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointInterval: -1, CheckpointBytes: 1 << 40,
		CheckpointDirtyPages: 1 << 20, NoCheckpointOnClose: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// "re": put, dropped (frozen says: gone); "gone": put (frozen says: exists).
	for _, ix := range []string{"re", "gone"} {
		if err := db.Put(ix, []byte("k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBatch()
	b.DropIndex("re")
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	// Freeze the active table, as flushMem's first step does.
	st := db.mem.lockActive()
	db.mem.state.Store(&memState{active: newMemTable(), frozen: st.active, base: st.base})
	st.active.mu.Unlock()
	if err := db.Put("re", []byte("k2"), []byte("v2")); err != nil { // created again
		t.Fatal(err)
	}
	b = NewBatch()
	b.DropIndex("gone")
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	err = db.View(func(s *Snapshot) error {
		names, err := s.Indexes()
		if err != nil {
			return err
		}
		if got := strings.Join(names, ","); got != "re" {
			return fmt.Errorf("Indexes() = %q, want \"re\"", got)
		}
		v, err := s.Get("re", []byte("k2"))
		if err != nil || string(v) != "v2" {
			return fmt.Errorf("Get(re, k2) = %q, %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
