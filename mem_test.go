package kdb_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// memModel is what the store must hold: index -> key -> value; an index
// present with no keys exists (empty).
type memModel map[string]map[string]string

func (m memModel) clone() memModel {
	out := make(memModel, len(m))
	for ix, kv := range m {
		out[ix] = maps.Clone(kv)
	}
	return out
}

// checkSnapshot compares everything a snapshot can say with the model:
// Exists, Len, Indexes, every Get of the key space, and iteration forward,
// backward and from random Seeks.
func checkSnapshot(s *kdb.Snapshot, want memModel, indexes, keys []string, r *rand.Rand) error {
	var got []string
	names, err := s.Indexes()
	if err != nil {
		return err
	}
	for _, ix := range names {
		got = append(got, ix)
	}
	wantNames := slices.Sorted(maps.Keys(want))
	if !slices.Equal(got, wantNames) {
		return fmt.Errorf("Indexes %v, want %v", got, wantNames)
	}
	for _, ix := range indexes {
		kv, exists := want[ix]
		ok, err := s.Exists(ix)
		if err != nil || ok != exists {
			return fmt.Errorf("Exists(%s) = %v, %v; want %v", ix, ok, err, exists)
		}
		n, err := s.Len(ix)
		if err != nil || n != uint64(len(kv)) {
			return fmt.Errorf("Len(%s) = %d, %v; want %d", ix, n, err, len(kv))
		}
		for _, k := range keys {
			v, err := s.Get(ix, []byte(k))
			w, ok := kv[k]
			switch {
			case !ok && !errors.Is(err, kdb.ErrNotFound):
				return fmt.Errorf("Get(%s, %s) = %.8q, %v; want not found", ix, k, v, err)
			case ok && (err != nil || string(v) != w):
				return fmt.Errorf("Get(%s, %s) = %.8q, %v; want %.8q", ix, k, v, err, w)
			}
		}
		sorted := slices.Sorted(maps.Keys(kv))
		var fwd, bwd []string
		it := s.Iter(ix)
		for ok := it.First(); ok; ok = it.Next() {
			if string(it.Value()) != kv[string(it.Key())] {
				return fmt.Errorf("Iter(%s) at %s: value %.8q, want %.8q", ix, it.Key(), it.Value(), kv[string(it.Key())])
			}
			fwd = append(fwd, string(it.Key()))
		}
		for ok := it.Last(); ok; ok = it.Prev() {
			bwd = append(bwd, string(it.Key()))
		}
		if err := it.Err(); err != nil {
			return err
		}
		slices.Reverse(bwd)
		if !slices.Equal(fwd, sorted) || !slices.Equal(bwd, sorted) {
			return fmt.Errorf("Iter(%s): forward %v, backward %v, want %v", ix, fwd, bwd, sorted)
		}
		// Seek, then wander both ways.
		for range 4 {
			k := keys[r.IntN(len(keys))]
			i, _ := slices.BinarySearch(sorted, k)
			ok := it.Seek([]byte(k))
			for range 6 {
				switch {
				case i < 0 || i >= len(sorted):
					if ok {
						return fmt.Errorf("Iter(%s) after Seek(%s) and steps: at %s, want the end", ix, k, it.Key())
					}
				case !ok || string(it.Key()) != sorted[i]:
					return fmt.Errorf("Iter(%s) after Seek(%s) and steps: at %q (%v), want %s", ix, k, it.Key(), ok, sorted[i])
				}
				if !ok {
					break
				}
				if r.IntN(2) == 0 {
					ok, i = it.Next(), i+1
				} else {
					ok, i = it.Prev(), i-1
				}
			}
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	return nil
}

// The mem tables under random writes (puts inline and in the journal,
// overwrites, deletes, dropped and re-created indexes), Views held open
// across later writes and checkpoints (each must keep seeing the state it
// began with: the versions it reads are kept, the frozen table a
// checkpoint flushes is still read), checkpoints at random moments, and a
// reopen at the end.
func TestMem_SnapshotsAgainstModel(t *testing.T) {
	seeds, steps := 8, 600
	if testing.Short() {
		seeds, steps = 3, 300
	}
	if os.Getenv("KDB_LONG") == "1" {
		seeds, steps = 40, 3000
	}
	indexes := []string{"a", "b", "c"}
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := &kdb.Options{FS: fs, SegmentSize: 64 << 10, CheckpointInterval: -1, CheckpointBytes: 1 << 40,
				CheckpointDirtyPages: 64 + seed*16}
			db, err := kdb.Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(seed), 9))
			model := memModel{}
			type held struct {
				release chan struct{}
				done    chan error
			}
			var views []held
			var bg sync.WaitGroup
			hold := func() {
				h := held{release: make(chan struct{}), done: make(chan error, 1)}
				started := make(chan struct{})
				want := model.clone() // no write runs until the View began
				vr := rand.New(rand.NewPCG(uint64(seed), uint64(len(views))))
				go func() {
					h.done <- db.View(func(s *kdb.Snapshot) error {
						close(started)
						<-h.release
						return checkSnapshot(s, want, indexes, keys, vr)
					})
				}()
				<-started
				views = append(views, h)
			}
			for step := range steps {
				b := kdb.NewBatch()
				for range 1 + r.IntN(3) {
					ix := indexes[r.IntN(len(indexes))]
					k := keys[r.IntN(len(keys))]
					switch x := r.IntN(100); {
					case x < 60:
						n := 1 + r.IntN(40)
						if r.IntN(3) == 0 {
							n = 600 + r.IntN(200) // kept in the journal
						}
						v := fmt.Sprintf("%d:%s", step, bytes.Repeat([]byte{'v'}, n))
						b.Put(ix, []byte(k), []byte(v))
						if model[ix] == nil {
							model[ix] = map[string]string{}
						}
						model[ix][k] = v
					case x < 95:
						b.Delete(ix, []byte(k))
						delete(model[ix], k)
					default:
						b.DropIndex(ix)
						delete(model, ix)
					}
				}
				if err := db.Write(b); err != nil {
					t.Fatal(err)
				}
				switch x := r.IntN(100); {
				case x < 8:
					hold()
				case x < 14 && len(views) > 0:
					i := r.IntN(len(views))
					close(views[i].release)
					if err := <-views[i].done; err != nil {
						t.Fatalf("step %d: a View held since earlier: %v", step, err)
					}
					views = slices.Delete(views, i, i+1)
				case x < 18:
					if err := db.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				case x < 20:
					bg.Add(1)
					go func() {
						defer bg.Done()
						if err := db.Checkpoint(); err != nil {
							t.Error(err)
						}
					}()
				case x < 24:
					vr := rand.New(rand.NewPCG(uint64(seed), uint64(step)))
					want := model.clone()
					if err := db.View(func(s *kdb.Snapshot) error { return checkSnapshot(s, want, indexes, keys, vr) }); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
			}
			for _, h := range views {
				close(h.release)
				if err := <-h.done; err != nil {
					t.Fatalf("a View held to the end: %v", err)
				}
			}
			bg.Wait()
			st := db.Stats()
			if _, err := db.Check(); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = kdb.Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			vr := rand.New(rand.NewPCG(uint64(seed), 1))
			if err := db.View(func(s *kdb.Snapshot) error { return checkSnapshot(s, model, indexes, keys, vr) }); err != nil {
				t.Fatalf("after reopening: %v", err)
			}
			t.Logf("%d checkpoints, %d mem versions at the end", st.Checkpoints, st.MemVersions)
		})
	}
}
