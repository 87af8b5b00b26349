package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
)

// overflowChain stores a value of three chain pages under "big" in tree "t"
// of a fillEnv store, checkpointed, and returns the value and its chain's
// pages in order.
func overflowChain(t *testing.T, e *env) ([]byte, []pagefile.PageID) {
	t.Helper()
	val := bytes.Repeat([]byte("0123456789"), 130) // 1,300 bytes: three links of 512-byte pages
	e.update(func(tx *Tx) error {
		return tx.Tree([]byte("t")).Put([]byte("big"), val)
	})
	e.checkpoint()
	var ids []pagefile.PageID
	e.view(func(tx *Tx) error {
		r, i, eq, err := tx.find(tx.Tree([]byte("t")).root, []byte("big"))
		if err != nil || !eq {
			return fmt.Errorf("find big: %v %v", eq, err)
		}
		_, ovf, vlen, err := r.value(i)
		if err != nil || ovf == 0 {
			return fmt.Errorf("big is not in an overflow chain: %v %v", ovf, err)
		}
		return e.s.walkChain(ovf, pageOverflow, uint64(vlen), func(id pagefile.PageID, _ []byte) error {
			ids = append(ids, id)
			return nil
		})
	})
	if len(ids) != 3 {
		t.Fatalf("chain of %d pages, want 3", len(ids))
	}
	return val, ids
}

// TestStore_DamagedOverflowChainIsCorrupt guards walkChain's checks of each
// link, which no test reached: a link whose length field runs past its
// page's payload, a last link that names a next page, and a link of another
// page type. The pages are written through the page file (valid checksums),
// as a bug or a bad tool would leave them. Get and Check must report
// ErrCorrupt. Without the checks the first panics (a slice past the
// payload), and the other two read the value back as if nothing were wrong:
// a chain that runs on into a page another owner uses, or a page of the
// pending-free list read as part of a value, would never be noticed.
func TestStore_DamagedOverflowChainIsCorrupt(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, e *env, ids []pagefile.PageID)
		want   string
	}{
		{"link length past its payload", func(t *testing.T, e *env, ids []pagefile.PageID) {
			_, p, err := e.pf.Read(ids[0])
			if err != nil {
				t.Fatal(err)
			}
			// The header still says a full link; the payload holds 10 bytes.
			short := append([]byte(nil), p[:chainHeaderSize+10]...)
			if err := e.pf.Write(ids[0], pageOverflow, short); err != nil {
				t.Fatal(err)
			}
		}, "payload has room for 10"},
		{"last link names a next page", func(t *testing.T, e *env, ids []pagefile.PageID) {
			last := ids[len(ids)-1]
			_, p, err := e.pf.Read(last)
			if err != nil {
				t.Fatal(err)
			}
			b := append([]byte(nil), p...)
			binary.LittleEndian.PutUint64(b[offChainNext:], uint64(ids[0]))
			if err := e.pf.Write(last, pageOverflow, b); err != nil {
				t.Fatal(err)
			}
		}, "continues to"},
		{"link of another page type", func(t *testing.T, e *env, ids []pagefile.PageID) {
			_, p, err := e.pf.Read(ids[1])
			if err != nil {
				t.Fatal(err)
			}
			if err := e.pf.Write(ids[1], pagePending, append([]byte(nil), p...)); err != nil {
				t.Fatal(err)
			}
		}, "page type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := fillEnv(t)
			val, ids := overflowChain(t, e)
			e.view(func(tx *Tx) error {
				got, ok, err := tx.Tree([]byte("t")).Get([]byte("big"))
				if err != nil || !ok || !bytes.Equal(got, val) {
					t.Fatalf("Get before the damage = %d bytes, %v, %v", len(got), ok, err)
				}
				return nil
			})
			e.check()
			tc.damage(t, e, ids)
			err := e.s.View(func(tx *Tx) error {
				got, ok, err := tx.Tree([]byte("t")).Get([]byte("big"))
				if err == nil {
					t.Errorf("Get after the damage = %d bytes, %v, nil; want ErrCorrupt", len(got), ok)
				}
				return err
			})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("View = %v, want ErrCorrupt mentioning %q", err, tc.want)
			}
			if _, err := e.s.Check(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want ErrCorrupt mentioning %q", err, tc.want)
			}
		})
	}
}

