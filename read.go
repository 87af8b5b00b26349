package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kdb-project/kdb/index"
	"github.com/kdb-project/kdb/journal"
)

// Get returns a copy of the value of key in the named index, or ErrNotFound.
// An empty or oversized key or index name, which no write can store, is
// ErrInvalid.
func (db *DB) Get(index string, key []byte) ([]byte, error) {
	return db.get(userTreePrefix, index, key)
}

// getSnapshots holds the Snapshots of DB.Get and Namespace.Get: such a
// snapshot never reaches the caller, so it is reused (with the tree names
// it made), which spares a point read the allocations of a whole View.
var getSnapshots = sync.Pool{New: func() any { return new(Snapshot) }}

// get is Get in the indexes whose tree names start with prefix.
func (db *DB) get(prefix, index string, key []byte) ([]byte, error) {
	s := getSnapshots.Get().(*Snapshot)
	s.want.index, s.want.key = index, key
	err := db.viewIn(prefix, s, getInView)
	v := s.want.got
	s.recycle()
	getSnapshots.Put(s)
	return v, err
}

// getInView is get's View function (a plain function: no closure to
// allocate).
func getInView(s *Snapshot) error {
	var err error
	s.want.got, err = s.Get(s.want.index, s.want.key)
	return err
}

// recycle clears a get or transaction snapshot for its next use, keeping
// its tree names.
func (s *Snapshot) recycle() {
	names := s.names
	*s = Snapshot{names: names}
}

// View runs fn with a consistent snapshot of the store: every write
// acknowledged before View began, and none after. Views run concurrently
// with each other, with writes and with checkpoints; a View never holds up
// a checkpoint or journal GC (GC keeps the segments a running View may read
// and removes them after it ends). Inside fn, Get, View, Write, Update and
// Checkpoint all work. After Close began, View returns ErrClosed; a View
// that outlasts Options.CloseWait gets ErrClosed from its next Snapshot or
// Iter call.
func (db *DB) View(fn func(s *Snapshot) error) error {
	return db.view(userTreePrefix, fn)
}

func (db *DB) view(prefix string, fn func(s *Snapshot) error) error {
	if fn == nil {
		return fmt.Errorf("%w: View: nil function", ErrInvalid)
	}
	return db.viewIn(prefix, nil, fn)
}

// viewIn is view; a non-nil s is the (cleared) Snapshot to fill rather
// than a new one.
func (db *DB) viewIn(prefix string, s *Snapshot, fn func(s *Snapshot) error) error {
	for {
		// The index snapshot first, then the mem tables' state and S: S is
		// then at least the bound of every flush the snapshot holds. A
		// flush that committed in between could leave the state without
		// the frozen table the snapshot's older pages need: then again.
		gen := db.mem.flushes.Load()
		again := false
		err := db.ix.View(func(tx *index.Tx) error {
			var err error
			again, err = db.viewOn(tx, gen, prefix, s, fn)
			return err
		})
		if !again {
			return db.staleOr(wrapErr(err))
		}
	}
}

// viewOn runs fn on a snapshot of index snapshot tx (taken after gen was
// read from mem.flushes) and of the mem tables' state and S, registered as
// a View while fn runs: s if not nil, else a new one. again: a flush
// committed since gen was read, and nothing ran (see viewIn).
func (db *DB) viewOn(tx *index.Tx, gen uint64, prefix string, s *Snapshot, fn func(s *Snapshot) error) (again bool, err error) {
	// S registered keeps the versions it reads (memApply.protected).
	db.mem.viewMu.RLock()
	mv := db.mem.read()
	if db.mem.flushes.Load() != gen {
		db.mem.viewMu.RUnlock()
		return true, nil
	}
	if testHookViewRead != nil {
		testHookViewRead()
	}
	mark := viewMark()
	floor, err := db.beginView(mv.s, mark)
	db.mem.viewMu.RUnlock()
	if err != nil {
		return false, err
	}
	defer db.endView(floor, mv.s, mark)
	if s == nil {
		s = new(Snapshot)
	}
	s.db, s.prefix, s.tx, s.mv = db, prefix, tx, mv
	defer s.ended.Store(true)
	return false, fn(s)
}

// testHookViewRead, if set (by tests only), runs between a View's reading
// its S and registering it: the window mem.viewMu closes.
var testHookViewRead func()

// latestView runs fn on a snapshot of everything applied, for the
// engine's own short reads (journal GC, compaction's accounting), also
// while Close runs. It holds the active mem table's lock throughout (no
// applier runs meanwhile, so nothing it reads is unlinked) and registers
// no View: fn must not read journal values.
func (db *DB) latestView(fn func(s *Snapshot) error) error {
	st := db.mem.lockActive()
	defer st.active.mu.Unlock()
	s := &Snapshot{db: db, prefix: userTreePrefix, mv: memView{st: st, s: db.mem.seq.Load()}}
	defer s.ended.Store(true)
	return wrapErr(db.ix.View(func(tx *index.Tx) error {
		s.tx = tx
		return fn(s)
	}))
}

