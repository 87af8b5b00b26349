package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/kdb-project/kdb"
)

// Deleting subscriptions and destinations in batches that fit
// (docs/DESIGN.md "The broker store", Limits).
//
// An Unsubscribe removes the subscription's record first, in its first
// batch, so that no Send delivers to it any more, and, if more is pending
// for it than one batch acks, leaves a record in goneTree (the topic's id
// and the subscription's, to the topic's name) until later batches have
// acked the rest. Before, every batch looked the subscription up by name
// and acked a batch's worth of what was pending: producers adding more
// than that between two batches kept it from ever finishing.
//
// Invariants:
//   - a subscription's pending tree belongs to its record in subsTree, or
//     to its record in goneTree, never both: the batch that deletes the one
//     writes the other, and the batch that empties the tree of a gone
//     subscription drops the tree and deletes the record;
//   - nothing is delivered to a gone subscription (Send lists subsTree),
//     so each batch makes progress: the pending tree only shrinks;
//   - a gone record left by a crash (or a failed batch) is finished by the
//     next Open of a writable store, Purge or DeleteDestination of its
//     topic: its pending entries hold references, so the messages they
//     name would otherwise stay forever.

// Unsubscribe deletes a durable subscription, acking everything pending for
// it. From its first batch on the subscription is gone (not listed, not
// delivered to, kdb.ErrNotFound by name); a subscription with many messages
// pending is acked in several batches (kdb.DB.MaxBatchSize/512 messages each:
// 16,384 with the default 32 MiB segments, 32 with 64 KiB ones). A crash
// in between leaves the rest to the next Broker Open. An unknown topic or
// subscription is kdb.ErrNotFound. On return (nil) it is deleted, durably.
func (b *Broker) Unsubscribe(topic, sub string) error {
	var g goneSub
	finished := false
	err := b.write(true, func(w *bwrite) error {
		d, id, err := w.topicSub(topic, sub)
		if err != nil {
			return err
		}
		w.del(subsTree, subKey(d.id, sub))
		g = goneSub{topic: d.id, sub: id}
		if finished, err = w.drainPending(d, id, b.perBatch()); err != nil {
			return err
		}
		if !finished {
			w.put(goneTree, g.key(), []byte(topic))
		}
		return nil
	})
	if err != nil || finished {
		return err
	}
	return b.finishGone(g)
}

// goneSub names a subscription unsubscribed whose pending tree is not yet
// empty: its record in goneTree.
type goneSub struct{ topic, sub uint64 }

func (g goneSub) key() []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, g.topic), g.sub)
}

func subKey(dest uint64, name string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, dest), name...)
}

