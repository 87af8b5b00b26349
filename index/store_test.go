package index

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestStore_PutGetDeleteReopen(t *testing.T) {
	e := newMemEnv(t, 4096)
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("a"))
		if err != nil {
			return err
		}
		for i := range 1000 {
			if err := tr.Put(fmt.Appendf(nil, "k%05d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	e.update(func(tx *Tx) error {
		tr := tx.Tree([]byte("a"))
		for i := 0; i < 1000; i += 2 {
			if ok, err := tr.Delete(fmt.Appendf(nil, "k%05d", i)); err != nil || !ok {
				return fmt.Errorf("delete %d: %v %v", i, ok, err)
			}
		}
		return nil
	})
	want := model{"a": {}}
	for i := 1; i < 1000; i += 2 {
		want["a"][fmt.Sprintf("k%05d", i)] = fmt.Sprintf("v%d", i)
	}
	if err := compare(e.s, want); err != nil {
		t.Fatal(err)
	}
	rep := e.check()
	if rep.Keys != 500 || rep.Trees != 1 {
		t.Fatalf("report %+v", rep)
	}
	e.checkpoint()
	e.reopen()
	if err := compare(e.s, want); err != nil {
		t.Fatal(err)
	}
	e.check()
}

func TestStore_RollbackAppliesNothing(t *testing.T) {
	e := newMemEnv(t, 512)
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("a"))
		if err != nil {
			return err
		}
		return tr.Put([]byte("x"), []byte("1"))
	})
	before := e.check()
	err := e.s.Update(func(tx *Tx) error {
		tr := tx.Tree([]byte("a"))
		for i := range 300 {
			if err := tr.Put(fmt.Appendf(nil, "k%d", i), bytes.Repeat([]byte{'v'}, i*3)); err != nil {
				return err
			}
		}
		if _, err := tr.Delete([]byte("x")); err != nil {
			return err
		}
		if _, err := tx.CreateTree([]byte("b")); err != nil {
			return err
		}
		if err := tx.DropTree([]byte("a")); err != nil {
			return err
		}
		return errTestRollback
	})
	if !errors.Is(err, errTestRollback) {
		t.Fatalf("Update = %v", err)
	}
	if err := compare(e.s, model{"a": {"x": "1"}}); err != nil {
		t.Fatal(err)
	}
	after := e.check()
	if after.ReachablePages != before.ReachablePages || after.Keys != before.Keys {
		t.Fatalf("after rollback %+v, before %+v", after, before)
	}
	if st := e.s.Stats(); st.Rollbacks != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStore_PanicRollsBack(t *testing.T) {
	e := newMemEnv(t, 512)
	func() {
		defer func() { _ = recover() }()
		_ = e.s.Update(func(tx *Tx) error {
			if _, err := tx.CreateTree([]byte("a")); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if err := compare(e.s, model{}); err != nil {
		t.Fatal(err)
	}
	e.check()
}

func TestTx_CreateDropTrees(t *testing.T) {
	e := newMemEnv(t, 512)
	e.update(func(tx *Tx) error {
		for _, n := range []string{"b", "a", "c"} {
			tr, err := tx.CreateTree([]byte(n))
			if err != nil {
				return err
			}
			for i := range 200 {
				if err := tr.Put(fmt.Appendf(nil, "%s%04d", n, i), bytes.Repeat([]byte(n), 200)); err != nil {
					return err
				}
			}
		}
		if _, err := tx.CreateTree([]byte("a")); !errors.Is(err, ErrExists) {
			return fmt.Errorf("CreateTree twice: %v", err)
		}
		return nil
	})
	full := e.check()
	e.update(func(tx *Tx) error {
		if err := tx.DropTree([]byte("b")); err != nil {
			return err
		}
		if err := tx.DropTree([]byte("b")); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("DropTree twice: %v", err)
		}
		return nil
	})
	dropped := e.check()
	if dropped.Trees != 2 || dropped.Keys != 400 {
		t.Fatalf("after drop: %+v", dropped)
	}
	if dropped.ReachablePages >= full.ReachablePages || dropped.FreePages+dropped.PendingPages <= full.FreePages {
		t.Fatalf("drop gave back no pages: before %+v after %+v", full, dropped)
	}
	var names [][]byte
	e.view(func(tx *Tx) error {
		var err error
		names, err = tx.Trees()
		return err
	})
	if fmt.Sprintf("%s", names) != "[a c]" {
		t.Fatalf("Trees = %s", names)
	}
}

func TestTree_Limits(t *testing.T) {
	e := newMemEnv(t, 4096)
	if e.s.MaxKeySize() != 998 {
		// FORMAT.md §3.3 documents 998 bytes for 4 KiB pages (4064-byte payload).
		t.Fatalf("MaxKeySize = %d", e.s.MaxKeySize())
	}
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("t"))
		if err != nil {
			return err
		}
		if err := tr.Put(make([]byte, e.s.MaxKeySize()+1), nil); !errors.Is(err, ErrKeyTooLarge) {
			return fmt.Errorf("long key: %v", err)
		}
		if err := tr.Put([]byte("k"), make([]byte, MaxValueSize+1)); !errors.Is(err, ErrValueTooLarge) {
			return fmt.Errorf("long value: %v", err)
		}
		if _, err := tx.CreateTree(nil); !errors.Is(err, ErrKeyTooLarge) {
			return fmt.Errorf("empty name: %v", err)
		}
		if _, err := tx.CreateTree(make([]byte, e.s.MaxKeySize()-7)); !errors.Is(err, ErrKeyTooLarge) {
			return fmt.Errorf("long name: %v", err)
		}
		if _, err := tx.CreateTree(bytes.Repeat([]byte{'n'}, e.s.MaxKeySize()-8)); err != nil {
			return fmt.Errorf("longest name: %v", err)
		}
		if err := tr.Put(bytes.Repeat([]byte{'k'}, e.s.MaxKeySize()), bytes.Repeat([]byte{'v'}, 100000)); err != nil {
			return err
		}
		return tr.Put(nil, []byte("empty key"))
	})
	e.checkpoint()
	e.reopen()
	if err := compare(e.s, model{string(bytes.Repeat([]byte{'n'}, 990)): {}, "t": {
		string(bytes.Repeat([]byte{'k'}, 998)): string(bytes.Repeat([]byte{'v'}, 100000)),
		"":                                     "empty key",
	}}); err != nil {
		t.Fatal(err)
	}
	if rep := e.check(); rep.OverflowPages == 0 {
		t.Fatalf("no overflow pages: %+v", rep)
	}
	e.view(func(tx *Tx) error {
		if err := tx.Tree([]byte("t")).Put([]byte("a"), nil); !errors.Is(err, ErrTxReadOnly) {
			return fmt.Errorf("Put in View: %v", err)
		}
		return nil
	})
}

