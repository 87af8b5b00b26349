package index

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
)

// modelRun drives a store with random Updates (puts, overwrites, deletes,
// gets, range scans, tree creation and drops, large values, rollbacks) and
// compares it with a model after each step; it runs Check after every step,
// checkpoints at random and reopens the page file after some checkpoints.
type modelRun struct {
	t      *testing.T
	rng    *rand.Rand
	e      *env
	m      model
	ops    int
	putPct int // puts among operations; deletes up to 80%
	depth  int // largest depth Check saw
	peak   uint64
	st     Stats // summed over reopens
	keys   int   // key space per tree
	steps  int
}

func (r *modelRun) key(n int) []byte {
	k := fmt.Sprintf("%06d", n)
	switch n % 7 {
	case 0:
		k += strings.Repeat("l", n%(r.e.s.MaxKeySize()-5))
	case 1:
		k += strings.Repeat("m", n%40)
	}
	return []byte(k)
}

func (r *modelRun) value() []byte {
	var n int
	switch p := r.rng.IntN(100); {
	case p < 70:
		n = r.rng.IntN(40)
	case p < 92:
		n = r.rng.IntN(r.e.s.lim.maxCell)
	default:
		n = r.e.s.lim.maxCell + r.rng.IntN(3*r.e.ps)
	}
	v := make([]byte, n)
	c := byte('a' + r.rng.IntN(26))
	for i := range v {
		v[i] = c + byte(i%3)
	}
	return v
}

func (r *modelRun) treeName() string { return fmt.Sprintf("tree%d", r.rng.IntN(6)) }

// step runs one Update of a few operations, rolled back at random.
func (r *modelRun) step() {
	next := r.m.clone()
	rollback := r.rng.IntN(10) == 0
	err := r.e.s.Update(func(tx *Tx) error {
		for range 1 + r.rng.IntN(8) {
			r.ops++
			name := r.treeName()
			kv, exists := next[name]
			tr := tx.Tree([]byte(name))
			if (tr != nil) != exists {
				return fmt.Errorf("tree %q: handle %v, model %v", name, tr != nil, exists)
			}
			switch p := r.rng.IntN(100); {
			case !exists || (p < 1 && r.rng.IntN(4) == 0):
				if exists {
					if err := tx.DropTree([]byte(name)); err != nil {
						return err
					}
					delete(next, name)
					continue
				}
				if _, err := tx.CreateTree([]byte(name)); err != nil {
					return err
				}
				next[name] = map[string]string{}
			case p < r.putPct:
				k, v := r.key(r.rng.IntN(r.keys)), r.value()
				if err := tr.Put(k, v); err != nil {
					return err
				}
				kv[string(k)] = string(v)
			case p < 80:
				k := r.key(r.rng.IntN(r.keys))
				if len(kv) > 0 && r.rng.IntN(4) != 0 {
					k = []byte(sortedKeys(kv)[r.rng.IntN(len(kv))])
				}
				ok, err := tr.Delete(k)
				if err != nil {
					return err
				}
				if _, want := kv[string(k)]; ok != want {
					return fmt.Errorf("Delete(%q) = %v, want %v", k, ok, want)
				}
				delete(kv, string(k))
			case p < 90:
				k := r.key(r.rng.IntN(r.keys))
				v, ok, err := tr.Get(k)
				want, wok := kv[string(k)]
				if err != nil || ok != wok || string(v) != want {
					return fmt.Errorf("Get(%q) = %d bytes %v %v, want %d bytes %v", k, len(v), ok, err, len(want), wok)
				}
			default:
				if err := r.scan(tr, kv); err != nil {
					return err
				}
			}
			if tr != nil && !tr.dropped && tr.Len() != uint64(len(next[name])) {
				return fmt.Errorf("tree %q: Len %d, model %d", name, tr.Len(), len(next[name]))
			}
		}
		if rollback {
			return errTestRollback
		}
		return nil
	})
	switch {
	case rollback && err == errTestRollback:
	case err != nil:
		r.t.Fatalf("step: %v", err)
	default:
		r.m = next
	}
}

