package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/codec"
)

// Tx is a local broker transaction: its sends and acks, across any
// destinations, take effect together at Commit (one journal batch: after a
// crash all of them are there or none) or not at all. Prepare makes it a
// two-phase transaction. A Tx is not safe for concurrent use.
type Tx struct {
	b    *Broker
	ops  []txOp
	done bool
}

type txOp struct {
	kind byte // txSend, txAck, txAckSub
	dk   DestKind
	dest string
	sub  string
	msg  *Message
	seqs []uint64
}

const (
	txSend   = 1
	txAck    = 2
	txAckSub = 3
)

// BeginTx starts a broker transaction.
func (b *Broker) BeginTx() *Tx { return &Tx{b: b} }

func (tx *Tx) usable() error {
	if tx.done {
		return fmt.Errorf("%w: transaction already committed, prepared or rolled back", kdb.ErrInvalid)
	}
	return nil
}

// Send adds a message to the transaction; m.Seq is set at Commit. m must
// not change until then. The same m sent to two destinations gets the
// sequence number of the later Send: send a copy to each to know both.
func (tx *Tx) Send(kind DestKind, dest string, m *Message) error {
	return tx.add(txOp{kind: txSend, dk: kind, dest: dest, msg: m})
}

// Ack adds queue acks to the transaction. They are checked at Commit (and
// Prepare): an unknown queue or sequence number, or a sequence number
// listed twice in the transaction, fails it with kdb.ErrNotFound, nothing
// written.
func (tx *Tx) Ack(kind DestKind, dest string, seqs ...uint64) error {
	return tx.add(txOp{kind: txAck, dk: kind, dest: dest, seqs: append([]uint64(nil), seqs...)})
}

// AckSub adds subscription acks to the transaction, checked at Commit
// (and Prepare) as Broker.AckSub checks them: kdb.ErrNotFound, nothing
// written.
func (tx *Tx) AckSub(topic, sub string, seqs ...uint64) error {
	return tx.add(txOp{kind: txAckSub, dk: Topic, dest: topic, sub: sub, seqs: append([]uint64(nil), seqs...)})
}

// add adds o to the transaction if o.check passes.
func (tx *Tx) add(o txOp) error {
	if err := tx.usable(); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	tx.ops = append(tx.ops, o)
	return nil
}

// check refuses (kdb.ErrInvalid) an op that Tx.Send, Ack or AckSub would
// not add: it is their check of the caller's input, and decodeTx's of a
// prepared record's ops (which it reports as kdb.ErrCorrupt), so that
// CommitPrepared runs only what the API could have prepared.
func (o *txOp) check() error {
	switch o.kind {
	case txSend:
		if err := checkMessage(o.msg); err != nil {
			return err
		}
		if err := checkDest(o.dk, o.dest); err != nil {
			return err
		}
	case txAck:
		if o.dk != Queue {
			return fmt.Errorf("%w: Ack is for queues; topics use AckSub", kdb.ErrInvalid)
		}
		if err := checkDest(o.dk, o.dest); err != nil {
			return err
		}
	case txAckSub:
		if o.dk != Topic {
			return fmt.Errorf("%w: AckSub is for topics, not %s %q", kdb.ErrInvalid, o.dk, o.dest)
		}
		if err := checkDest(o.dk, o.dest); err != nil {
			return err
		}
		if err := checkName("subscription name", o.sub); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: transaction op kind %d", kdb.ErrInvalid, o.kind)
	}
	if o.kind != txAckSub && o.sub != "" {
		return fmt.Errorf("%w: subscription name %q in a transaction op of kind %d", kdb.ErrInvalid, o.sub, o.kind)
	}
	return nil
}