// finishGone acks what is pending for the gone subscription g, in
// batches, and deletes its record. Another call finishing it too, or a
// DeleteDestination or Purge of its topic in between, leaves it nothing
// to do.
func (b *Broker) finishGone(g goneSub) error {
	for finished := false; !finished; {
		err := b.write(true, func(w *bwrite) error {
			v, ok, err := w.get(goneTree, g.key())
			if err != nil || !ok {
				finished = true
				return err
			}
			d, err := w.dest(Topic, string(v), false)
			if err != nil {
				return fmt.Errorf("%w: broker gone subscription %d: topic %q: %w", kdb.ErrCorrupt, g.sub, v, err)
			}
			if d.id != g.topic {
				return fmt.Errorf("%w: broker gone subscription %d: topic %q has id %d, not %d", kdb.ErrCorrupt, g.sub, v, d.id, g.topic)
			}
			if finished, err = w.drainPending(d, g.sub, b.perBatch()); err != nil {
				return err
			}
			if finished {
				w.del(goneTree, g.key())
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !finished && testHookUnsubscribeBatch != nil {
			testHookUnsubscribeBatch()
		}
	}
	return nil
}

// testHookUnsubscribeBatch, if set (by tests), runs between two of an
// Unsubscribe's batches.
var testHookUnsubscribeBatch func()

// drainPending acks up to n messages pending for subscription id of d
// and reports whether that was all: then the pending tree is dropped too.
func (w *bwrite) drainPending(d *destRec, id uint64, n int) (bool, error) {
	pt := idTree(pendPrefix, id)
	if ok, err := w.tx.Exists(pt); err != nil || !ok {
		return true, err
	}
	c := w.tx.Iter(pt)
	done := 0
	for ok := c.First(); ok; ok = c.Next() {
		k := c.Key()
		if len(k) != 8 {
			return false, fmt.Errorf("%w: broker pending key of %d bytes", kdb.ErrCorrupt, len(k))
		}
		if done == n {
			return false, nil
		}
		done++
		w.del(pt, bytes.Clone(k))
		if err := w.unrefMsg(d, binary.BigEndian.Uint64(k)); err != nil {
			return false, err
		}
	}
	if err := c.Err(); err != nil {
		return false, err
	}
	w.drop(pt)
	return true, nil
}

// gone lists the gone subscriptions of topic id.
func gone(it *kdb.Iter, id uint64) ([]goneSub, error) {
	var out []goneSub
	prefix := binary.BigEndian.AppendUint64(nil, id)
	for ok := it.Seek(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		k := it.Key()
		if len(k) != 16 {
			return nil, fmt.Errorf("%w: broker gone subscription key of %d bytes", kdb.ErrCorrupt, len(k))
		}
		out = append(out, goneSub{id, binary.BigEndian.Uint64(k[8:])})
	}
	return out, it.Err()
}

// allGone lists every gone subscription.
func (b *Broker) allGone() ([]goneSub, error) {
	var out []goneSub
	err := b.view(func(s snap) error {
		it := s.s.Iter(goneTree)
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			if len(k) != 16 {
				return fmt.Errorf("%w: broker gone subscription key of %d bytes", kdb.ErrCorrupt, len(k))
			}
			out = append(out, goneSub{binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(k[8:])})
		}
		return it.Err()
	})
	return out, err
}

// dropGone drops the pending trees of topic d's gone subscriptions and
// their records: the messages they named are being dropped with them
// (Purge, DeleteDestination).
func (w *bwrite) dropGone(d *destRec) error {
	gs, err := gone(w.tx.Iter(goneTree), d.id)
	if err != nil {
		return err
	}
	for _, g := range gs {
		w.dropIfExists(idTree(pendPrefix, g.sub))
		w.del(goneTree, g.key())
	}
	return nil
}

// Purge removes every message of a destination (and everything pending for
// its subscriptions); their space comes back. Sequence numbers, the
// producer audit and the subscriptions stay. An unknown destination is
// kdb.ErrNotFound. On return (nil) it is durable.
func (b *Broker) Purge(kind DestKind, dest string) error {
	return b.write(true, func(w *bwrite) error {
		d, err := w.dest(kind, dest, false)
		if err != nil {
			return err
		}
		var ids []uint64
		if kind == Topic {
			if _, ids, err = w.subs(d); err != nil {
				return err
			}
		}
		return w.purge(d, ids)
	})
}

// purge drops the messages of d and what is pending for its
// subscriptions (ids) and gone subscriptions.
func (w *bwrite) purge(d *destRec, ids []uint64) error {
	for _, id := range ids {
		w.dropIfExists(idTree(pendPrefix, id))
	}
	if err := w.dropGone(d); err != nil {
		return err
	}
	for _, p := range []string{msgPrefix, hdrPrefix, idPrefix} {
		w.dropIfExists(idTree(p, d.id))
	}
	if d.count != 0 || d.nbytes != 0 {
		d.count, d.nbytes, d.dirty = 0, 0, true
	}
	return nil
}

func (w *bwrite) dropIfExists(tree string) {
	ok, err := w.tx.Exists(tree)
	if err != nil && w.err == nil {
		w.err = err
	}
	if ok {
		w.drop(tree)
	}
}

// DeleteDestination removes a destination, its messages, subscriptions and
// producer audit; its space comes back. On return (nil) it is durable. An
// unknown destination is kdb.ErrNotFound. A
// destination that a prepared transaction acks messages of is
// kdb.ErrInvalid, naming the transaction: commit or roll it back first (a
// destination made again numbers its messages from 1 again, so the
// prepared acks would remove the new one's messages). A
// topic with more subscriptions than one batch deletes
// (kdb.DB.MaxBatchSize/512: 16,384 with the default 32 MiB segments, 32
// with 64 KiB ones) is deleted in several: the first purges it
// (its messages and everything pending), the next delete its
// subscriptions, the last the topic; a crash in between leaves it purged
// with fewer subscriptions, and a second call finishes it. Every batch
// drops the tree of each subscription left, so a topic with more
// subscriptions than one batch drops (about 800 with 64 KiB segments,
// hundreds of thousands with the default) is kdb.ErrInvalid ("split the
// batch"): unsubscribe some first.
func (b *Broker) DeleteDestination(kind DestKind, dest string) error {
	var id uint64
	for began, finished := false, false; !finished; began = true {
		err := b.write(true, func(w *bwrite) error {
			d, err := w.dest(kind, dest, false)
			if began && (isNotFound(err) || err == nil && d.id != id) {
				finished = true // deleted by another call since our last batch
				return nil
			}
			if err != nil {
				return err
			}
			// Every batch: a Send between two batches may have delivered
			// a message that a transaction prepared since acks.
			if err := w.refusePreparedAcks(kind, dest); err != nil {
				return err
			}
			id = d.id
			names, ids, err := w.subs(d)
			if err != nil {
				return err
			}
			// Every batch purges (a Send between two batches may have
			// delivered to the subscriptions left).
			if err := w.purge(d, ids); err != nil {
				return err
			}
			n := min(len(names), b.perBatch())
			for _, name := range names[:n] {
				w.del(subsTree, subKey(d.id, name))
			}
			if n < len(names) {
				return nil
			}
			w.dropIfExists(idTree(prodPrefix, d.id))
			w.del(destsTree, d.key)
			w.forget(d)
			finished = true
			return nil
		})
		if err != nil {
			return err
		}
		if !finished && testHookUnsubscribeBatch != nil {
			testHookUnsubscribeBatch()
		}
	}
	return nil
}

// refusePreparedAcks returns kdb.ErrInvalid if a prepared transaction
// acks messages of the destination (DeleteDestination). A record that
// does not decode is skipped: CommitPrepared never runs it.
func (w *bwrite) refusePreparedAcks(kind DestKind, dest string) error {
	it := w.tx.Iter(txTree)
	for ok := it.First(); ok; ok = it.Next() {
		v := it.Value()
		if v == nil {
			break // Err says why
		}
		ops, err := decodeTx(v)
		if err != nil {
			continue
		}
		for _, o := range ops {
			if (o.kind == txAck || o.kind == txAckSub) && o.dk == kind && o.dest == dest {
				return fmt.Errorf("%w: %s %q: prepared transaction %q acks its messages: commit or roll it back first", kdb.ErrInvalid, kind, dest, it.Key())
			}
		}
	}
	return it.Err()
}
