package kdb

import (
	"bytes"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/google/btree"
	"github.com/kdb-project/kdb/index"
)

// The mem tables (docs/DESIGN.md "The mem tables").
//
// The live write path applies batches to an in-memory, multi-version table
// rather than to the B-tree pages: every operation writes a new version of
// its key, numbered by the operation's sequence number (seq). A checkpoint
// freezes the table (a new, empty one takes the writes from then on),
// writes the frozen table's last version of each key into the page file's
// index in one Update, in key order, and checkpoints the pages. So the
// index pages are changed once per checkpoint instead of copied on write
// for every group of batches, and a key written and deleted between two
// checkpoints (a message sent and acked) never reaches a page.
//
// Reads: a View takes the state (memState), the last applied seq S and an
// index snapshot, and reads each key's newest version with base < seq <= S
// in the active table, then in the frozen one, then in the index. The
// index snapshot holds every change up to base (its flush may have written
// some later ones too: the frozen table holds those as well, with the
// same final values, so they read the same).
//
// Invariants:
//   - A table's versions of a key are never changed, only added and
//     removed; a frozen table is never changed.
//   - Every seq in the active table is above every seq in the frozen one,
//     which is above memState.base; the index holds every change up to
//     base.
//   - A version is removed only if no running View's S and no flush's
//     bound lies in [its seq, the seq of the next newer version of its key)
//     (prune): no reader can still want it.
//   - The active table changes only under its mu, held by the applier for
//     a whole group; the state changes (freeze, flush done) under the same
//     lock, so an applier sees a state and its tables as one.

// memItem is one version of one key.
type memItem struct {
	tree, key string
	seq       uint64
	// val is the value as the page file's tree keeps it (an index value,
	// or the bare counts of the segment-refs tree); nil: deleted.
	val []byte
	// below: the key had a value below the active table (in the frozen
	// table or the index) when this version was written; a deleted key
	// that has none, and no older version, needs no version at all.
	below bool
}

func memLess(a, b memItem) bool {
	if a.tree != b.tree {
		return a.tree < b.tree
	}
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq > b.seq // newest first
}

// treeVer is one version of a tree's existence and key count.
type treeVer struct {
	seq    uint64
	exists bool
	count  uint64
	drop   bool // the tree was dropped at seq: its keys' older versions are gone
}

// memItemSize estimates what an item costs in memory.
func memItemSize(it memItem) int64 { return int64(len(it.tree) + len(it.key) + len(it.val) + 96) }

// memTable is one table of versions.
type memTable struct {
	mu    sync.RWMutex // the active table's; a frozen table is read without it
	items *btree.BTreeG[memItem]
	trees map[string][]treeVer // oldest first
	bytes atomic.Int64         // estimated memory
	n     atomic.Int64         // versions (items)
}

func newMemTable() *memTable {
	return &memTable{items: btree.NewG(16, memLess), trees: map[string][]treeVer{}}
}

// memState is what a View reads: the tables and the index's bound.
type memState struct {
	active *memTable
	frozen *memTable // being written into the index by a checkpoint, or nil
	base   uint64    // the index holds every change up to this seq
}

// mem is the DB's mem tables and sequence numbers.
type mem struct {
	state atomic.Pointer[memState]
	// seq is the seq of the last operation applied (written under the
	// active table's mu).
	seq atomic.Uint64
}

func (m *mem) init() { m.state.Store(&memState{active: newMemTable()}) }

// lockActive locks the active table for writing and returns the state it
// belongs to.
func (m *mem) lockActive() *memState {
	for {
		st := m.state.Load()
		st.active.mu.Lock()
		if m.state.Load() == st {
			return st
		}
		st.active.mu.Unlock()
	}
}

// rlockActive locks the active table for reading and returns its state.
func (m *mem) rlockActive() *memState {
	for {
		st := m.state.Load()
		st.active.mu.RLock()
		if m.state.Load() == st {
			return st
		}
		st.active.mu.RUnlock()
	}
}

// bytes returns the memory the tables hold (estimated).
func (m *mem) bytes() int64 {
	st := m.state.Load()
	n := st.active.bytes.Load()
	if st.frozen != nil {
		n += st.frozen.bytes.Load()
	}
	return n
}

// versions returns how many versions the tables hold.
func (m *mem) versions() int {
	st := m.state.Load()
	n := int(st.active.n.Load())
	if st.frozen != nil {
		n += int(st.frozen.n.Load())
	}
	return n
}