// runTx adds the transaction's operations to the batch and returns the
// sequence numbers of its sends, in order.
func (w *bwrite) runTx(ops []txOp) ([]uint64, error) {
	var seqs []uint64
	for _, o := range ops {
		var err error
		switch o.kind {
		case txSend:
			var seq uint64
			seq, err = w.send(o.dk, o.dest, o.msg, nil)
			seqs = append(seqs, seq)
		case txAck:
			err = w.ack(o.dk, o.dest, o.seqs)
		case txAckSub:
			err = w.ackSub(o.dest, o.sub, o.seqs)
		default:
			err = fmt.Errorf("%w: broker transaction op %d", kdb.ErrCorrupt, o.kind)
		}
		if err != nil {
			return nil, err
		}
	}
	return seqs, nil
}

// Commit applies the transaction atomically. If any of its operations fails
// (a duplicate, an unknown message) nothing is written and the error is
// returned. On return (nil) it is durable. Either way the transaction is
// over.
func (tx *Tx) Commit() error {
	if err := tx.usable(); err != nil {
		return err
	}
	tx.done = true
	// Even with no operation: it is a synced write, which makes the
	// AckAsyncs before it durable.
	var seqs []uint64
	err := tx.b.write(false, func(w *bwrite) error {
		var err error
		seqs, err = w.runTx(tx.ops)
		return err
	})
	if err != nil {
		return err // the messages are left as they were: no Seq was handed out
	}
	i := 0
	for _, o := range tx.ops {
		if o.kind == txSend {
			o.msg.Seq = seqs[i]
			i++
		}
	}
	return nil
}

// Rollback abandons the transaction: nothing of it was written. After
// Prepare it only ends the Tx: the prepared transaction stays stored under
// its xid (it must survive the process), finished by CommitPrepared or
// RollbackPrepared.
func (tx *Tx) Rollback() { tx.done = true }