// Snapshot is a consistent read-only view of the store, valid during the
// View that made it. It must be used by one goroutine. Used after its View
// returned, its methods (and its iterators') return ErrInvalid and touch no
// memory of the store.
type Snapshot struct {
	db     *DB
	prefix string // tree-name prefix of its index names: "u/" or a namespace's
	tx     *index.Tx
	mv     memView // what it sees of the mem tables (mem.go)
	names  treeNames
	ended  atomic.Bool
	// opened caches the trees opened last (a snapshot is immutable, and
	// a transaction reads the same few trees over and over).
	opened [4]openedTree
	nextOp int
	// inline holds the first trees the snapshot opens (most open a few),
	// inlineUsed how many of them are.
	inline     [2]snapTree
	inlineUsed int
	// want is a get snapshot's question and answer (DB.get).
	want struct {
		index string
		key   []byte
		got   []byte
	}
	// escaped: an Iter was made from s, so s may be read after its View
	// (and must then say so): it is not reused.
	escaped bool
}

type openedTree struct {
	name string
	t    *snapTree // nil: no such tree in the snapshot
	ok   bool
}

// snapTree is one tree as a snapshot sees it: the mem tables' versions
// over the index's tree.
type snapTree struct {
	s      *Snapshot
	name   string
	base   *index.Tree // nil: the index has no such tree, or it is hidden (dropped since)
	lower  uint64
	hidden bool
	count  uint64
}

// openTree returns the tree called name (full name), or nil if it does not
// exist in the snapshot.
func (s *Snapshot) openTree(name []byte) (*snapTree, error) {
	return s.openTreeNamed(name, "")
}

// openTreeNamed is openTree; str, if not empty, is name as a string.
func (s *Snapshot) openTreeNamed(name []byte, str string) (*snapTree, error) {
	for i := range s.opened {
		if o := &s.opened[i]; o.ok && o.name == string(name) {
			return o.t, nil
		}
	}
	if str == "" {
		str = string(name)
	}
	t, err := s.openTreeUncached(name, str)
	if err != nil {
		return nil, err
	}
	o := &s.opened[s.nextOp]
	s.nextOp = (s.nextOp + 1) % len(s.opened)
	o.ok, o.t, o.name = true, t, str
	return t, nil
}

// openIndex opens the tree of the named index under s's prefix.
func (s *Snapshot) openIndex(index string) (*snapTree, error) {
	tree, str := s.names.getBoth(s.prefix, index)
	return s.openTreeNamed(tree, str)
}

func (s *Snapshot) openTreeUncached(name []byte, n string) (*snapTree, error) {
	var t *snapTree
	if s.inlineUsed < len(s.inline) {
		t = &s.inline[s.inlineUsed]
		s.inlineUsed++
	} else {
		t = new(snapTree)
	}
	*t = snapTree{s: s, name: n}
	t.lower, t.hidden = s.mv.lower(n)
	if !t.hidden {
		b, err := s.tx.OpenTree(name)
		if err != nil {
			return nil, err
		}
		t.base = b
	}
	if tv := s.mv.tree(n); tv != nil {
		if !tv.exists.Load() {
			return nil, nil
		}
		t.count = tv.count.Load()
		return t, nil
	}
	if t.base == nil {
		return nil, nil
	}
	t.count = t.base.Len()
	return t, nil
}

// get returns key's value as the tree keeps it (an index value).
func (t *snapTree) get(key []byte) ([]byte, bool, error) {
	if v, found := t.s.mv.get(t.name, bstr(key), t.lower); found {
		return v, v != nil, nil
	}
	if t.base == nil {
		return nil, false, nil
	}
	return t.base.Get(key)
}

// cursor returns a cursor over the tree's keys and values (as the tree
// keeps them).
func (t *snapTree) cursor() *mergeCursor {
	c := &mergeCursor{mv: t.s.mv, tree: t.name, lower: t.lower}
	if t.base != nil {
		c.base = t.base.Cursor()
	}
	return c
}

