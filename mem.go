package kdb

import (
	"bytes"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

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
// A table is a skiplist of keys, each with its versions newest first, and
// a map of trees, each with its metadata versions newest first. One writer
// (the applier, holding the table's mu) links new nodes and versions in
// with atomic stores; readers take no lock and follow the atomic pointers.
// A node or version unlinked by pruning stays intact (the garbage
// collector frees it once no reader holds it), so a reader standing on one
// goes on from there.
//
// Invariants:
//   - A version's seq and value never change once linked; only its link
//     to older versions moves, past versions no reader wants (a reader
//     standing on one goes on through its own link). A frozen table is
//     never changed.
//   - Every seq in the active table is above every seq in the frozen one,
//     which is above memState.base; the index holds every change up to
//     base.
//   - A version is unlinked only if no running View's S lies in [its seq,
//     the seq of the next newer version of its key) (protected): no reader
//     can still want it. A key's node is unlinked only with its last
//     version.
//   - The active table changes only under its mu, held by the applier for
//     a whole group; the state changes (freeze, flush done) under the same
//     lock, so an applier sees a state and its tables as one.

// memVer is one version of one key.
type memVer struct {
	seq uint64
	// val is the value as the page file's tree keeps it (an index value,
	// or the bare counts of the segment-refs tree); nil: deleted.
	val []byte
	// below: the key had a value below the active table (in the frozen
	// table or the index) when this version was written; a deleted key
	// that has none, and no older version, needs no version at all.
	below bool
	older atomic.Pointer[memVer]
}

// treeVer is one version of a tree's existence and key count.
//
// Its fields are atomic because the applier updates a version it made in
// the group it is applying in place (setTreeNow): no reader sees such a
// version (its seq is above every reader's S), but readers load its seq to
// skip it.
type treeVer struct {
	seq    atomic.Uint64
	exists atomic.Bool
	count  atomic.Uint64
	older  atomic.Pointer[treeVer]
}

func newTreeVer(seq uint64, exists bool, count uint64) *treeVer {
	tv := new(treeVer)
	tv.set(seq, exists, count)
	return tv
}

// set sets tv's fields (a new version, or one no reader sees yet).
func (tv *treeVer) set(seq uint64, exists bool, count uint64) {
	tv.exists.Store(exists)
	tv.count.Store(count)
	tv.seq.Store(seq)
}

// memKey is a key's node in a table's skiplist.
type memKey struct {
	tree, key string
	vers      atomic.Pointer[memVer] // newest first
	next      []atomic.Pointer[memKey]
	queued    bool // in its table's revisit list (writer only)
	held      bool // in its table's held list (writer only)
}

// newMemKey returns a node of height h. The low heights, most nodes (3 in
// 4 are of height 1), hold their links in the same allocation.
func newMemKey(h int) *memKey {
	switch h {
	case 1:
		n := new(struct {
			memKey
			links [1]atomic.Pointer[memKey]
		})
		n.next = n.links[:]
		return &n.memKey
	case 2:
		n := new(struct {
			memKey
			links [2]atomic.Pointer[memKey]
		})
		n.next = n.links[:]
		return &n.memKey
	}
	return &memKey{next: make([]atomic.Pointer[memKey], h)}
}

// memTree is a tree's metadata in a table.
type memTree struct {
	name string                  // the table's own copy, shared by its keys' nodes
	vers atomic.Pointer[treeVer] // newest first
	// drops are the seqs at which the tree was dropped, oldest first (never
	// pruned: a drop hides its keys' older versions from every reader
	// after it).
	drops atomic.Pointer[[]uint64]
}

const memMaxHeight = 20

// memVerSize estimates what a version costs in memory.
func memVerSize(val []byte) int64 { return int64(len(val) + 48) }

func memKeySize(tree, key string, h int) int64 { return int64(len(tree) + len(key) + 48 + 8*h) }

// memTable is one table of versions.
type memTable struct {
	mu     sync.Mutex // the writer's (the active table's); readers take none
	head   *memKey
	height atomic.Int32
	rnd    uint64
	// trees maps a tree name to its metadata; replaced whole (copy on
	// write) when a tree is added, which is rare.
	trees atomic.Pointer[map[string]*memTree]
	bytes atomic.Int64 // estimated memory
	n     atomic.Int64 // versions
	// revisit lists the keys pruneKept looks at again (writer only; with
	// the spare backing array it swaps with).
	revisit, revisitSpare []*memKey
	// held lists, oldest first, the keys whose older versions were kept
	// for a registered View, each with the last seq given when it was
	// queued (so the marks never decrease); heldHead is the first not yet
	// revisited (writer only).
	held     []heldKey
	heldHead int
}

// heldKey is a key whose older versions a registered View may read: only
// Views with S below mark can, so once none is left the key is pruned
// again.
type heldKey struct {
	n    *memKey
	mark uint64
}

// revisitKey queues n for the next group's pruneKept. Writer only.
func (t *memTable) revisitKey(n *memKey) {
	if !n.queued {
		n.queued = true
		t.revisit = append(t.revisit, n)
	}
}

// holdKey queues n to be pruned again once no View with S below mark is
// registered. Writer only; mark is the last seq given.
func (t *memTable) holdKey(n *memKey, mark uint64) {
	if !n.held {
		n.held = true
		t.held = append(t.held, heldKey{n, mark})
	}
}

func newMemTable() *memTable {
	t := &memTable{head: &memKey{next: make([]atomic.Pointer[memKey], memMaxHeight)}, rnd: 0x9e3779b97f4a7c15}
	t.height.Store(1)
	return t
}

func keyLess(tree, key string, n *memKey) bool { return n.cmp(tree, key) > 0 }

// cmp compares n's (tree, key) with (tree, key): one three-way comparison
// of the tree names (most neighbours share one) and then of the keys,
// rather than a less-than and an equality test of the names at every step.
func (n *memKey) cmp(tree, key string) int {
	if c := strings.Compare(n.tree, tree); c != 0 {
		return c
	}
	return strings.Compare(n.key, key)
}

// seekGE returns the first node at or after (tree, key), or nil; with
// after, the first one after it.
func (t *memTable) seekGE(tree, key string, after bool) *memKey {
	x := t.head
	var n *memKey
	for lvl := int(t.height.Load()) - 1; lvl >= 0; lvl-- {
		for {
			// n, as loaded and compared, is the answer at level 0: a
			// second load could meet a node linked in since, before it.
			n = x.next[lvl].Load()
			if n == nil {
				break
			}
			if after {
				if keyLess(tree, key, n) {
					break
				}
			} else if n.cmp(tree, key) >= 0 {
				break
			}
			x = n
		}
	}
	return n
}

// seekLT returns the last node before (tree, key), or nil (the head is not
// a node); with incl, at or before it.
func (t *memTable) seekLT(tree, key string, incl bool) *memKey {
	x := t.head
	for lvl := int(t.height.Load()) - 1; lvl >= 0; lvl-- {
		for {
			n := x.next[lvl].Load()
			if n == nil {
				break
			}
			c := n.cmp(tree, key)
			if c > 0 || (c == 0 && !incl) {
				break
			}
			x = n
		}
	}
	if x == t.head {
		return nil
	}
	return x
}

// find returns the node of (tree, key), or nil.
func (t *memTable) find(tree, key string) *memKey {
	n := t.seekGE(tree, key, false)
	if n != nil && n.tree == tree && n.key == key {
		return n
	}
	return nil
}

// insertKey returns the node of (tree, key), linking a new one in if
// needed. Writer only.
func (t *memTable) insertKey(tree, key string) *memKey {
	var prev [memMaxHeight]*memKey
	x := t.head
	h := int(t.height.Load())
	for lvl := h - 1; lvl >= 0; lvl-- {
		for {
			n := x.next[lvl].Load()
			if n == nil || n.cmp(tree, key) >= 0 {
				break
			}
			x = n
		}
		prev[lvl] = x
	}
	if n := x.next[0].Load(); n != nil && n.tree == tree && n.key == key {
		return n
	}
	t.rnd ^= t.rnd << 13
	t.rnd ^= t.rnd >> 7
	t.rnd ^= t.rnd << 17
	nh := 1 + bits.TrailingZeros64(t.rnd|1<<(memMaxHeight-1))/2
	if nh > memMaxHeight {
		nh = memMaxHeight
	}
	if nh > h {
		for lvl := h; lvl < nh; lvl++ {
			prev[lvl] = t.head
		}
		t.height.Store(int32(nh))
	}
	// The node keeps copies: the caller's strings may alias its batch.
	n := newMemKey(nh)
	n.tree, n.key = t.intern(tree), strings.Clone(key)
	for lvl := 0; lvl < nh; lvl++ {
		n.next[lvl].Store(prev[lvl].next[lvl].Load())
	}
	// Linked bottom up: a reader that meets n at some level finds it whole.
	for lvl := 0; lvl < nh; lvl++ {
		prev[lvl].next[lvl].Store(n)
	}
	t.bytes.Add(memKeySize(tree, key, nh))
	return n
}

// removeKey unlinks node n (whose versions are all gone). Writer only.
func (t *memTable) removeKey(n *memKey) {
	x := t.head
	for lvl := int(t.height.Load()) - 1; lvl >= 0; lvl-- {
		for {
			m := x.next[lvl].Load()
			if m == nil || m == n || m.cmp(n.tree, n.key) >= 0 {
				break
			}
			x = m
		}
		if lvl < len(n.next) && x.next[lvl].Load() == n {
			x.next[lvl].Store(n.next[lvl].Load())
		}
	}
	t.bytes.Add(-memKeySize(n.tree, n.key, len(n.next)))
}

// tree returns tree's metadata node, or nil.
func (t *memTable) tree(tree string) *memTree {
	if m := t.trees.Load(); m != nil {
		return (*m)[tree]
	}
	return nil
}

// treeNames returns the names of the trees t has metadata for.
func (t *memTable) treeNames() []string {
	m := t.trees.Load()
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(*m))
	for n := range *m {
		out = append(out, n)
	}
	return out
}

