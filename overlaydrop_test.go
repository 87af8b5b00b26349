package kdb_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestSubmit_ReadAfterADropInFlight: transactions submitted while earlier
// ones are still in flight (not yet applied: their sync is held) read
// their writes in order: a key put, then its index dropped, reads as not
// found, not as the put's value (the in-flight put outlived the drop).
func TestSubmit_ReadAfterADropInFlight(t *testing.T) {
	var (
		mu   sync.Mutex
		hold = make(chan struct{})
		held bool
	)
	fsys := vfs.Intercept(vfs.NewMem(), func(e vfs.Event) error {
		if e.Op == vfs.OpSync && strings.Contains(e.Path, "db-") {
			mu.Lock()
			h := held
			mu.Unlock()
			if h {
				<-hold
			}
		}
		return nil
	})
	opts := misuseOpts()
	opts.FS = fsys
	db, err := kdb.Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Put("t", []byte("old"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	held = true
	mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			mu.Lock()
			held = false
			mu.Unlock()
			close(hold)
		}
	}
	defer release()

	var cs []*kdb.Commit
	submit := func(fn func(tx *kdb.Txn) error) {
		t.Helper()
		c, err := db.Submit(fn)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	submit(func(tx *kdb.Txn) error { return tx.Put("t", []byte("k"), []byte("v")) })
	submit(func(tx *kdb.Txn) error { return tx.DropIndex("t") })
	var gotK, gotOld error
	submit(func(tx *kdb.Txn) error {
		_, gotK = tx.Get("t", []byte("k"))
		_, gotOld = tx.Get("t", []byte("old"))
		return nil
	})
	release()
	for _, c := range cs {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(gotK, kdb.ErrNotFound) || !errors.Is(gotOld, kdb.ErrNotFound) {
		t.Errorf("after a put and a drop of its index, both in flight: Get k = %v, Get old = %v; want ErrNotFound for both", gotK, gotOld)
	}
}
