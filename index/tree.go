package index

import (
	"bytes"
	"fmt"

	"github.com/kdb-project/kdb/pagefile"
)

// Tree is a handle on one named tree within a Tx.
type Tree struct {
	tx      *Tx
	name    []byte
	root    pagefile.PageID
	count   uint64
	changed bool
	dropped bool
}

// Name returns the tree's name.
func (t *Tree) Name() []byte { return t.name }

func (t *Tree) usable(write bool) error {
	if err := t.tx.usable(write); err != nil {
		return err
	}
	if t.dropped {
		return ErrTreeDropped
	}
	return nil
}

// Len returns the number of keys in the tree, without a scan.
func (t *Tree) Len() uint64 { return t.count }

// Get returns the value stored under key. An inline value is a slice of the
// page (or of the Update's memory): read-only, and valid only until the
// transaction ends (copy it to keep it). A value in an overflow chain is
// returned in a new slice.
func (t *Tree) Get(key []byte) ([]byte, bool, error) {
	if err := t.usable(false); err != nil {
		return nil, false, err
	}
	v, ok, err := t.tx.get(t.root, key)
	return v, ok, t.tx.fail(err)
}

// Put stores value under key, replacing any previous value. Only in an
// Update. Keys longer than MaxKeySize give ErrKeyTooLarge and values longer
// than MaxValueSize ErrValueTooLarge. Put copies key and value.
func (t *Tree) Put(key, value []byte) error {
	if err := t.usable(true); err != nil {
		return err
	}
	lim := t.tx.s.lim
	if len(key) > lim.maxKey {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrKeyTooLarge, len(key), lim.maxKey)
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes (max %d)", ErrValueTooLarge, len(value), MaxValueSize)
	}
	tx := t.tx
	e := entry{key: bytes.Clone(key)}
	if e.key == nil {
		e.key = []byte{}
	}
	if lim.inline(len(key), len(value)) {
		e.val = append([]byte{}, value...)
	} else {
		head, _, err := tx.s.writeChainLocked(pageOverflow, value, tx.allocate)
		if err != nil {
			return tx.fail(err)
		}
		e.ovf, e.vlen = head, uint32(len(value))
	}
	root, added, err := tx.insert(t.root, e)
	if err != nil {
		return tx.fail(err)
	}
	t.root = root
	if added {
		t.count++
	}
	t.changed = true
	return nil
}

// Delete removes key and reports whether it was present. Only in an Update.
func (t *Tree) Delete(key []byte) (bool, error) {
	if err := t.usable(true); err != nil {
		return false, err
	}
	if t.root == 0 {
		return false, nil
	}
	_, _, eq, err := t.tx.find(t.root, key)
	if err != nil || !eq {
		return false, t.tx.fail(err)
	}
	root, err := t.tx.remove(t.root, key)
	if err != nil {
		return false, t.tx.fail(err)
	}
	t.root = root
	t.count--
	t.changed = true
	return true, nil
}

// Cursor returns a cursor over the tree, positioned nowhere: call First,
// Last or Seek. Modifying the tree invalidates its cursors' positions
// (Seek again).
func (t *Tree) Cursor() *Cursor {
	c := &Cursor{tx: t.tx, t: t}
	if err := t.usable(false); err != nil {
		c.err = err
	}
	return c
}
