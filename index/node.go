package index

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/pagefile"
)

// entry is one cell of a decoded node. In a leaf, val holds an inline value
// (ovf == 0) or ovf names the first overflow page of a value of vlen bytes.
// In a branch, child is the child page and key its lower bound; the key of
// entry 0 is always nil (the lower bound comes from the parent).
type entry struct {
	key   []byte
	val   []byte
	ovf   pagefile.PageID
	vlen  uint32
	child pagefile.PageID
}

// node is a decoded node that the writer mutates. Its byte slices may point
// into page payloads: those stay unchanged until the page is freed, which
// happens only after the Update that holds the node has committed.
type node struct {
	id   pagefile.PageID
	leaf bool
	ents []entry
}

func (e *entry) leafSize() int {
	if e.ovf != 0 {
		return slotSize + leafCellHeader + len(e.key) + overflowRefSize
	}
	return slotSize + leafCellHeader + len(e.key) + len(e.val)
}

func (e *entry) branchSize() int { return slotSize + branchCellHeader + len(e.key) }

func (e *entry) size(leaf bool) int {
	if leaf {
		return e.leafSize()
	}
	return e.branchSize()
}

// size returns the encoded size of n.
func (n *node) size() int {
	s := nodeHeaderSize
	for i := range n.ents {
		s += n.ents[i].size(n.leaf)
	}
	return s
}

func (n *node) typ() pagefile.PageType {
	if n.leaf {
		return pageLeaf
	}
	return pageBranch
}

// encode writes n into buf (at least n.size() bytes) and returns the
// encoded bytes, buf[:n.size()].
func (n *node) encode(buf []byte) []byte {
	le := binary.LittleEndian
	cnt := len(n.ents)
	le.PutUint16(buf[offNodeCount:], uint16(cnt))
	le.PutUint16(buf[offNodeFlags:], 0)
	off := nodeHeaderSize + cnt*slotSize
	for i := range n.ents {
		e := &n.ents[i]
		le.PutUint16(buf[nodeHeaderSize+i*slotSize:], uint16(off))
		if n.leaf {
			le.PutUint16(buf[off+offLeafKeyLen:], uint16(len(e.key)))
			if e.ovf != 0 {
				buf[off+offLeafKind] = valueOverflow
				le.PutUint32(buf[off+offLeafValueLen:], e.vlen)
				off += leafCellHeader
				off += copy(buf[off:], e.key)
				le.PutUint64(buf[off:], uint64(e.ovf))
				off += overflowRefSize
			} else {
				buf[off+offLeafKind] = valueInline
				le.PutUint32(buf[off+offLeafValueLen:], uint32(len(e.val)))
				off += leafCellHeader
				off += copy(buf[off:], e.key)
				off += copy(buf[off:], e.val)
			}
		} else {
			le.PutUint64(buf[off+offBranchChild:], uint64(e.child))
			key := e.key
			if i == 0 {
				key = nil
			}
			le.PutUint16(buf[off+offBranchKeyLen:], uint16(len(key)))
			off += branchCellHeader
			off += copy(buf[off:], key)
		}
	}
	return buf[:off]
}

func corruptf(id pagefile.PageID, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, id, fmt.Sprintf(format, args...))
}