// intern returns the table's copy of tree's name.
func (t *memTable) intern(tree string) string {
	if mt := t.tree(tree); mt != nil {
		return mt.name
	}
	return strings.Clone(tree)
}

// bstr returns b as a string without copying, for a comparison or a
// lookup that keeps nothing: b must not change meanwhile.
func bstr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// visible returns the newest version of n with lower < seq <= s.
func visible(n *memKey, s, lower uint64) *memVer {
	for v := n.vers.Load(); v != nil; v = v.older.Load() {
		if v.seq <= s {
			if v.seq > lower {
				return v
			}
			return nil
		}
	}
	return nil
}

// treeAt returns the newest version of tree's metadata with lower < seq <=
// s in t, if any.
func (t *memTable) treeAt(tree string, s, lower uint64) *treeVer {
	mt := t.tree(tree)
	if mt == nil {
		return nil
	}
	for v := mt.vers.Load(); v != nil; v = v.older.Load() {
		if seq := v.seq.Load(); seq <= s {
			if seq > lower {
				return v
			}
			return nil
		}
	}
	return nil
}

// dropAt returns the seq of the newest drop of tree with lower < seq <= s
// in t, or 0.
func (t *memTable) dropAt(tree string, s, lower uint64) uint64 {
	mt := t.tree(tree)
	if mt == nil {
		return 0
	}
	ds := mt.drops.Load()
	if ds == nil {
		return 0
	}
	for i := len(*ds) - 1; i >= 0; i-- {
		if d := (*ds)[i]; d <= s {
			if d > lower {
				return d
			}
			return 0
		}
	}
	return 0
}

