package kdb

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Deferred transactions (docs/DESIGN.md "Deferred transactions").
//
// Defer queues a transaction's function without taking txMu: it runs,
// in the order deferred, under txMu at the start of the next write that
// takes txMu (a Submit, whose transaction it joins when both are in the
// same namespace, or a Write, Put or Delete, before whose batch it is
// queued as its own), before an Update's function, at Sync, Checkpoint and
// Close, or by a timer within Options.SyncInterval. So a layer's
// fire-and-forget writes (the broker's AckAsync) cost no commit of their
// own: they ride the next write's batch, group and fsync.
//
// Invariants:
//   - A write that takes txMu after Defer returned runs the deferred
//     function before its own reads (Submit, Update) or queues it before
//     its own batch (Write): deferred functions are ordered before every
//     write that begins after Defer returns.
//   - A deferred function whose host fails (its function returns an
//     error) is put back at the head of the queue: it runs again with the
//     next host.
//   - A deferred function's own error fails it alone, whatever it wraps
//     (ErrClosed, ErrFailed): the others, and the write hosting them,
//     fail only by the DB's own state (Err, Close) or commit.
//   - done is called exactly once: after the deferred writes are applied
//     (nil) or known never to be (the function's error, the commit's
//     failure, ErrClosed).

// deferredTxn is one deferred transaction.
type deferredTxn struct {
	prefix string
	fn     func(tx *Txn) error
	done   func(error)
	// end: once folded into a transaction and run, the end of its writes
	// in that transaction's ops (they begin at the previous one's end).
	end int
	// fin counts it finished for syncDeferred (done calls it too).
	fin *deferFin
}

// deferFin is a deferred transaction's place in the count syncDeferred
// waits for (dq.live): settled once its writes are applied or known never
// to be, which is when its done is called, or before that, by the leader
// that applied the batch carrying them (commitReq.settle): done runs only
// when that batch's Commit is waited for, and Sync (and Checkpoint) must
// not wait for a Wait the same goroutine makes after them.
type deferFin struct {
	db      *DB
	epoch   uint64
	done    func(error)
	settled atomic.Bool
}

func (f *deferFin) settle() {
	if f.settled.CompareAndSwap(false, true) {
		f.db.deferFinished(f.epoch)
	}
}

// finish calls the user's done with err and settles f.
func (f *deferFin) finish(err error) {
	defer f.settle()
	if f.done != nil {
		f.db.callDone(f.done, err)
	}
}

// deferredQueue holds the deferred transactions not yet run.
type deferredQueue struct {
	sync.Mutex
	fns []deferredTxn
	// queued is len(fns), read without the lock by writers that find
	// nothing to run (most of them).
	queued atomic.Int32
	timer  *time.Timer
	armed  bool
	closed bool
	// live counts the deferred transactions not yet finished (done not
	// yet called), by the epoch they were deferred in; syncDeferred (Sync,
	// Checkpoint) starts a new epoch and waits until the earlier ones have
	// none left: a deferred transaction taken by a host (a writer, or the
	// timer's flush) is finished by that host, not by Sync's own flush.
	epoch uint64
	live  map[uint64]int
	idle  *sync.Cond // on the queue's mutex: an epoch's count reached 0
	// waiters counts the syncDeferred calls waiting on idle (counted
	// before they read the commit queue's held: giveLeadLocked wakes them).
	waiters atomic.Int32
}

// Defer queues fn as a transaction in the user indexes; see
// Namespace.Defer.
func (db *DB) Defer(fn func(tx *Txn) error, done func(err error)) error {
	return db.deferTxn(userTreePrefix, fn, done)
}

