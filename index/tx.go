package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kdb-project/kdb/pagefile"
)

// maxDepth bounds every descent, so that a cycle of damaged pages gives
// ErrCorrupt instead of a loop. A tree of 4-cell nodes of this depth would
// hold 4^48 keys.
const maxDepth = 48

// Tx is a transaction: a View's read-only snapshot or the Update's writable
// state. A Tx and everything obtained from it are valid only until the View
// or Update function returns, and must be used by one goroutine.
type Tx struct {
	s        *Store
	writable bool
	closed   bool
	err      error // the first failure of an operation: the Tx is rolled back
	version  uint64
	catalog  pagefile.PageID // catalog tree root as modified by this Tx

	trees map[string]*Tree // name -> latest handle, once more than linearTrees are open
	order []*Tree          // handles in the order they were opened, for a deterministic commit

	// Update only:
	dirty map[pagefile.PageID]*node    // nodes allocated by this Update, written at commit
	alloc map[pagefile.PageID]struct{} // pages allocated by this Update and not freed
	freed []pagefile.PageID            // pages visible before this Update that it replaced
	path  []pathElem
}

type pathElem struct {
	n   *node
	idx int // index of the child taken
}

// Writable reports whether tx is the Update's transaction.
func (tx *Tx) Writable() bool { return tx.writable }

func (tx *Tx) usable(write bool) error {
	if tx.closed {
		return ErrTxClosed
	}
	if write && !tx.writable {
		return ErrTxReadOnly
	}
	if write && tx.err != nil {
		return tx.err
	}
	return nil
}

// fail records err as the Tx's failure, if it is the first, and returns it.
// A failed operation may have left the Update's nodes half-changed, so a
// failed Update is rolled back even if its function returns nil, and a View
// returns the failure too (Tree, which has no error result, reports a
// catalog read error only this way).
func (tx *Tx) fail(err error) error {
	if err != nil && tx.err == nil {
		tx.err = err
	}
	return err
}

// Err returns the first failure of an operation in tx (I/O, corruption,
// allocation), or nil. Validation errors (ErrKeyTooLarge, ErrValueTooLarge,
// ErrExists, ErrNotFound, ErrTreeDropped, ErrTxReadOnly, ErrTxClosed) change
// nothing and are not failures.
func (tx *Tx) Err() error { return tx.err }

// ref returns a read view of node id: the Update's modified node if any,
// else the page.
func (tx *Tx) ref(id pagefile.PageID) (ref, error) {
	if tx.dirty != nil {
		if n, ok := tx.dirty[id]; ok {
			return ref{n: n, cnt: len(n.ents)}, nil
		}
	}
	typ, p, err := tx.s.pf.Read(id)
	if err != nil {
		return ref{}, pageErr(id, err)
	}
	if typ != pageLeaf && typ != pageBranch {
		return ref{}, corruptf(id, "page type %d is not a B-tree node", typ)
	}
	pg := nodePage{id: id, p: p, leaf: typ == pageLeaf}
	cnt, err := pg.count()
	if err != nil {
		return ref{}, err
	}
	if !pg.leaf && cnt == 0 {
		return ref{}, corruptf(id, "branch without children")
	}
	return ref{pg: pg, cnt: cnt}, nil
}

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

// allocate takes a page for this Update.
func (tx *Tx) allocate() (pagefile.PageID, error) {
	id, err := tx.s.pf.Allocate()
	if err != nil {
		return 0, fmt.Errorf("index: allocate: %w", err)
	}
	tx.alloc[id] = struct{}{}
	return id, nil
}

// freePage frees a page: at once if this Update allocated it (nobody else
// can see it), else once no View can see it.
func (tx *Tx) freePage(id pagefile.PageID) error {
	if _, ok := tx.alloc[id]; ok {
		delete(tx.alloc, id)
		delete(tx.dirty, id)
		if err := tx.s.pf.Free(id); err != nil {
			return fmt.Errorf("index: free %s: %w", id, err)
		}
		return nil
	}
	tx.freed = append(tx.freed, id)
	return nil
}

