package kdb

import (
	"bytes"
	"fmt"
)

// Txn is a read-write transaction: see DB.Update and DB.Submit. Its reads
// see its own writes first (one mechanism for every transaction: the
// batch it builds, indexed by key), then, in a Submit, the writes in flight
// before it, then its snapshot. A Txn is not safe for concurrent use: only
// the function it was given to may use it, from its own goroutine.
type Txn struct {
	db     *DB
	prefix string // tree-name prefix of its index names: "u/" or a namespace's
	b      Batch
	s      *Snapshot
	// own maps ovKey(tree, key) to the index in b.ops of the last op on it;
	// dropped maps a tree to the index of the last op dropping it.
	own     map[string]int
	dropped map[string]int
	ordered bool // a Submit: reads see the writes in flight
	noSync  bool
	// folded: the deferred transactions that run in this one before its
	// function (deferred.go); while one runs, the ops below frozen (its
	// savepoint) are not changed in place.
	folded []deferredTxn
	frozen int
	// goexit: a deferred function run in this Txn called runtime.Goexit
	// (callFn); the host's cleanup answers it with errGoexit.
	goexit bool
}

// Update runs fn as one serializable transaction: fn's reads (Get and
// Iter) see every acknowledged write plus fn's own writes for Get, no other
// write commits while fn runs, and fn's writes commit atomically when it
// returns nil (and are then durable). If fn returns an error nothing is
// written; if it panics, nothing is written and the panic goes on to the
// caller. A Txn write that returned an error (ErrInvalid: a bad key or
// index name, an oversized value) fails the whole transaction even if fn
// ignores it and returns nil: Update returns that error and nothing is
// written. Updates run one at a time, after the transactions submitted
// before them are applied; concurrent blind writes belong in Write, ordered
// ones in Submit. The deferred transactions queued (Defer) run first; fn's
// commit makes them durable with it, and an Update whose fn writes nothing
// syncs them itself (under SyncAlways), and any NoSync commit before it, as
// any write that returns would.
//
// Inside fn (as inside a Submit's function, or a deferred transaction's),
// Get, View, Sync and Checkpoint work (Get and View see the committed
// state, without fn's writes; Sync and Checkpoint leave the deferred
// transactions and compaction for after fn). Put, Delete, Write, Update,
// Submit, Close and the broker's writes, which would wait for this Update
// to end, and Defer, whose transaction would run inside it, return
// ErrInvalid at once; so does Compact when it has values to move. Use the
// Txn.
func (db *DB) Update(fn func(tx *Txn) error) error {
	return db.update(userTreePrefix, fn)
}

func (db *DB) update(prefix string, fn func(tx *Txn) error) error {
	if fn == nil {
		return fmt.Errorf("%w: Update: nil function", ErrInvalid)
	}
	if err := db.lockWrite("Update"); err != nil {
		return err
	}
	defer db.writeMu.Unlock()
	db.enterFn()
	defer db.leaveFn()
	db.mu.Lock()
	err := db.writableLocked()
	db.mu.Unlock()
	if err != nil {
		return err
	}
	// The deferred transactions come first (deferred.go).
	if fns := db.takeDeferred(); len(fns) > 0 {
		reqs := func() []*commitReq {
			db.txMu.Lock()         // free: writeMu excludes every other writer
			defer db.txMu.Unlock() // deferred: see runDeferred
			return db.runDeferred(fns, true)
		}()
		_ = db.waitAll(reqs)
	}
	// writeMu excludes new writers; wait for the ordered commits still in
	// flight, so that fn's snapshot holds everything.
	db.drain()
	tx := &Txn{db: db, prefix: prefix, b: Batch{pooled: true}}
	if err := db.runTxn(tx, fn); err != nil {
		return err
	}
	tx.s = nil
	if len(tx.b.ops) == 0 {
		if db.opts.Sync == SyncAlways {
			// The deferred transactions it ran (and those its drain
			// committed, and any NoSync commit before it) were committed
			// without a sync of their own, to be made durable by the next
			// synced write: this one writes nothing, so it syncs them, as
			// a write would (a broker's AckAsync before a Subscribe that
			// finds the subscription, or a Purge of an empty queue). With
			// nothing unsynced it costs no fdatasync.
			if err := db.j.Sync(); err != nil {
				return db.fail(err)
			}
		}
		return nil
	}
	return db.commitAsync(tx.b.ops, false, true)
}