func TestTx_UseAfterEnd(t *testing.T) {
	e := newMemEnv(t, 512)
	var tr *Tree
	e.update(func(tx *Tx) error {
		var err error
		tr, err = tx.CreateTree([]byte("t"))
		return err
	})
	if err := tr.Put([]byte("a"), nil); !errors.Is(err, ErrTxClosed) {
		t.Fatalf("Put after Update: %v", err)
	}
	if _, _, err := tr.Get([]byte("a")); !errors.Is(err, ErrTxClosed) {
		t.Fatalf("Get after Update: %v", err)
	}
}

func TestCursor_SeekAndBothDirections(t *testing.T) {
	e := newMemEnv(t, 512)
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("t"))
		if err != nil {
			return err
		}
		for i := 0; i < 2000; i += 2 {
			if err := tr.Put(fmt.Appendf(nil, "%05d", i), nil); err != nil {
				return err
			}
		}
		return nil
	})
	e.view(func(tx *Tx) error {
		c := tx.Tree([]byte("t")).Cursor()
		tests := []struct {
			seek, want string
			ok         bool
		}{
			{"", "00000", true},
			{"00000", "00000", true},
			{"00001", "00002", true},
			{"01001", "01002", true},
			{"01998", "01998", true},
			{"01999", "", false},
			{"9", "", false},
		}
		for _, tc := range tests {
			k, _, ok := c.Seek([]byte(tc.seek))
			if ok != tc.ok || string(k) != tc.want {
				return fmt.Errorf("Seek(%q) = %q %v, want %q %v", tc.seek, k, ok, tc.want, tc.ok)
			}
		}
		k, _, _ := c.Seek([]byte("01001"))
		for i := 1002; i < 1010; i += 2 {
			if string(k) != fmt.Sprintf("%05d", i) {
				return fmt.Errorf("at %d: %q", i, k)
			}
			k, _, _ = c.Next()
		}
		k, _, _ = c.Seek([]byte("01001"))
		for i := 1002; i > 990; i -= 2 {
			if string(k) != fmt.Sprintf("%05d", i) {
				return fmt.Errorf("backward at %d: %q", i, k)
			}
			k, _, _ = c.Prev()
		}
		if k, _, ok := c.Last(); !ok || string(k) != "01998" {
			return fmt.Errorf("Last = %q", k)
		}
		if _, _, ok := c.Next(); ok {
			return fmt.Errorf("Next after Last")
		}
		return c.Err()
	})
}

