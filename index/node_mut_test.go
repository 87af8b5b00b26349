package index

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kdb-project/kdb/pagefile"
)

// TestNode_DecodeRejectsSubtleDamage guards the checks of decodeNode that
// TestNode_DecodeRejectsDamage does not reach: equal neighbouring keys (the
// order check must be strict: a duplicate key makes Get and cursors see two
// values for one key), equal separators in a branch, a leaf cell whose
// overflow reference names page 0 and a branch cell whose child is page 0
// (page 0 is the file header: following either would read the header as a
// node or chain).
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