// Defer queues fn as an ordered transaction in the namespace and returns
// without waiting for anything (no lock a writer holds, no fsync), unless
// the queue is full: the Defer that brings it to 1,024 transactions commits
// them all (fn too; each is durable as below, not synced by this), so a
// loop of Defers with no other write goes at the pace of their commits and
// the queue never holds more. That Defer may call done functions, this
// one's included, before it returns: a caller must not hold a lock that a
// done function takes (it would wait for itself). fn runs
// later, in the order deferred, at the start of the next transaction or
// write of the DB (joining a Submit's transaction in the same namespace, so
// that it shares its batch; queued before the batch of any other write),
// at Sync, Checkpoint and Close, or by a timer within Options.SyncInterval,
// whichever comes first. Every write that begins after Defer returns is
// ordered after fn, and reads fn's writes. Called inside an Update's or a
// Submit's function, or inside a deferred fn, Defer returns ErrInvalid
// (the transaction it queues would run inside that one): add the writes
// to that function's Txn. Inside a done it works.
//
// fn must be a function of the state it reads (it may run more than once:
// when the transaction it joined fails, its writes are discarded with the
// rest and fn runs again with the next one). If fn returns an error, its
// writes are discarded and the transaction it joined goes on without them,
// whatever the error wraps (an ErrClosed or ErrFailed fn returns is its
// own, from a handle of its own, say: only this DB's state fails the
// others);
// a panic in fn is that error (wrapping ErrInvalid, logged with the stack):
// fn runs in another caller's write or on a timer, where the panic would
// reach a caller that has nothing to do with it. runtime.Goexit in fn (as
// t.FailNow and t.Fatal call) cannot be stopped: it ends the goroutine that
// runs fn, that other caller's or the timer's, and fn's done gets an error
// wrapping ErrInvalid; the store goes on. A panic in done is logged and
// goes no further.
// done, if not nil, is called once: by the goroutine that waited for the
// commit, with nil after fn's writes are applied (readers see them;
// durable with that commit, or with the next synced one or within
// SyncInterval), or with the reason they never will be (fn's error, a
// failed commit, ErrClosed); it may run holding the DB's write locks, so the
// calls that take them (Put, Write, Delete, Submit, Update, Compact,
// Close) return ErrInvalid in it; reads, Defer, Sync and Checkpoint are
// allowed (Sync and Checkpoint there do not wait for deferred
// transactions). fn's writes are durable once a later
// synced write, Sync or Checkpoint returns; a crash before that loses them
// whole.
func (n *Namespace) Defer(fn func(tx *Txn) error, done func(err error)) error {
	return n.db.deferTxn(n.prefix, fn, done)
}

func (db *DB) deferTxn(prefix string, fn func(tx *Txn) error, done func(error)) error {
	if fn == nil {
		return fmt.Errorf("%w: Defer: nil function", ErrInvalid)
	}
	if err := db.Err(); err != nil {
		return err
	}
	// In a done (which may run under an Update's or a Submit's mark, after
	// its function failed) Defer is allowed: queuing takes no lock a
	// writer holds, and a full queue's flush skips itself there.
	if !db.doners.has(currentMark) {
		if err := db.inFn("Defer"); err != nil {
			// As every write from there: the function's own Txn is the way.
			return err
		}
	}
	if db.opts.ReadOnly {
		return ErrReadOnly
	}
	q := &db.dq
	q.Lock()
	if q.closed {
		q.Unlock()
		return ErrClosed
	}
	e := q.epoch
	if q.live == nil {
		q.live = map[uint64]int{}
	}
	q.live[e]++
	fin := &deferFin{db: db, epoch: e, done: done}
	q.fns = append(q.fns, deferredTxn{prefix: prefix, fn: fn, done: fin.finish, fin: fin})
	q.queued.Store(int32(len(q.fns)))
	if !q.armed {
		q.armed = true
		if q.timer == nil {
			q.timer = time.AfterFunc(db.opts.SyncInterval, db.flushDeferredTimer)
		} else {
			q.timer.Reset(db.opts.SyncInterval)
		}
	}
	full := len(q.fns) >= maxDeferred
	q.Unlock()
	if full {
		// The caller pays for the queue it filled: without it a loop of
		// Defers with no other write outran the timer's flushes (each
		// deferred transaction costs its commit's work, a Defer a
		// closure), and the queue grew without bound (1.7 million
		// queued, 818 MiB, in 3 s, TestDefer_QueueIsBounded). Not synced:
		// as any deferred transaction, durable with the next synced write
		// or within SyncInterval. Its outcome is each function's done.
		_ = db.flushDeferred(false)
	}
	return nil
}