// TestTree_DeleteGivesPagesBack: deleting most keys merges nodes and frees
// their pages; deleting all leaves the tree without pages.
func TestTree_DeleteGivesPagesBack(t *testing.T) {
	e := newMemEnv(t, 512)
	const n = 5000
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("t"))
		if err != nil {
			return err
		}
		for i := range n {
			if err := tr.Put(fmt.Appendf(nil, "key%06d", i*7919%n), []byte("value-value")); err != nil {
				return err
			}
		}
		return nil
	})
	full := e.check()
	if full.LeafFill < 0.5 {
		t.Fatalf("after random inserts: leaf fill %.2f", full.LeafFill)
	}
	e.update(func(tx *Tx) error {
		tr := tx.Tree([]byte("t"))
		for i := range n {
			if i%50 == 0 {
				continue
			}
			if ok, err := tr.Delete(fmt.Appendf(nil, "key%06d", i)); err != nil || !ok {
				return fmt.Errorf("delete %d: %v %v", i, ok, err)
			}
		}
		return nil
	})
	thin := e.check()
	t.Logf("full: %d pages, leaf fill %.2f; 2%% left: %d pages, leaf fill %.2f", full.ReachablePages, full.LeafFill, thin.ReachablePages, thin.LeafFill)
	if thin.Keys != n/50 || thin.ReachablePages > full.ReachablePages/10 || thin.LeafFill < 0.25 {
		t.Fatalf("after deleting 98%%: %+v (full: %+v)", thin, full)
	}
	e.update(func(tx *Tx) error {
		tr := tx.Tree([]byte("t"))
		for i := 0; i < n; i += 50 {
			if ok, err := tr.Delete(fmt.Appendf(nil, "key%06d", i)); err != nil || !ok {
				return fmt.Errorf("delete %d: %v %v", i, ok, err)
			}
		}
		if tr.root != 0 || tr.Len() != 0 {
			return fmt.Errorf("empty tree: root %v, Len %d", tr.root, tr.Len())
		}
		return nil
	})
	empty := e.check()
	if empty.ReachablePages != 1 || empty.LeafPages != 1 { // the catalog leaf
		t.Fatalf("after deleting all: %+v", empty)
	}
}

// TestTx_ManyTrees opens more trees in one Update than the linear handle
// search covers, drops and re-creates some, and checks the result.
func TestTx_ManyTrees(t *testing.T) {
	e := newMemEnv(t, 512)
	want := model{}
	e.update(func(tx *Tx) error {
		for i := range 30 {
			name := fmt.Sprintf("tree%02d", i)
			tr, err := tx.CreateTree([]byte(name))
			if err != nil {
				return err
			}
			want[name] = map[string]string{}
			for j := range i {
				k, v := fmt.Sprintf("k%d", j), fmt.Sprintf("v%d-%d", i, j)
				if err := tr.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
				want[name][k] = v
			}
		}
		for i := 0; i < 30; i += 3 {
			name := fmt.Sprintf("tree%02d", i)
			if err := tx.DropTree([]byte(name)); err != nil {
				return err
			}
			delete(want, name)
			if i%2 == 0 {
				tr, err := tx.CreateTree([]byte(name))
				if err != nil {
					return err
				}
				if err := tr.Put([]byte("again"), []byte(name)); err != nil {
					return err
				}
				want[name] = map[string]string{"again": name}
			}
		}
		return compareTx(tx, want)
	})
	if err := compare(e.s, want); err != nil {
		t.Fatal(err)
	}
	if rep := e.check(); rep.Trees != len(want) {
		t.Fatalf("report %+v", rep)
	}
}
