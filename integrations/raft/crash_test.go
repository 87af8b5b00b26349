package raftkdb

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

type state map[uint64]uint64 // index -> term

func (s state) clone() state {
	c := state{}
	for k, v := range s {
		c[k] = v
	}
	return c
}

// TestStore_PowerLoss takes a power-loss image of the store before every
// fsync of a workload whose StoreLogs and DeleteRange calls are too large
// for one kdb batch (so they split), and checks each image: it opens, its
// log is contiguous (a split DeleteRange never leaves a hole: a suffix is
// deleted from the top, a prefix from the bottom), every call acknowledged
// before the image is in it, and nothing is there that neither the last
// acknowledged state nor the call in flight could have left.
func TestStore_PowerLoss(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var (
		mu     sync.Mutex
		syncs  int
		images = map[int]*vfs.MemFS{}
	)
	fs := vfs.Intercept(mem, func(e vfs.Event) error {
		if e.Op == vfs.OpSync {
			mu.Lock()
			syncs++
			images[syncs] = mem.CrashClone(vfs.CrashOptions{KeepUnsynced: 0.5, Seed: int64(syncs)})
			mu.Unlock()
		}
		return nil
	})
	opts := &kdb.Options{FS: fs, SegmentSize: 256 << 10, CheckpointBytes: 256 << 10, CheckpointInterval: -1}
	s, err := Open("/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	// states[j] is the log after call j; acked[j] the fsyncs begun when
	// call j returned (all of them done).
	states := []state{{}}
	acked := []int{0}
	cur := state{}
	done := func() {
		mu.Lock()
		acked = append(acked, syncs)
		mu.Unlock()
		states = append(states, cur.clone())
	}
	store := func(lo, hi, term uint64) {
		var logs []*raft.Log
		for i := lo; i <= hi; i++ {
			logs = append(logs, entry(i, term, 100))
			cur[i] = term
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
		done()
	}
	del := func(lo, hi uint64) {
		if err := s.DeleteRange(lo, hi); err != nil {
			t.Fatal(err)
		}
		for i := lo; i <= hi; i++ {
			delete(cur, i)
		}
		done()
	}
	store(1, 3000, 1) // ~15 transactions
	del(1001, 3000)   // a conflicting suffix: 3 batches, from the top
	store(1001, 1500, 2)
	del(1, 800) // compaction after a snapshot: 2 batches, from the bottom
	store(1501, 1510, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := syncs
	mu.Unlock()
	checked := 0
	for k := 1; k <= n; k++ {
		if testing.Short() && k%3 != 0 && k != n {
			continue
		}
		// Calls acknowledged before fsync k began are durable in image k.
		j := 0
		for j+1 < len(acked) && acked[j+1] < k {
			j++
		}
		lo, hi := states[j], states[min(j+1, len(states)-1)]
		checkImage(t, images[k], fmt.Sprintf("image before fsync %d (after call %d)", k, j), lo, hi)
		checked++
	}
	t.Logf("%d fsyncs, %d power-loss images checked", n, checked)
}

func checkImage(t *testing.T, img *vfs.MemFS, name string, a, b state) {
	t.Helper()
	s, err := Open("/db", &kdb.Options{FS: img, SegmentSize: 256 << 10, CheckpointInterval: -1})
	if err != nil {
		t.Fatalf("%s: open: %v", name, err)
	}
	defer s.Close()
	f, l := bounds(t, s)
	got := state{}
	for i := f; i <= l && l > 0; i++ {
		var e raft.Log
		if err := s.GetLog(i, &e); err != nil {
			t.Fatalf("%s: log %d..%d has a hole at %d: %v", name, f, l, i, err)
		}
		got[i] = e.Term
	}
	for i, term := range a {
		if bt, ok := b[i]; ok && bt == term {
			if gt, ok := got[i]; !ok || gt != term {
				t.Fatalf("%s: acknowledged entry %d (term %d) missing or changed (%v, term %d)", name, i, term, ok, gt)
			}
		}
	}
	for i, term := range got {
		if a[i] != term && b[i] != term {
			t.Fatalf("%s: entry %d term %d is in neither the acknowledged state nor the one in flight", name, i, term)
		}
	}
}