// TestOpen_RejectsPendingEntryBeyondPageCount guards Open's bound on the
// page IDs of the pending-free list the last checkpoint stored (pages an
// Update replaced while a View read them). The first Update frees them:
// an entry past the page count, accepted at Open, made every Update of the
// store fail (the page file refuses to free it) instead of Open reporting
// the damage.
func TestOpen_RejectsPendingEntryBeyondPageCount(t *testing.T) {
	e := fillEnv(t)
	// A View running across an Update and a checkpoint leaves the pages
	// the Update replaced on the checkpoint's pending-free list.
	_, release := e.s.Pin()
	e.update(func(tx *Tx) error {
		return tx.Tree([]byte("t")).Put([]byte("k0000"), []byte("rewritten"))
	})
	e.checkpoint()
	release()
	chain := e.s.w.chain
	if len(chain) == 0 {
		t.Fatal("the checkpoint stored no pending-free list")
	}
	_, p, err := e.pf.Read(chain[0])
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte(nil), p...)
	binary.LittleEndian.PutUint64(b[chainHeaderSize:], uint64(e.pf.PageCount()+5))
	if err := e.pf.Write(chain[0], pagePending, b); err != nil {
		t.Fatal(err)
	}
	if err := e.pf.Checkpoint(pagefile.MetaUpdate{Root: e.pf.Meta().Root}); err != nil {
		t.Fatal(err)
	}
	_, err = Open(e.pf, Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "beyond page count") {
		t.Fatalf("Open = %v, want ErrCorrupt naming the pending-free entry beyond the page count", err)
	}
}

// TestTx_DropTreeOfAPageLinkedTwice guards freeTree's refusal of a page a
// damaged tree links twice (two children of the root naming one leaf).
// Freed twice, the leaf went twice on the pending-free list: the drop
// committed, and the next Update failed giving it back the second time
// (ErrDoubleFree), as would every Update after it. The drop must fail with
// ErrCorrupt and change nothing.
func TestTx_DropTreeOfAPageLinkedTwice(t *testing.T) {
	e := fillEnv(t)
	root, leaf, _ := firstLeaf(t, e)
	typ, p, err := e.pf.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	rn, err := decodeNode(root, typ, p)
	if err != nil {
		t.Fatal(err)
	}
	rn.ents[1].child = leaf
	if err := e.pf.Write(root, pageBranch, rn.encode(make([]byte, e.pf.PayloadSize()))); err != nil {
		t.Fatal(err)
	}
	err = e.s.Update(func(tx *Tx) error { return tx.DropTree([]byte("t")) })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "linked twice") {
		t.Fatalf("DropTree = %v, want ErrCorrupt naming a page linked twice", err)
	}
	e.update(func(tx *Tx) error {
		_, err := tx.CreateTree([]byte("other"))
		return err
	})
	e.view(func(tx *Tx) error {
		if tx.Tree([]byte("t")) == nil {
			t.Fatal("the failed drop removed the tree")
		}
		return nil
	})
}

// TestPin_ReleaseTwiceUnpinsOnce: a Pin's release called twice (a caller's
// bug an outside tester tried) leaves another reader's pin of the same
// state in place: the second call used to drop its count too, and the
// pages it reads could then be freed under it.
func TestPin_ReleaseTwiceUnpinsOnce(t *testing.T) {
	e := fillEnv(t)
	tx, release := e.s.Pin()
	_, other := e.s.Pin()
	defer other()
	release()
	release()
	e.s.mu.Lock()
	n := e.s.mu.readers[tx.Version()]
	e.s.mu.Unlock()
	if n != 1 {
		t.Fatalf("after one pin's release twice, %d readers of its version, want 1 (the other pin)", n)
	}
}
