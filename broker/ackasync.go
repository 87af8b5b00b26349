package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/kdb-project/kdb"
)

// Asynchronous acks (docs/DESIGN.md "The broker store", Semantics).
//
// AckAsync checks its messages against the store and the acks still
// deferred, then hands the ack to the engine as a deferred transaction
// (Namespace.Defer), after releasing mu: no lock a writer holds, no commit
// of its own (but the Defer that fills the engine's bounded queue commits
// the queue, and the done functions it calls take mu). The ack
// runs at the start of the next write (joining the transaction of the next
// broker write, so it shares its batch and fsync), or by the engine's
// timer within SyncInterval.
//
// Invariants:
//   - pending holds every (destination id, seq) acked by an AckAsync whose
//     deferred transaction is not yet applied; an entry leaves only once
//     the engine reports the transaction applied (or never to be). So a
//     message is refused by AckAsync while its ack is deferred or in
//     flight, and once the ack is applied the store no longer has it.
//   - AckAsync checks pending and the store, and adds its entries, under
//     mu: two AckAsyncs of one message cannot both pass.
type asyncAcks struct {
	mu   sync.Mutex
	cond *sync.Cond // signalled when an entry of out leaves
	// pending: the messages acked and not yet applied.
	pending map[ackKey]struct{}
	// out: the AckAsync calls not yet applied, by number (next counts
	// them), for Sync.
	out  map[uint64]struct{}
	next uint64
	// handing: the numbers of out still being handed to the engine (their
	// AckAsync has not returned): a Sync begun meanwhile does not wait for
	// them, since the engine's Sync would not run them.
	handing map[uint64]struct{}
	// failed: the errors of the deferred acks that were never applied, by
	// number, until a Sync reports them.
	failed map[uint64]error
}

type ackKey struct{ dest, seq uint64 }

// testHookHanding, set by tests, runs in AckAsync between numbering its
// acks and handing them to the engine.
var testHookHanding func()

// AckAsync removes the given messages of a queue, as Ack, but waits for
// nothing: it checks the messages (an unknown queue or sequence number,
// one listed twice in the call, or one whose ack is already on its way, is
// kdb.ErrNotFound, returned at once with nothing acked) and returns. The
// ack is ordered there: every broker write that begins after it returns
// (Send, Ack, AckAsync, AckSub, a transaction) sees the messages gone. It
// is journaled with the next write (it joins the next broker write's
// batch, or is queued before any other write's), at Sync or Checkpoint, or
// within Options.SyncInterval, whichever comes first; readers (Read,
// Destination, GetMessage) see it once that write is applied.
//
// It is durable once a later synced write (a Send, an Ack, any Write),
// Sync or Checkpoint returns. Without one, under kdb.SyncAlways it is
// durable within Options.SyncInterval (the timer that journals it syncs),
// or within SyncInterval of an unsynced commit that journaled it first (a
// Txn.NoSync one, or the commit of a full Defer queue): within about twice
// SyncInterval at most. Under kdb.SyncInterval it is likewise durable
// within about twice SyncInterval (journaled by the timer, synced within
// SyncInterval after); under kdb.UnsafeSyncNever only at Sync, Checkpoint
// or Close. A crash before then loses the ack, not the message: it is
// delivered again (at-least-once), never acked twice, and every message
// sent and acknowledged is still there. So a producer that sends and acks
// in a loop pays one commit and one fsync per pair, and never waits for an
// ack. A consumer that acks with AckAsync and writes nothing else waits,
// at every 1,024th deferred ack, for the engine to commit them (without an
// fsync): the deferred acks held in memory are bounded.
//
// More than kdb.DB.MaxBatchSize/512 messages (16,384 with the default 32
// MiB segments, 32 with 64 KiB ones) are acked in several deferred
// transactions of that many, each all or nothing: a crash may lose some
// of them, as above. An ack that fails when it runs (bad bytes in the
// store, a failed handle) leaves its messages in the queue, and the next
// Sync returns its error.
//
// Acks made by AckAsync are checked against the other AckAsyncs of the
// same Broker; an Ack or a transaction racing with an AckAsync of the same
// message may both return nil (the message is removed once), and while
// one races, so may a second AckAsync of it.
func (b *Broker) AckAsync(kind DestKind, dest string, seqs ...uint64) error {
	if kind != Queue {
		return fmt.Errorf("%w: AckAsync is for queues; topics use AckSub", kdb.ErrInvalid)
	}
	if err := checkDest(kind, dest); err != nil {
		return err
	}
	if len(seqs) == 0 {
		// Nothing to ack; the queue must exist, as for Ack.
		_, err := b.ns.Get(destsTree, destKey(kind, dest))
		if errors.Is(err, kdb.ErrNotFound) {
			return fmt.Errorf("%w: %s %q", kdb.ErrNotFound, kind, dest)
		}
		return err
	}
	a := &b.acks
	a.mu.Lock()
	id, err := b.checkAcks(kind, dest, seqs)
	if err != nil {
		a.mu.Unlock()
		return err
	}
	if a.pending == nil {
		a.pending = map[ackKey]struct{}{}
		a.out = map[uint64]struct{}{}
		a.handing = map[uint64]struct{}{}
		a.cond = sync.NewCond(&a.mu)
	}
	for _, s := range seqs {
		a.pending[ackKey{id, s}] = struct{}{}
	}
	seqs = append([]uint64(nil), seqs...) // the caller's may change
	// One deferred transaction per batch's worth of messages: a deferred
	// transaction too large for one batch would fail on its own, after
	// AckAsync returned.
	per := b.perBatch()
	var one [1]deferredAck // most AckAsyncs are one part: no allocation
	parts := one[:0]
	for rest := seqs; len(rest) > 0; {
		part := rest[:min(per, len(rest))]
		rest = rest[len(part):]
		parts = append(parts, b.prepareAck(kind, dest, id, part))
		a.handing[parts[len(parts)-1].n] = struct{}{}
	}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		for _, p := range parts {
			delete(a.handing, p.n)
		}
		a.mu.Unlock()
	}()
	if testHookHanding != nil {
		testHookHanding()
	}
	// Handed to the engine without a.mu: a Defer that fills the engine's
	// queue commits it before it returns, and the done functions it calls
	// take a.mu.
	for i, p := range parts {
		if err := b.ns.Defer(p.fn, p.done); err != nil {
			a.mu.Lock()
			for _, q := range parts[i:] {
				for _, s := range q.seqs {
					delete(a.pending, ackKey{id, s})
				}
				delete(a.out, q.n)
			}
			a.cond.Broadcast()
			a.mu.Unlock()
			if i > 0 {
				// The parts before were queued: they commit (Close
				// commits the deferred transactions queued).
				n := 0
				for _, q := range parts[:i] {
					n += len(q.seqs)
				}
				return fmt.Errorf("%w (the acks of the first %d of the %d messages were queued before it, in %d deferred transactions, and stand)", err, n, len(seqs), i)
			}
			return err
		}
	}
	return nil
}

