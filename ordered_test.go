package kdb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func openMem(t *testing.T) *kdb.DB {
	t.Helper()
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func getU64(t *testing.T, tx *kdb.Txn, index, key string) uint64 {
	t.Helper()
	v, err := tx.Get(index, []byte(key))
	if errors.Is(err, kdb.ErrNotFound) {
		return 0
	}
	if err != nil || len(v) != 8 {
		t.Errorf("get %s/%s: %x %v", index, key, v, err)
		return 0
	}
	return binary.LittleEndian.Uint64(v)
}

// Concurrent Submits that each read a counter and write it plus one: the
// counter ends at the number of transactions only if each reads the
// writes queued before it (in flight, not yet applied).
func TestSubmit_ReadsTheWritesInFlight(t *testing.T) {
	db := openMem(t)
	const writers, each = 16, 40
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				c, err := db.Submit(func(tx *kdb.Txn) error {
					n := getU64(t, tx, "ctr", "n")
					return tx.Put("ctr", []byte("n"), binary.LittleEndian.AppendUint64(nil, n+1))
				})
				if err != nil {
					t.Error(err)
					return
				}
				if err := c.Wait(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err := db.Get("ctr", []byte("n"))
	if err != nil || binary.LittleEndian.Uint64(v) != writers*each {
		t.Fatalf("counter %x (%v), want %d", v, err, writers*each)
	}
}

// Commits nobody waited for yet are queued, not applied: what later
// transactions read of them comes from the overlay alone.
func TestSubmit_OverlayPutsDeletesAndDrops(t *testing.T) {
	db := openMem(t)
	if err := db.Put("a", []byte("old"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	var cs []*kdb.Commit
	submit := func(fn func(tx *kdb.Txn) error) {
		t.Helper()
		c, err := db.Submit(fn)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	submit(func(tx *kdb.Txn) error {
		if err := tx.Put("a", []byte("k2"), []byte("in flight, then its index dropped")); err != nil {
			return err
		}
		return tx.Put("a", []byte("k"), []byte("v1"))
	})
	submit(func(tx *kdb.Txn) error {
		if v, err := tx.Get("a", []byte("k")); err != nil || string(v) != "v1" {
			t.Errorf("in flight put: %q %v", v, err)
		}
		if _, err := db.Get("a", []byte("k")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("readers see a commit before it is applied: %v", err)
		}
		return tx.Delete("a", []byte("k"))
	})
	submit(func(tx *kdb.Txn) error {
		if _, err := tx.Get("a", []byte("k")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("in flight delete: %v", err)
		}
		return tx.DropIndex("a")
	})
	submit(func(tx *kdb.Txn) error {
		if _, err := tx.Get("a", []byte("old")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("in flight drop: key of the dropped index still read: %v", err)
		}
		// An in-flight put before the in-flight drop: gone with its index.
		if v, err := tx.Get("a", []byte("k2")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("in flight drop: a key put in flight before it still read: %q %v", v, err)
		}
		return tx.Put("a", []byte("new"), []byte("2"))
	})
	submit(func(tx *kdb.Txn) error {
		if v, err := tx.Get("a", []byte("new")); err != nil || string(v) != "2" {
			t.Errorf("put after an in-flight drop: %q %v", v, err)
		}
		if _, err := tx.Get("a", []byte("old")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("old key after drop and put: %v", err)
		}
		return nil
	})
	for _, c := range cs {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	err := db.View(func(s *kdb.Snapshot) error {
		n, err := s.Len("a")
		if err != nil || n != 1 {
			t.Errorf("index a holds %d keys (%v), want 1", n, err)
		}
		v, err := s.Get("a", []byte("new"))
		if err != nil || string(v) != "2" {
			t.Errorf("new: %q %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTxn_OwnWrites(t *testing.T) {
	db := openMem(t)
	if err := db.Put("i", []byte("x"), []byte("committed")); err != nil {
		t.Fatal(err)
	}
	err := db.Update(func(tx *kdb.Txn) error {
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(tx.Put("i", []byte("y"), []byte("mine")))
		if v, err := tx.Get("i", []byte("y")); err != nil || string(v) != "mine" {
			t.Errorf("own put: %q %v", v, err)
		}
		must(tx.Delete("i", []byte("x")))
		if _, err := tx.Get("i", []byte("x")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("own delete: %v", err)
		}
		must(tx.DropIndex("i"))
		if _, err := tx.Get("i", []byte("y")); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("own drop: %v", err)
		}
		must(tx.Put("i", []byte("z"), []byte("after")))
		if v, err := tx.Get("i", []byte("z")); err != nil || string(v) != "after" {
			t.Errorf("put after own drop: %q %v", v, err)
		}
		// Iter sees the committed state only.
		it := tx.Iter("i")
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if n != 1 || it.Err() != nil {
			t.Errorf("Iter in the Update saw %d keys (%v), want the 1 committed", n, it.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := db.Get("i", []byte("z")); err != nil || string(v) != "after" {
		t.Fatalf("z: %q %v", v, err)
	}
	for _, k := range []string{"x", "y"} {
		if _, err := db.Get("i", []byte(k)); !errors.Is(err, kdb.ErrNotFound) {
			t.Fatalf("%s survived the drop: %v", k, err)
		}
	}
}

// Update runs after the transactions in flight are applied: its iterator
// sees a Submit's write that was still waiting for its leader.
func TestUpdate_WaitsForCommitsInFlight(t *testing.T) {
	db := openMem(t)
	c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("q", []byte("k"), []byte("v")) })
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		c.Wait()
	}()
	err = db.Update(func(tx *kdb.Txn) error {
		it := tx.Iter("q")
		if !it.First() || string(it.Key()) != "k" {
			t.Errorf("Update's iterator misses the commit submitted before it (%v)", it.Err())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestSubmit_NestedAndFailed(t *testing.T) {
	db := openMem(t)
	_, err := db.Submit(func(tx *kdb.Txn) error {
		for name, err := range map[string]error{
			"Put":    db.Put("i", []byte("k"), []byte("v")),
			"Update": db.Update(func(*kdb.Txn) error { return nil }),
			"Submit": func() error { _, err := db.Submit(func(*kdb.Txn) error { return nil }); return err }(),
		} {
			if !errors.Is(err, kdb.ErrInvalid) {
				t.Errorf("%s inside Submit: %v, want ErrInvalid", name, err)
			}
		}
		return errors.New("abandon")
	})
	if err == nil || err.Error() != "abandon" {
		t.Fatalf("Submit returned %v, want fn's error", err)
	}
	// A transaction refused (too large) registers nothing.
	big := make([]byte, db.MaxBatchSize())
	_, err = db.Submit(func(tx *kdb.Txn) error {
		for i := 0; i < 3; i++ {
			if err := tx.Put("i", []byte{byte(i)}, big[:400]); err != nil {
				return err
			}
		}
		for i := 0; i < db.MaxBatchSize()/150; i++ {
			if err := tx.Put("i", binary.BigEndian.AppendUint32(nil, uint32(i)), big[:200]); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("oversized transaction: %v, want ErrInvalid", err)
	}
	c, err := db.Submit(func(tx *kdb.Txn) error {
		if _, err := tx.Get("i", []byte{0}); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("a refused transaction's write is visible: %v", err)
		}
		return nil
	})
	if err != nil || c.Wait() != nil {
		t.Fatal(err)
	}
	if db.Err() != nil {
		t.Fatalf("handle failed: %v", db.Err())
	}
}

func TestNamespace(t *testing.T) {
	db := openMem(t)
	for _, bad := range []string{"", "u", "k", "B", "a/b", "toolongns"} {
		if _, err := db.Namespace(bad); !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("namespace %q: %v, want ErrInvalid", bad, err)
		}
	}
	ns, err := db.Namespace("raft")
	if err != nil {
		t.Fatal(err)
	}
	b := ns.NewBatch()
	b.Put("log", []byte("k"), []byte("ns"))
	if err := db.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := db.Put("log", []byte("k"), []byte("user")); err != nil {
		t.Fatal(err)
	}
	if v, err := ns.Get("log", []byte("k")); err != nil || string(v) != "ns" {
		t.Fatalf("namespace read: %q %v", v, err)
	}
	if v, err := db.Get("log", []byte("k")); err != nil || string(v) != "user" {
		t.Fatalf("user read: %q %v", v, err)
	}
	c, err := ns.Submit(func(tx *kdb.Txn) error {
		v, err := tx.Get("log", []byte("k"))
		if err != nil || string(v) != "ns" {
			t.Errorf("namespace txn read: %q %v", v, err)
		}
		return tx.Put("log", []byte("k2"), []byte("v2"))
	})
	if err != nil || c.Wait() != nil {
		t.Fatal(err)
	}
	err = db.View(func(s *kdb.Snapshot) error {
		names, err := s.Indexes()
		if err != nil || len(names) != 1 || names[0] != "log" {
			t.Errorf("user indexes: %q %v", names, err)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	long := make([]byte, kdb.MaxIndexNameSize)
	for i := range long {
		long[i] = 'x'
	}
	b = ns.NewBatch()
	b.Put(string(long), []byte("k"), nil)
	if !errors.Is(b.Err(), kdb.ErrInvalid) {
		t.Fatalf("index name of %d bytes in a 4-byte namespace: %v, want ErrInvalid", len(long), b.Err())
	}
	if _, err := db.Check(); err != nil {
		t.Fatal(err)
	}
}

// A Commit never waited for does not hang Close: Close commits it (it
// used to wait CloseWait and abandon it, since only the Commit's Wait
// would lead its commit), and its Wait after Close says it is durable.
func TestClose_CommitsCommitsNeverWaited(t *testing.T) {
	mem := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: mem, CloseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("i", []byte("k"), []byte("v")) })
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("Wait after Close: %v, want nil (committed by Close)", err)
	}
	db, err = kdb.Open("/db", &kdb.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Get("i", []byte("k")); err != nil {
		t.Fatalf("the commit Close made: %v", err)
	}
}

// Txn.NoSync: the commit is applied, and readable, before Wait returns and
// before it is durable, values kept in the journal included (they were
// unreadable until the next fsync: "the index refers to a value ... which
// the journal no longer holds"); a power loss before any sync loses it
// whole; DB.Sync makes it durable.
func TestSubmit_NoSyncReadableThenDurable(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, CheckpointInterval: -1, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	big, small := make([]byte, 3000), []byte("small")
	big[0] = 'B'
	c, err := db.Submit(func(tx *kdb.Txn) error {
		tx.NoSync()
		if err := tx.Put("i", []byte("big"), big); err != nil {
			return err
		}
		return tx.Put("i", []byte("small"), small)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string][]byte{"big": big, "small": small} {
		if v, err := db.Get("i", []byte(k)); err != nil || string(v) != string(want) {
			t.Fatalf("%s before its sync: %d bytes, %v", k, len(v), err)
		}
	}
	reopen := func(img *vfs.MemFS) *kdb.DB {
		db2, err := kdb.Open("/db", &kdb.Options{FS: img, CheckpointInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return db2
	}
	lost := reopen(fs.CrashClone(vfs.CrashOptions{}))
	for _, k := range []string{"big", "small"} {
		if _, err := lost.Get("i", []byte(k)); !errors.Is(err, kdb.ErrNotFound) {
			t.Fatalf("%s survived a power loss before any sync: %v", k, err)
		}
	}
	lost.Close()
	if err := db.Sync(); err != nil { // makes the NoSync commit durable
		t.Fatal(err)
	}
	kept := reopen(fs.CrashClone(vfs.CrashOptions{}))
	defer kept.Close()
	for k, want := range map[string][]byte{"big": big, "small": small} {
		if v, err := kept.Get("i", []byte(k)); err != nil || string(v) != string(want) {
			t.Fatalf("%s after Sync and a power loss: %d bytes, %v", k, len(v), err)
		}
	}
}

// A transaction's reads of its own writes agree with a model, for
// transactions short enough to be scanned and long enough to be indexed,
// in Update and in Submit, over committed keys and in-flight ones.
func TestTxn_OwnWritesModel(t *testing.T) {
	db := openMem(t)
	indexes := []string{"a", "b"}
	keys := []string{"k0", "k1", "k2", "k3"}
	type kv = map[string]string // index + "/" + key -> value
	committed := kv{}
	for _, ix := range indexes {
		for _, k := range keys[:2] {
			v := "c-" + ix + k
			if err := db.Put(ix, []byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			committed[ix+"/"+k] = v
		}
	}
	rnd := uint64(7)
	next := func(n int) int {
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return int(rnd % uint64(n))
	}
	for round := 0; round < 60; round++ {
		nops := 1 + next(40) // crosses the scan/index boundary
		model := kv{}
		for k, v := range committed {
			model[k] = v
		}
		body := func(tx *kdb.Txn) error {
			for i := 0; i < nops; i++ {
				ix, k := indexes[next(2)], keys[next(4)]
				switch r := next(10); {
				case r < 6:
					v := "v" + string(rune('a'+next(26)))
					put := tx.Put
					if next(2) == 0 {
						put = tx.PutOwned // a fresh buffer, never changed
					}
					if err := put(ix, []byte(k), []byte(v)); err != nil {
						return err
					}
					model[ix+"/"+k] = v
				case r < 9:
					if err := tx.Delete(ix, []byte(k)); err != nil {
						return err
					}
					delete(model, ix+"/"+k)
				default:
					if err := tx.DropIndex(ix); err != nil {
						return err
					}
					for _, kk := range keys {
						delete(model, ix+"/"+kk)
					}
				}
				for _, ix := range indexes {
					for _, k := range keys {
						v, err := tx.Get(ix, []byte(k))
						want, ok := model[ix+"/"+k]
						switch {
						case !ok && !errors.Is(err, kdb.ErrNotFound):
							t.Fatalf("round %d op %d: Get(%s, %s) = %q, %v; want not found", round, i, ix, k, v, err)
						case ok && (err != nil || string(v) != want):
							t.Fatalf("round %d op %d: Get(%s, %s) = %q, %v; want %q", round, i, ix, k, v, err, want)
						}
					}
				}
			}
			return nil
		}
		if round%2 == 0 {
			if err := db.Update(body); err != nil {
				t.Fatal(err)
			}
		} else {
			c, err := db.Submit(body)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		committed = model
		for _, ix := range indexes {
			for _, k := range keys {
				v, err := db.Get(ix, []byte(k))
				want, ok := committed[ix+"/"+k]
				if (!ok && !errors.Is(err, kdb.ErrNotFound)) || (ok && (err != nil || string(v) != want)) {
					t.Fatalf("round %d committed: Get(%s, %s) = %q, %v; want %q (%v)", round, ix, k, v, err, want, ok)
				}
			}
		}
	}
}

// PutOwned keeps the caller's buffer: small and journal-kept values (past
// ValueThreshold), in place over the transaction's own put, read back in
// the transaction, after the commit, after a checkpoint and after a
// reopen that replays the journal; bad input is refused as by Put.
func TestTxn_PutOwned(t *testing.T) {
	fs := vfs.NewMem()
	o := &kdb.Options{FS: fs, CheckpointInterval: -1}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	big := func(c byte) []byte { return bytes.Repeat([]byte{c}, 2000) }
	want := map[string][]byte{"small": []byte("s1"), "big": big('b'), "replaced": big('r'), "empty": {}}
	want["nil"] = []byte{}
	puts := func(tx *kdb.Txn) error {
		for _, k := range []string{"small", "big", "empty"} {
			if err := tx.PutOwned("i", []byte(k), bytes.Clone(want[k])); err != nil {
				return err
			}
		}
		if err := tx.Put("i", []byte("replaced"), []byte("first")); err != nil {
			return err
		}
		if err := tx.PutOwned("i", []byte("replaced"), bytes.Clone(want["replaced"])); err != nil {
			return err
		}
		return tx.PutOwned("i", []byte("nil"), nil)
	}
	// First with a bad PutOwned at the end: nothing is written.
	c, err := db.Submit(func(tx *kdb.Txn) error {
		if err := puts(tx); err != nil {
			return err
		}
		for k, w := range want {
			if v, err := tx.Get("i", []byte(k)); err != nil || !bytes.Equal(v, w) {
				return fmt.Errorf("in the transaction, %s = %.20q %v", k, v, err)
			}
		}
		if err := tx.PutOwned("i", nil, []byte("x")); !errors.Is(err, kdb.ErrInvalid) {
			return fmt.Errorf("empty key: %v, want ErrInvalid", err)
		}
		return nil
	})
	if err == nil || !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("a transaction with a bad PutOwned: %v, want ErrInvalid", err)
	}
	if c != nil {
		t.Fatal("a failed transaction returned a Commit")
	}
	if _, err := db.Get("i", []byte("small")); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("the failed transaction's put is readable: %v", err)
	}
	c, err = db.Submit(puts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for k, w := range want {
			if v, err := db.Get("i", []byte(k)); err != nil || !bytes.Equal(v, w) {
				t.Errorf("%s: %s = %.20q %v", when, k, v, err)
			}
		}
	}
	check("committed")
	if err := db.Update(func(tx *kdb.Txn) error {
		return tx.PutOwned("i", []byte("big"), make([]byte, kdb.MaxValueSize+1))
	}); !errors.Is(err, kdb.ErrInvalid) {
		t.Errorf("an oversized PutOwned: %v, want ErrInvalid", err)
	}
	var late *kdb.Txn
	if err := db.Update(func(tx *kdb.Txn) error { late = tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := late.PutOwned("i", []byte("k"), []byte("v")); !errors.Is(err, kdb.ErrInvalid) {
		t.Errorf("PutOwned after the transaction: %v, want ErrInvalid", err)
	}
	// A crash image of the live store: the reopen replays the journal.
	crashed := fs.CrashClone(vfs.CrashOptions{})
	if err := db.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	check("after a checkpoint")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open("/db", &kdb.Options{FS: crashed, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("replayed after a crash")
}