// trees returns the full names of the trees in the snapshot, in order.
func (s *Snapshot) trees() ([][]byte, error) {
	names, err := s.tx.Trees()
	if err != nil {
		return nil, err
	}
	mnames, verdict := s.mv.trees()
	if len(mnames) == 0 {
		return names, nil
	}
	out := make([][]byte, 0, len(names)+len(mnames))
	for _, n := range names {
		if exists, ok := verdict[string(n)]; !ok || exists {
			out = append(out, n)
		}
	}
	for _, n := range mnames {
		if verdict[n] && !containsName(names, n) {
			out = append(out, []byte(n))
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out, nil
}

func containsName(names [][]byte, n string) bool {
	i := sort.Search(len(names), func(i int) bool { return string(names[i]) >= n })
	return i < len(names) && string(names[i]) == n
}

// usable returns why s cannot be read any more, if it cannot.
func (s *Snapshot) usable() error {
	if s.ended.Load() {
		return fmt.Errorf("%w: snapshot used after its View returned", ErrInvalid)
	}
	if s.db.views.gone.Load() {
		return fmt.Errorf("%w: the DB was closed while this View ran", ErrClosed)
	}
	return nil
}

// Get returns a copy of the value of key in the named index, or ErrNotFound.
// An empty or oversized key or index name is ErrInvalid.
func (s *Snapshot) Get(index string, key []byte) ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := checkIndexName(s.prefix, index); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	t, err := s.openIndex(index)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%w: index %q", ErrNotFound, index)
	}
	v, ok, err := t.get(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotFound
	}
	return s.db.resolve(v)
}

// Len returns the number of keys in the named index, without a scan (0
// for an index that does not exist; an empty or oversized name is
// ErrInvalid).
func (s *Snapshot) Len(index string) (uint64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	if err := checkIndexName(s.prefix, index); err != nil {
		return 0, err
	}
	t, err := s.openIndex(index)
	if err != nil || t == nil {
		return 0, err
	}
	return t.count, nil
}

// Indexes returns the names of the indexes, in order.
func (s *Snapshot) Indexes() ([]string, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	names, err := s.trees()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if len(n) > len(s.prefix) && string(n[:len(s.prefix)]) == s.prefix {
			out = append(out, string(n[len(s.prefix):]))
		}
	}
	return out, nil
}

// Namespaces returns the names of the namespaces (DB.Namespace) that hold
// at least one index in the snapshot, in order; the user indexes' and the
// engine's own are not namespaces. It is for tools that show a whole
// store (kdbtool): a program knows its namespaces.
func (s *Snapshot) Namespaces() ([]string, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	names, err := s.trees()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		ns, _, ok := bytes.Cut(n, []byte("/"))
		if ok && validNamespace(string(ns)) && (len(out) == 0 || out[len(out)-1] != string(ns)) {
			out = append(out, string(ns))
		}
	}
	return out, nil
}

// Exists reports whether the named index exists (an empty or oversized
// name is ErrInvalid).
func (s *Snapshot) Exists(index string) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	if err := checkIndexName(s.prefix, index); err != nil {
		return false, err
	}
	t, err := s.openIndex(index)
	return t != nil, err
}

// Iter returns an iterator over the named index in key order (empty if the
// index does not exist; an empty or oversized name is ErrInvalid, from
// Err).
func (s *Snapshot) Iter(index string) *Iter {
	s.escaped = true
	it := &Iter{s: s}
	if err := s.usable(); err != nil {
		it.err = err
		return it
	}
	if err := checkIndexName(s.prefix, index); err != nil {
		it.err = err
		return it
	}
	t, err := s.openIndex(index)
	switch {
	case err != nil:
		it.err = err
	case t != nil:
		it.c = t.cursor()
	}
	return it
}

// Iter walks an index in key order, forward or backward. Key and Value are
// valid until the next move or the end of the View (copy them to keep them):
// while the View runs, the memory they point into stays mapped, even if
// Close gives up waiting for it. They are read-only: they may point into
// the page file's read-only mapping, where a write into them kills the
// process with a fault that recover does not catch, or into the store's
// memory, which other readers share. Copy a key or value before changing
// it (appending to one is safe: its capacity ends at its length). Used
// after its View returned, or after Close gave up waiting for the View,
// its moves return false, Key and Value return nil, and Err says why.
//
// A move that finds no key (Next past the last, Prev before the first, a
// Seek past the last) leaves the iterator off the index: Next and Prev
// then return false too, until First, Last or Seek puts it back on a key.
// To step back from a Seek that went past the end, call Last.
type Iter struct {
	s        *Snapshot
	c        *mergeCursor
	key, raw []byte
	ok       bool
	err      error
}

func (it *Iter) set(k, v []byte, ok bool) bool {
	it.key, it.raw, it.ok = k, v, ok
	if !ok && it.c != nil && it.err == nil {
		it.err = it.c.err
	}
	return ok
}

// move reports whether the iterator may step: it has a cursor and its
// snapshot is still readable (else the reason becomes Err).
func (it *Iter) move() bool {
	if it.c == nil {
		return false
	}
	return it.readable()
}

// readable reports whether the snapshot may still be read; if not, the
// iterator is exhausted and Err says why.
func (it *Iter) readable() bool {
	if err := it.s.usable(); err != nil {
		if it.err == nil {
			it.err = err
		}
		it.set(nil, nil, false)
		return false
	}
	return true
}

