package index

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb/pagefile"
)

// The catalog: the tree mapping each tree's name to its root page and key
// count (docs/FORMAT.md §3.7), and the Tx's handles on the trees it opened.

func encodeCatalogEntry(root pagefile.PageID, count uint64) []byte {
	b := make([]byte, catalogEntrySize)
	binary.LittleEndian.PutUint64(b[offCatalogRoot:], uint64(root))
	binary.LittleEndian.PutUint64(b[offCatalogCount:], count)
	return b
}

func (tx *Tx) putCatalog(t *Tree) error {
	root, _, err := tx.insert(tx.catalog, entry{key: t.name, val: encodeCatalogEntry(t.root, t.count)})
	if err != nil {
		return err
	}
	tx.catalog = root
	return nil
}

// lookupTree reads name's catalog entry.
func (tx *Tx) lookupTree(name []byte) (*Tree, error) {
	if t := tx.findTree(name); t != nil {
		if t.dropped {
			return nil, nil
		}
		return t, nil
	}
	// A View's catalog never changes: its entries are cached per snapshot
	// version, for the Views of the same version after it (the engine
	// opens trees in every View, and commits an Update only at a
	// checkpoint).
	var cache *catalogCache
	if !tx.writable {
		cache = tx.s.cat.Load()
		if cache == nil || cache.version < tx.version {
			cache = &catalogCache{version: tx.version, m: map[string]catalogEntry{}}
			tx.s.cat.Store(cache)
		} else if cache.version != tx.version {
			cache = nil // an older View than the cache's: it looks up
		}
	}
	if cache != nil {
		cache.mu.RLock()
		e, ok := cache.m[string(name)]
		cache.mu.RUnlock()
		if ok {
			if e.absent {
				return nil, nil
			}
			t := &Tree{tx: tx, name: bytes.Clone(name), root: e.root, count: e.count}
			tx.addTree(t)
			return t, nil
		}
	}
	v, ok, err := tx.get(tx.catalog, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		if cache != nil {
			cache.put(name, catalogEntry{absent: true})
		}
		return nil, nil
	}
	if len(v) != catalogEntrySize {
		return nil, fmt.Errorf("%w: catalog entry %q of %d bytes", ErrCorrupt, name, len(v))
	}
	root := pagefile.PageID(binary.LittleEndian.Uint64(v[offCatalogRoot:]))
	if root != 0 && (root < pagefile.FirstDataPage || root >= tx.s.pf.PageCount()) {
		return nil, fmt.Errorf("%w: catalog entry %q: root %s beyond page count", ErrCorrupt, name, root)
	}
	t := &Tree{tx: tx, name: bytes.Clone(name), root: root, count: binary.LittleEndian.Uint64(v[offCatalogCount:])}
	if cache != nil {
		cache.put(name, catalogEntry{root: root, count: t.count})
	}
	tx.addTree(t)
	return t, nil
}

// put records an entry, up to a bound (a store of many trees reads the
// rest from the catalog).
func (c *catalogCache) put(name []byte, e catalogEntry) {
	c.mu.Lock()
	if len(c.m) < 4096 {
		c.m[string(name)] = e
	}
	c.mu.Unlock()
}

// findTree returns the handle last opened or created for name in this Tx.
// A few handles are searched linearly (no map allocation for the common
// View of one tree); beyond linearTrees, a map indexes them.
func (tx *Tx) findTree(name []byte) *Tree {
	if tx.trees != nil {
		return tx.trees[string(name)]
	}
	for i := len(tx.order) - 1; i >= 0; i-- {
		if bytes.Equal(tx.order[i].name, name) {
			return tx.order[i]
		}
	}
	return nil
}

const linearTrees = 8

func (tx *Tx) addTree(t *Tree) {
	tx.order = append(tx.order, t)
	switch {
	case tx.trees != nil:
		tx.trees[string(t.name)] = t
	case len(tx.order) > linearTrees:
		tx.trees = make(map[string]*Tree, 2*len(tx.order))
		for _, o := range tx.order {
			tx.trees[string(o.name)] = o // later handles replace dropped ones
		}
	}
}

func (tx *Tx) checkName(name []byte) error {
	if max := tx.s.lim.maxName(); len(name) == 0 || len(name) > max {
		return fmt.Errorf("%w: tree name of %d bytes (1..%d)", ErrKeyTooLarge, len(name), max)
	}
	return nil
}

// Tree returns the tree called name, or nil if there is none. On an error
// reading the catalog it also returns nil, and the error fails the Tx: the
// Update is rolled back and View returns it (see Tx.Err). Use OpenTree to
// tell the two apart at once.
func (tx *Tx) Tree(name []byte) *Tree {
	if tx.closed {
		return nil
	}
	t, err := tx.lookupTree(name)
	if err != nil {
		tx.fail(err)
		return nil
	}
	return t
}

// OpenTree is Tree with the error: nil, nil if there is no such tree.
func (tx *Tx) OpenTree(name []byte) (*Tree, error) {
	if err := tx.usable(false); err != nil {
		return nil, err
	}
	t, err := tx.lookupTree(name)
	return t, tx.fail(err)
}

// CreateTree creates an empty tree called name. It returns ErrExists if the
// name is taken, ErrKeyTooLarge if name is empty or longer than
// MaxKeySize-8 (its catalog entry must fit a leaf cell inline).
func (tx *Tx) CreateTree(name []byte) (*Tree, error) {
	if err := tx.usable(true); err != nil {
		return nil, err
	}
	if err := tx.checkName(name); err != nil {
		return nil, err
	}
	t, err := tx.lookupTree(name)
	if err != nil {
		return nil, tx.fail(err)
	}
	if t != nil {
		return nil, fmt.Errorf("%w: %q", ErrExists, name)
	}
	t = &Tree{tx: tx, name: bytes.Clone(name)}
	if err := tx.putCatalog(t); err != nil {
		return nil, tx.fail(err)
	}
	tx.addTree(t)
	return t, nil
}

// DropTree deletes the tree called name and frees its pages (once no View
// can see them). Handles to it return ErrTreeDropped.
func (tx *Tx) DropTree(name []byte) error {
	if err := tx.usable(true); err != nil {
		return err
	}
	t, err := tx.lookupTree(name)
	if err != nil {
		return tx.fail(err)
	}
	if t == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err := tx.freeTree(t.root, 0, make(map[pagefile.PageID]bool)); err != nil {
		return tx.fail(err)
	}
	root, err := tx.remove(tx.catalog, t.name)
	if err != nil {
		return tx.fail(err)
	}
	tx.catalog = root
	t.dropped, t.root, t.count = true, 0, 0
	return nil
}

// Trees returns the names of all trees in order.
func (tx *Tx) Trees() ([][]byte, error) {
	if err := tx.usable(false); err != nil {
		return nil, err
	}
	c := &Cursor{tx: tx, root: tx.catalog}
	var names [][]byte
	for k, _, ok := c.first(false); ok; k, _, ok = c.next(false) {
		names = append(names, bytes.Clone(k))
	}
	return names, c.err
}
