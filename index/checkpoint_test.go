package index

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
)

// TestStore_CheckpointIODoesNotBlockViewsOrUpdates holds a checkpoint inside
// its first fsync and runs Views and an Update meanwhile. After the
// checkpoint completes and the store is reopened, it holds what was
// committed before the checkpoint began, and not the Update made during it.
func TestStore_CheckpointIODoesNotBlockViewsOrUpdates(t *testing.T) {
	mem := vfs.NewMem()
	var blocking atomic.Bool
	inSync := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fs := vfs.Intercept(mem, func(ev vfs.Event) error {
		if ev.Op == vfs.OpSync && blocking.Load() {
			once.Do(func() { close(inSync) })
			<-release
		}
		return nil
	})
	e := &env{t: t, fs: fs, dir: "/db", ps: 512}
	e.open()
	defer func() {
		if e.pf != nil {
			_ = e.pf.Close()
		}
	}()
	before := model{"t": {}}
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("t"))
		if err != nil {
			return err
		}
		for i := range 500 {
			k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
			if err := tr.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
			before["t"][k] = v
		}
		return nil
	})
	var releaseOnce sync.Once
	unblock := func() {
		blocking.Store(false)
		releaseOnce.Do(func() { close(release) })
	}
	defer unblock() // on failure, before Close
	blocking.Store(true)
	done := make(chan error, 1)
	go func() { done <- e.s.Checkpoint(pagefile.MetaUpdate{}) }()
	select {
	case <-inSync:
	case <-time.After(10 * time.Second):
		t.Fatal("checkpoint never reached fsync")
	}
	during := before.clone()
	finished := make(chan error, 1)
	go func() {
		finished <- func() error {
			if err := compare(e.s, before); err != nil {
				return err
			}
			err := e.s.Update(func(tx *Tx) error {
				tr := tx.Tree([]byte("t"))
				for i := range 300 {
					k := fmt.Sprintf("k%04d", i)
					if _, err := tr.Delete([]byte(k)); err != nil {
						return err
					}
					delete(during["t"], k)
				}
				return tr.Put([]byte("new"), []byte("during checkpoint"))
			})
			if err != nil {
				return err
			}
			during["t"]["new"] = "during checkpoint"
			return compare(e.s, during)
		}()
	}()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("View or Update blocked behind the checkpoint's I/O")
	}
	unblock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.check()
	e.reopen()
	if err := compare(e.s, before); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
	e.check()
}
