package kdb_test

import (
	"encoding/binary"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// The overlay entry of a key that two submitted transactions wrote stays
// until the later one is applied: cleaning up after the earlier one
// (ordered.go, cleanup) must not drop the later one's entry. Three
// increments of one counter, the second still in flight (one batch per
// group, and its writer not yet waiting) when the first is applied and the
// third runs: the third reads the second's value, and the counter ends at 3.
func TestSubmit_CleanupKeepsALaterGenerationsKey(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CommitGroupOps: 1, CheckpointInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	submit := func() *kdb.Commit {
		t.Helper()
		c, err := db.Submit(incr(t, "c", "n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := submit()
	c2 := submit()
	if err := c1.Wait(); err != nil { // applied alone: c2 is in flight
		t.Fatal(err)
	}
	c3 := submit() // its cleanup follows c1's apply
	for _, c := range []*kdb.Commit{c2, c3} {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	v, err := db.Get("c", []byte("n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(v); got != 3 {
		t.Fatalf("counter after three increments: %d, want 3 (an increment read a value the overlay had forgotten)", got)
	}
}