// visible returns the newest version of key in tree with lower < seq <= s
// in t, if any. The caller holds t.mu (active) or t is frozen.
func (t *memTable) visible(tree, key string, s, lower uint64) (memItem, bool) {
	var out memItem
	found := false
	t.items.AscendGreaterOrEqual(memItem{tree: tree, key: key, seq: s}, func(it memItem) bool {
		if it.tree == tree && it.key == key && it.seq > lower {
			out, found = it, true
		}
		return false
	})
	return out, found
}

// treeAt returns the newest version of tree's metadata with lower < seq <=
// s in t, if any.
func (t *memTable) treeAt(tree string, s, lower uint64) (treeVer, bool) {
	vs := t.trees[tree]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].seq <= s {
			if vs[i].seq > lower {
				return vs[i], true
			}
			break
		}
	}
	return treeVer{}, false
}

// dropAt returns the seq of the newest drop of tree with lower < seq <= s
// in t, or 0.
func (t *memTable) dropAt(tree string, s, lower uint64) uint64 {
	vs := t.trees[tree]
	for i := len(vs) - 1; i >= 0 && vs[i].seq > lower; i-- {
		if vs[i].seq <= s && vs[i].drop {
			return vs[i].seq
		}
	}
	return 0
}

// memView is what one reader sees of the mem tables: the state and S.
type memView struct {
	st *memState
	s  uint64
	// locked: the reader holds the active table's lock already (the
	// applier, latestView).
	locked bool
}

// rlock takes the active table's read lock unless the reader holds it;
// the returned func releases what it took.
func (v memView) rlock() func() {
	if v.locked {
		return func() {}
	}
	a := v.st.active
	a.mu.RLock()
	return a.mu.RUnlock
}

// lower returns the bound above which versions of tree are visible, and
// whether the index's tree is hidden (dropped after base). The caller holds
// the active table's read lock.
func (v memView) lower(tree string) (uint64, bool) {
	lower := v.st.base
	if v.st.frozen != nil {
		if d := v.st.frozen.dropAt(tree, v.s, lower); d > 0 {
			lower = d
		}
	}
	if d := v.st.active.dropAt(tree, v.s, lower); d > 0 {
		lower = d
	}
	return lower, lower > v.st.base
}

// get returns the value of key in tree: found says the mem tables decide
// (val nil: deleted); otherwise hidden says the index's tree is dropped,
// and the index holds the answer if not.
func (v memView) get(tree, key string) (val []byte, found, hidden bool) {
	a := v.st.active
	defer v.rlock()()
	lower, hidden := v.lower(tree)
	if it, ok := a.visible(tree, key, v.s, lower); ok {
		return it.val, true, hidden
	}
	if f := v.st.frozen; f != nil {
		if it, ok := f.visible(tree, key, v.s, lower); ok {
			return it.val, true, hidden
		}
	}
	return nil, false, hidden
}

// tree returns tree's metadata if the mem tables decide it (else the
// index's tree is the answer).
func (v memView) tree(tree string) (treeVer, bool) {
	a := v.st.active
	defer v.rlock()()
	if tv, ok := a.treeAt(tree, v.s, v.st.base); ok {
		return tv, true
	}
	if f := v.st.frozen; f != nil {
		return f.treeAt(tree, v.s, v.st.base)
	}
	return treeVer{}, false
}