// scan compares a range scan from a random key, forward or backward.
func (r *modelRun) scan(tr *Tree, kv map[string]string) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	from := r.key(r.rng.IntN(r.keys))
	i := sort.SearchStrings(keys, string(from))
	c := tr.Cursor()
	k, v, ok := c.Seek(from)
	back := r.rng.IntN(2) == 0
	for n := 0; n < 30; n++ {
		if i < 0 || i >= len(keys) {
			if ok {
				return fmt.Errorf("scan from %q: extra key %q at %d", from, k, i)
			}
			break
		}
		if !ok || string(k) != keys[i] || string(v) != kv[keys[i]] {
			return fmt.Errorf("scan from %q (back %v): got %q %v, want %q", from, back, k, ok, keys[i])
		}
		if back {
			k, v, ok = c.Prev()
			i--
		} else {
			k, v, ok = c.Next()
			i++
		}
	}
	return c.Err()
}

func (r *modelRun) addStats() {
	st := r.e.s.Stats()
	r.st.Commits += st.Commits
	r.st.Rollbacks += st.Rollbacks
	r.st.Splits += st.Splits
	r.st.LeafMerges += st.LeafMerges
	r.st.BranchMerges += st.BranchMerges
}

func (r *modelRun) checkStep() {
	rep, err := r.e.s.Check()
	if err != nil {
		r.t.Fatalf("Check: %v", err)
	}
	var keys uint64
	for _, kv := range r.m {
		keys += uint64(len(kv))
	}
	r.depth = max(r.depth, rep.Depth)
	r.peak = max(r.peak, rep.Keys)
	if rep.Keys != keys || rep.Trees != len(r.m) {
		r.t.Fatalf("Check: %d trees, %d keys; model %d trees, %d keys", rep.Trees, rep.Keys, len(r.m), keys)
	}
}

func runModel(t *testing.T, seed uint64, pageSize, steps, keys int) int {
	r := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, 1)), e: newMemEnv(t, pageSize), m: model{}, keys: keys, steps: steps}
	// A long-running View holds a snapshot across several steps.
	type reader struct {
		m    model
		next chan struct{}
		done chan error
	}
	var long *reader
	finishReader := func() {
		if long != nil {
			close(long.next)
			if err := <-long.done; err != nil {
				t.Fatalf("long View: %v", err)
			}
			long = nil
		}
	}
	for i := 0; i < steps; i++ {
		// Tides: grow, then shrink, so that splits and merges at every
		// level both happen.
		if i/250%2 == 0 {
			r.putPct = 65
		} else {
			r.putPct = 12
		}
		r.step()
		r.checkStep()
		switch p := r.rng.IntN(100); {
		case p < 3:
			r.e.checkpoint()
			if r.rng.IntN(2) == 0 {
				finishReader()
				r.addStats()
				r.e.reopen()
				r.checkStep()
			}
			if err := compare(r.e.s, r.m); err != nil {
				t.Fatalf("step %d after checkpoint: %v", i, err)
			}
		case p < 5 && long == nil:
			long = &reader{m: r.m.clone(), next: make(chan struct{}), done: make(chan error, 1)}
			started := make(chan struct{})
			go func(rd *reader) {
				rd.done <- r.e.s.View(func(tx *Tx) error {
					close(started)
					<-rd.next
					return compareTx(tx, rd.m)
				})
			}(long)
			<-started
		case p < 10:
			finishReader()
		}
	}
	finishReader()
	if err := compare(r.e.s, r.m); err != nil {
		t.Fatalf("end: %v", err)
	}
	t.Logf("%d operations, up to %d keys, depth up to %d", r.ops, r.peak, r.depth)
	r.addStats()
	if st := r.st; st.Splits == 0 || st.LeafMerges == 0 || pageSize < 4096 && (r.depth < 3 || st.BranchMerges == 0) {
		t.Errorf("depth %d, %+v: the run does not exercise splits and merges of branches", r.depth, st)
	}
	return r.ops
}

func TestStore_Model(t *testing.T) {
	seeds, steps := 5, 1000
	if raceEnabled {
		seeds, steps = 3, 600
	}
	if os.Getenv("KDB_LONG") != "" {
		seeds, steps = 48, 8000
	}
	total := 0
	for seed := range seeds {
		ps := []int{512, 1024, 4096}[seed%3]
		t.Run(fmt.Sprintf("seed=%d/page=%d", seed, ps), func(t *testing.T) {
			total += runModel(t, uint64(seed), ps, steps, ps)
		})
	}
	t.Logf("%d operations in %d seeds", total, seeds)
}

var _ = bytes.Equal