// lastDrop returns the seq of tree's newest drop in t, or 0.
func (t *memTable) lastDrop(tree string) uint64 { return t.dropAt(tree, ^uint64(0), 0) }

// empty reports whether t holds nothing.
func (t *memTable) empty() bool { return t.head.next[0].Load() == nil && t.trees.Load() == nil }

// memState is what a View reads: the tables and the index's bound.
type memState struct {
	active *memTable
	frozen *memTable // being written into the index by a checkpoint, or nil
	base   uint64    // the index holds every change up to this seq
}

// mem is the DB's mem tables and sequence numbers.
type mem struct {
	state atomic.Pointer[memState]
	// seq is the seq of the last operation applied: the applier publishes
	// it at the end of each group, a View reads it as its S (read).
	seq atomic.Uint64
	// flushes counts the flushes whose index Update committed (see
	// DB.view).
	flushes atomic.Uint64
	// viewMu orders Views' registration against the applier's pruning: a
	// View reads its S and registers it holding it shared; the applier
	// copies the registered seqs holding it exclusively, at the start of
	// each group. So a View either is in the copy, or read S after it:
	// then S is the seq published at the copy (memApply.start).
	viewMu sync.RWMutex
}

// read returns a state and an S that go together: every version with
// state.base < seq <= S is in the state's tables.
func (m *mem) read() memView {
	for {
		st := m.state.Load()
		if h := testHookMemRead.Load(); h != nil {
			(*h)()
		}
		s := m.seq.Load()
		if m.state.Load() == st {
			return memView{st: st, s: s}
		}
	}
}

