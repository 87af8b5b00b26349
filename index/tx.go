package index

import (
	"fmt"

	"github.com/kdb-project/kdb/pagefile"
)

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