func (tx *Txn) live() error {
	if tx.s == nil {
		return fmt.Errorf("%w: transaction used after its function returned", ErrInvalid)
	}
	return nil
}

// Put sets key to value in the named index. key and value are copied.
func (tx *Txn) Put(index string, key, value []byte) error {
	if err := tx.live(); err != nil {
		return err
	}
	tx.b.prefix = tx.prefix
	if o := tx.putInPlace(index, key, len(value)); o != nil {
		v := tx.b.alloc(len(value))
		copy(v, value)
		tx.b.size += len(v) - len(o.value)
		o.value = v
		return nil
	}
	tx.b.Put(index, key, value)
	return tx.record()
}

// PutOwned is Put without the copy of value: the transaction keeps value
// itself (the journal is written from it, and reads see it until it is
// applied), so the caller must never change value afterwards. For a buffer
// made for this one write, such as an encoded message. key is copied.
func (tx *Txn) PutOwned(index string, key, value []byte) error {
	if value == nil {
		return tx.Put(index, key, value)
	}
	if err := tx.live(); err != nil {
		return err
	}
	tx.b.prefix = tx.prefix
	if o := tx.putInPlace(index, key, len(value)); o != nil {
		tx.b.size += len(value) - len(o.value)
		o.value = value
		return nil
	}
	tx.b.putOwned(index, key, value)
	return tx.record()
}

// putInPlace returns the op whose value a valid put of n bytes to key
// replaces in place, or nil. A key the transaction put already takes the
// new value in place: its batch journals and applies the key once (a
// broker's destination record, written by each write a transaction
// holds). Not below a savepoint (runFolded): a rollback to it would keep
// the new value.
func (tx *Txn) putInPlace(index string, key []byte, n int) *op {
	if tx.b.err != nil || !tx.b.check(index, key) || n > MaxValueSize {
		return nil
	}
	if i, _ := tx.ownIndex(tx.b.tree(index), key); i >= tx.frozen && tx.b.ops[i].kind == opPut {
		return &tx.b.ops[i]
	}
	return nil
}

// Delete removes key from the named index.
func (tx *Txn) Delete(index string, key []byte) error {
	if err := tx.live(); err != nil {
		return err
	}
	tx.b.prefix = tx.prefix
	tx.b.Delete(index, key)
	return tx.record()
}

// DropIndex removes the named index and all its keys (nothing if it does
// not exist).
func (tx *Txn) DropIndex(index string) error {
	if err := tx.live(); err != nil {
		return err
	}
	tx.b.prefix = tx.prefix
	tx.b.DropIndex(index)
	return tx.record()
}

// NoSync marks the transaction's commit as not needing an fsync of its
// own: it is applied (readers see it) before Commit.Wait returns, and made
// durable by the next synced commit or within Options.SyncInterval,
// whichever comes first; a crash before then loses it whole. Under
// Options.Sync other than SyncAlways every commit is like that already.
func (tx *Txn) NoSync() { tx.noSync = true }

// Fits reports whether the transaction's writes so far fit in one batch of
// this store (DB.MaxBatchSize, Options.SegmentSize): nil, or the ErrInvalid
// ("split the batch") its commit would fail with. A function that builds a
// transaction only to check it (a dry run, whose error discards it) can
// learn so whether the same writes would commit.
func (tx *Txn) Fits() error {
	if tx.b.err != nil {
		return tx.b.err
	}
	ops := tx.b.ops
	if n := len(tx.folded); n > 0 {
		// Deferred transactions that joined this one are committed apart
		// from it if they must (splitFolded): its own writes are the rest.
		ops = ops[tx.folded[n-1].end:]
	}
	return tx.db.fits(ops)
}

