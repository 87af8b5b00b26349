package index

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// crashWorkload runs Updates and checkpoints on fs until an error. It
// returns the model after each completed checkpoint (models[0] is the empty
// store), how many checkpoints completed, and whether the error struck
// inside a checkpoint.
//
// models[i] is the content at checkpoint i; models[completed+1] exists when
// the error struck inside checkpoint completed+1.
func crashWorkload(fs vfs.FS, seed uint64, rounds int) (models []model, completed int, inCheckpoint bool, err error) {
	models = []model{{}}
	pf, _, err := pagefile.Open("/db", pagefile.Options{FS: fs, PageSize: 512})
	if err != nil {
		return nil, 0, false, err
	}
	defer func() { _ = pf.Close() }()
	s, err := Open(pf, Options{})
	if err != nil {
		return models, 0, false, err
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	m := model{}
	// A View open across rounds 1 and 2 keeps pages pending free over
	// checkpoints 2 and 3, so that the pending-free list is persisted.
	release, done := make(chan struct{}), make(chan error, 1)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	for round := range rounds {
		if round == 1 {
			started := make(chan struct{})
			go func() {
				done <- s.View(func(tx *Tx) error {
					close(started)
					<-release
					return nil
				})
			}()
			<-started
		}
		if round == 3 {
			close(release)
			if err := <-done; err != nil {
				return models, round, false, err
			}
		}
		for range 4 {
			next := m.clone()
			err := s.Update(func(tx *Tx) error {
				for range 10 {
					name := fmt.Sprintf("t%d", rng.IntN(3))
					tr := tx.Tree([]byte(name))
					if tr == nil {
						var err error
						if tr, err = tx.CreateTree([]byte(name)); err != nil {
							return err
						}
						next[name] = map[string]string{}
					}
					k := fmt.Sprintf("k%04d", rng.IntN(300))
					if round > 1 && rng.IntN(3) == 0 {
						if _, err := tr.Delete([]byte(k)); err != nil {
							return err
						}
						delete(next[name], k)
						continue
					}
					v := fmt.Sprintf("%d-%0*d", round, rng.IntN(2)*rng.IntN(900), 7)
					if err := tr.Put([]byte(k), []byte(v)); err != nil {
						return err
					}
					next[name][k] = v
				}
				return nil
			})
			if err != nil {
				return models, round, false, err
			}
			m = next
		}
		models = append(models, m.clone())
		if err := s.Checkpoint(pagefile.MetaUpdate{ReplayOffset: uint64(round + 1)}); err != nil {
			return models, round, true, err
		}
	}
	return models, rounds, false, nil
}

func TestStore_CrashDuringCheckpoint(t *testing.T) {
	settings := []vfs.CrashOptions{
		{KeepUnsynced: 0},
		{KeepUnsynced: 0.5, Seed: 1},
		{KeepUnsynced: 1},
		{KeepUnsynced: 0.5, GarbageUnsynced: 0.3, Seed: 2},
	}
	rounds := 4
	if os.Getenv("KDB_LONG") != "" {
		rounds = 8
	} else if raceEnabled {
		settings = settings[1:3]
	}
	for _, o := range settings {
		t.Run(fmt.Sprintf("keep=%v/garbage=%v", o.KeepUnsynced, o.GarbageUnsynced), func(t *testing.T) {
			crashes := 0
			for k := 1; ; k++ {
				c := kdbtest.CrashAt(vfs.NewMem(), k, o)
				models, completed, inCkpt, err := crashWorkload(c.FS(), uint64(k), rounds)
				if !c.Crashed() {
					if err != nil {
						t.Fatalf("k=%d: workload failed without a crash: %v", k, err)
					}
					if crashes == 0 {
						t.Fatalf("no crash point")
					}
					t.Logf("%d crash points", crashes)
					return
				}
				crashes++
				if !errors.Is(err, kdbtest.ErrCrashed) {
					t.Fatalf("k=%d: workload error %v, want ErrCrashed", k, err)
				}
				img := c.Image()
				pf, _, err := pagefile.Open("/db", pagefile.Options{FS: img})
				if err != nil {
					if models == nil {
						continue // crashed while creating the store: may be unopenable
					}
					t.Fatalf("k=%d: reopen after %d checkpoints: %v", k, completed, err)
				}
				s, err := Open(pf, Options{})
				if err != nil {
					t.Fatalf("k=%d: index.Open: %v", k, err)
				}
				if models == nil {
					models = []model{{}} // crashed while creating: empty, if it opens
				}
				got := int(pf.Meta().ReplayOffset)
				if got != completed && !(inCkpt && got == completed+1) {
					t.Fatalf("k=%d: reopened at checkpoint %d; completed %d, in checkpoint %v", k, got, completed, inCkpt)
				}
				if err := compare(s, models[got]); err != nil {
					t.Fatalf("k=%d: checkpoint %d: %v", k, got, err)
				}
				if _, err := s.Check(); err != nil {
					t.Fatalf("k=%d: Check: %v", k, err)
				}
				// The reopened store keeps working and checkpoints.
				if err := s.Update(func(tx *Tx) error {
					_, err := tx.CreateTree([]byte("after-crash"))
					return err
				}); err != nil {
					t.Fatalf("k=%d: Update after reopen: %v", k, err)
				}
				if err := s.Checkpoint(pagefile.MetaUpdate{}); err != nil {
					t.Fatalf("k=%d: Checkpoint after reopen: %v", k, err)
				}
				if _, err := s.Check(); err != nil {
					t.Fatalf("k=%d: Check after checkpoint: %v", k, err)
				}
				if p := pf.FreeListProof(); p.Lies != 0 {
					t.Fatalf("k=%d: the recovered free list lied: %+v", k, p)
				}
				if err := pf.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