// Prepare is phase one of a two-phase commit: it checks that the
// transaction can commit now (no duplicate, every acked message there, its
// writes fit in one batch of the store: else kdb.ErrInvalid, "split the
// batch") and stores it durably under xid. It survives a crash, is listed by Prepared,
// and is finished by CommitPrepared or RollbackPrepared. Its sends get their
// sequence numbers at CommitPrepared, which does not report them (the
// transaction may be committed by another process after a crash): find a
// message by its ID (GetMessage, or Read). A prepared transaction holds no lock:
// a conflicting write made before CommitPrepared makes it fail (then roll it
// back); only a DeleteDestination of a destination it acks in is refused
// until it is finished. It may ack only messages sent before it: an ack of
// one of its own sends (numbered only at CommitPrepared) is ErrInvalid, as
// is an ack in a destination it creates. An xid prepared already is
// ErrDuplicate. On return (nil) it is durable.
func (tx *Tx) Prepare(xid string) error {
	if err := tx.usable(); err != nil {
		return err
	}
	if err := checkName("transaction ID", xid); err != nil {
		return err
	}
	enc := encodeTx(tx.ops)
	if len(enc) > kdb.MaxValueSize {
		return fmt.Errorf("%w: transaction of %d bytes (max %d)", kdb.ErrInvalid, len(enc), kdb.MaxValueSize)
	}
	if max := tx.b.db.MaxBatchSize(); len(enc) > max {
		return fmt.Errorf("%w: transaction of %d bytes: this store's largest is %d (a quarter of kdb.Options.SegmentSize, at most 16 MiB)", kdb.ErrInvalid, len(enc), max)
	}
	// A dry run whose writes are discarded (errDryRun), so that m.Seq
	// stays unset until commit; then the prepared record alone. Both run
	// after the writes in flight; a write in between can only make
	// CommitPrepared fail, as any write before it can.
	//
	// The acks name their messages by sequence number, which a
	// destination deleted and made again hands out from 1 again: the
	// write checks that each destination acked in is still the one the
	// dry run saw (its id), or the stored acks would name the new one's
	// messages. DeleteDestination refuses once the record is stored.
	var acked map[string]uint64
	dry := func(w *bwrite) error {
		acked = map[string]uint64{}
		if _, ok, err := w.get(txTree, []byte(xid)); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: transaction %q is prepared already", ErrDuplicate, xid)
		}
		ops, err := decodeTx(enc)
		if err != nil {
			return err
		}
		// The next sequence number of each destination acked in, before
		// the transaction's own sends (0: it does not exist yet).
		before := map[string]uint64{}
		for _, o := range ops {
			if o.kind == txAck || o.kind == txAckSub {
				k := string(append([]byte{byte(o.dk)}, o.dest...))
				if _, ok := before[k]; ok {
					continue
				}
				d, err := w.dest(o.dk, o.dest, false)
				if err != nil && !isNotFound(err) {
					return err
				}
				before[k] = 0
				if err == nil {
					before[k] = d.nextSeq
				}
			}
		}
		if _, err := w.runTx(ops); err != nil {
			return err
		}
		for _, o := range ops {
			if o.kind == txAck || o.kind == txAckSub {
				d, err := w.dest(o.dk, o.dest, false)
				if err != nil {
					return err
				}
				// An ack of a message the transaction sends itself names
				// the number the send is given now; at CommitPrepared
				// sends made meanwhile have taken it, and the ack would
				// remove another's message.
				first := before[string(d.key)]
				for _, seq := range o.seqs {
					switch {
					case first == 0:
						return fmt.Errorf("%w: transaction %q acks in %s %q, which it creates itself: a prepared transaction acks only messages sent before it, since its own sends are numbered at CommitPrepared", kdb.ErrInvalid, xid, o.dk, o.dest)
					case seq >= first:
						return fmt.Errorf("%w: transaction %q acks message %d of %s %q, which it sends itself: a prepared transaction acks only messages sent before it, since its own sends are numbered at CommitPrepared", kdb.ErrInvalid, xid, seq, o.dk, o.dest)
					}
				}
				acked[string(d.key)] = d.id
			}
		}
		// CommitPrepared writes the same and removes the prepared
		// record, in one batch: it must fit, or the transaction could
		// only ever be rolled back.
		w.del(txTree, []byte(xid))
		w.flush()
		if w.err == nil {
			w.err = w.tx.Fits()
		}
		if w.err != nil {
			return fmt.Errorf("transaction %q: %w", xid, w.err)
		}
		return errDryRun
	}
	if err := tx.b.write(true, dry); !errors.Is(err, errDryRun) {
		return err
	}
	if testHookPrepareWrite != nil {
		testHookPrepareWrite()
	}
	// Another Prepare of xid may have stored it since the dry run.
	err := tx.b.write(true, func(w *bwrite) error {
		if _, ok, err := w.get(txTree, []byte(xid)); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("%w: transaction %q is prepared already", ErrDuplicate, xid)
		}
		for key, id := range acked {
			kind, name := DestKind(key[0]), key[1:]
			if d, err := w.dest(kind, name, false); err != nil && !isNotFound(err) {
				return err
			} else if err != nil || d.id != id {
				return fmt.Errorf("%w: %s %q, which transaction %q acks in, was deleted while it was prepared", kdb.ErrNotFound, kind, name, xid)
			}
		}
		w.put(txTree, []byte(xid), enc)
		return nil
	})
	if err == nil {
		tx.done = true
	}
	return err
}

var errDryRun = errors.New("broker: dry run")

// testHookPrepareWrite, if set (by tests), runs between Prepare's dry run
// and its write of the prepared record.
var testHookPrepareWrite func()

// Prepared returns the IDs of the prepared transactions, in order.
func (b *Broker) Prepared() ([]string, error) {
	var out []string
	err := b.view(func(s snap) error {
		it := s.s.Iter(txTree)
		for ok := it.First(); ok; ok = it.Next() {
			out = append(out, string(it.Key()))
		}
		return it.Err()
	})
	return out, err
}

// CommitPrepared commits a prepared transaction atomically, with the
// removal of its prepared record. kdb.ErrNotFound if xid is not prepared. On
// return (nil) it is durable.
func (b *Broker) CommitPrepared(xid string) error {
	if err := checkName("transaction ID", xid); err != nil {
		return err
	}
	return b.write(true, func(w *bwrite) error {
		v, ok, err := w.get(txTree, []byte(xid))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: prepared transaction %q", kdb.ErrNotFound, xid)
		}
		ops, err := decodeTx(v)
		if err != nil {
			return fmt.Errorf("prepared transaction %q: %w", xid, err)
		}
		if _, err := w.runTx(ops); err != nil {
			return err
		}
		w.del(txTree, []byte(xid))
		return nil
	})
}

