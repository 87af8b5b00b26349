package kdb_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kdb-project/kdb"
)

// DB.Get and Namespace.Get reuse their snapshots (and the tree names they
// made): each Get must still see exactly the store as it is when it
// starts, in its own namespace, from any goroutine.
func TestGet_ReusedSnapshotsSeeTheirOwnStore(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace("other")
	if err != nil {
		t.Fatal(err)
	}
	// The same index and key names at the root and in the namespace.
	for round := range 50 {
		root, other := fmt.Sprintf("root-%d", round), fmt.Sprintf("other-%d", round)
		if err := db.Put("x", []byte("k"), []byte(root)); err != nil {
			t.Fatal(err)
		}
		b := ns.NewBatch()
		b.Put("x", []byte("k"), []byte(other))
		if err := db.Write(b); err != nil {
			t.Fatal(err)
		}
		if round%10 == 9 {
			if err := db.Checkpoint(); err != nil { // the values move to the page file
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					get, want := db.Get, root
					if (g+i)%2 == 1 {
						get, want = ns.Get, other
					}
					v, err := get("x", []byte("k"))
					if err != nil || string(v) != want {
						errs <- fmt.Errorf("round %d: got %q, %v; want %q", round, v, err, want)
						return
					}
					if _, err := get("y", []byte("k")); !errors.Is(err, kdb.ErrNotFound) {
						errs <- fmt.Errorf("round %d: missing index: %v, want ErrNotFound", round, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	if err := db.Delete("x", []byte("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get("x", []byte("k")); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("deleted key: %v, want ErrNotFound", err)
	}
	if v, err := ns.Get("x", []byte("k")); err != nil || string(v) != "other-49" {
		t.Fatalf("namespace after the root's delete: %q, %v", v, err)
	}
}

// Transactions reuse the Snapshot they read through (DB.runTxn): an Iter
// kept from one after its function returned must still say it is stale,
// not read the next transaction's snapshot; and each transaction reads its
// own namespace's trees, as they are when it starts.
func TestTxn_ReusedSnapshotsStayTheirOwn(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := db.Namespace("n")
	if err != nil {
		t.Fatal(err)
	}
	var kept *kdb.Iter
	for i := range 20 {
		for _, w := range []struct {
			submit func(func(*kdb.Txn) error) (*kdb.Commit, error)
			tag    string
		}{{db.Submit, "root"}, {ns.Submit, "ns"}} {
			want := fmt.Sprintf("%s-%d", w.tag, i-1)
			c, err := w.submit(func(tx *kdb.Txn) error {
				v, err := tx.Get("x", []byte("k"))
				if i > 0 && (err != nil || string(v) != want) {
					return fmt.Errorf("round %d %s: got %q, %v; want %q", i, w.tag, v, err, want)
				}
				if i%3 == 1 { // x exists (an Iter over no tree is just empty)
					kept = tx.Iter("x")
				}
				return tx.Put("x", []byte("k"), fmt.Appendf(nil, "%s-%d", w.tag, i))
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(); err != nil {
				t.Fatal(err)
			}
			if kept != nil {
				if kept.First() || !errors.Is(kept.Err(), kdb.ErrInvalid) {
					t.Fatalf("round %d: an Iter kept after its transaction read on (err %v)", i, kept.Err())
				}
			}
		}
	}
}