// First moves to the smallest key.
func (it *Iter) First() bool {
	if !it.move() {
		return false
	}
	return it.set(it.c.first())
}

// Last moves to the largest key.
func (it *Iter) Last() bool {
	if !it.move() {
		return false
	}
	return it.set(it.c.last())
}

// Seek moves to the smallest key >= key. Any key may be given, even an
// empty one (First) or one longer than MaxKeySize (the smallest stored key
// above it; no stored key is that long): unlike Get, it takes no key for
// ErrInvalid.
func (it *Iter) Seek(key []byte) bool {
	if !it.move() {
		return false
	}
	return it.set(it.c.seek(key))
}

// Next moves to the next key. Off the index (see Iter) it returns false.
func (it *Iter) Next() bool {
	if !it.ok || !it.move() {
		return false
	}
	return it.set(it.c.next())
}

// Prev moves to the previous key. Off the index (see Iter) it returns
// false.
func (it *Iter) Prev() bool {
	if !it.ok || !it.move() {
		return false
	}
	return it.set(it.c.prev())
}

// Key returns the current key, or nil off the index. It is read-only and
// valid until the next move or the end of the View (see Iter): copy it to
// change or keep it.
func (it *Iter) Key() []byte {
	if !it.ok || !it.readable() {
		return nil
	}
	return it.key
}

// Value returns the current value (a copy if it was kept in the journal). On
// error it returns nil and Err reports it. It is read-only and valid until
// the next move or the end of the View (see Iter): copy it to change or
// keep it; a write into it may kill the process.
func (it *Iter) Value() []byte {
	if !it.ok || !it.readable() {
		return nil
	}
	if len(it.raw) > 0 && it.raw[0] == valInline {
		return it.raw[1:]
	}
	v, err := it.s.db.resolve(it.raw)
	if err != nil && it.err == nil {
		it.err = err
	}
	return v
}

// All returns the iterator's keys and values as a range-over-func sequence,
// from First to the end in key order:
//
//	it := s.Iter("users")
//	for k, v := range it.All() {
//		...
//	}
//	if err := it.Err(); err != nil {
//		...
//	}
//
// k and v are Key and Value: read-only (a write into them may kill the
// process, see Iter), valid until the next step or the end of the View
// (copy them to change or keep them). The sequence stops at the first error
// (a value that cannot be read, the View's end, Close giving up waiting)
// without yielding the failed entry, so check Err after the loop. Breaking
// out of the loop leaves the iterator on the last key yielded (Next goes
// on from there); ranging over All again starts over from First.
func (it *Iter) All() iter.Seq2[[]byte, []byte] {
	return func(yield func(k, v []byte) bool) {
		for ok := it.First(); ok; ok = it.Next() {
			k, v := it.Key(), it.Value()
			if it.err != nil {
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// Err returns the first error met while iterating.
func (it *Iter) Err() error { return wrapErr(it.err) }

// resolve returns a copy of the value that the index value v stands for.
// The caller must run inside a View (db.View), whose registration keeps
// the journal segment it reads (see lifecycle.go).
func (db *DB) resolve(v []byte) ([]byte, error) {
	if len(v) == 0 {
		return nil, fmt.Errorf("%w: empty index value", ErrCorrupt)
	}
	switch v[0] {
	case valInline:
		return clone(v[1:]), nil
	case valJournal:
		if len(v) != valRefSize {
			return nil, fmt.Errorf("%w: journal reference of %d bytes", ErrCorrupt, len(v))
		}
		loc := journal.Location{
			Segment: journal.SegmentID(binary.LittleEndian.Uint32(v[1:])),
			Offset:  int64(binary.LittleEndian.Uint64(v[5:])),
		}
		size := int(binary.LittleEndian.Uint32(v[13:]))
		rec, err := db.j.Read(loc)
		if err != nil && db.views.gone.Load() {
			// Close closed the journal under a View that outlasted
			// CloseWait.
			return nil, fmt.Errorf("%w: value at %s: %w", ErrClosed, loc, err)
		}
		if errors.Is(err, journal.ErrNotFound) {
			// The index refers to it, so it existed: lost (a missing
			// segment, skipped by SkipDamagedJournal).
			return nil, fmt.Errorf("%w: the index refers to a value at %s, which the journal no longer holds: %w", ErrCorrupt, loc, err)
		}
		if err != nil {
			return nil, wrapErr(fmt.Errorf("kdb: value at %s: %w", loc, err))
		}
		if rec.Type != recValue || len(rec.Payload) != size {
			return nil, fmt.Errorf("%w: %s: record type %d of %d bytes, want a value of %d", ErrCorrupt, loc, rec.Type, len(rec.Payload), size)
		}
		return rec.Payload, nil
	}
	return nil, fmt.Errorf("%w: index value tag %d", ErrCorrupt, v[0])
}
