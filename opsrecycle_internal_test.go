package kdb

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/kdb-project/kdb/vfs"
)

// recycleOps clears an array from opArrays before it goes back, and leaves
// a slice of any other capacity (a batch that outgrew its array, a caller's
// own) alone.
func TestOps_RecycleClearsAndKeepsOthers(t *testing.T) {
	ops := newOps()
	if len(ops) != 0 || cap(ops) != pooledOps {
		t.Fatalf("newOps: len %d cap %d", len(ops), cap(ops))
	}
	ops = append(ops, op{kind: opPut, tree: []byte("u/t"), key: []byte("k"), value: []byte("v")})
	a := (*[pooledOps]op)(ops[:pooledOps])
	recycleOps(ops)
	if a[0].tree != nil || a[0].key != nil || a[0].value != nil || a[0].kind != 0 {
		t.Fatalf("a recycled array keeps %+v", a[0])
	}
	other := make([]op, 1, 8)
	other[0] = op{kind: opPut, key: []byte("k")}
	recycleOps(other)
	if other[0].key == nil {
		t.Fatal("recycleOps cleared a slice that is not one of opArrays'")
	}
}

// Every path whose operations come from opArrays, at once: ordered
// transactions (Submit) reading what the ones before them wrote, Put,
// Update, and Write of a Batch the caller reuses as soon as Write returns
// (its operations are copied into a pooled array; the caller's stay its
// own). Each writer checks every value it wrote afterwards. An array
// recycled before its group is applied, or a caller's batch recycled, loses
// or mixes values here.
func TestOps_RecycledArraysNeverShared(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem(), CheckpointDirtyPages: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const rounds = 150
	val := func(w, i, j int) []byte {
		return []byte(fmt.Sprintf("w%d-i%d-j%d-%s", w, i, j, bytes.Repeat([]byte{'x'}, j)))
	}
	key := func(w, i, j int) []byte { return []byte(fmt.Sprintf("%02d/%04d/%02d", w, i, j)) }
	// writes is how many keys writer w writes in round i (its path is
	// (w+i)%4: Submit, Put, Write, Update).
	writes := func(w, i int) int {
		switch (w + i) % 4 {
		case 0:
			return 1 + i%20 // one more than an array holds
		case 2:
			return 1 + i%17
		case 3:
			return 1 + i%3
		}
		return 1
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := NewBatch()
			for i := range rounds {
				var err error
				switch (w + i) % 4 {
				case 0: // an ordered transaction
					n := writes(w, i)
					var c *Commit
					c, err = db.Submit(func(tx *Txn) error {
						if i > 0 {
							// The previous round's first key, maybe still in flight.
							prev := key(w, i-1, 0)
							if v, err := tx.Get("t", prev); err != nil || !bytes.Equal(v, val(w, i-1, 0)) {
								return fmt.Errorf("writer %d round %d reads %q = %q, %v", w, i, prev, v, err)
							}
						}
						for j := range n {
							if err := tx.Put("t", key(w, i, j), val(w, i, j)); err != nil {
								return err
							}
						}
						return nil
					})
					if err == nil {
						err = c.Wait()
					}
				case 1:
					err = db.Put("t", key(w, i, 0), val(w, i, 0))
				case 2:
					b.Reset()
					for j := range writes(w, i) {
						b.Put("t", key(w, i, j), val(w, i, j))
					}
					err = db.Write(b)
					// Reused at once: Write's copy must not be this.
					b.Reset()
					for j := range writes(w, i) {
						b.Put("t", key(w, i, j), []byte("not written"))
					}
				case 3:
					err = db.Update(func(tx *Txn) error {
						for j := range writes(w, i) {
							if err := tx.Put("t", key(w, i, j), val(w, i, j)); err != nil {
								return err
							}
						}
						return nil
					})
				}
				if err != nil {
					errs <- err
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
	for w := range 8 {
		for i := range rounds {
			for j := range writes(w, i) {
				v, err := db.Get("t", key(w, i, j))
				if err != nil || !bytes.Equal(v, val(w, i, j)) {
					t.Fatalf("%s = %q, %v; want %q", key(w, i, j), v, err, val(w, i, j))
				}
			}
		}
	}
}

// Write copies a caller's batch (into an array from opArrays) and never
// recycles the caller's own operations, which Reset keeps for reuse: with
// the caller's array of opArrays' size, after Write the arrays the pool
// hands out are never the caller's.
func TestOps_WriteKeepsCallersBatch(t *testing.T) {
	db, err := Open("/db", &Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := NewBatch()
	b.ops = make([]op, 0, pooledOps) // as a batch that grew to that size
	for round := range 20 {
		b.Reset()
		for j := range 12 {
			b.Put("t", []byte(fmt.Sprintf("k%02d", j)), []byte(fmt.Sprint(round)))
		}
		if cap(b.ops) != pooledOps {
			t.Fatalf("the batch's capacity is %d, not %d: the test misses its case", cap(b.ops), pooledOps)
		}
		if err := db.Write(b); err != nil {
			t.Fatal(err)
		}
		mine := &b.ops[:1][0]
		for range 4 {
			if got := newOps(); &got[:1][0] == mine {
				t.Fatalf("round %d: the pool handed out the caller's batch", round)
			}
		}
	}
	if v, err := db.Get("t", []byte("k11")); err != nil || string(v) != "19" {
		t.Fatalf("k11 = %q, %v", v, err)
	}
}
