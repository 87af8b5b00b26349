package index

import (
	"fmt"
	"slices"

	"github.com/kdb-project/kdb/pagefile"
)

// The B-tree algorithms over a Tx's nodes: descent, insertion with
// splits, removal with merges, and freeing whole trees and overflow chains.

// maxDepth bounds every descent, so that a cycle of damaged pages gives
// ErrCorrupt instead of a loop. A tree of 4-cell nodes of this depth would
// hold 4^48 keys.
const maxDepth = 48

// find descends from root to the leaf that would hold key.
func (tx *Tx) find(root pagefile.PageID, key []byte) (r ref, i int, eq bool, err error) {
	id := root
	for d := 0; d < maxDepth; d++ {
		if r, err = tx.ref(id); err != nil {
			return r, 0, false, err
		}
		if r.leaf() {
			i, eq, err = r.searchLeaf(key)
			return r, i, eq, err
		}
		ci, err := r.searchBranch(key)
		if err != nil {
			return r, 0, false, err
		}
		if id, err = r.child(ci); err != nil {
			return r, 0, false, err
		}
	}
	return r, 0, false, corruptf(root, "tree deeper than %d levels", maxDepth)
}

// get returns the value stored under key in the tree at root.
func (tx *Tx) get(root pagefile.PageID, key []byte) ([]byte, bool, error) {
	if root == 0 {
		return nil, false, nil
	}
	r, i, eq, err := tx.find(root, key)
	if err != nil || !eq {
		return nil, false, err
	}
	val, ovf, vlen, err := r.value(i)
	if err != nil {
		return nil, false, err
	}
	if ovf != 0 {
		val, err = tx.s.readChain(ovf, pageOverflow, uint64(vlen))
		if err != nil {
			return nil, false, err
		}
	}
	return val, true, nil
}

// descend makes the path from root to the leaf for key writable. It returns
// the new root, the leaf, and leaves the branches in tx.path.
func (tx *Tx) descend(root pagefile.PageID, key []byte) (pagefile.PageID, *node, error) {
	tx.path = tx.path[:0]
	n, err := tx.writableNode(root)
	if err != nil {
		return 0, nil, err
	}
	root = n.id
	for !n.leaf {
		if len(tx.path) >= maxDepth {
			return 0, nil, corruptf(root, "tree deeper than %d levels", maxDepth)
		}
		r := ref{n: n, cnt: len(n.ents)}
		ci, _ := r.searchBranch(key)
		c, err := tx.writableNode(n.ents[ci].child)
		if err != nil {
			return 0, nil, err
		}
		n.ents[ci].child = c.id
		tx.path = append(tx.path, pathElem{n: n, idx: ci})
		n = c
	}
	return root, n, nil
}

// insert stores e in the tree at root and returns the new root and whether
// the key is new. An overwritten overflow value's chain is freed.
func (tx *Tx) insert(root pagefile.PageID, e entry) (pagefile.PageID, bool, error) {
	if root == 0 {
		n, err := tx.newNode(true)
		if err != nil {
			return 0, false, err
		}
		n.ents = append(n.ents, e)
		return n.id, true, nil
	}
	root, n, err := tx.descend(root, e.key)
	if err != nil {
		return 0, false, err
	}
	r := ref{n: n, cnt: len(n.ents)}
	i, eq, _ := r.searchLeaf(e.key)
	if eq {
		if old := n.ents[i]; old.ovf != 0 {
			if err := tx.freeChain(old.ovf, old.vlen); err != nil {
				return 0, false, err
			}
		}
		n.ents[i] = e
	} else {
		n.ents = append(n.ents, entry{})
		copy(n.ents[i+1:], n.ents[i:])
		n.ents[i] = e
	}
	for n.size() > tx.s.lim.payload {
		right, sep, err := tx.split(n)
		if err != nil {
			return 0, false, err
		}
		if len(tx.path) == 0 {
			nr, err := tx.newNode(false)
			if err != nil {
				return 0, false, err
			}
			nr.ents = append(nr.ents, entry{child: n.id}, entry{key: sep, child: right.id})
			root = nr.id
			break
		}
		pe := tx.path[len(tx.path)-1]
		tx.path = tx.path[:len(tx.path)-1]
		p := pe.n
		p.ents = append(p.ents, entry{})
		copy(p.ents[pe.idx+2:], p.ents[pe.idx+1:])
		p.ents[pe.idx+1] = entry{key: sep, child: right.id}
		n = p
	}
	return root, !eq, nil
}

// split moves the upper half (by bytes) of n to a new node and returns it
// with the separator for the parent.
func (tx *Tx) split(n *node) (*node, []byte, error) {
	half := n.size() / 2
	acc := nodeHeaderSize
	m := 0
	for ; m < len(n.ents); m++ {
		acc += n.ents[m].size(n.leaf)
		if acc > half {
			break
		}
	}
	m = max(1, min(m, len(n.ents)-1))
	tx.s.w.splits++
	right, err := tx.newNode(n.leaf)
	if err != nil {
		return nil, nil, err
	}
	right.ents = append(make([]entry, 0, len(n.ents)-m+8), n.ents[m:]...)
	sep := right.ents[0].key
	if !n.leaf {
		right.ents[0].key = nil
	}
	clear(n.ents[m:])
	n.ents = n.ents[:m]
	return right, sep, nil
}