// deferredAck is one deferred transaction of an AckAsync: the ack of seqs,
// numbered n among the AckAsyncs.
type deferredAck struct {
	n    uint64
	seqs []uint64
	fn   func(tx *kdb.Txn) error
	done func(error)
}

// prepareAck numbers the ack of seqs (of queue id, dest) and makes the
// deferred transaction that removes them, and its done function. The
// caller holds a.mu and has put seqs in a.pending; if the engine refuses
// the transaction, the caller takes them out again.
func (b *Broker) prepareAck(kind DestKind, dest string, id uint64, seqs []uint64) deferredAck {
	a := &b.acks
	a.next++
	n := a.next
	a.out[n] = struct{}{}
	fn := func(tx *kdb.Txn) error {
		w := &bwrite{b: b, tx: tx}
		if err := w.ackDeferred(kind, dest, id, seqs); err != nil {
			return err
		}
		w.flush()
		return w.err
	}
	done := func(err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, s := range seqs {
			delete(a.pending, ackKey{id, s})
		}
		delete(a.out, n)
		if err != nil {
			// Not applied, and never will be: the messages stay (they
			// are delivered again). The next Sync says so.
			if a.failed == nil {
				a.failed = map[uint64]error{}
			}
			a.failed[n] = fmt.Errorf("broker: AckAsync of %d message(s) of %s %q not applied: %w", len(seqs), kind, dest, err)
		}
		a.cond.Broadcast()
	}
	return deferredAck{n: n, seqs: seqs, fn: fn, done: done}
}

// ackBytes bounds what the removal of one message writes to a batch: three
// deletes (its body, header and ID, keys of 8, 8 and up to MaxNameSize
// bytes, in trees of names under 32 bytes) and its destination's record.
const ackBytes = 512

// perBatch is how many messages one batch surely has room to remove
// (kdb.DB.MaxBatchSize is a quarter of the store's segment size).
func (b *Broker) perBatch() int { return max(1, b.db.MaxBatchSize()/ackBytes) }

// maxAckScan is the longest list of sequence numbers checkAcks checks
// for a message named twice by a scan; longer lists use a set.
const maxAckScan = 16

