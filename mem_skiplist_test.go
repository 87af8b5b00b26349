package kdb

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// The skiplist of a mem table, one writer linking and unlinking keys, as
// a set: find, the order, seekGE and seekLT.
func TestMemTable_SkiplistModel(t *testing.T) {
	tb := newMemTable()
	want := map[string]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	key := func(i int) string { return fmt.Sprintf("k%04d", i) }
	for i := range 100000 {
		k := key(r.IntN(2000))
		if r.IntN(3) == 0 {
			if n := tb.find("t", k); n != nil {
				tb.removeKey(n)
				delete(want, k)
			}
		} else if n := tb.insertKey("t", k); n.key != k {
			t.Fatalf("insertKey(%s) gave %s", k, n.key)
		} else {
			want[k] = true
		}
		if i%997 != 0 {
			continue
		}
		var all []string
		for n := tb.head.next[0].Load(); n != nil; n = n.next[0].Load() {
			if len(all) > 0 && n.key <= all[len(all)-1] {
				t.Fatalf("order: %s after %s", n.key, all[len(all)-1])
			}
			all = append(all, n.key)
		}
		if len(all) != len(want) {
			t.Fatalf("step %d: %d nodes, want %d", i, len(all), len(want))
		}
		for j := range 2000 {
			k := key(j)
			if (tb.find("t", k) != nil) != want[k] {
				t.Fatalf("step %d: find(%s) wrong", i, k)
			}
			ge, lt := tb.seekGE("t", k, false), tb.seekLT("t", k, false)
			var wge, wlt string
			for _, a := range all {
				if a >= k && wge == "" {
					wge = a
				}
				if a < k {
					wlt = a
				}
			}
			if (ge == nil) != (wge == "") || (ge != nil && ge.key != wge) || (lt == nil) != (wlt == "") || (lt != nil && lt.key != wlt) {
				t.Fatalf("step %d: seeks around %s: %v %v, want %q %q", i, k, ge, lt, wge, wlt)
			}
		}
	}
}

// Readers find keys that stay while the writer links and unlinks the keys
// around them (a reader that compared one node and then loaded its
// predecessor's pointer again could return a node linked in meanwhile).
func TestMemTable_SkiplistConcurrentReaders(t *testing.T) {
	tb := newMemTable()
	var stable []string
	isStable := map[string]bool{}
	for i := 0; i < 3000; i += 7 {
		k := fmt.Sprintf("k%04d", i)
		tb.insertKey("t", k)
		stable = append(stable, k)
		isStable[k] = true
	}
	var stop atomic.Bool
	var misses atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for _, k := range stable {
					if tb.find("t", k) == nil {
						misses.Add(1)
					}
				}
			}
		}()
	}
	r := rand.New(rand.NewPCG(3, 4))
	n := 300000
	if testing.Short() {
		n = 100000
	}
	for range n {
		k := fmt.Sprintf("k%04d", r.IntN(3000))
		if isStable[k] {
			continue
		}
		if r.IntN(2) == 0 {
			if node := tb.find("t", k); node != nil {
				tb.removeKey(node)
			}
		} else {
			tb.insertKey("t", k)
		}
	}
	stop.Store(true)
	wg.Wait()
	if m := misses.Load(); m > 0 {
		t.Fatalf("%d lookups missed a key that was there throughout", m)
	}
}