// maxDeferred is how many deferred transactions may wait in the queue: the
// Defer that fills it commits them (and its own) before it returns.
const maxDeferred = 1024

// callFn runs a deferred function with a panic turned into its error
// (wrapping ErrInvalid, logged with the stack): a deferred function runs in
// another caller's write, with txMu held, or on the timer's goroutine,
// where a panic would reach a caller that has nothing to do with it, or
// end the process. Its writes are discarded and done receives the error,
// as for any failing deferred function.
//
// runtime.Goexit (t.FailNow, t.Fatal) cannot be stopped: it ends the
// goroutine that hosts the function. callFn marks tx (goexit), and the
// host's cleanup (runDeferred's, runFolded's) answers that function with
// errGoexit, not running it again, releases what the host holds and
// leaves the other deferred transactions queued or waited for, so that
// the DB goes on.
func (db *DB) callFn(fn func(tx *Txn) error, tx *Txn) (err error) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			db.opts.Logger.Error("kdb: a deferred transaction's function panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: Defer: the function panicked: %v", ErrInvalid, r)
		} else if !returned {
			db.opts.Logger.Error("kdb: a deferred transaction's function called runtime.Goexit: the goroutine hosting it ends", "stack", string(debug.Stack()))
			tx.goexit = true
		}
	}()
	err = fn(tx)
	returned = true
	return err
}

// errGoexit answers a deferred transaction whose function called
// runtime.Goexit.
var errGoexit = fmt.Errorf("%w: Defer: the function called runtime.Goexit (t.FailNow, t.Fatal?): it ended the goroutine that ran it, another caller's write or the timer's", ErrInvalid)