// trees returns the names of the trees the mem tables have metadata for,
// with the verdict for each (exists or not), sorted.
func (v memView) trees() ([]string, map[string]bool) {
	a := v.st.active
	defer v.rlock()()
	out := map[string]bool{}
	for _, t := range []*memTable{v.st.frozen, a} {
		if t == nil {
			continue
		}
		for name := range t.trees {
			if tv, ok := t.treeAt(name, v.s, v.st.base); ok {
				out[name] = tv.exists
			}
		}
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, out
}

// step returns the first key of tree after (or, with !fwd, before) key
// that has a version visible at lower < seq <= s in the tables (nil key
// with fwd: from the start; nil with !fwd: from the end, inclusive of
// nothing), and that version; ok false at the end. With incl, key itself
// qualifies.
func (v memView) step(tree string, key []byte, incl, fwd bool, lower uint64) (k []byte, val []byte, ok bool) {
	a := v.st.active
	defer v.rlock()()
	var best memItem
	found := false
	for _, t := range []*memTable{a, v.st.frozen} {
		if t == nil {
			continue
		}
		it, ok := t.stepTable(tree, key, incl, fwd, v.s, lower)
		if !ok {
			continue
		}
		switch {
		case !found:
			best, found = it, true
		case it.key == best.key:
			// The active table's version is the newer one: keep best.
		case fwd == (it.key < best.key):
			best = it
		}
	}
	if !found {
		return nil, nil, false
	}
	return []byte(best.key), best.val, true
}

// stepTable is step in one table.
func (t *memTable) stepTable(tree string, key []byte, incl, fwd bool, s, lower uint64) (memItem, bool) {
	var out memItem
	found := false
	if fwd {
		pivot := memItem{tree: tree, key: string(key), seq: ^uint64(0)}
		skip := ""
		skipSet := !incl && key != nil
		if skipSet {
			skip = string(key)
		}
		t.items.AscendGreaterOrEqual(pivot, func(it memItem) bool {
			if it.tree != tree {
				return false
			}
			if skipSet && it.key == skip {
				return true
			}
			if it.seq <= s && it.seq > lower {
				out, found = it, true
				return false
			}
			return true
		})
		return out, found
	}
	// Backward: versions of a key come newest first in the order, so
	// walking down meets a key's oldest version first; the visible one is
	// the last one met with lower < seq <= s before the key changes.
	var pivot memItem
	switch {
	case key == nil:
		// After every item of tree: no name lies between tree and
		// tree+"\x00".
		pivot = memItem{tree: tree + "\x00", seq: ^uint64(0)}
	case incl:
		pivot = memItem{tree: tree, key: string(key), seq: 0}
	default:
		pivot = memItem{tree: tree, key: string(key), seq: ^uint64(0)}
	}
	cur := ""
	started := false
	t.items.DescendLessOrEqual(pivot, func(it memItem) bool {
		if it.tree != tree {
			return it.tree > tree // the pivot itself, if an item: go on
		}
		if !started || it.key != cur {
			if found {
				return false // the key before had a visible version
			}
			cur, started = it.key, true
		}
		if it.seq <= s && it.seq > lower {
			out, found = it, true
		}
		return true
	})
	return out, found
}

// memApply is the mem tables as the applier's target (applyTarget): the
// active table, locked, over the frozen table and the index. Every
// operation writes a new version with the next seq.
type memApply struct {
	db  *DB
	st  *memState
	ix  *index.Tx // the index as of the state (a View)
	seq uint64    // the last seq given
	// protected reports whether some reader may want a version with seq
	// in [from, to): see prune.
	protected func(from, to uint64) bool
	// The last key looked up by current, and whether it has a value below
	// the active table (put and del, which follow, need it).
	lastTree, lastKey []byte
	lastBelow         bool
}

// latestLower returns the bound above which versions of tree are current
// (its newest drop, or the index's bound) and whether the index's tree is
// hidden.
func (m *memApply) latestLower(tree string) (uint64, bool) {
	v := memView{st: m.st, s: ^uint64(0)}
	lower := m.st.base
	if f := m.st.frozen; f != nil {
		if d := f.dropAt(tree, v.s, lower); d > 0 {
			lower = d
		}
	}
	if d := m.st.active.dropAt(tree, v.s, lower); d > 0 {
		lower = d
	}
	return lower, lower > m.st.base
}

// lookup returns key's current value and whether it has one below the
// active table.
func (m *memApply) lookup(tree, key []byte) (val []byte, ok, below bool, err error) {
	tn, kn := string(tree), string(key)
	lower, hidden := m.latestLower(tn)
	if it, found := m.st.active.visible(tn, kn, ^uint64(0), lower); found {
		return it.val, it.val != nil, it.below, nil
	}
	if f := m.st.frozen; f != nil {
		if it, found := f.visible(tn, kn, ^uint64(0), lower); found {
			return it.val, it.val != nil, it.val != nil, nil
		}
	}
	if hidden {
		return nil, false, false, nil
	}
	t, err := m.ix.OpenTree(tree)
	if err != nil || t == nil {
		return nil, false, false, err
	}
	v, ok, err := t.Get(key)
	if err != nil || !ok {
		return nil, false, false, err
	}
	return v, true, true, nil
}

func (m *memApply) current(tree, key []byte) ([]byte, bool, error) {
	v, ok, below, err := m.lookup(tree, key)
	m.lastTree, m.lastKey, m.lastBelow = tree, key, below
	return v, ok, err
}

// below reports whether key has a value below the active table.
func (m *memApply) below(tree, key []byte) (bool, error) {
	if bytes.Equal(tree, m.lastTree) && bytes.Equal(key, m.lastKey) {
		return m.lastBelow, nil
	}
	_, _, below, err := m.lookup(tree, key)
	return below, err
}

// treeNow returns tree's current metadata.
func (m *memApply) treeNow(tree string) (treeVer, error) {
	if tv, ok := m.st.active.treeAt(tree, ^uint64(0), m.st.base); ok {
		return tv, nil
	}
	if f := m.st.frozen; f != nil {
		if tv, ok := f.treeAt(tree, ^uint64(0), m.st.base); ok {
			return tv, nil
		}
	}
	t, err := m.ix.OpenTree([]byte(tree))
	if err != nil || t == nil {
		return treeVer{}, err
	}
	return treeVer{exists: true, count: t.Len()}, nil
}

// setTree records a new version of tree's metadata, dropping the previous
// one if no reader may want it.
func (m *memApply) setTree(tree string, tv treeVer) {
	a := m.st.active
	vs := a.trees[tree]
	if n := len(vs); n > 0 && !vs[n-1].drop && !m.protected(vs[n-1].seq, tv.seq) {
		vs = vs[:n-1]
	}
	a.trees[tree] = append(vs, tv)
}

func (m *memApply) put(tree, key, val []byte, existed bool) error {
	below, err := m.below(tree, key)
	if err != nil {
		return err
	}
	tn := string(tree)
	tv, err := m.treeNow(tn)
	if err != nil {
		return err
	}
	m.seq++
	if !existed || !tv.exists {
		if !tv.exists {
			tv = treeVer{exists: true}
		}
		tv.count++
		tv.seq, tv.drop = m.seq, false
		m.setTree(tn, tv)
	}
	m.insert(memItem{tree: tn, key: string(key), seq: m.seq, val: val, below: below})
	return nil
}

func (m *memApply) del(tree, key []byte) error {
	below, err := m.below(tree, key)
	if err != nil {
		return err
	}
	tn := string(tree)
	tv, err := m.treeNow(tn)
	if err != nil {
		return err
	}
	m.seq++
	if tv.count > 0 {
		tv.count--
	}
	tv.seq, tv.drop = m.seq, false
	m.setTree(tn, tv)
	m.insert(memItem{tree: tn, key: string(key), seq: m.seq, below: below})
	return nil
}

func (m *memApply) drop(tree []byte, each func(val []byte)) error {
	tn := string(tree)
	tv, err := m.treeNow(tn)
	if err != nil || !tv.exists {
		return err
	}
	// Every current value, from the tables and the index.
	c := m.cursor(tn)
	for _, v, ok := c.first(); ok; _, v, ok = c.next() {
		each(v)
	}
	if c.err != nil {
		return c.err
	}
	m.seq++
	m.st.active.trees[tn] = append(m.st.active.trees[tn], treeVer{seq: m.seq, drop: true})
	return nil
}

// cursor walks tree's current keys and values (for a drop).
func (m *memApply) cursor(tree string) *mergeCursor {
	lower, hidden := m.latestLower(tree)
	c := &mergeCursor{mv: memView{st: m.st, s: ^uint64(0), locked: true}, tree: tree, lower: lower}
	if !hidden {
		t, err := m.ix.OpenTree([]byte(tree))
		if err != nil {
			c.err = err
		} else if t != nil {
			c.base = t.Cursor()
		}
	}
	return c
}

// insert adds it to the active table and prunes the versions it makes
// unwanted.
func (m *memApply) insert(it memItem) {
	a := m.st.active
	a.items.ReplaceOrInsert(it)
	a.bytes.Add(memItemSize(it))
	a.n.Add(1)
	// The next older version of the key in the active table.
	var prev memItem
	hasPrev := false
	a.items.AscendGreaterOrEqual(memItem{tree: it.tree, key: it.key, seq: it.seq - 1}, func(p memItem) bool {
		if p.tree == it.tree && p.key == it.key {
			prev, hasPrev = p, true
		}
		return false
	})
	if hasPrev && !m.protected(prev.seq, it.seq) {
		a.items.Delete(prev)
		a.bytes.Add(-memItemSize(prev))
		a.n.Add(-1)
		// An older one still there was wanted by a reader then; it goes
		// when this key is written next with that reader gone.
		hasPrev = false
		a.items.AscendGreaterOrEqual(memItem{tree: it.tree, key: it.key, seq: it.seq - 1}, func(p memItem) bool {
			hasPrev = p.tree == it.tree && p.key == it.key
			return false
		})
	}
	if it.val == nil && !it.below && !hasPrev {
		// A key deleted that has no value below and no older version:
		// absent for every reader, with or without this version.
		a.items.Delete(it)
		a.bytes.Add(-memItemSize(it))
		a.n.Add(-1)
	}
}

// mergeCursor walks one tree's visible keys: the mem tables' versions over
// the index's tree (a deleted version hides the index's key).
type mergeCursor struct {
	mv    memView
	tree  string
	lower uint64
	base  *index.Cursor // nil if the index has no such tree or it is hidden
	err   error

	// The index cursor's current entry (bok false: exhausted or unset).
	bk, bv []byte
	bok    bool
	key    []byte // the current key (nil: none)
	fwd    bool
}

func (c *mergeCursor) memStep(key []byte, incl, fwd bool) ([]byte, []byte, bool) {
	return c.mv.step(c.tree, key, incl, fwd, c.lower)
}

func (c *mergeCursor) baseSet(k, v []byte, ok bool) {
	c.bk, c.bv, c.bok = k, v, ok
	if !ok && c.base != nil && c.err == nil {
		c.err = c.base.Err()
	}
}

// settle picks the next visible entry from the mem position (mk) and the
// index position, in the cursor's direction, skipping deleted keys.
func (c *mergeCursor) settle(mk, mv []byte, mok bool) ([]byte, []byte, bool) {
	for c.err == nil {
		switch {
		case !mok && !c.bok:
			c.key = nil
			return nil, nil, false
		case mok && (!c.bok || (c.fwd && bytes.Compare(mk, c.bk) <= 0) || (!c.fwd && bytes.Compare(mk, c.bk) >= 0)):
			if c.bok && bytes.Equal(mk, c.bk) {
				// The mem tables' version decides; move the index past it.
				c.advanceBase()
			}
			if mv != nil {
				c.key = mk
				return mk, mv, true
			}
			mk, mv, mok = c.memStep(mk, false, c.fwd)
		default:
			k, v := c.bk, c.bv
			c.key = k
			return k, v, true
		}
	}
	c.key = nil
	return nil, nil, false
}

func (c *mergeCursor) advanceBase() {
	if c.base == nil {
		c.bok = false
		return
	}
	if c.fwd {
		c.baseSet(c.base.Next())
	} else {
		c.baseSet(c.base.Prev())
	}
}

func (c *mergeCursor) first() ([]byte, []byte, bool) {
	c.fwd = true
	if c.base != nil {
		c.baseSet(c.base.First())
	}
	mk, mv, mok := c.memStep(nil, true, true)
	return c.settle(mk, mv, mok)
}

func (c *mergeCursor) last() ([]byte, []byte, bool) {
	c.fwd = false
	if c.base != nil {
		c.baseSet(c.base.Last())
	}
	mk, mv, mok := c.memStep(nil, true, false)
	return c.settle(mk, mv, mok)
}

func (c *mergeCursor) seek(key []byte) ([]byte, []byte, bool) {
	c.fwd = true
	if c.base != nil {
		c.baseSet(c.base.Seek(key))
	}
	mk, mv, mok := c.memStep(key, true, true)
	return c.settle(mk, mv, mok)
}

func (c *mergeCursor) next() ([]byte, []byte, bool) {
	if c.key == nil {
		return nil, nil, false
	}
	cur := c.key
	if !c.fwd {
		// Turn around: reposition the index cursor after cur.
		c.fwd = true
		if c.base != nil {
			c.baseSet(c.base.Seek(cur))
			if c.bok && bytes.Equal(c.bk, cur) {
				c.advanceBase()
			}
		}
	} else if c.bok && bytes.Equal(c.bk, cur) {
		c.advanceBase()
	}
	mk, mv, mok := c.memStep(cur, false, true)
	return c.settle(mk, mv, mok)
}

func (c *mergeCursor) prev() ([]byte, []byte, bool) {
	if c.key == nil {
		return nil, nil, false
	}
	cur := c.key
	if c.fwd {
		c.fwd = false
		if c.base != nil {
			// The greatest index key below cur.
			c.baseSet(c.base.Seek(cur))
			if !c.bok {
				if c.err != nil {
					return nil, nil, false
				}
				c.baseSet(c.base.Last())
			}
			for c.bok && bytes.Compare(c.bk, cur) >= 0 {
				c.baseSet(c.base.Prev())
			}
		}
	} else if c.bok && bytes.Equal(c.bk, cur) {
		c.advanceBase()
	}
	mk, mv, mok := c.memStep(cur, false, false)
	return c.settle(mk, mv, mok)
}