// testHookMemRead, if set (by tests only), runs in read between its load
// of the state and its load of S: a freeze and a publish there must not
// pair the old state with the new S.
// Atomic: a View of a goroutine an earlier test left running may read it
// while a test sets it.
var testHookMemRead atomic.Pointer[func()]

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

// memView is what one reader sees of the mem tables: the state and S.
type memView struct {
	st *memState
	s  uint64
}

// lower returns the bound above which versions of tree are visible, and
// whether the index's tree is hidden (dropped after base).
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

// get returns the value of key in tree with versions above lower: found
// says the mem tables decide (val nil: deleted); otherwise the index holds
// the answer.
func (v memView) get(tree, key string, lower uint64) (val []byte, found bool) {
	for _, t := range [2]*memTable{v.st.active, v.st.frozen} {
		if t == nil {
			continue
		}
		if n := t.find(tree, key); n != nil {
			if ver := visible(n, v.s, lower); ver != nil {
				return ver.val, true
			}
		}
	}
	return nil, false
}

// tree returns tree's metadata if the mem tables decide it (else the
// index's tree is the answer).
func (v memView) tree(tree string) *treeVer {
	if tv := v.st.active.treeAt(tree, v.s, v.st.base); tv != nil {
		return tv
	}
	if f := v.st.frozen; f != nil {
		return f.treeAt(tree, v.s, v.st.base)
	}
	return nil
}