// remove deletes key, which must be present, from the tree at root and
// returns the new root (0 when the tree becomes empty).
func (tx *Tx) remove(root pagefile.PageID, key []byte) (pagefile.PageID, error) {
	root, n, err := tx.descend(root, key)
	if err != nil {
		return 0, err
	}
	r := ref{n: n, cnt: len(n.ents)}
	i, eq, _ := r.searchLeaf(key)
	if !eq {
		return 0, fmt.Errorf("index: remove of absent key %q", key) // programmer error: callers probe first
	}
	if old := n.ents[i]; old.ovf != 0 {
		if err := tx.freeChain(old.ovf, old.vlen); err != nil {
			return 0, err
		}
	}
	n.ents = slices.Delete(n.ents, i, i+1)
	for len(tx.path) > 0 {
		if len(n.ents) > 0 && n.size() >= tx.s.lim.minFill {
			break
		}
		pe := tx.path[len(tx.path)-1]
		tx.path = tx.path[:len(tx.path)-1]
		merged, err := tx.merge(pe.n, pe.idx)
		if err != nil {
			return 0, err
		}
		if !merged {
			break
		}
		n = pe.n
	}
	// Collapse a root with one child, and drop an empty root leaf.
	for d := 0; d < maxDepth; d++ {
		r, err := tx.ref(root)
		if err != nil {
			return 0, err
		}
		if r.leaf() {
			if r.cnt == 0 {
				if err := tx.freePage(root); err != nil {
					return 0, err
				}
				root = 0
			}
			break
		}
		if r.cnt != 1 {
			break
		}
		c, err := r.child(0)
		if err != nil {
			return 0, err
		}
		if err := tx.freePage(root); err != nil {
			return 0, err
		}
		root = c
	}
	return root, nil
}

// merge merges the underfull child ci of p (this Update's node) with its left
// or else its right sibling, if the two fit one page. It reports whether it
// merged; p then has one child fewer.
func (tx *Tx) merge(p *node, ci int) (bool, error) {
	n := tx.dirty[p.ents[ci].child]
	fits := func(l, r *node, sep []byte) bool {
		s := l.size() + r.size() - nodeHeaderSize
		if !l.leaf {
			s += len(sep)
		}
		return s <= tx.s.lim.payload
	}
	join := func(l, r *node, sep []byte) {
		if l.leaf {
			tx.s.w.lmerges++
		} else {
			tx.s.w.bmerges++
		}
		first := len(l.ents)
		l.ents = append(l.ents, r.ents...)
		if !l.leaf {
			l.ents[first].key = sep
		}
	}
	if ci > 0 {
		left, mine, err := tx.peek(p.ents[ci-1].child)
		if err != nil {
			return false, err
		}
		if fits(left, n, p.ents[ci].key) {
			if !mine {
				if err := tx.cow(left); err != nil {
					return false, err
				}
				p.ents[ci-1].child = left.id
			}
			join(left, n, p.ents[ci].key)
			if err := tx.freePage(n.id); err != nil {
				return false, err
			}
			p.ents = slices.Delete(p.ents, ci, ci+1)
			return true, nil
		}
	}
	if ci+1 < len(p.ents) {
		right, _, err := tx.peek(p.ents[ci+1].child)
		if err != nil {
			return false, err
		}
		if fits(n, right, p.ents[ci+1].key) {
			join(n, right, p.ents[ci+1].key)
			if err := tx.freePage(right.id); err != nil {
				return false, err
			}
			p.ents = slices.Delete(p.ents, ci+1, ci+2)
			return true, nil
		}
	}
	return false, nil
}

// freeChain frees the pages of an overflow chain.
func (tx *Tx) freeChain(head pagefile.PageID, vlen uint32) error {
	var ids []pagefile.PageID
	err := tx.s.walkChain(head, pageOverflow, uint64(vlen), func(id pagefile.PageID, _ []byte) error {
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := tx.freePage(id); err != nil {
			return err
		}
	}
	return nil
}

// freeTree frees every page of the tree at root. seen guards against
// damaged pages that link a page twice.
func (tx *Tx) freeTree(root pagefile.PageID, depth int, seen map[pagefile.PageID]bool) error {
	if root == 0 {
		return nil
	}
	if depth > maxDepth {
		return corruptf(root, "tree deeper than %d levels", maxDepth)
	}
	if seen[root] {
		return corruptf(root, "page linked twice in one tree")
	}
	seen[root] = true
	n, _, err := tx.peek(root)
	if err != nil {
		return err
	}
	for i := range n.ents {
		e := &n.ents[i]
		if n.leaf {
			if e.ovf != 0 {
				if err := tx.freeChain(e.ovf, e.vlen); err != nil {
					return err
				}
			}
		} else if err := tx.freeTree(e.child, depth+1, seen); err != nil {
			return err
		}
	}
	return tx.freePage(root)
}
