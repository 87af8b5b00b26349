package index

import (
	"errors"

	"github.com/kdb-project/kdb/pagefile"
)

// Cursor iterates over a tree's keys in order, forward and backward. Its
// keys and values are valid only until the transaction ends; inline ones are
// read-only slices of pages. A Cursor must not be used after the tree is
// modified without a new First, Last or Seek.
type Cursor struct {
	tx    *Tx
	t     *Tree           // nil for a catalog cursor
	root  pagefile.PageID // root when t is nil
	stack []frame
	err   error
}

// frame is one node on the cursor's path and the index taken in it.
type frame struct {
	r ref
	i int
}

// Err returns the first error the cursor met (a closed transaction, a
// dropped tree, a corrupt page). A cursor that met an error stays exhausted.
func (c *Cursor) Err() error { return c.err }

// First moves to the smallest key.
func (c *Cursor) First() (key, value []byte, ok bool) { return c.first(true) }

// Last moves to the largest key.
func (c *Cursor) Last() (key, value []byte, ok bool) {
	c.stack = c.stack[:0]
	root, ok := c.start()
	if !ok || !c.descend(root, true) {
		return nil, nil, false
	}
	return c.settle(true, -1)
}

// Seek moves to the smallest key >= key.
func (c *Cursor) Seek(key []byte) (k, value []byte, ok bool) {
	c.stack = c.stack[:0]
	id, ok := c.start()
	if !ok {
		return nil, nil, false
	}
	for {
		if len(c.stack) >= maxDepth {
			c.fail(corruptf(id, "tree deeper than %d levels", maxDepth))
			return nil, nil, false
		}
		r, err := c.tx.ref(id)
		if err != nil {
			c.fail(err)
			return nil, nil, false
		}
		if r.leaf() {
			i, _, err := r.searchLeaf(key)
			if err != nil {
				c.fail(err)
				return nil, nil, false
			}
			c.stack = append(c.stack, frame{r: r, i: i})
			return c.settle(true, +1)
		}
		ci, err := r.searchBranch(key)
		if err == nil {
			id, err = r.child(ci)
		}
		if err != nil {
			c.fail(err)
			return nil, nil, false
		}
		c.stack = append(c.stack, frame{r: r, i: ci})
	}
}

// Next moves to the next key. After the last key (or before any positioning)
// it returns ok false.
func (c *Cursor) Next() (key, value []byte, ok bool) { return c.next(true) }

// Prev moves to the previous key.
func (c *Cursor) Prev() (key, value []byte, ok bool) {
	if len(c.stack) == 0 || !c.usable() {
		return nil, nil, false
	}
	c.stack[len(c.stack)-1].i--
	return c.settle(true, -1)
}

func (c *Cursor) first(vals bool) ([]byte, []byte, bool) {
	c.stack = c.stack[:0]
	root, ok := c.start()
	if !ok || !c.descend(root, false) {
		return nil, nil, false
	}
	return c.settle(vals, +1)
}

func (c *Cursor) next(vals bool) ([]byte, []byte, bool) {
	if len(c.stack) == 0 || !c.usable() {
		return nil, nil, false
	}
	c.stack[len(c.stack)-1].i++
	return c.settle(vals, +1)
}

func (c *Cursor) fail(err error) {
	c.err = err
	c.stack = c.stack[:0]
	if !errors.Is(err, ErrTxClosed) && !errors.Is(err, ErrTreeDropped) {
		c.tx.fail(err)
	}
}

func (c *Cursor) usable() bool {
	if c.err != nil {
		return false
	}
	var err error
	if c.t != nil {
		err = c.t.usable(false)
	} else {
		err = c.tx.usable(false)
	}
	if err != nil {
		c.fail(err)
		return false
	}
	return true
}

// start returns the root to descend from; ok false if there is none.
func (c *Cursor) start() (pagefile.PageID, bool) {
	if !c.usable() {
		return 0, false
	}
	root := c.root
	if c.t != nil {
		root = c.t.root
	}
	return root, root != 0
}

// descend pushes the path from id to its first (or last) leaf.
func (c *Cursor) descend(id pagefile.PageID, last bool) bool {
	for {
		if len(c.stack) >= maxDepth {
			c.fail(corruptf(id, "tree deeper than %d levels", maxDepth))
			return false
		}
		r, err := c.tx.ref(id)
		if err != nil {
			c.fail(err)
			return false
		}
		i := 0
		if last {
			i = r.cnt - 1
		}
		c.stack = append(c.stack, frame{r: r, i: i})
		if r.leaf() {
			return true
		}
		if id, err = r.child(i); err != nil {
			c.fail(err)
			return false
		}
	}
}

// settle moves from the leaf position on top of the stack, if it is outside
// its leaf, to the nearest key in direction dir, and returns the entry there.
func (c *Cursor) settle(vals bool, dir int) ([]byte, []byte, bool) {
	for {
		top := &c.stack[len(c.stack)-1]
		if top.i >= 0 && top.i < top.r.cnt {
			return c.current(vals)
		}
		// Leave the leaf: find the nearest ancestor with a sibling in dir.
		c.stack = c.stack[:len(c.stack)-1]
		for {
			if len(c.stack) == 0 {
				return nil, nil, false
			}
			p := &c.stack[len(c.stack)-1]
			p.i += dir
			if p.i >= 0 && p.i < p.r.cnt {
				break
			}
			c.stack = c.stack[:len(c.stack)-1]
		}
		p := c.stack[len(c.stack)-1]
		id, err := p.r.child(p.i)
		if err != nil {
			c.fail(err)
			return nil, nil, false
		}
		if !c.descend(id, dir < 0) {
			return nil, nil, false
		}
	}
}

func (c *Cursor) current(vals bool) ([]byte, []byte, bool) {
	top := &c.stack[len(c.stack)-1]
	k, err := top.r.key(top.i)
	if err != nil {
		c.fail(err)
		return nil, nil, false
	}
	if !vals {
		return k, nil, true
	}
	v, ovf, vlen, err := top.r.value(top.i)
	if err == nil && ovf != 0 {
		v, err = c.tx.s.readChain(ovf, pageOverflow, uint64(vlen))
	}
	if err != nil {
		c.fail(err)
		return nil, nil, false
	}
	return k, v, true
}