// RollbackPrepared forgets a prepared transaction. kdb.ErrNotFound if xid is
// not prepared. On return (nil) it is durable.
func (b *Broker) RollbackPrepared(xid string) error {
	if err := checkName("transaction ID", xid); err != nil {
		return err
	}
	return b.write(true, func(w *bwrite) error {
		if _, ok, err := w.get(txTree, []byte(xid)); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: prepared transaction %q", kdb.ErrNotFound, xid)
		}
		w.del(txTree, []byte(xid))
		return nil
	})
}

// encodeTx: version u8, op count uvarint, then per op: kind u8, dest kind
// u8, dest, sub (uvarint length + bytes), for sends the message
// (uvarint length + encodeMessage), for acks the count and the seqs
// (uvarints). FORMAT.md §5.6.
func encodeTx(ops []txOp) []byte {
	b := []byte{txVersion}
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, o := range ops {
		b = append(b, o.kind, byte(o.dk))
		b = appendStr(b, o.dest)
		b = appendStr(b, o.sub)
		if o.kind == txSend {
			m := encodeMessage(o.msg)
			b = binary.AppendUvarint(b, uint64(len(m)))
			b = append(b, m...)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(o.seqs)))
		for _, s := range o.seqs {
			b = binary.AppendUvarint(b, s)
		}
	}
	return b
}

// decodeTx decodes encodeTx's bytes; it never panics and allocates at most
// a bounded multiple of len(b). An op that txOp.check refuses (one the API
// never prepares) is kdb.ErrCorrupt.
func decodeTx(b []byte) ([]txOp, error) {
	d := codec.Decoder{B: b}
	if v := d.Byte(); d.Err == nil && v != txVersion {
		return nil, fmt.Errorf("%w: broker transaction version %d", kdb.ErrCorrupt, v)
	}
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(b))/4 {
		return nil, fmt.Errorf("%w: broker transaction: %d ops in %d bytes", kdb.ErrCorrupt, n, len(b))
	}
	var ops []txOp
	for i := uint64(0); i < n && d.Err == nil; i++ {
		o := txOp{kind: d.Byte(), dk: DestKind(d.Byte())}
		o.dest = string(d.Bytes(d.Uvarint()))
		o.sub = string(d.Bytes(d.Uvarint()))
		switch o.kind {
		case txSend:
			raw := d.Bytes(d.Uvarint())
			if d.Err != nil {
				break
			}
			m, err := decodeMessage(raw)
			if err != nil {
				return nil, err
			}
			o.msg = &m
		case txAck, txAckSub:
			k := d.Uvarint()
			if d.Err == nil && k > uint64(len(b)-d.Off) {
				return nil, fmt.Errorf("%w: broker transaction: %d acks", kdb.ErrCorrupt, k)
			}
			for j := uint64(0); j < k && d.Err == nil; j++ {
				o.seqs = append(o.seqs, d.Uvarint())
			}
		default:
			if d.Err == nil {
				return nil, fmt.Errorf("%w: broker transaction op kind %d", kdb.ErrCorrupt, o.kind)
			}
		}
		if d.Err != nil {
			break
		}
		// What the API refuses to prepare is damage here (not
		// kdb.ErrInvalid: the caller gave nothing wrong).
		if err := o.check(); err != nil {
			return nil, fmt.Errorf("%w: broker transaction op %d: %v", kdb.ErrCorrupt, i, err)
		}
		ops = append(ops, o)
	}
	if d.Err != nil {
		return nil, fmt.Errorf("%w: broker transaction: %w", kdb.ErrCorrupt, d.Err)
	}
	if d.Off != len(b) {
		return nil, fmt.Errorf("%w: broker transaction: %d trailing bytes", kdb.ErrCorrupt, len(b)-d.Off)
	}
	return ops, nil
}
