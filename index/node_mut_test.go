package index

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
)

// TestNode_DecodeRejectsSubtleDamage guards the checks of decodeNode that
// TestNode_DecodeRejectsDamage does not reach: equal neighbouring keys (the
// order check must be strict: a duplicate key makes Get and cursors see two
// values for one key), equal separators in a branch, a leaf cell whose
// overflow reference names page 0 and a branch cell whose child is page 0
// (page 0 is the file header: following either would read the header as a
// node or chain), and an overflow cell whose value length is above
// MaxValueSize (decodeNode is what Check and the writer trust: a length no
// Put can store means the cell is damaged).
func TestNode_DecodeRejectsSubtleDamage(t *testing.T) {
	le := binary.LittleEndian
	cellOff := func(b []byte, i int) int { return int(le.Uint16(b[nodeHeaderSize+i*slotSize:])) }
	tests := []struct {
		name string
		typ  pagefile.PageType
		enc  func() []byte
	}{
		{"duplicate leaf keys", pageLeaf, func() []byte {
			n := &node{leaf: true, ents: []entry{{key: []byte("a"), val: []byte("1")}, {key: []byte("b"), val: []byte("2")}, {key: []byte("b"), val: []byte("3")}}}
			return n.encode(make([]byte, 128))
		}},
		{"duplicate branch separators", pageBranch, func() []byte {
			n := &node{ents: []entry{{child: 3}, {key: []byte("k"), child: 4}, {key: []byte("k"), child: 5}}}
			return n.encode(make([]byte, 128))
		}},
		{"overflow reference to page 0", pageLeaf, func() []byte {
			n := &node{leaf: true, ents: []entry{{key: []byte("a"), ovf: 9, vlen: 5000}}}
			b := n.encode(make([]byte, 128))
			le.PutUint64(b[len(b)-overflowRefSize:], 0)
			return b
		}},
		{"overflow value above the maximum", pageLeaf, func() []byte {
			n := &node{leaf: true, ents: []entry{{key: []byte("a"), ovf: 9, vlen: MaxValueSize + 1}}}
			return n.encode(make([]byte, 128))
		}},
		{"branch child page 0", pageBranch, func() []byte {
			n := &node{ents: []entry{{child: 3}, {key: []byte("k"), child: 4}}}
			b := n.encode(make([]byte, 128))
			le.PutUint64(b[cellOff(b, 1)+offBranchChild:], 0)
			return b
		}},
		{"first branch child page 0", pageBranch, func() []byte {
			n := &node{ents: []entry{{child: 3}, {key: []byte("k"), child: 4}}}
			b := n.encode(make([]byte, 128))
			le.PutUint64(b[cellOff(b, 0)+offBranchChild:], 0)
			return b
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := decodeNode(3, tc.typ, tc.enc())
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeNode = %+v, %v; want ErrCorrupt", n, err)
			}
		})
	}
	// The same shapes without the damage decode.
	ok := &node{ents: []entry{{child: 3}, {key: []byte("k"), child: 4}, {key: []byte("l"), child: 5}}}
	if _, err := decodeNode(3, pageBranch, ok.encode(make([]byte, 128))); err != nil {
		t.Fatalf("valid branch: %v", err)
	}
}

// TestNode_DamagedLengthsAreCorruptNotPanics guards the bounds checks of
// the page accessors on the length fields a damaged page can hold (a cell
// count, an inline value length, a separator length): each gives ErrCorrupt
// from decodeNode and from the accessors Get and cursors read pages with
// (tx.ref, key, value, child), never a slice beyond the payload. The pages
// decode except for one field, so no other check (key order, a cell offset)
// stops the reader before the bound.
func TestNode_DamagedLengthsAreCorruptNotPanics(t *testing.T) {
	le := binary.LittleEndian
	cellOff := func(b []byte, i int) int { return int(le.Uint16(b[nodeHeaderSize+i*slotSize:])) }
	leaf := func() []byte {
		n := &node{leaf: true, ents: []entry{{key: []byte("a"), val: []byte("1")}}}
		return n.encode(make([]byte, 64))
	}
	branch := func() []byte {
		n := &node{ents: []entry{{child: 3}, {key: []byte("k"), child: 4}}}
		return n.encode(make([]byte, 64))
	}
	tests := []struct {
		name string
		leaf bool
		page []byte
	}{
		{"cell count beyond the slot array", true, func() []byte {
			b := leaf()
			le.PutUint16(b[offNodeCount:], 6) // the slot of cell 5 would end past the payload
			return b
		}()},
		{"inline value length beyond payload", true, func() []byte {
			b := leaf()
			le.PutUint32(b[cellOff(b, 0)+offLeafValueLen:], 100)
			return b
		}()},
		{"separator length beyond payload", false, func() []byte {
			b := branch()
			le.PutUint16(b[cellOff(b, 1)+offBranchKeyLen:], 200)
			return b
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ := pageBranch
			if tc.leaf {
				typ = pageLeaf
			}
			if n, err := decodeNode(3, typ, tc.page); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeNode = %+v, %v; want ErrCorrupt", n, err)
			}
			pg := nodePage{id: 3, p: tc.page, leaf: tc.leaf}
			cnt, err := pg.count()
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("count: %v", err)
				}
				return
			}
			r := ref{pg: pg, cnt: cnt}
			bad := 0
			for i := range cnt {
				_, kerr := r.key(i)
				var verr error
				if tc.leaf {
					_, _, _, verr = r.value(i)
				} else {
					_, verr = r.child(i)
				}
				for _, err := range []error{kerr, verr} {
					if err != nil && !errors.Is(err, ErrCorrupt) {
						t.Fatalf("cell %d: %v", i, err)
					}
					if err != nil {
						bad++
					}
				}
			}
			if bad == 0 {
				t.Fatalf("the accessors read all %d cells of the damaged page without an error", cnt)
			}
		})
	}
}

// TestTx_EmptyBranchPageIsCorrupt guards tx.ref's refusal of a branch page
// with no cells, the read path of Get, cursors and the writer's descent
// (decodeNode refuses it too, but Get does not decode). A branch's search
// takes child 0 even when there is none: it read the slot array past the
// payload (a panic), or, on a page with bytes after its header, a child
// pointer made of whatever they hold.
func TestTx_EmptyBranchPageIsCorrupt(t *testing.T) {
	e := fillEnv(t)
	root, _, _ := firstLeaf(t, e)
	empty := (&node{}).encode(make([]byte, nodeHeaderSize))
	if err := e.pf.Write(root, pageBranch, empty); err != nil {
		t.Fatal(err)
	}
	err := e.s.View(func(tx *Tx) error {
		_, _, err := tx.Tree([]byte("t")).Get([]byte("k0100"))
		return err
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "branch without children") {
		t.Fatalf("Get = %v, want ErrCorrupt naming a branch without children", err)
	}
	err = e.s.View(func(tx *Tx) error {
		c := tx.Tree([]byte("t")).Cursor()
		if k, _, ok := c.Last(); ok {
			t.Errorf("Last = %q on an empty branch", k)
		}
		return c.Err()
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("cursor = %v, want ErrCorrupt", err)
	}
}
