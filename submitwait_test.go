package kdb_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

// mustWithin is within, failing on fn's error too.
func mustWithin(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	if err := within(t, d, what, fn); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A Submit's Commit not yet waited for used to hold the leader role of the
// commit queue, which only its Wait would take up: a goroutine that
// submitted, then wrote (Put, Write, Update, another Submit's Wait) before
// its Wait, waited for itself for ever, and so did every other writer (an
// outside tester, 2026-12-07). Now a writer that waits behind such a
// commit leads it with its own. Each way: the role taken at once (the
// Commit's batch alone in the queue), and handed on past commits not
// waited for to a writer waiting behind them (one batch a group).
func TestSubmit_WriteBeforeWaitDoesNotDeadlock(t *testing.T) {
	writes := map[string]func(db *kdb.DB, i int) error{
		"put": func(db *kdb.DB, i int) error { return db.Put("b", fmt.Appendf(nil, "k%d", i), []byte("v")) },
		"write": func(db *kdb.DB, i int) error {
			b := kdb.NewBatch()
			b.Put("b", fmt.Appendf(nil, "k%d", i), []byte("v"))
			return db.Write(b)
		},
		"update": func(db *kdb.DB, i int) error {
			return db.Update(func(tx *kdb.Txn) error { return tx.Put("b", fmt.Appendf(nil, "k%d", i), []byte("v")) })
		},
		"submit-wait": func(db *kdb.DB, i int) error {
			c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("b", fmt.Appendf(nil, "k%d", i), []byte("v")) })
			if err != nil {
				return err
			}
			return c.Wait()
		},
	}
	for name, write := range writes {
		for _, groupOps := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/group-ops=%d", name, groupOps), func(t *testing.T) {
				db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CommitGroupOps: groupOps, CloseWait: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				// Three Commits not waited for, then a write in the same
				// goroutine, then their Waits.
				var cs []*kdb.Commit
				for i := range 3 {
					c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("a", fmt.Appendf(nil, "s%d", i), []byte("v")) })
					if err != nil {
						t.Fatal(err)
					}
					cs = append(cs, c)
				}
				mustWithin(t, 10*time.Second, "a write after three Submits not yet waited for", func() error { return write(db, 0) })
				for i, c := range cs {
					mustWithin(t, 10*time.Second, fmt.Sprintf("Wait %d", i), c.Wait)
				}
				for i := range 3 {
					if _, err := db.Get("a", fmt.Appendf(nil, "s%d", i)); err != nil {
						t.Fatalf("s%d: %v", i, err)
					}
				}
				if _, err := db.Get("b", []byte("k0")); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// Many goroutines, each submitting a few transactions, writing in between,
// and waiting for its Commits late and in any order, some from other
// goroutines: every write completes, and every Commit's outcome is nil
// and its write there.
func TestSubmit_ManyWritersWaitingLateAndInAnyOrder(t *testing.T) {
	for _, groupOps := range []int{0, 2} {
		t.Run(fmt.Sprint("group-ops=", groupOps), func(t *testing.T) {
			db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), CommitGroupOps: groupOps})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			const writers, rounds = 8, 60
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for r := range rounds {
						var cs []*kdb.Commit
						for i := range 1 + rng.IntN(3) {
							k := fmt.Appendf(nil, "w%d-r%d-%d", w, r, i)
							c, err := db.Submit(func(tx *kdb.Txn) error { return tx.Put("s", k, k) })
							if err != nil {
								errs <- err
								return
							}
							cs = append(cs, c)
						}
						if rng.IntN(2) == 0 {
							if err := db.Put("p", fmt.Appendf(nil, "w%d-r%d", w, r), []byte("v")); err != nil {
								errs <- err
								return
							}
						}
						rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
						var cw sync.WaitGroup
						for i, c := range cs {
							if i%2 == 1 {
								cw.Add(1)
								go func() {
									defer cw.Done()
									if err := c.Wait(); err != nil {
										errs <- err
									}
								}()
							} else if err := c.Wait(); err != nil {
								errs <- err
								return
							}
						}
						cw.Wait()
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("writers still running after 60 s")
			}
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var n uint64
			err = db.View(func(s *kdb.Snapshot) error {
				var err error
				n, err = s.Len("s")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if n < uint64(writers*rounds) {
				t.Fatalf("%d submitted keys, want at least %d", n, writers*rounds)
			}
		})
	}
}

// Sync and Checkpoint wait for the deferred transactions before them. One
// that joined a Submit (or was queued before it) used to count as pending
// until its done ran, which only the Commit's Wait does: a goroutine that
// deferred, submitted, then synced before its Wait waited for itself for
// ever (an outside tester, 2026-12-07). Now the count drops once the batch
// is applied, by whichever writer leads it.
func TestSubmit_SyncBeforeWaitOfACommitHostingDeferred(t *testing.T) {
	for _, c := range []struct{ name, ns string }{{"folded", ""}, {"other-namespace", "other"}} {
		for _, call := range []string{"sync", "checkpoint"} {
			t.Run(c.name+"/"+call, func(t *testing.T) {
				db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem(), SyncInterval: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				done := make(chan error, 1)
				if err := db.Defer(func(tx *kdb.Txn) error { return tx.Put("d", []byte("k"), []byte("v")) },
					func(err error) { done <- err }); err != nil {
					t.Fatal(err)
				}
				submit := db.Submit
				if c.ns != "" {
					ns, err := db.Namespace(c.ns)
					if err != nil {
						t.Fatal(err)
					}
					submit = ns.Submit
				}
				cm, err := submit(func(tx *kdb.Txn) error { return tx.Put("s", []byte("k"), []byte("v")) })
				if err != nil {
					t.Fatal(err)
				}
				what := map[string]func() error{"sync": db.Sync, "checkpoint": db.Checkpoint}[call]
				mustWithin(t, 10*time.Second, call+" before the Wait of a Submit hosting a deferred transaction", what)
				mustWithin(t, 10*time.Second, "Wait", cm.Wait)
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the deferred transaction's done never ran")
				}
				if _, err := db.Get("d", []byte("k")); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
