package kdb

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Ordered commits and the writes in flight (docs/DESIGN.md "Ordered
// commits").
//
// A batch is in flight from the moment it is queued for the journal until
// it is applied to the index. A transaction that commits in order (Submit)
// must see the batches in flight before it, or a producer's second message
// would get the sequence number of its first: so every batch queued
// registers the last value it gives each key in the in-flight overlay, and a
// Txn reads its own writes, then the overlay, then its snapshot. Submissions
// are serialized by txMu, so the order in which transactions read is the
// order they are queued in, which is journal order and apply order.
//
// Invariants:
//   - keys holds, for each key written by a batch in flight (or applied
//     since the last cleanup), the value the last such batch gave it, with
//     that batch's gen; drops holds the gen of the last such batch that
//     dropped each tree. keys and drops are read and written only under
//     txMu.
//   - An entry is removed (cleanup, under txMu) only after its batch is
//     applied, and before the next Txn takes its snapshot: an entry is
//     either in the overlay or in every snapshot taken after its removal.
//   - n counts the batches queued and not yet applied or failed; Update
//     and Close wait for it to reach 0 (drain).
type inflight struct {
	keys  map[string]ovEntry
	drops map[string]uint64
	gen   uint64

	mu   sync.Mutex
	cond *sync.Cond
	// drainers counts the drains waiting on cond (giveLeadLocked wakes
	// them when a Submit's Commit not waited for holds the leader role).
	drainers atomic.Int32
	n        int
	applied  []*commitReq // applied or failed, entries not yet removed
}

type ovEntry struct {
	gen uint64
	val []byte
	del bool
}

// ovKey is the overlay's and a Txn's key for (tree, key).
func ovKey(tree, key []byte) string {
	return string(appendOvKey(make([]byte, 0, 1+len(tree)+len(key)), tree, key))
}

func appendOvKey(b, tree, key []byte) []byte {
	return append(append(append(b, byte(len(tree))), tree...), key...)
}

// ovKeysSize returns the bytes of the overlay keys register makes: those
// of the key writes that have none yet.
func ovKeysSize(ops []op) int {
	n := 0
	for i := range ops {
		switch o := &ops[i]; o.kind {
		case opDelete, opPut, opPutJournal:
			if o.ovk == "" {
				n += 1 + len(o.tree) + len(o.key)
			}
		}
	}
	return n
}

// register records req's writes in the overlay. The caller holds txMu and
// queues req right after: nothing may fail in between.
func (db *DB) register(req *commitReq) {
	f := &db.fl
	db.cleanup()
	f.gen++
	req.gen = f.gen
	// The keys made here live as long as their entries: one buffer holds
	// them all.
	var arena []byte
	if n := ovKeysSize(req.ops); n > 0 {
		arena = make([]byte, 0, n)
	}
	for i := range req.ops {
		o := &req.ops[i]
		switch o.kind {
		case opDropTree:
			if f.drops == nil {
				f.drops = map[string]uint64{}
			}
			f.drops[string(o.tree)] = req.gen
			req.ovDrops = append(req.ovDrops, string(o.tree))
		case opDelete, opPut, opPutJournal:
			if f.keys == nil {
				f.keys = map[string]ovEntry{}
			}
			k := o.ovk
			if k == "" {
				start := len(arena)
				arena = appendOvKey(arena, o.tree, o.key)
				k = bstr(arena[start:])
			}
			f.keys[k] = ovEntry{gen: req.gen, val: o.value, del: o.kind == opDelete}
			if req.ovKeys == nil {
				if len(req.ops) <= len(req.ovKeyBuf) {
					req.ovKeys = req.ovKeyBuf[:0]
				} else {
					req.ovKeys = make([]string, 0, len(req.ops))
				}
			}
			req.ovKeys = append(req.ovKeys, k)
		}
	}
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

// cleanup removes the overlay entries of the batches applied since the
// last cleanup (unless a later batch replaced them). The caller holds txMu.
func (db *DB) cleanup() {
	f := &db.fl
	f.mu.Lock()
	done := f.applied
	f.applied = nil
	f.mu.Unlock()
	for _, r := range done {
		for _, k := range r.ovKeys {
			if e, ok := f.keys[k]; ok && e.gen == r.gen {
				delete(f.keys, k)
			}
		}
		for _, t := range r.ovDrops {
			if f.drops[t] == r.gen {
				delete(f.drops, t)
			}
		}
	}
}

// settled marks the batches of group applied (or failed): their overlay
// entries go at the next cleanup.
func (db *DB) settled(group []*commitReq) {
	f := &db.fl
	f.mu.Lock()
	f.applied = append(f.applied, group...)
	f.n -= len(group)
	if f.n == 0 && f.cond != nil {
		f.cond.Broadcast()
	}
	f.mu.Unlock()
}

// drain waits until no batch is in flight.
func (db *DB) drain() { db.drainUntil(time.Time{}) }

// drainUntil waits until no batch is in flight, or until deadline (if not
// zero), and reports whether none is.
func (db *DB) drainUntil(deadline time.Time) bool {
	f := &db.fl
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cond == nil {
		f.cond = sync.NewCond(&f.mu)
	}
	if !deadline.IsZero() && f.n > 0 {
		t := time.AfterFunc(time.Until(deadline), func() {
			f.mu.Lock()
			f.cond.Broadcast()
			f.mu.Unlock()
		})
		defer t.Stop()
	}
	for f.n > 0 {
		// Counted before held is read: giveLeadLocked stores held, then
		// reads drainers, and wakes the drains it counts (under f.mu).
		f.drainers.Add(1)
		if h := db.cq.held.Load(); h != nil {
			// A Submit's Commit not waited for holds the leader role:
			// commit it.
			f.drainers.Add(-1)
			f.mu.Unlock()
			db.leadHeld(h)
			f.mu.Lock()
			continue
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			f.drainers.Add(-1)
			return false
		}
		if testHookDrainChecked != nil {
			testHookDrainChecked()
		}
		f.cond.Wait()
		f.drainers.Add(-1)
	}
	return true
}

// lookup returns what the overlay says of key in tree: found is false when
// it says nothing (read the snapshot). The caller holds txMu.
func (db *DB) lookup(tree, key []byte) (val []byte, ok, found bool) {
	f := &db.fl
	d := f.drops[string(tree)]
	var buf [80]byte
	if e, hit := f.keys[string(appendOvKey(buf[:0], tree, key))]; hit && e.gen > d {
		return e.val, !e.del, true
	}
	if d > 0 {
		return nil, false, true
	}
	return nil, false, false
}

// lockTx takes txMu, or returns ErrInvalid if the caller runs the function
// of a Submit or an Update, or a deferred transaction's done (it would, or
// could, wait for itself).
func (db *DB) lockTx(call string) error {
	if err := db.inDone(call); err != nil {
		return err
	}
	if db.txMu.TryLock() {
		return nil
	}
	if err := db.nested(call); err != nil {
		return err
	}
	db.txMu.Lock()
	return nil
}

// Commit is a transaction submitted by Submit: queued for the journal in
// submission order, and not yet known durable.
//
// Every Commit must be waited for (Wait, from any goroutine): its done
// functions run, and its outcome is known, only then. A Commit not yet
// waited for does not hold up the writes queued after it: a writer that
// waits behind it leads the commit of both (so a goroutine may Submit,
// write, and then Wait). While no other write comes, it waits for its
// Wait. Close commits the Commits not waited for; it waits for the writes
// in flight up to Options.CloseWait, and one still not committed then is
// abandoned (never acknowledged, so nothing acknowledged is lost) and its
// Wait returns ErrClosed.
type Commit struct {
	db  *DB
	req *commitReq // nil: the transaction wrote nothing
	// pre: the deferred transactions queued as batches of their own
	// before req (deferred.go).
	pre  []*commitReq
	once sync.Once
	err  error
}

// Wait waits until the commit is applied (readers see it) and durable
// under the sync mode, and returns its outcome; a transaction marked
// NoSync is waited for until applied only. Wait may be called more than
// once and from several goroutines; all get the same outcome.
func (c *Commit) Wait() error {
	c.once.Do(func() {
		// The deferred transactions' outcomes go to their done
		// functions; a failed commit fails the handle, and so c too.
		_ = c.db.waitAll(c.pre)
		if c.req == nil {
			return
		}
		c.err = c.db.wait(c.req)
		if c.err != nil && c.db.Err() == nil && !errors.Is(c.err, ErrClosed) {
			// Transactions submitted after this one read its writes.
			c.err = c.db.fail(fmt.Errorf("ordered commit not applied: %w", c.err))
		}
	})
	return c.err
}

// Submit runs fn as a transaction that commits in order, without waiting
// for its fsync: fn's reads see every write acknowledged or submitted before
// it (applied or still in flight) plus its own; transactions submitted
// concurrently run fn one at a time, and commit in that order. When fn
// returns nil, its writes are queued for the journal and Submit returns:
// the caller then calls Commit.Wait, after releasing whatever fn's caller
// must not hold across an fsync, so that the next transaction is built and
// written while this one's fsync runs (a message broker's concurrent
// producers share fsyncs that way). If fn returns an error, nothing is
// written and that error is returned; if fn panics, nothing is written, the
// store stays usable and the panic goes on to the caller. A Txn write that
// returned an error fails the transaction even if fn ignores it and
// returns nil: Submit returns that error and nothing is written. A
// transaction with no writes returns a Commit whose Wait returns nil at
// once.
//
// Txn.Iter inside fn sees the committed state, not the writes in flight nor
// fn's own: use Update for transactions that must scan everything.
// Inside fn the same calls as inside an Update's function return
// ErrInvalid at once (Put, Delete, Write, Update, Submit, Defer, Close,
// the broker's writes, and Compact when it has values to move), and the
// same work (Get, View, Sync, Checkpoint): see DB.Update.
func (db *DB) Submit(fn func(tx *Txn) error) (*Commit, error) {
	return db.submitTxn(userTreePrefix, fn)
}

func (db *DB) submitTxn(prefix string, fn func(tx *Txn) error) (*Commit, error) {
	if fn == nil {
		return nil, fmt.Errorf("%w: Submit: nil function", ErrInvalid)
	}
	if err := db.rlockWrite("Submit"); err != nil {
		return nil, err
	}
	defer db.writeMu.RUnlock()
	if err := db.waitForRoom(); err != nil { // also says whether the handle takes writes
		return nil, err
	}
	if err := db.lockTx("Submit"); err != nil {
		return nil, err
	}
	defer db.txMu.Unlock()
	db.detaching = true
	defer func() { db.detaching = false }()
	db.enterFn()
	defer db.leaveFn()
	db.cleanup()
	// One allocation for both: the Commit outlives the Txn, whose batch
	// its request holds anyway.
	tc := &struct {
		tx Txn
		c  Commit
	}{tx: Txn{db: db, prefix: prefix, ordered: true, b: Batch{pooled: true}}, c: Commit{db: db}}
	tx, c := &tc.tx, &tc.c
	// The deferred transactions run first: in this transaction when they
	// are in its namespace, else each as a batch of its own queued before
	// it (deferred.go).
	if fns := db.takeDeferred(); len(fns) > 0 {
		if foldable(fns, prefix) {
			tx.folded = fns
		} else {
			c.pre = db.runDeferred(fns, true)
			db.cleanup()
		}
	}
	// A panic in fn goes on to the caller (as in Update), after the same
	// cleanup as an error: the deferred transactions that joined are put
	// back, and those queued before it are waited for (every request must
	// be: the first one queued leads the commit, and the queue's head left
	// unled would hold up every later write).
	panicking := true
	defer func() {
		if panicking {
			db.requeueDeferred(tx.unfolded())
			if len(c.pre) > 0 {
				go func() { _ = db.waitAll(c.pre) }()
			}
		}
	}()
	err := db.runTxn(tx, fn)
	panicking = false
	var req *commitReq
	if err == nil && len(tx.folded) > 0 && !db.foldedFits(tx.b.ops) {
		var pre []*commitReq
		var own []op
		pre, own, err = db.splitFolded(tx)
		c.pre = append(c.pre, pre...)
		if err == nil && len(own) > 0 {
			req, err = db.submit(own, tx.noSync, false)
		}
	} else if err == nil && len(tx.b.ops) > 0 {
		db.settleNext = tx.foldedFins()
		req, err = db.submit(tx.b.ops, tx.noSync, true)
	}
	if err != nil {
		db.requeueDeferred(tx.unfolded())
		if len(c.pre) > 0 {
			// Queued already: waited for, as every request must be.
			go func() { _ = db.waitAll(c.pre) }()
		}
		return nil, err
	}
	if req == nil {
		// Nothing written: the deferred functions that joined are done.
		for _, f := range tx.foldedDone() {
			f(nil)
		}
		if len(c.pre) == 0 {
			c.once.Do(func() {})
		}
		return c, nil
	}
	req.onDone = append(req.onDone, tx.foldedDone()...)
	c.req = req
	return c, nil
}

// runTxn runs fn with tx in a View of its own. The caller holds txMu, or
// writeMu exclusively: transactions run one at a time, so the Snapshot
// they read through is one reused (db.txSnap, with the tree names it
// made), unless an Iter made from it may outlive the transaction.
func (db *DB) runTxn(tx *Txn, fn func(tx *Txn) error) error {
	s := db.txSnap
	db.txSnap = nil
	if s == nil {
		s = new(Snapshot)
	}
	// A closure, not fn stored in s: that would move fn (and what it
	// captures) to the heap.
	err := db.txView(tx.prefix, s, func(s *Snapshot) error {
		tx.s = s
		defer func() { tx.s = nil }()
		tx.runFolded()
		return fn(tx)
	})
	if !s.escaped {
		s.recycle()
		db.txSnap = s
	}
	if err != nil {
		return err
	}
	return tx.b.err
}

// txView is viewIn for transactions: it runs fn on s, filled with the
// mem tables' state and S and the transactions' pinned index snapshot
// (pinnedIndex) rather than a View of the index begun for it. The caller holds
// txMu, or writeMu exclusively.
func (db *DB) txView(prefix string, s *Snapshot, fn func(s *Snapshot) error) error {
	for {
		// As in viewIn: the index snapshot first (one pinned is the
		// current one, as a View begun now would be), then the mem
		// tables' state and S, again if a flush committed in between.
		gen := db.mem.flushes.Load()
		tx := db.txIx.get(db.ix)
		again, err := db.viewOn(tx, gen, prefix, s, fn)
		if again {
			continue
		}
		if terr := tx.Err(); terr != nil {
			// A failed read (I/O, corruption) comes first, as in a View;
			// the next transaction pins a fresh snapshot.
			err = terr
		}
		return wrapErr(err)
	}
}

// Namespace is a set of indexes kept apart from the user indexes of the
// DB's own methods, for a layer built on the engine (the broker package
// keeps its message store in namespace "b"). Index "x" of namespace "n" is
// tree "n/x" on disk, as user index "x" is tree "u/x" (docs/FORMAT.md, tree
// names). Everything else (journal, checkpoints, recovery, Check, Export)
// treats a namespace's indexes as it treats user indexes.
type Namespace struct {
	db     *DB
	name   string
	prefix string
}

// MaxNamespaceSize bounds a namespace's name.
const MaxNamespaceSize = 8

// Namespace returns the namespace called name: 1..MaxNamespaceSize bytes of
// a-z and 0-9, not "u" (the user indexes) or "k" (the engine's own trees).
// Index names in namespace n are at most MaxIndexNameSize-len(n)+1 bytes.
func (db *DB) Namespace(name string) (*Namespace, error) {
	if !validNamespace(name) {
		return nil, fmt.Errorf("%w: namespace %q: want 1..%d bytes of a-z and 0-9, not u or k", ErrInvalid, name, MaxNamespaceSize)
	}
	return &Namespace{db: db, name: name, prefix: name + "/"}, nil
}

func validNamespace(name string) bool {
	if len(name) == 0 || len(name) > MaxNamespaceSize || name == "u" || name == "k" {
		return false
	}
	for _, c := range []byte(name) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Name returns the namespace's name.
func (n *Namespace) Name() string { return n.name }

// DB returns the store the namespace is in.
func (n *Namespace) DB() *DB { return n.db }

// NewBatch returns an empty batch whose index names are the namespace's;
// commit it with DB.Write.
func (n *Namespace) NewBatch() *Batch { return &Batch{prefix: n.prefix} }

// Get is DB.Get in the namespace.
func (n *Namespace) Get(index string, key []byte) ([]byte, error) {
	return n.db.get(n.prefix, index, key)
}

// View is DB.View in the namespace: the snapshot's index names are the
// namespace's.
func (n *Namespace) View(fn func(s *Snapshot) error) error {
	return n.db.view(n.prefix, fn)
}

// Update is DB.Update in the namespace.
func (n *Namespace) Update(fn func(tx *Txn) error) error {
	return n.db.update(n.prefix, fn)
}

// Submit is DB.Submit in the namespace.
func (n *Namespace) Submit(fn func(tx *Txn) error) (*Commit, error) {
	return n.db.submitTxn(n.prefix, fn)
}

// MaxBatchSize returns the largest encoded batch record: a Write or a
// transaction whose operations (keys, and values up to
// Options.ValueThreshold, with a few bytes each) take more is ErrInvalid, to
// be split. Values kept in the journal count apart, each up to the same
// size.
func (db *DB) MaxBatchSize() int { return db.maxRecord }

// PutSize returns the bytes a Put of key, with a value of valueLen bytes
// kept in the batch record (up to Options.ValueThreshold), into the
// namespace's index takes in the record that MaxBatchSize bounds: a layer
// whose writes grow with its data (one entry per subscriber, say) counts
// with it what still fits in one batch.
func (n *Namespace) PutSize(index string, key []byte, valueLen int) int {
	tree := len(n.prefix) + len(index)
	return 1 + uvarintLen(uint64(tree)) + tree + uvarintLen(uint64(len(key))) + len(key) +
		uvarintLen(uint64(valueLen)) + valueLen
}
