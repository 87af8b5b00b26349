package index

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/internal/kdbtest"
	"github.com/kdb-project/kdb/pagefile"
)

// fillEnv builds a store with one tree "t" of 300 keys on 512-byte pages (a
// few levels) and checkpoints it.
func fillEnv(t *testing.T) *env {
	e := newMemEnv(t, 512)
	e.update(func(tx *Tx) error {
		tr, err := tx.CreateTree([]byte("t"))
		if err != nil {
			return err
		}
		for i := range 300 {
			if err := tr.Put(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "value-%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	e.checkpoint()
	return e
}

// firstLeaf returns the tree's root, its first child and that child's node.
func firstLeaf(t *testing.T, e *env) (root, child pagefile.PageID, n *node) {
	e.view(func(tx *Tx) error {
		root = tx.Tree([]byte("t")).root
		return nil
	})
	typ, p, err := e.pf.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	rn, err := decodeNode(root, typ, p)
	if err != nil || rn.leaf {
		t.Fatalf("root %v %v", rn, err)
	}
	child = rn.ents[0].child
	for {
		typ, p, err := e.pf.Read(child)
		if err != nil {
			t.Fatal(err)
		}
		if n, err = decodeNode(child, typ, p); err != nil {
			t.Fatal(err)
		}
		if n.leaf {
			return root, child, n
		}
		child = n.ents[0].child
	}
}

// TestStore_CheckFindsDamage damages a checkpointed store behind the index's
// back and expects Check to name the problem.
func TestStore_CheckFindsDamage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, e *env)
		want   string
	}{
		{"keys out of order", func(t *testing.T, e *env) {
			_, id, n := firstLeaf(t, e)
			n.ents[0], n.ents[1] = n.ents[1], n.ents[0]
			if err := e.pf.Write(id, pageLeaf, n.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
				t.Fatal(err)
			}
		}, "not above previous key"},
		{"key beyond parent bound", func(t *testing.T, e *env) {
			_, id, n := firstLeaf(t, e)
			n.ents[len(n.ents)-1].key = []byte("k9999")
			if err := e.pf.Write(id, pageLeaf, n.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
				t.Fatal(err)
			}
		}, "outside its parent's bounds"},
		{"count differs from catalog", func(t *testing.T, e *env) {
			_, id, n := firstLeaf(t, e)
			n.ents = n.ents[1:]
			if err := e.pf.Write(id, pageLeaf, n.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
				t.Fatal(err)
			}
		}, "catalog count 300 (in this catalog leaf), tree rooted at page"},
		{"leaked page", func(t *testing.T, e *env) {
			id, err := e.pf.Allocate()
			if err != nil {
				t.Fatal(err)
			}
			if err := e.pf.Write(id, pageLeaf, make([]byte, 8)); err != nil {
				t.Fatal(err)
			}
		}, "neither reachable nor free"},
		{"reachable page freed", func(t *testing.T, e *env) {
			_, id, _ := firstLeaf(t, e)
			if err := e.pf.Free(id); err != nil {
				t.Fatal(err)
			}
		}, "is not a B-tree node"},
		{"unequal leaf depth", func(t *testing.T, e *env) {
			root, leaf, _ := firstLeaf(t, e)
			typ, p, _ := e.pf.Read(root)
			rn, _ := decodeNode(root, typ, p)
			// Point the root's first child straight at a leaf.
			old := rn.ents[0].child
			rn.ents[0].child = leaf
			if err := e.pf.Write(root, pageBranch, rn.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
				t.Fatal(err)
			}
			_ = old
		}, "depth"},
		{"bad checksum on disk", func(t *testing.T, e *env) {
			_, id, _ := firstLeaf(t, e)
			// A later checkpoint that does not contain the leaf, so that
			// db.redo cannot repair it at reopen.
			e.update(func(tx *Tx) error {
				_, err := tx.CreateTree([]byte("other"))
				return err
			})
			e.checkpoint()
			e.close()
			if err := kdbtest.FlipBit(e.fs, "/db/db.data", int64(id)*512+100, 3); err != nil {
				t.Fatal(err)
			}
			e.open()
		}, "pagefile: corrupt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fillEnv(t)
			if rep := e.check(); rep.Depth < 3 || rep.Keys != 300 {
				t.Fatalf("store too small for the test: %+v", rep)
			}
			tc.damage(t, e)
			_, err := e.s.Check()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want ErrCorrupt mentioning %q", err, tc.want)
			}
		})
	}
}

func TestOpen_RejectsDamagedRootPage(t *testing.T) {
	tests := []struct {
		name   string
		damage func(b []byte) []byte
		want   error
	}{
		{"bad magic", func(b []byte) []byte { b[0] ^= 1; return b }, ErrCorrupt},
		{"future version", func(b []byte) []byte { b[offRootVersion] = 2; return b }, ErrVersionMismatch},
		{"short", func(b []byte) []byte { return b[:rootSize-1] }, ErrCorrupt},
		{"catalog beyond page count", func(b []byte) []byte { b[offRootCatalog+7] = 0x40; return b }, ErrCorrupt},
		{"pending count without chain", func(b []byte) []byte { b[offRootPendingCount] = 3; return b }, ErrCorrupt},
		// 2^61 IDs: the byte count wraps to 0, which an absent chain matches.
		{"pending count beyond page count", func(b []byte) []byte { b[offRootPendingCount+7] = 0x20; return b }, ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fillEnv(t)
			root := e.pf.Meta().Root
			_, p, err := e.pf.Read(root)
			if err != nil {
				t.Fatal(err)
			}
			b := tc.damage(append([]byte(nil), p...))
			if err := e.pf.Write(root, pageRoot, b); err != nil {
				t.Fatal(err)
			}
			if err := e.pf.Checkpoint(pagefile.MetaUpdate{Root: root}); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(e.pf, Options{}); !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
}