// callDone calls a deferred transaction's done with err; a panic in it is
// logged with the stack and goes no further (see callFn).
func (db *DB) callDone(done func(error), err error) {
	defer func() {
		if r := recover(); r != nil {
			db.opts.Logger.Error("kdb: a deferred transaction's done function panicked", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	slot := db.doners.enter()
	defer db.doners.leave(slot)
	done(err)
}

// deferFinished counts one deferred transaction of epoch e finished (its
// done called).
func (db *DB) deferFinished(e uint64) {
	q := &db.dq
	q.Lock()
	defer q.Unlock()
	if q.live[e]--; q.live[e] <= 0 {
		delete(q.live, e)
		if q.idle != nil {
			q.idle.Broadcast()
		}
	}
}

// syncDeferred runs the deferred transactions queued and waits until every
// one deferred before the call is finished: applied (so written to the
// journal, which the caller then syncs or checkpoints) or known never to
// be. Those a host took already (a writer, or the timer's flush) are
// finished by their host: without the wait, a Sync could return while
// the timer's flush of a Defer made before it was still on its way to the
// journal. Inside an Update's or a Submit's function it does nothing (the
// function's own transaction may be the host).
func (db *DB) syncDeferred() error {
	if db.nested("flush") != nil {
		return nil
	}
	q := &db.dq
	q.Lock()
	e := q.epoch
	q.epoch++
	q.Unlock()
	if err := db.flushDeferred(false); err != nil {
		return err
	}
	q.Lock()
	defer q.Unlock()
	if q.idle == nil {
		q.idle = sync.NewCond(&q.Mutex)
	}
	for {
		older := false
		for k := range q.live {
			older = older || k <= e
		}
		switch {
		case !older:
			return nil
		case len(q.fns) > 0:
			// Put back by a host whose transaction failed: run them.
			q.Unlock()
			err := db.flushDeferred(false)
			q.Lock()
			if err != nil {
				return err
			}
		default:
			// The batch carrying one may be a Submit's whose Commit is
			// not yet waited for, holding the leader role: commit it
			// (giveLeadLocked wakes this wait when it marks one held).
			q.waiters.Add(1)
			if h := db.cq.held.Load(); h != nil {
				q.waiters.Add(-1)
				q.Unlock()
				db.leadHeld(h)
				q.Lock()
				continue
			}
			q.idle.Wait()
			q.waiters.Add(-1)
		}
	}
}

// takeDeferred returns the deferred transactions queued and empties the
// queue. The caller holds txMu (or writeMu exclusively) and runs them.
func (db *DB) takeDeferred() []deferredTxn {
	q := &db.dq
	if q.queued.Load() == 0 {
		return nil
	}
	q.Lock()
	defer q.Unlock()
	fns := q.fns
	q.fns = nil
	q.queued.Store(0)
	return fns
}

// requeueDeferred puts fns back at the head of the queue: the transaction
// they joined failed.
func (db *DB) requeueDeferred(fns []deferredTxn) {
	if len(fns) == 0 {
		return
	}
	q := &db.dq
	q.Lock()
	if q.closed {
		q.Unlock()
		finishDeferred(fns, ErrClosed)
		return
	}
	q.fns = append(fns[:len(fns):len(fns)], q.fns...)
	q.queued.Store(int32(len(q.fns)))
	if q.idle != nil {
		q.idle.Broadcast() // a Sync waiting for them runs them
	}
	q.Unlock()
}

// finishDeferred calls the done functions of fns with err.
func finishDeferred(fns []deferredTxn, err error) {
	for _, d := range fns {
		if d.done != nil {
			d.done(err)
		}
	}
}

// foldable reports whether fns can all join a transaction with prefix:
// they are in its namespace (a Txn reads and writes one namespace).
func foldable(fns []deferredTxn, prefix string) bool {
	for _, d := range fns {
		if d.prefix != prefix {
			return false
		}
	}
	return true
}

// runFolded runs the deferred functions that joined tx, in order, before
// tx's own function: the writes of one that fails are discarded, and its
// done is called at once.
func (tx *Txn) runFolded() {
	noSync := tx.noSync
	i := 0
	defer func() {
		if tx.goexit {
			// Its function ended the host's goroutine: answered here, so
			// that the host's cleanup (requeueDeferred of tx.unfolded())
			// does not run it again in the next host.
			d := &tx.folded[i]
			if d.done != nil {
				d.done(errGoexit)
			}
			d.fn, d.done = nil, nil
		}
	}()
	for i = range tx.folded {
		d := &tx.folded[i]
		m := tx.mark()
		tx.frozen = m.ops
		err := tx.db.callFn(d.fn, tx)
		if err == nil {
			err = tx.b.err
		}
		if err != nil {
			tx.rollback(m)
			if d.done != nil {
				d.done(err)
			}
			d.fn, d.done = nil, nil // answered: not run again
		}
		d.end = len(tx.b.ops)
	}
	// The host's function never changes the deferred functions' writes in
	// place either, so that they can still be committed apart from its own
	// (splitFolded) and the host stays all or nothing.
	tx.frozen = len(tx.b.ops)
	// Whether the host's commit is synced is the host's: a deferred
	// function's NoSync is moot (it is never waited durable anyway).
	tx.noSync = noSync
}

// unfolded returns the deferred transactions that joined tx, to be run
// again with the next one (tx failed).
func (tx *Txn) unfolded() []deferredTxn {
	var out []deferredTxn
	for _, d := range tx.folded {
		if d.fn != nil {
			out = append(out, d)
		}
	}
	return out
}

// foldedDone returns the done functions of the deferred transactions
// that joined tx and succeeded.
func (tx *Txn) foldedDone() []func(error) {
	var out []func(error)
	for _, d := range tx.folded {
		if d.done != nil {
			out = append(out, d.done)
		}
	}
	return out
}

// foldedFins returns the counts (deferFin) of the deferred transactions
// that joined tx and succeeded, settled when tx's batch is applied.
func (tx *Txn) foldedFins() []*deferFin {
	var out []*deferFin
	for _, d := range tx.folded {
		if d.done != nil && d.fin != nil {
			out = append(out, d.fin)
		}
	}
	return out
}

// txnMark is a point a Txn can be rolled back to.
type txnMark struct{ ops, size int }

func (tx *Txn) mark() txnMark { return txnMark{len(tx.b.ops), tx.b.size} }

// rollback discards the writes made since m.
func (tx *Txn) rollback(m txnMark) {
	clear(tx.b.ops[m.ops:])
	tx.b.ops = tx.b.ops[:m.ops]
	tx.b.size = m.size
	tx.b.err = nil
	if tx.own != nil || tx.dropped != nil {
		// Rebuilt by the next write past ownScanMax; until then ownOp
		// scans.
		tx.own, tx.dropped = nil, nil
	}
}

// runDeferred runs fns, each as an ordered transaction of its own, and
// queues their batches (async: without an fsync of their own, made
// durable by the next synced commit), returning the requests to wait for.
// The caller holds writeMu (shared or exclusively) and txMu, and unlocks
// them in defers: if a function calls runtime.Goexit, which ends the
// caller's goroutine (see callFn), runDeferred answers that function with
// errGoexit, puts the ones after it back in the queue and has the requests
// it queued waited for, and the caller's defers release the locks.
func (db *DB) runDeferred(fns []deferredTxn, async bool) []*commitReq {
	if len(fns) == 0 {
		return nil
	}
	if db.updater.Load() == 0 {
		db.enterFn()
		defer db.leaveFn()
	}
	var reqs []*commitReq
	var tx *Txn
	i := 0
	defer func() {
		if tx != nil && tx.goexit {
			if d := fns[i]; d.done != nil {
				d.done(errGoexit)
			}
			db.requeueDeferred(fns[i+1:])
			if len(reqs) > 0 {
				// Queued already: waited for, as every request must be.
				go func() { _ = db.waitAll(reqs) }()
			}
		}
	}()
	for i = range fns {
		d := fns[i]
		db.cleanup()
		tx = &Txn{db: db, prefix: d.prefix, ordered: true, b: Batch{pooled: true}}
		fn := d.fn
		err := db.runTxn(tx, func(tx *Txn) error { return db.callFn(fn, tx) })
		if err != nil {
			// The function's own error (or its Txn's), whatever it wraps:
			// an ErrClosed it returned may be from a closed handle of its
			// own, not this DB. It fails alone; only the DB's state (closed
			// or failed, asked here; or the submit's error below) fails
			// the ones after it.
			db.mu.Lock()
			derr := db.writableLocked()
			db.mu.Unlock()
			if derr != nil {
				finishDeferred(fns[i:], derr)
				return reqs
			}
			if d.done != nil {
				d.done(err)
			}
			continue
		}
		if len(tx.b.ops) == 0 {
			if d.done != nil {
				d.done(nil)
			}
			continue
		}
		if d.done != nil {
			db.settleNext = append(db.settleNext, d.fin)
		}
		req, err := db.submit(tx.b.ops, async || tx.noSync, true)
		if err != nil {
			// The DB's own: a closed or failed handle fails the rest.
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				finishDeferred(fns[i:], err)
				return reqs
			}
			if d.done != nil {
				d.done(err)
			}
			continue
		}
		if d.done != nil {
			req.onDone = append(req.onDone, d.done)
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// waitAll waits for reqs (every request must be waited for) and returns
// the first failure.
func (db *DB) waitAll(reqs []*commitReq) error {
	var first error
	for _, r := range reqs {
		if err := db.wait(r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// flushDeferred runs the deferred transactions queued, as commits of
// their own, and waits until they are applied (and durable, if synced).
// Inside an Update's or a Submit's function it does nothing (they run
// once that function's transaction commits, or by the timer).
func (db *DB) flushDeferred(synced bool) error {
	if db.dq.queued.Load() == 0 || db.nested("flush") != nil {
		return nil
	}
	if err := db.rlockWrite("flush"); err != nil {
		return err
	}
	defer db.writeMu.RUnlock()
	if err := db.waitForRoom(); err != nil {
		finishDeferred(db.takeDeferred(), err)
		return err
	}
	if err := db.lockTx("flush"); err != nil {
		return err
	}
	reqs := func() []*commitReq {
		defer db.txMu.Unlock() // deferred: see runDeferred
		return db.runDeferred(db.takeDeferred(), !synced)
	}()
	return db.waitAll(reqs)
}

// flushDeferredTimer runs on the timer Defer arms: within SyncInterval of
// a Defer, its transaction is committed and synced. A failure fails the
// handle already (there is no caller to return it to).
func (db *DB) flushDeferredTimer() {
	q := &db.dq
	q.Lock()
	q.armed = false
	q.Unlock()
	_ = db.flushDeferred(db.opts.Sync == SyncAlways)
}

// closeDeferred refuses further Defers and commits the queued ones
// (Close, before it stops taking writes).
func (db *DB) closeDeferred() {
	q := &db.dq
	q.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.Unlock()
	_ = db.flushDeferred(false)
}

// abandonDeferred answers the deferred transactions still queued (a host
// that failed after Close flushed put them back) with ErrClosed.
func (db *DB) abandonDeferred() {
	finishDeferred(db.takeDeferred(), ErrClosed)
}

// foldedFits reports whether ops, a transaction with deferred functions
// folded into it, surely passes encode's bounds as one batch. The estimate
// takes every value as written inline (a value kept in the journal costs
// its 64-byte record overhead instead, and a reference of a few bytes):
// an upper bound, so a false answer may be wrong only towards splitting.
func (db *DB) foldedFits(ops []op) bool {
	est := encodedBatchSize(ops) + 8*len(ops)
	return est <= db.maxRecord && est+64*(len(ops)+1) <= db.maxGroup
}

// splitFolded queues the writes of the deferred functions folded into tx
// each as a batch of its own, in order, and returns their requests and the
// ops left, the host's own: the batches of the folded and the host's
// writes together may be larger than one batch may be, though each is
// valid alone (the deferred transactions are not the host's to fail). A
// deferred transaction that fails alone gets its error in done, as when
// runDeferred runs it; an error that fails the handle (ErrClosed,
// ErrFailed) answers the ones not queued and is returned. The caller holds
// txMu.
func (db *DB) splitFolded(tx *Txn) (pre []*commitReq, own []op, err error) {
	ops := tx.b.ops
	start := 0
	for i := range tx.folded {
		d := &tx.folded[i]
		if d.fn == nil { // failed and answered: it wrote nothing
			continue
		}
		part := ops[start:d.end]
		start = d.end
		done := d.done
		d.fn, d.done = nil, nil // answered here, not with the host
		if len(part) == 0 {
			if done != nil {
				done(nil)
			}
			continue
		}
		// Copied (own false): the parts share one array, which a request
		// owning it could give back to the pool.
		if done != nil {
			db.settleNext = append(db.settleNext, d.fin)
		}
		req, serr := db.submit(part, true, false)
		if serr != nil {
			if errors.Is(serr, ErrClosed) || errors.Is(serr, ErrFailed) {
				if done != nil {
					done(serr)
				}
				for _, f := range tx.foldedDone() {
					f(serr)
				}
				for j := range tx.folded {
					tx.folded[j].fn, tx.folded[j].done = nil, nil
				}
				return pre, nil, serr
			}
			if done != nil {
				done(serr)
			}
			continue
		}
		if done != nil {
			req.onDone = append(req.onDone, done)
		}
		pre = append(pre, req)
	}
	tx.folded = nil
	return pre, ops[start:], nil
}
