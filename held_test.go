package kdb_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// TestDB_HeldPagesBounded: with concurrent writers at random keys, the page
// images held for checkpoints (dirty pages, and old images a running
// checkpoint still writes) never pass twice CheckpointDirtyPages by more
// than what one commit group can dirty, and writers did wait for room.
func TestDB_HeldPagesBounded(t *testing.T) {
	const (
		cdp      = 16
		groupOps = 8
		writers  = 4
	)
	batches := 150
	if testing.Short() {
		batches = 60
	}
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CheckpointDirtyPages: cdp, CommitGroupOps: groupOps})
	if err != nil {
		t.Fatal(err)
	}
	var maxHeld atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			val := make([]byte, 200)
			b := kdb.NewBatch()
			for range batches {
				b.Reset()
				for range 2 {
					var k [8]byte
					binary.BigEndian.PutUint64(k[:], rng.Uint64())
					b.Put("t", k[:], val)
				}
				if err := db.Write(b); err != nil {
					t.Error(err)
					return
				}
				held := int64(db.Stats().HeldPages)
				for {
					m := maxHeld.Load()
					if held <= m || maxHeld.CompareAndSwap(m, held) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	st := db.Stats()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// One group of groupOps puts dirties per put at most a leaf, the leaf
	// a split adds and its branch path, and the catalog's path.
	const bound = 2*cdp + groupOps*6
	if m := maxHeld.Load(); m > bound {
		t.Fatalf("HeldPages reached %d, bound %d", m, bound)
	}
	if st.WriteStalls == 0 || st.Checkpoints < 2 {
		t.Fatalf("the bound was not exercised: %d stalls, %d checkpoints", st.WriteStalls, st.Checkpoints)
	}
	t.Logf("max HeldPages %d (bound %d), %d stalls, %d checkpoints", maxHeld.Load(), bound, st.WriteStalls, st.Checkpoints)
}

func TestOptions_CommitGroupOpsValidated(t *testing.T) {
	if _, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CommitGroupOps: -1}); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("CommitGroupOps -1: %v, want ErrInvalid", err)
	}
}