// ownScanMax is how many operations a Txn finds its own writes among by a
// scan; past it, record indexes them in own and dropped.
const ownScanMax = 16

func (tx *Txn) record() error {
	if tx.b.err != nil {
		return tx.b.err
	}
	n := len(tx.b.ops)
	switch {
	case n <= ownScanMax:
	case tx.own == nil:
		tx.own = make(map[string]int, 2*n)
		for i := range tx.b.ops {
			tx.index(i)
		}
	default:
		tx.index(n - 1)
	}
	return nil
}

// index records op i in own or dropped.
func (tx *Txn) index(i int) {
	o := &tx.b.ops[i]
	if o.kind == opDropTree {
		if tx.dropped == nil {
			tx.dropped = make(map[string]int)
		}
		tx.dropped[string(o.tree)] = i
		return
	}
	o.ovk = ovKey(o.tree, o.key)
	tx.own[o.ovk] = i
}

// ownOp returns the transaction's last write of key in tree: found is
// false if it has none; o is nil if the tree was dropped since.
func (tx *Txn) ownOp(tree, key []byte) (o *op, found bool) {
	i, found := tx.ownIndex(tree, key)
	if i < 0 {
		return nil, found
	}
	return &tx.b.ops[i], true
}

// ownIndex is ownOp as an index into the batch's ops: -1 if there is no
// such write (found: the tree was dropped since).
func (tx *Txn) ownIndex(tree, key []byte) (i int, found bool) {
	ops := tx.b.ops
	if tx.own == nil {
		for i := len(ops) - 1; i >= 0; i-- {
			o := &ops[i]
			if !bytes.Equal(o.tree, tree) {
				continue
			}
			if o.kind == opDropTree {
				return -1, true
			}
			if bytes.Equal(o.key, key) {
				return i, true
			}
		}
		return -1, false
	}
	d, dropped := tx.dropped[string(tree)]
	var buf [80]byte
	if i, ok := tx.own[string(appendOvKey(buf[:0], tree, key))]; ok && (!dropped || i > d) {
		return i, true
	}
	return -1, dropped
}

// Get returns a copy of the value of key in the named index as this
// transaction sees it (its own writes, then, in a Submit, the writes in
// flight, then its snapshot), or ErrNotFound. An empty or oversized key or
// index name is ErrInvalid.
func (tx *Txn) Get(index string, key []byte) ([]byte, error) {
	if err := tx.live(); err != nil {
		return nil, err
	}
	if err := checkIndexName(tx.prefix, index); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	tx.b.prefix = tx.prefix
	tree := tx.b.tree(index)
	if o, found := tx.ownOp(tree, key); found {
		if o == nil || o.kind == opDelete {
			return nil, ErrNotFound
		}
		return bytes.Clone(o.value), nil
	}
	if tx.ordered {
		if v, ok, found := tx.db.lookup(tree, key); found {
			if !ok {
				return nil, ErrNotFound
			}
			return bytes.Clone(v), nil
		}
	}
	return tx.s.Get(index, key)
}

// Iter returns an iterator over the named index as committed when the
// transaction began: without the transaction's own writes, and in a
// Submit without the writes in flight.
func (tx *Txn) Iter(index string) *Iter {
	if err := tx.live(); err != nil {
		return &Iter{err: err}
	}
	return tx.s.Iter(index)
}

// Len returns the number of keys in the named index as committed when the
// transaction began (as Iter sees it).
func (tx *Txn) Len(index string) (uint64, error) {
	if err := tx.live(); err != nil {
		return 0, err
	}
	return tx.s.Len(index)
}

// Exists reports whether the named index exists as committed when the
// transaction began (as Iter sees it).
func (tx *Txn) Exists(index string) (bool, error) {
	if err := tx.live(); err != nil {
		return false, err
	}
	return tx.s.Exists(index)
}
