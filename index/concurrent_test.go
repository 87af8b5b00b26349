package index

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// TestStore_ConcurrentViewsUpdatesCheckpoints runs one writer, several
// readers and a checkpointer at once on the OS file system (so that clean
// pages are read through the mmap, which checkpoints write in place). Every
// Update rewrites all fixed keys with its generation and replaces the extra
// keys (every tenth with a value in an overflow chain) of the previous
// generation: a View that saw a half-applied Update, or
// a page freed and rewritten under it, finds mixed generations.
func TestStore_ConcurrentViewsUpdatesCheckpoints(t *testing.T) {
	pf, _, err := pagefile.Open(t.TempDir(), pagefile.Options{FS: vfs.OS, PageSize: 512, UnsafeNoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pf.Close(); err != nil {
			t.Error(err)
		}
	}()
	s, err := Open(pf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const fixed, extra = 40, 60
	fixedKey := func(i int) []byte { return fmt.Appendf(nil, "f%03d", i) }
	gens := 300
	if testing.Short() || raceEnabled {
		gens = 100
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				err := s.View(func(tx *Tx) error {
					tr := tx.Tree([]byte("t"))
					if tr == nil {
						return nil
					}
					v, ok, err := tr.Get(fixedKey(0))
					if err != nil || !ok {
						return fmt.Errorf("get f000: %v %v", ok, err)
					}
					gen := string(v)
					for i := 1; i < fixed; i++ {
						v, ok, err := tr.Get(fixedKey(i))
						if err != nil || !ok || string(v) != gen {
							return fmt.Errorf("f%03d = %q, f000 = %q (%v)", i, v, gen, err)
						}
					}
					c := tr.Cursor()
					seen := 0
					prefix := []byte("x" + gen + "-")
					for k, v, ok := c.Seek([]byte("x")); ok; k, v, ok = c.Next() {
						reps := 20
						if seen%10 == 0 {
							reps = 400 // an overflow chain
						}
						if !bytes.HasPrefix(k, prefix) || !bytes.Equal(v, bytes.Repeat(prefix, reps)) {
							return fmt.Errorf("gen %s: extra key %q", gen, k)
						}
						seen++
					}
					if c.Err() != nil {
						return c.Err()
					}
					if seen != extra || tr.Len() != fixed+extra {
						return fmt.Errorf("gen %s: %d extra keys, Len %d", gen, seen, tr.Len())
					}
					if r == 0 && n%7 == 0 {
						// A slow reader: hold the snapshot across more Updates.
						for range 1000 {
							if _, _, err := tr.Get(fixedKey(n % fixed)); err != nil {
								return err
							}
						}
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := s.Checkpoint(pagefile.MetaUpdate{}); err != nil {
				errs <- err
				return
			}
		}
	}()
	for g := 1; g <= gens; g++ {
		err := s.Update(func(tx *Tx) error {
			tr := tx.Tree([]byte("t"))
			if tr == nil {
				var err error
				if tr, err = tx.CreateTree([]byte("t")); err != nil {
					return err
				}
			}
			gen := []byte(strconv.Itoa(g))
			for i := range fixed {
				if err := tr.Put(fixedKey(i), gen); err != nil {
					return err
				}
			}
			for i := range extra {
				if g > 1 {
					if ok, err := tr.Delete(fmt.Appendf(nil, "x%d-%03d", g-1, i)); err != nil || !ok {
						return fmt.Errorf("delete gen %d extra %d: %v %v", g-1, i, ok, err)
					}
				}
				p := fmt.Appendf(nil, "x%d-", g)
				reps := 20
				if i%10 == 0 {
					reps = 400 // an overflow chain
				}
				if err := tr.Put(fmt.Appendf(nil, "x%d-%03d", g, i), bytes.Repeat(p, reps)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if g%50 == 0 {
			if _, err := s.Check(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-errs:
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		default:
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