// decodeNode decodes and fully validates a node page. The entries' slices
// point into p. Key order is checked too.
func decodeNode(id pagefile.PageID, typ pagefile.PageType, p []byte) (*node, error) {
	if typ != pageLeaf && typ != pageBranch {
		return nil, corruptf(id, "page type %d is not a B-tree node", typ)
	}
	pg := nodePage{id: id, p: p, leaf: typ == pageLeaf}
	cnt, err := pg.count()
	if err != nil {
		return nil, err
	}
	n := &node{id: id, leaf: pg.leaf, ents: make([]entry, cnt, cnt+1)} // room for one insert
	for i := 0; i < cnt; i++ {
		e := &n.ents[i]
		if pg.leaf {
			k, kind, vlen, rest, err := pg.leafCell(i)
			if err != nil {
				return nil, err
			}
			e.key = k
			if kind == valueOverflow {
				e.ovf = pagefile.PageID(binary.LittleEndian.Uint64(rest))
				e.vlen = vlen
				if e.ovf == 0 {
					return nil, corruptf(id, "cell %d: overflow reference to page 0", i)
				}
			} else {
				e.val = rest
			}
		} else {
			k, child, err := pg.branchCell(i)
			if err != nil {
				return nil, err
			}
			if i == 0 {
				k = nil
			}
			e.key, e.child = k, child
			if child == 0 {
				return nil, corruptf(id, "cell %d: child page 0", i)
			}
		}
		if i > 0 && (pg.leaf || i > 1) && bytes.Compare(n.ents[i-1].key, e.key) >= 0 {
			return nil, corruptf(id, "cell %d: key %q not above previous key %q", i, e.key, n.ents[i-1].key)
		}
	}
	if !pg.leaf && cnt == 0 {
		return nil, corruptf(id, "branch without children")
	}
	// Cells that overlap (each within the payload, keys in order) decode to
	// a node larger than its page: the writer would re-encode it past its
	// page buffer. An encoded node takes exactly its size.
	if sz := n.size(); sz > len(p) {
		return nil, corruptf(id, "cells of %d bytes overlap in a payload of %d", sz, len(p))
	}
	return n, nil
}

// nodePage reads a node directly from its page payload, bounds-checking every
// access so that damaged bytes give ErrCorrupt, never a panic.
type nodePage struct {
	id   pagefile.PageID
	p    []byte
	leaf bool
}

func (pg nodePage) count() (int, error) {
	if len(pg.p) < nodeHeaderSize {
		return 0, corruptf(pg.id, "payload of %d bytes too short for a node header", len(pg.p))
	}
	cnt := int(binary.LittleEndian.Uint16(pg.p[offNodeCount:]))
	if nodeHeaderSize+cnt*slotSize > len(pg.p) {
		return 0, corruptf(pg.id, "cell count %d does not fit the page", cnt)
	}
	return cnt, nil
}

// cell returns the bytes from cell i to the end of the payload.
func (pg nodePage) cell(i int) ([]byte, error) {
	off := int(binary.LittleEndian.Uint16(pg.p[nodeHeaderSize+i*slotSize:]))
	if off >= len(pg.p) {
		return nil, corruptf(pg.id, "cell %d at offset %d beyond payload", i, off)
	}
	return pg.p[off:], nil
}

// leafCell returns cell i's key, value kind, value length and the bytes after
// the key: the inline value (exactly vlen bytes) or the 8-byte overflow ref.
// The caller must have checked i < count.
func (pg nodePage) leafCell(i int) (key []byte, kind uint8, vlen uint32, rest []byte, err error) {
	c, err := pg.cell(i)
	if err != nil {
		return nil, 0, 0, nil, err
	}
	if len(c) < leafCellHeader {
		return nil, 0, 0, nil, corruptf(pg.id, "leaf cell %d truncated", i)
	}
	klen := int(binary.LittleEndian.Uint16(c[offLeafKeyLen:]))
	kind = c[offLeafKind]
	vlen = binary.LittleEndian.Uint32(c[offLeafValueLen:])
	c = c[leafCellHeader:]
	var rlen int
	switch kind {
	case valueInline:
		rlen = int(vlen)
	case valueOverflow:
		rlen = overflowRefSize
		if vlen > MaxValueSize {
			return nil, 0, 0, nil, corruptf(pg.id, "leaf cell %d: value length %d above maximum", i, vlen)
		}
	default:
		return nil, 0, 0, nil, corruptf(pg.id, "leaf cell %d: unknown value kind %d", i, kind)
	}
	if klen > len(c) || rlen > len(c)-klen {
		return nil, 0, 0, nil, corruptf(pg.id, "leaf cell %d: key %d + value %d bytes beyond payload", i, klen, rlen)
	}
	return c[:klen:klen], kind, vlen, c[klen : klen+rlen : klen+rlen], nil
}