func (tx *Tx) newNode(leaf bool) (*node, error) {
	id, err := tx.allocate()
	if err != nil {
		return nil, err
	}
	n := &node{id: id, leaf: leaf}
	tx.dirty[id] = n
	return n, nil
}

// peek returns node id decoded, and whether it is already this Update's.
func (tx *Tx) peek(id pagefile.PageID) (*node, bool, error) {
	if n, ok := tx.dirty[id]; ok {
		return n, true, nil
	}
	typ, p, err := tx.s.pf.Read(id)
	if err != nil {
		return nil, false, pageErr(id, err)
	}
	n, err := decodeNode(id, typ, p)
	return n, false, err
}

// cow makes n (decoded from a page by peek) this Update's: it moves to a new
// page and its old page is freed once no View sees it.
func (tx *Tx) cow(n *node) error {
	id, err := tx.allocate()
	if err != nil {
		return err
	}
	if err := tx.freePage(n.id); err != nil {
		return err
	}
	n.id = id
	tx.dirty[id] = n
	return nil
}

// writableNode returns node id as a node this Update may modify, copying it to
// a new page if it is visible to others.
func (tx *Tx) writableNode(id pagefile.PageID) (*node, error) {
	n, mine, err := tx.peek(id)
	if err != nil || mine {
		return n, err
	}
	return n, tx.cow(n)
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

// commitLocked writes the changed trees' catalog entries and the modified
// nodes, then publishes the new state.
//
// The caller must hold tx.s.wmu.
func (tx *Tx) commitLocked() error {
	s := tx.s
	for _, t := range tx.order {
		if t.dropped || !t.changed {
			continue
		}
		if err := tx.putCatalog(t); err != nil {
			return err
		}
		t.changed = false
	}
	if len(tx.dirty) == 0 && len(tx.freed) == 0 && len(tx.alloc) == 0 && tx.catalog == s.mu.cur.catalog {
		return nil
	}
	for id, n := range tx.dirty {
		if err := s.pf.Write(id, n.typ(), n.encode(s.w.buf)); err != nil {
			return fmt.Errorf("index: write %s: %w", id, err)
		}
	}
	// INVARIANT: every page in tx.alloc is now written (nodes here, overflow
	// pages when they were created).
	tx.alloc = nil
	s.mu.Lock()
	v := s.mu.cur.version + 1
	s.mu.cur = snapshot{catalog: tx.catalog, version: v}
	s.mu.Unlock()
	if len(tx.freed) > 0 {
		s.w.pending = append(s.w.pending, pendingFree{version: v, ids: tx.freed})
	}
	return nil
}

// rollback gives back every page this Update allocated.
func (tx *Tx) rollback() error {
	for id := range tx.alloc {
		if err := tx.s.pf.Free(id); err != nil {
			return fmt.Errorf("index: rollback: free %s: %w", id, err)
		}
	}
	tx.alloc, tx.dirty, tx.freed = nil, nil, nil
	return nil
}

// Catalog.

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
	v, ok, err := tx.get(tx.catalog, name)
	if err != nil || !ok {
		return nil, err
	}
	if len(v) != catalogEntrySize {
		return nil, fmt.Errorf("%w: catalog entry %q of %d bytes", ErrCorrupt, name, len(v))
	}
	root := pagefile.PageID(binary.LittleEndian.Uint64(v[offCatalogRoot:]))
	if root != 0 && (root < pagefile.FirstDataPage || root >= tx.s.pf.PageCount()) {
		return nil, fmt.Errorf("%w: catalog entry %q: root %s beyond page count", ErrCorrupt, name, root)
	}
	t := &Tree{tx: tx, name: bytes.Clone(name), root: root, count: binary.LittleEndian.Uint64(v[offCatalogCount:])}
	tx.addTree(t)
	return t, nil
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