// checkAcks returns the id of the queue and checks that each of seqs is
// in the store and not acked by an AckAsync on its way. The caller holds
// b.acks.mu.
//
// Its reads are point reads (Namespace.Get, which allocates no Snapshot),
// not one View: a queue deleted and created again between the first and a
// later read only makes the ack a no-op, which ackDeferred's check of the
// id makes it anyway; a message removed in between is ErrNotFound, as if
// the removal came first.
func (b *Broker) checkAcks(kind DestKind, dest string, seqs []uint64) (uint64, error) {
	var kb [64]byte
	key := append(append(kb[:0], byte(kind)), dest...)
	v, err := b.ns.Get(destsTree, key)
	if errors.Is(err, kdb.ErrNotFound) {
		return 0, fmt.Errorf("%w: %s %q", kdb.ErrNotFound, kind, dest)
	}
	if err != nil {
		return 0, err
	}
	var d destRec
	if err := d.decode(key, v); err != nil {
		return 0, err
	}
	ht := idTree(hdrPrefix, d.id)
	// A message named twice in seqs is acked once: the second is
	// ErrNotFound. Short lists are checked by a scan, long ones with a set
	// (a scan would be quadratic in the caller's list). The set grows with
	// the entries checked, not to the list's length at once: a list
	// refused early allocates little.
	var seen map[uint64]struct{}
	if len(seqs) > maxAckScan {
		seen = make(map[uint64]struct{}, maxAckScan)
	}
	for i, seq := range seqs {
		_, acked := b.acks.pending[ackKey{d.id, seq}]
		if seen != nil {
			_, twice := seen[seq]
			acked = acked || twice
			seen[seq] = struct{}{}
		} else {
			for _, o := range seqs[:i] {
				acked = acked || o == seq
			}
		}
		if acked {
			return 0, fmt.Errorf("%w: message %d", kdb.ErrNotFound, seq)
		}
		var sk [8]byte
		binary.BigEndian.PutUint64(sk[:], seq)
		if _, err := b.ns.Get(ht, sk[:]); err != nil {
			if errors.Is(err, kdb.ErrNotFound) {
				return 0, fmt.Errorf("%w: message %d", kdb.ErrNotFound, seq)
			}
			return 0, err
		}
	}
	return d.id, nil
}

// ackDeferred is an AckAsync's transaction: it acks those of seqs still
// in queue id (dest). A message acked since (by an Ack or a transaction
// that raced with the AckAsync), or a queue deleted since, is skipped: the
// ack was checked when AckAsync was called, and it is never applied twice.
func (w *bwrite) ackDeferred(kind DestKind, dest string, id uint64, seqs []uint64) error {
	d, err := w.dest(kind, dest, false)
	if errors.Is(err, kdb.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if d.id != id {
		return nil // deleted and created again: not the queue acked
	}
	for _, s := range seqs {
		if _, err := w.unrefIfThere(d, s); err != nil {
			return err
		}
	}
	return nil
}

// Sync waits until every AckAsync that returned before it is applied
// (readers no longer see the messages) and durable, with one fdatasync
// shared with the writers syncing at the same time. A failure to sync
// fails the handle. It returns too the errors of those AckAsyncs that
// were never applied (their messages stay in the queue), each once.
//
// Called inside the function of an Update, a Submit or a deferred
// transaction of the DB (or a deferred transaction's done), Sync returns
// kdb.ErrInvalid at once, as the broker's writes do there: the write
// hosting that function may have taken deferred acks, applied only once
// the function returns (until 2026-12-08 Sync waited for them for good,
// and Close behind it: TestSync_InsideATransactionFunctionIsInvalid).
// Inside a View's function it works.
func (b *Broker) Sync() error {
	if err := b.db.RefuseNested("Broker.Sync"); err != nil {
		return err
	}
	a := &b.acks
	a.mu.Lock()
	last := a.next
	// An AckAsync still handing its acks to the engine has not returned:
	// not waited for (its Defer may come after the engine's Sync below,
	// and then only the SyncInterval timer would run it).
	var skip map[uint64]struct{}
	if len(a.handing) > 0 {
		skip = maps.Clone(a.handing)
	}
	a.mu.Unlock()
	// The engine's Sync commits the deferred acks not yet run, then
	// syncs the journal.
	if err := b.db.Sync(); err != nil {
		return err
	}
	// Acks that joined a write still in flight are applied when it is.
	waited := false
	a.mu.Lock()
	for a.before(last, skip) {
		waited = true
		a.cond.Wait()
	}
	a.mu.Unlock()
	if waited {
		if err := b.db.Sync(); err != nil {
			return err
		}
	}
	return a.takeFailed(last)
}

// takeFailed returns (and forgets) the failures of the AckAsyncs numbered
// up to last: nil if all of them were applied.
func (a *asyncAcks) takeFailed(last uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(a.failed)) {
		if n <= last {
			errs = append(errs, a.failed[n])
			delete(a.failed, n)
		}
	}
	return errors.Join(errs...)
}

// before reports whether an AckAsync numbered up to last, and not in
// skip, is not yet applied. The caller holds mu.
func (a *asyncAcks) before(last uint64, skip map[uint64]struct{}) bool {
	for n := range a.out {
		if _, ok := skip[n]; n <= last && !ok {
			return true
		}
	}
	return false
}
