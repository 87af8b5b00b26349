package index

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
	"github.com/kdb-project/kdb/vfs"
	"github.com/kdb-project/kdb/vfs/errfs"
)

// TestStore_CheckpointIOErrorIsSticky injects EIO at every file operation
// of a checkpoint. The checkpoint returns the error; later Updates fail
// without changing what Views see; a reopen of a crash image finds the
// previous or the new checkpoint whole, and Check passes.
func TestStore_CheckpointIOErrorIsSticky(t *testing.T) {
	fill := func(s *Store, from, to int, m model) error {
		return s.Update(func(tx *Tx) error {
			tr := tx.Tree([]byte("t"))
			if tr == nil {
				var err error
				if tr, err = tx.CreateTree([]byte("t")); err != nil {
					return err
				}
				m["t"] = map[string]string{}
			}
			for i := from; i < to; i++ {
				k, v := fmt.Sprintf("k%04d", i%250), fmt.Sprintf("v%d", i)
				if err := tr.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
				m["t"][k] = v
			}
			return nil
		})
	}
	failures := 0
	for i := 1; ; i++ {
		mem := vfs.NewMem()
		efs := errfs.Wrap(mem)
		pf, _, err := pagefile.Open("/db", pagefile.Options{FS: efs, PageSize: 512})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(pf, Options{})
		if err != nil {
			t.Fatal(err)
		}
		first := model{}
		if err := fill(s, 0, 300, first); err != nil {
			t.Fatal(err)
		}
		if err := s.Checkpoint(pagefile.MetaUpdate{ReplayOffset: 1}); err != nil {
			t.Fatal(err)
		}
		second := first.clone()
		if err := fill(s, 300, 600, second); err != nil {
			t.Fatal(err)
		}
		efs.AddRule(errfs.OnIndex(efs.Count()+i, errfs.ErrInjected))
		err = s.Checkpoint(pagefile.MetaUpdate{ReplayOffset: 2})
		if err == nil {
			_ = pf.Close()
			if failures == 0 {
				t.Fatal("no operation of the checkpoint failed")
			}
			t.Logf("%d failing operation indexes", failures)
			return
		}
		failures++
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("i=%d: Checkpoint = %v, want EIO", i, err)
		}
		if err := fill(s, 600, 610, second.clone()); err == nil {
			t.Fatalf("i=%d: Update after a failed checkpoint succeeded", i)
		}
		if err := s.Checkpoint(pagefile.MetaUpdate{}); err == nil {
			t.Fatalf("i=%d: second checkpoint after a failure succeeded", i)
		}
		if err := compare(s, second); err != nil {
			t.Fatalf("i=%d: View after failure: %v", i, err)
		}
		_ = pf.Close()

		pf2, _, err := pagefile.Open("/db", pagefile.Options{FS: mem.CrashClone(vfs.CrashOptions{})})
		if err != nil {
			t.Fatalf("i=%d: reopen: %v", i, err)
		}
		s2, err := Open(pf2, Options{})
		if err != nil {
			t.Fatalf("i=%d: index.Open: %v", i, err)
		}
		want := map[uint64]model{1: first, 2: second}[pf2.Meta().ReplayOffset]
		if want == nil {
			t.Fatalf("i=%d: reopened at checkpoint %d", i, pf2.Meta().ReplayOffset)
		}
		if err := compare(s2, want); err != nil {
			t.Fatalf("i=%d: after reopen at %d: %v", i, pf2.Meta().ReplayOffset, err)
		}
		if _, err := s2.Check(); err != nil {
			t.Fatalf("i=%d: Check: %v", i, err)
		}
		if err := pf2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTx_ReadErrorFailsTheTx fails the i-th page read of an Update whose
// function ignores every error. The Update must then fail and apply
// nothing (an operation that failed halfway must not be committed), and
// the store must stay whole.
func TestTx_ReadErrorFailsTheTx(t *testing.T) {
	// One rule, armed only during the Update under test: fail its target-th
	// read.
	var armed bool
	var reads, target int
	rule := func(op vfs.Op, _ string, _ int) error {
		if op != vfs.OpRead || !armed {
			return nil
		}
		if reads++; reads == target {
			return errfs.ErrInjected
		}
		return nil
	}
	efs := errfs.Wrap(vfs.NewMem(), rule)
	e := &env{t: t, fs: efs, dir: "/db", ps: 512}
	e.open()
	defer func() { _ = e.pf.Close() }()
	m := model{"t": {}, "u": {}}
	e.update(func(tx *Tx) error {
		for name := range m {
			tr, err := tx.CreateTree([]byte(name))
			if err != nil {
				return err
			}
			for i := range 200 {
				k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
				if err := tr.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
				m[name][k] = v
			}
		}
		return nil
	})
	failed := 0
	for i := 1; ; i++ {
		// Clean pages are read from the file (MemFS has no mmap), so each
		// Update reads the catalog and the paths it touches.
		e.checkpoint()
		e.reopen()
		next := m.clone()
		armed, reads, target = true, 0, i
		err := e.s.Update(func(tx *Tx) error {
			for round := range 3 {
				for _, name := range []string{"t", "u"} {
					tr := tx.Tree([]byte(name))
					if tr == nil {
						continue // a read error: Update must fail anyway
					}
					k := fmt.Sprintf("k%04d", (i*37+round*71)%250)
					if round == 1 {
						if ok, _ := tr.Delete([]byte(k)); ok {
							delete(next[name], k)
						}
						continue
					}
					v := fmt.Sprintf("new%d-%d", i, round)
					if tr.Put([]byte(k), []byte(v)) == nil {
						next[name][k] = v
					}
				}
			}
			return nil
		})
		armed = false
		if err == nil {
			m = next
		} else {
			failed++
			if !errors.Is(err, syscall.EIO) {
				t.Fatalf("i=%d: Update = %v, want EIO", i, err)
			}
		}
		if cerr := compare(e.s, m); cerr != nil {
			t.Fatalf("i=%d (Update: %v): %v", i, err, cerr)
		}
		e.check()
		if reads < i {
			if err != nil {
				t.Fatalf("i=%d: Update failed without an injected error: %v", i, err)
			}
			if failed == 0 {
				t.Fatal("no read failed")
			}
			t.Logf("%d failing read indexes", failed)
			return
		}
	}
}