// trees returns the names of the trees the mem tables have metadata for,
// with the verdict for each (exists or not), sorted.
func (v memView) trees() ([]string, map[string]bool) {
	out := map[string]bool{}
	for _, t := range [2]*memTable{v.st.frozen, v.st.active} {
		if t == nil {
			continue
		}
		for _, name := range t.treeNames() {
			if tv := t.treeAt(name, v.s, v.st.base); tv != nil {
				out[name] = tv.exists.Load()
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

// step returns the first key of tree after (fwd) or before (!fwd) key that
// has a version visible at lower < seq <= s (key nil: from the start or
// the end; incl: key itself qualifies), and that version's value (nil:
// deleted); ok false at the end.
func (v memView) step(tree string, key []byte, incl, fwd bool, lower uint64) (k []byte, val []byte, ok bool) {
	var bestKey string
	var best *memVer
	for _, t := range [2]*memTable{v.st.active, v.st.frozen} {
		if t == nil {
			continue
		}
		n, ver := t.stepTable(tree, key, incl, fwd, v.s, lower)
		if n == nil {
			continue
		}
		switch {
		case best == nil:
			bestKey, best = n.key, ver
		case n.key == bestKey:
			// The active table's version is the newer one: keep it.
		case fwd == (n.key < bestKey):
			bestKey, best = n.key, ver
		}
	}
	if best == nil {
		return nil, nil, false
	}
	// A copy whose capacity ends at its length (Iter.Key promises it:
	// []byte(s) may round the capacity up to its size class).
	k = make([]byte, len(bestKey))
	copy(k, bestKey)
	return k, best.val, true
}

// stepTable is step in one table: the node and its visible version.
func (t *memTable) stepTable(tree string, key []byte, incl, fwd bool, s, lower uint64) (*memKey, *memVer) {
	var n *memKey
	if fwd {
		if key == nil {
			n = t.seekGE(tree, "", false)
		} else {
			n = t.seekGE(tree, bstr(key), !incl)
		}
		for ; n != nil && n.tree == tree; n = n.next[0].Load() {
			if ver := visible(n, s, lower); ver != nil {
				return n, ver
			}
		}
		return nil, nil
	}
	if key == nil {
		n = t.seekLT(tree+"\x00", "", false) // no name lies between tree and tree+"\x00"
	} else {
		n = t.seekLT(tree, bstr(key), incl)
	}
	for ; n != nil && n.tree == tree; n = t.seekLT(n.tree, n.key, false) {
		if ver := visible(n, s, lower); ver != nil {
			return n, ver
		}
	}
	return nil, nil
}

// memApply is the mem tables as the applier's target (applyTarget): the
// active table, locked, over the frozen table and the index. Every
// operation writes a new version with the next seq.
type memApply struct {
	st  *memState
	ix  *index.Tx // the index as of the state (a View)
	seq uint64    // the last seq given
	// views are the S of the running Views (sorted), copied at the start
	// of the group, and the seq published then (start): see protected.
	views []uint64
	start uint64
	// The last key looked up by current, and whether it has a value below
	// the active table (put and del, which follow, need it).
	lastTree, lastKey []byte
	lastBelow         bool
	// lastNode is the active table's node of the key current looked up
	// last, if it has one: insert links the next version into it without
	// searching the skiplist again.
	lastNode *memKey
}

// protected reports whether a View may read the mem tables at a seq in
// [from, to): a version there may be wanted. The Views registered when the
// group began are known (views); one registering since read S = start
// (mem.viewMu).
func (m *memApply) protected(from, to uint64) bool {
	byStart, byView := m.protectedBy(from, to)
	return byStart || byView
}

// protectedBy tells the two reasons of protected apart: a View that may
// register with S = start, and one registered.
func (m *memApply) protectedBy(from, to uint64) (byStart, byView bool) {
	i := sort.Search(len(m.views), func(i int) bool { return m.views[i] >= from })
	return from <= m.start && m.start < to, i < len(m.views) && m.views[i] < to
}

// ixTree returns the index's tree, or nil (the snapshot keeps the trees
// it opened: pinnedIndex).
func (m *memApply) ixTree(tree string) (*index.Tree, error) {
	return m.ix.OpenTree(unsafe.Slice(unsafe.StringData(tree), len(tree)))
}

// latestLower returns the bound above which versions of tree are current
// (its newest drop, or the index's bound) and whether the index's tree is
// hidden.
func (m *memApply) latestLower(tree string) (uint64, bool) {
	return memView{st: m.st, s: ^uint64(0)}.lower(tree)
}

// lookup returns key's current value and whether it has one below the
// active table.
func (m *memApply) lookup(tree, key []byte) (val []byte, ok, below bool, err error) {
	tn, kn := bstr(tree), bstr(key)
	lower, hidden := m.latestLower(tn)
	n := m.st.active.find(tn, kn)
	m.lastNode = n
	if n != nil {
		if v := visible(n, ^uint64(0), lower); v != nil {
			return v.val, v.val != nil, v.below, nil
		}
	}
	if f := m.st.frozen; f != nil {
		if n := f.find(tn, kn); n != nil {
			if v := visible(n, ^uint64(0), lower); v != nil {
				return v.val, v.val != nil, v.val != nil, nil
			}
		}
	}
	if hidden {
		return nil, false, false, nil
	}
	t, err := m.ixTree(tn)
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

// treeNow returns tree's current metadata (exists, count).
func (m *memApply) treeNow(tree string) (exists bool, count uint64, err error) {
	if tv := m.st.active.treeAt(tree, ^uint64(0), m.st.base); tv != nil {
		return tv.exists.Load(), tv.count.Load(), nil
	}
	if f := m.st.frozen; f != nil {
		if tv := f.treeAt(tree, ^uint64(0), m.st.base); tv != nil {
			return tv.exists.Load(), tv.count.Load(), nil
		}
	}
	t, err := m.ixTree(tree)
	if err != nil || t == nil {
		return false, 0, err
	}
	return true, t.Len(), nil
}

// setTreeNow sets tree's metadata as of m.seq (a put or a delete; not a
// drop). A version made earlier in the same group is updated in place
// rather than a new one linked in: no reader can see it (its seq is above
// the seq published when the group began, m.start, which bounds every
// reader's S), and a new version would unlink it anyway (protected).
// It returns the key version to fill for the operation: allocated with the
// tree's new version when one is made (one allocation for both).
func (m *memApply) setTreeNow(tree string, exists bool, count uint64) *memVer {
	if mt := m.st.active.tree(tree); mt != nil {
		if tv := mt.vers.Load(); tv != nil && tv.seq.Load() > m.start {
			tv.set(m.seq, exists, count)
			return new(memVer)
		}
	}
	p := new(struct {
		mv memVer
		tv treeVer
	})
	p.tv.set(m.seq, exists, count)
	m.setTree(tree, &p.tv, false)
	return &p.mv
}

// setTree links a new version of tree's metadata in, unlinking the older
// ones no reader may want; with drop, it records a drop at tv.seq.
func (m *memApply) setTree(tree string, tv *treeVer, drop bool) {
	a := m.st.active
	mt := a.tree(tree)
	if mt == nil {
		mt = &memTree{name: strings.Clone(tree)}
		m := map[string]*memTree{mt.name: mt}
		if old := a.trees.Load(); old != nil {
			for k, v := range *old {
				m[k] = v
			}
		}
		a.trees.Store(&m)
	}
	if drop {
		var ds []uint64
		if old := mt.drops.Load(); old != nil {
			ds = append(ds, *old...)
		}
		ds = append(ds, tv.seq.Load())
		mt.drops.Store(&ds)
	}
	// Keep an older version only if a reader's S lies between it and the
	// next newer version kept (prune).
	link, newer := &tv.older, tv.seq.Load()
	for u := mt.vers.Load(); u != nil; u = u.older.Load() {
		if useq := u.seq.Load(); m.protected(useq, newer) {
			link.Store(u)
			link, newer = &u.older, useq
		}
	}
	link.Store(nil)
	mt.vers.Store(tv)
}

func (m *memApply) put(tree, key, val []byte, existed bool) error {
	below, err := m.below(tree, key)
	if err != nil {
		return err
	}
	tn := bstr(tree)
	exists, count, err := m.treeNow(tn)
	if err != nil {
		return err
	}
	m.seq++
	var v *memVer
	if !existed || !exists {
		if !exists {
			count = 0
		}
		v = m.setTreeNow(tn, true, count+1)
	} else {
		v = new(memVer)
	}
	v.seq, v.val, v.below = m.seq, val, below
	m.insert(tn, bstr(key), v)
	return nil
}

func (m *memApply) del(tree, key []byte) error {
	below, err := m.below(tree, key)
	if err != nil {
		return err
	}
	tn := bstr(tree)
	_, count, err := m.treeNow(tn)
	if err != nil {
		return err
	}
	m.seq++
	if count > 0 {
		count--
	}
	v := m.setTreeNow(tn, true, count)
	v.seq, v.below = m.seq, below
	m.insert(tn, bstr(key), v)
	return nil
}

func (m *memApply) drop(tree []byte, each func(val []byte)) error {
	tn := bstr(tree)
	exists, _, err := m.treeNow(tn)
	if err != nil || !exists {
		return err
	}
	// Every current value, from the tables and the index.
	lower, hidden := m.latestLower(tn)
	c := &mergeCursor{mv: memView{st: m.st, s: ^uint64(0)}, tree: tn, lower: lower}
	if !hidden {
		t, err := m.ixTree(tn)
		if err != nil {
			return err
		}
		if t != nil {
			c.base = t.Cursor()
		}
	}
	for _, v, ok := c.first(); ok; _, v, ok = c.next() {
		each(v)
	}
	if c.err != nil {
		return c.err
	}
	m.seq++
	m.setTree(tn, newTreeVer(m.seq, false, 0), true)
	return nil
}

// insert links version v of (tree, key) in and unlinks the versions it
// makes unwanted.
func (m *memApply) insert(tree, key string, v *memVer) {
	a := m.st.active
	n := m.lastNode
	m.lastNode = nil
	if n == nil || n.tree != tree || n.key != key {
		n = a.insertKey(tree, key)
	}
	kept, again, held := m.keepWanted(&v.older, v.seq, n.vers.Load())
	if v.val == nil && !v.below && !kept {
		// A key deleted that has no value below and no older version:
		// absent for every reader, with or without this version.
		n.vers.Store(nil)
		a.removeKey(n)
		return
	}
	n.vers.Store(v)
	a.n.Add(1)
	a.bytes.Add(memVerSize(v.val))
	if again {
		a.revisitKey(n)
	}
	if held {
		a.holdKey(n, m.seq)
	}
}

// keepWanted links into link, from u down, only the older versions a reader
// may want: one is kept if a reader's S may lie between it and the next
// newer version kept (newer, then the kept one's seq), since a reader
// reads the newest version at or below its S. It reports whether it kept
// any, whether one was kept only for a View that may still register with
// S = start (none can once the next group begins: revisit the key then),
// and whether one was kept for a registered View (held: revisit the key
// once that View has ended). Relinking is safe for readers walking the
// list: a version unlinked keeps its own link to the older ones.
func (m *memApply) keepWanted(link *atomic.Pointer[memVer], newer uint64, u *memVer) (kept, again, held bool) {
	a := m.st.active
	for ; u != nil; u = u.older.Load() {
		byStart, byView := m.protectedBy(u.seq, newer)
		if byStart || byView {
			link.Store(u)
			link, newer = &u.older, u.seq
			kept = true
			again = again || !byView
			held = held || byView
		} else {
			a.n.Add(-1)
			a.bytes.Add(-memVerSize(u.val))
		}
	}
	link.Store(nil)
	return kept, again, held
}

// pruneKept revisits the keys whose older versions the last group kept
// only for a View registering with S = its start: such a View's S is now
// known (registered) or above every seq in the table. So a message sent and
// acked in two groups leaves no versions behind (without this, both stay
// until the next checkpoint, and their count alone makes one due). It then
// revisits the held keys no registered View can read below: with many
// writers some View is nearly always running, and without this the
// versions kept for each stayed until the next checkpoint (16 broker
// producers: ~1,500 versions on average instead of ~15, a deeper skiplist
// and a checkpoint every ~3,500 pairs).
func (m *memApply) pruneKept() {
	a := m.st.active
	list := a.revisit
	a.revisit, a.revisitSpare = a.revisitSpare[:0], nil
	for _, n := range list {
		n.queued = false
		m.prune(n)
	}
	clear(list)
	a.revisitSpare = list[:0]

	// Only a View with S below a key's mark can read the versions kept for
	// it (older ones than the key's newest then); m.views is sorted.
	lowest := ^uint64(0)
	if len(m.views) > 0 {
		lowest = m.views[0]
	}
	for a.heldHead < len(a.held) && a.held[a.heldHead].mark <= lowest {
		n := a.held[a.heldHead].n
		a.held[a.heldHead] = heldKey{}
		a.heldHead++
		n.held = false
		m.prune(n)
	}
	if a.heldHead == len(a.held) {
		a.held, a.heldHead = a.held[:0], 0
	} else if a.heldHead > 256 && a.heldHead > len(a.held)/2 {
		k := copy(a.held, a.held[a.heldHead:])
		clear(a.held[k:])
		a.held, a.heldHead = a.held[:k], 0
	}
}

// prune unlinks the older versions of n no reader can want now, and n
// itself if it is left a deletion with nothing below, and queues it again
// as keepWanted says.
func (m *memApply) prune(n *memKey) {
	a := m.st.active
	v := n.vers.Load()
	if v == nil {
		return // unlinked since
	}
	kept, again, held := m.keepWanted(&v.older, v.seq, v.older.Load())
	if v.val == nil && !v.below && !kept {
		n.vers.Store(nil)
		a.n.Add(-1)
		a.bytes.Add(-memVerSize(nil))
		a.removeKey(n)
		return
	}
	if again {
		a.revisitKey(n)
	}
	if held {
		a.holdKey(n, m.seq)
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