// leafKey returns the key of leaf cell i.
func (pg nodePage) leafKey(i int) ([]byte, error) {
	c, err := pg.cell(i)
	if err != nil {
		return nil, err
	}
	if len(c) < leafCellHeader {
		return nil, corruptf(pg.id, "leaf cell %d truncated", i)
	}
	klen := int(binary.LittleEndian.Uint16(c[offLeafKeyLen:]))
	if klen > len(c)-leafCellHeader {
		return nil, corruptf(pg.id, "leaf cell %d: key of %d bytes beyond payload", i, klen)
	}
	return c[leafCellHeader : leafCellHeader+klen : leafCellHeader+klen], nil
}

// branchCell returns branch cell i's separator key and child.
func (pg nodePage) branchCell(i int) ([]byte, pagefile.PageID, error) {
	c, err := pg.cell(i)
	if err != nil {
		return nil, 0, err
	}
	if len(c) < branchCellHeader {
		return nil, 0, corruptf(pg.id, "branch cell %d truncated", i)
	}
	child := pagefile.PageID(binary.LittleEndian.Uint64(c[offBranchChild:]))
	klen := int(binary.LittleEndian.Uint16(c[offBranchKeyLen:]))
	if klen > len(c)-branchCellHeader {
		return nil, 0, corruptf(pg.id, "branch cell %d: key of %d bytes beyond payload", i, klen)
	}
	return c[branchCellHeader : branchCellHeader+klen : branchCellHeader+klen], child, nil
}

// ref is a read-only view of a node: a page payload (n == nil) or a node the
// current Update has modified and not yet written.
type ref struct {
	pg  nodePage
	n   *node
	cnt int
}

func (r *ref) leaf() bool {
	if r.n != nil {
		return r.n.leaf
	}
	return r.pg.leaf
}

func (r *ref) key(i int) ([]byte, error) {
	if r.n != nil {
		return r.n.ents[i].key, nil
	}
	if r.pg.leaf {
		return r.pg.leafKey(i)
	}
	k, _, err := r.pg.branchCell(i)
	return k, err
}

func (r *ref) child(i int) (pagefile.PageID, error) {
	if r.n != nil {
		return r.n.ents[i].child, nil
	}
	_, c, err := r.pg.branchCell(i)
	if err == nil && c == 0 {
		err = corruptf(r.pg.id, "branch cell %d: child page 0", i)
	}
	return c, err
}

// value returns leaf cell i's value: inline bytes, or the first overflow page
// and total length.
func (r *ref) value(i int) (val []byte, ovf pagefile.PageID, vlen uint32, err error) {
	if r.n != nil {
		e := &r.n.ents[i]
		return e.val, e.ovf, e.vlen, nil
	}
	_, kind, vlen, rest, err := r.pg.leafCell(i)
	if err != nil {
		return nil, 0, 0, err
	}
	if kind == valueOverflow {
		ovf = pagefile.PageID(binary.LittleEndian.Uint64(rest))
		if ovf == 0 {
			return nil, 0, 0, corruptf(r.pg.id, "cell %d: overflow reference to page 0", i)
		}
		return nil, ovf, vlen, nil
	}
	return rest, 0, vlen, nil
}

// searchLeaf returns the first index whose key is >= key, and whether it is
// equal.
func (r *ref) searchLeaf(key []byte) (int, bool, error) {
	lo, hi := 0, r.cnt
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		k, err := r.key(m)
		if err != nil {
			return 0, false, err
		}
		if bytes.Compare(k, key) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < r.cnt {
		k, err := r.key(lo)
		if err != nil {
			return 0, false, err
		}
		return lo, bytes.Equal(k, key), nil
	}
	return lo, false, nil
}

// searchBranch returns the index of the child whose range holds key: the
// last i >= 1 whose separator is <= key, else 0.
func (r *ref) searchBranch(key []byte) (int, error) {
	lo, hi := 1, r.cnt // find first i in [1,cnt) with sep > key
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		k, err := r.key(m)
		if err != nil {
			return 0, err
		}
		if bytes.Compare(k, key) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1, nil
}
