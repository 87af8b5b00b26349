package kdb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
)

// The message store of a broker (queues, topics, durable subscriptions,
// transactions), kept in the same journal, index and checkpoints as
// everything else: each broker operation is a batch of plain puts and
// deletes on the "b/" trees (FORMAT.md §5.6), journaled, applied and
// replayed like any Write. Sequence numbers, counts and sizes are computed
// by the writer before journaling and written as absolute values, so replay
// reproduces them exactly.

// DestKind says whether a destination is a queue or a topic.
type DestKind uint8

const (
	// Queue: each message is consumed (acked) once, with Ack.
	Queue DestKind = 1
	// Topic: each message goes to every durable subscription that exists
	// when it is sent and is kept until all of them acked it (AckSub). A
	// message sent to a topic with no subscription is given a sequence
	// number and forgotten at once, as in JMS.
	Topic DestKind = 2
)

func (k DestKind) String() string {
	switch k {
	case Queue:
		return "queue"
	case Topic:
		return "topic"
	}
	return fmt.Sprintf("DestKind(%d)", uint8(k))
}

// Limits of the broker API.
const (
	// MaxNameSize bounds destination, subscription, message, producer and
	// transaction IDs.
	MaxNameSize = 255
)

// Message is a broker message.
type Message struct {
	// ID identifies the message in its destination (1..MaxNameSize bytes).
	// A second message with the same ID, while the first is kept, is a
	// duplicate.
	ID string
	// ProducerID and ProducerSeq detect resends: a message whose
	// ProducerSeq is not above the highest one stored for its ProducerID in
	// the destination is a duplicate (the producer audit survives acks and
	// restarts; it is reset by DeleteDestination). An empty ProducerID skips
	// the check.
	ProducerID  string
	ProducerSeq uint64
	Properties  map[string]string
	Body        []byte
	// Seq is the message's sequence number in its destination, set by the
	// store (1, 2, 3, ...; never reused, also across Purge).
	Seq uint64
}

// DestInfo describes a destination.
type DestInfo struct {
	Kind DestKind
	Name string
	// Count and Bytes are the messages kept and the size of their encoding;
	// both are kept up to date on every write, no scan.
	Count, Bytes uint64
	// NextSeq is the sequence number the next message will get.
	NextSeq uint64
}

// SubInfo describes a durable subscription.
type SubInfo struct {
	Name    string
	Pending uint64 // messages it has not acked
}

// brokerState serializes the broker's writers.
//
// A writer holds mu while it reads the state it needs (the index, overlaid
// by the batches submitted but not yet applied: ov), computes its batch and
// submits it to the commit queue; it releases mu before waiting for the fsync,
// so concurrent producers share fsyncs (group commit) while submission
// order, which is journal order and apply order, is the order in which
// their sequence numbers were assigned.
//
// Invariants:
//   - ov holds, for each key (of a tree writers read) written by a batch in
//     flight, the value the last such batch gave it. An entry is removed by
//     its batch once applied, unless a later batch replaced it (gen).
//   - Operations that scan trees or drop them (subscribe, purge, delete,
//     two-phase, compaction) first wait until nothing is in flight (drain)
//     and hold mu until their own batch is applied.
type brokerState struct {
	mu  sync.Mutex
	ov  map[string]ovEntry
	gen uint64

	fmu      sync.Mutex
	inflight int
	idle     *sync.Cond

	commits     atomic.Uint64
	compactions atomic.Uint64
	movedValues atomic.Uint64
	compactMu   sync.Mutex
	compactedAt atomic.Int64 // journal segment of the replay position at the last compaction pass
}

type ovEntry struct {
	gen uint64
	val []byte
	del bool
}

func (b *brokerState) drain() {
	b.fmu.Lock()
	if b.idle == nil {
		b.idle = sync.NewCond(&b.fmu)
	}
	for b.inflight > 0 {
		b.idle.Wait()
	}
	b.fmu.Unlock()
}

func (b *brokerState) done() {
	b.fmu.Lock()
	b.inflight--
	if b.inflight == 0 && b.idle != nil {
		b.idle.Broadcast()
	}
	b.fmu.Unlock()
}

// bwrite is one broker write being built under brokerState.mu.
type bwrite struct {
	db      *DB
	s       *Snapshot
	ops     []op
	own     map[string]int // ovKey -> index of the last op on it
	dropped map[string]bool
	dests   map[string]*destRec
	order   []*destRec
}

type destRec struct {
	key                        []byte
	id, nextSeq, count, nbytes uint64
	dirty                      bool
}

func ovKey(tree, key []byte) string {
	return string([]byte{byte(len(tree))}) + string(tree) + string(key)
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func idTree(prefix string, id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(prefix), id)
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func (w *bwrite) add(o op) {
	if w.own == nil {
		w.own = map[string]int{}
	}
	w.ops = append(w.ops, o)
	if o.kind == opDropTree {
		if w.dropped == nil {
			w.dropped = map[string]bool{}
		}
		w.dropped[string(o.tree)] = true
		for k := range w.own {
			if len(k) > 0 && k[1:1+int(k[0])] == string(o.tree) {
				delete(w.own, k)
			}
		}
		return
	}
	w.own[ovKey(o.tree, o.key)] = len(w.ops) - 1
}

func (w *bwrite) put(tree, key, val []byte) {
	w.add(op{kind: opPut, tree: tree, key: key, value: val})
}

func (w *bwrite) del(tree, key []byte) { w.add(op{kind: opDelete, tree: tree, key: key}) }

func (w *bwrite) drop(tree []byte) { w.add(op{kind: opDropTree, tree: tree}) }

// get returns key's value in tree as the write sees it: its own ops, then
// the batches in flight, then the index.
func (w *bwrite) get(tree, key []byte) ([]byte, bool, error) {
	k := ovKey(tree, key)
	if i, ok := w.own[k]; ok {
		o := w.ops[i]
		if o.kind == opDelete {
			return nil, false, nil
		}
		return o.value, true, nil
	}
	if w.dropped[string(tree)] {
		return nil, false, nil
	}
	if e, ok := w.db.broker.ov[k]; ok {
		if e.del {
			return nil, false, nil
		}
		return e.val, true, nil
	}
	return w.s.rawGet(tree, key)
}

func destKey(kind DestKind, name string) []byte {
	return append([]byte{byte(kind)}, name...)
}

func decodeDestRec(key, v []byte) (*destRec, error) {
	if len(v) != destRecSize {
		return nil, fmt.Errorf("%w: broker destination %q: record of %d bytes", ErrCorrupt, key, len(v))
	}
	le := binary.LittleEndian
	return &destRec{key: bytes.Clone(key), id: le.Uint64(v), nextSeq: le.Uint64(v[8:]), count: le.Uint64(v[16:]), nbytes: le.Uint64(v[24:])}, nil
}

func (d *destRec) encode() []byte {
	v := make([]byte, 0, destRecSize)
	for _, x := range []uint64{d.id, d.nextSeq, d.count, d.nbytes} {
		v = binary.LittleEndian.AppendUint64(v, x)
	}
	return v
}

// dest returns the destination's record, creating it if create.
func (w *bwrite) dest(kind DestKind, name string, create bool) (*destRec, error) {
	if err := checkDest(kind, name); err != nil {
		return nil, err
	}
	key := destKey(kind, name)
	if d, ok := w.dests[string(key)]; ok {
		return d, nil
	}
	v, ok, err := w.get([]byte(brokerDestsTree), key)
	if err != nil {
		return nil, err
	}
	var d *destRec
	if ok {
		if d, err = decodeDestRec(key, v); err != nil {
			return nil, err
		}
	} else {
		if !create {
			return nil, fmt.Errorf("%w: %s %q", ErrNotFound, kind, name)
		}
		id, err := w.nextID()
		if err != nil {
			return nil, err
		}
		d = &destRec{key: key, id: id, nextSeq: 1, dirty: true}
	}
	if w.dests == nil {
		w.dests = map[string]*destRec{}
	}
	w.dests[string(key)] = d
	w.order = append(w.order, d)
	return d, nil
}

func (w *bwrite) nextID() (uint64, error) {
	ctr, key := []byte(brokerCtrTree), []byte("ids")
	v, ok, err := w.get(ctr, key)
	if err != nil {
		return 0, err
	}
	id := uint64(1)
	if ok {
		if len(v) != 8 {
			return 0, fmt.Errorf("%w: broker id counter of %d bytes", ErrCorrupt, len(v))
		}
		id = binary.LittleEndian.Uint64(v)
	}
	w.put(ctr, key, u64(id+1))
	return id, nil
}

// flush writes the destination records the write changed.
func (w *bwrite) flush() {
	for _, d := range w.order {
		if d.dirty {
			w.put([]byte(brokerDestsTree), d.key, d.encode())
			d.dirty = false
		}
	}
	w.order = w.order[:0]
	clear(w.dests)
}

func checkDest(kind DestKind, name string) error {
	if kind != Queue && kind != Topic {
		return fmt.Errorf("%w: destination kind %d", ErrInvalid, kind)
	}
	return checkName("destination name", name)
}

func checkName(what, s string) error {
	if len(s) == 0 || len(s) > MaxNameSize {
		return fmt.Errorf("%w: %s of %d bytes (want 1..%d)", ErrInvalid, what, len(s), MaxNameSize)
	}
	return nil
}

// subs returns the ids of the destination's subscriptions, by name.
func (w *bwrite) subs(d *destRec) (names []string, ids []uint64, err error) {
	t := w.s.tx.Tree([]byte(brokerSubsTree))
	if t == nil {
		return nil, nil, nil
	}
	prefix := binary.BigEndian.AppendUint64(nil, d.id)
	c := t.Cursor()
	for k, v, ok := c.Seek(prefix); ok && bytes.HasPrefix(k, prefix); k, v, ok = c.Next() {
		v, err := w.db.resolve(v)
		if err != nil {
			return nil, nil, err
		}
		if len(v) != 16 {
			return nil, nil, fmt.Errorf("%w: broker subscription %q: value of %d bytes", ErrCorrupt, k, len(v))
		}
		names = append(names, string(k[8:]))
		ids = append(ids, binary.LittleEndian.Uint64(v))
	}
	return names, ids, c.Err()
}

func (w *bwrite) sub(d *destRec, name string) (uint64, error) {
	if err := checkName("subscription name", name); err != nil {
		return 0, err
	}
	v, ok, err := w.get([]byte(brokerSubsTree), append(binary.BigEndian.AppendUint64(nil, d.id), name...))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: subscription %q", ErrNotFound, name)
	}
	if len(v) != 16 {
		return 0, fmt.Errorf("%w: broker subscription %q: value of %d bytes", ErrCorrupt, name, len(v))
	}
	return binary.LittleEndian.Uint64(v), nil
}

// checkMessage checks what the caller put in m.
func checkMessage(m *Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalid)
	}
	if err := checkName("message ID", m.ID); err != nil {
		return err
	}
	switch {
	case len(m.ProducerID) > MaxNameSize:
		return fmt.Errorf("%w: producer ID of %d bytes (max %d)", ErrInvalid, len(m.ProducerID), MaxNameSize)
	case m.ProducerSeq == math.MaxUint64:
		// Stored as the producer's last, it would make every later
		// message of the producer a duplicate.
		return fmt.Errorf("%w: producer %q sequence %d: the largest allowed is %d", ErrInvalid, m.ProducerID, m.ProducerSeq, uint64(math.MaxUint64-1))
	}
	return nil
}

// send adds m to the destination and returns its sequence number. It does
// not change m: the caller sets m.Seq once the batch is committed.
func (w *bwrite) send(kind DestKind, dest string, m *Message) (uint64, error) {
	if err := checkMessage(m); err != nil {
		return 0, err
	}
	d, err := w.dest(kind, dest, true)
	if err != nil {
		return 0, err
	}
	if m.ProducerID != "" {
		v, ok, err := w.get(idTree(brokerProdPrefix, d.id), []byte(m.ProducerID))
		if err != nil {
			return 0, err
		}
		if ok {
			if len(v) != 8 {
				return 0, fmt.Errorf("%w: broker producer %q: value of %d bytes", ErrCorrupt, m.ProducerID, len(v))
			}
			if last := binary.LittleEndian.Uint64(v); m.ProducerSeq <= last {
				return 0, fmt.Errorf("%w: producer %q sequence %d (already at %d) in %s %q", ErrDuplicate, m.ProducerID, m.ProducerSeq, last, kind, dest)
			}
		}
	}
	if _, ok, err := w.get(idTree(brokerIDPrefix, d.id), []byte(m.ID)); err != nil {
		return 0, err
	} else if ok {
		return 0, fmt.Errorf("%w: message ID %q in %s %q", ErrDuplicate, m.ID, kind, dest)
	}
	enc := encodeMessage(m)
	if len(enc) > MaxValueSize {
		return 0, fmt.Errorf("%w: message of %d bytes (max %d)", ErrInvalid, len(enc), MaxValueSize)
	}
	seq := d.nextSeq
	d.nextSeq++
	d.dirty = true
	if m.ProducerID != "" {
		w.put(idTree(brokerProdPrefix, d.id), []byte(m.ProducerID), u64(m.ProducerSeq))
	}
	refs := uint32(1)
	if kind == Topic {
		_, ids, err := w.subs(d)
		if err != nil {
			return 0, err
		}
		if len(ids) == 0 {
			return seq, nil // nobody to keep it for
		}
		refs = uint32(len(ids))
		for _, id := range ids {
			w.put(idTree(brokerPendPrefix, id), seqKey(seq), []byte{})
		}
	}
	w.put(idTree(brokerMsgPrefix, d.id), seqKey(seq), enc)
	w.put(idTree(brokerHdrPrefix, d.id), seqKey(seq), encodeHdr(refs, uint32(len(enc)), m.ID))
	w.put(idTree(brokerIDPrefix, d.id), []byte(m.ID), u64(seq))
	d.count++
	d.nbytes += uint64(len(enc))
	return seq, nil
}

func encodeHdr(refs, size uint32, id string) []byte {
	v := binary.LittleEndian.AppendUint32(nil, refs)
	v = binary.LittleEndian.AppendUint32(v, size)
	return append(v, id...)
}

func decodeHdr(v []byte) (refs, size uint32, id []byte, err error) {
	if len(v) < 9 {
		return 0, 0, nil, fmt.Errorf("%w: broker message header of %d bytes", ErrCorrupt, len(v))
	}
	return binary.LittleEndian.Uint32(v), binary.LittleEndian.Uint32(v[4:]), v[8:], nil
}

// remove drops one reference to message seq; the last one removes it.
func (w *bwrite) unrefMsg(d *destRec, seq uint64) error {
	ht := idTree(brokerHdrPrefix, d.id)
	v, ok, err := w.get(ht, seqKey(seq))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: message %d", ErrNotFound, seq)
	}
	refs, size, id, err := decodeHdr(v)
	if err != nil {
		return err
	}
	if refs > 1 {
		w.put(ht, seqKey(seq), encodeHdr(refs-1, size, string(id)))
		return nil
	}
	w.del(idTree(brokerMsgPrefix, d.id), seqKey(seq))
	w.del(ht, seqKey(seq))
	w.del(idTree(brokerIDPrefix, d.id), bytes.Clone(id))
	if d.count == 0 || d.nbytes < uint64(size) {
		return fmt.Errorf("%w: broker destination %q: counts below zero", ErrCorrupt, d.key)
	}
	d.count--
	d.nbytes -= uint64(size)
	d.dirty = true
	return nil
}

func (w *bwrite) ack(kind DestKind, dest string, seqs []uint64) error {
	if kind != Queue {
		return fmt.Errorf("%w: Ack is for queues; topics use AckSub", ErrInvalid)
	}
	d, err := w.dest(kind, dest, false)
	if err != nil {
		return err
	}
	for _, s := range seqs {
		if err := w.unrefMsg(d, s); err != nil {
			return err
		}
	}
	return nil
}

func (w *bwrite) ackSub(topic, sub string, seqs []uint64) error {
	d, err := w.dest(Topic, topic, false)
	if err != nil {
		return err
	}
	id, err := w.sub(d, sub)
	if err != nil {
		return err
	}
	pt := idTree(brokerPendPrefix, id)
	for _, s := range seqs {
		if _, ok, err := w.get(pt, seqKey(s)); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: message %d pending for subscription %q", ErrNotFound, s, sub)
		}
		w.del(pt, seqKey(s))
		if err := w.unrefMsg(d, s); err != nil {
			return err
		}
	}
	return nil
}

// brokerWrite runs fn to build one atomic batch and commits it. exclusive
// operations drain the batches in flight first and hold the broker lock
// until theirs is applied; the others release it once their batch is
// submitted. On return (nil) the batch is durable and applied.
func (db *DB) brokerWrite(exclusive bool, fn func(w *bwrite) error) error {
	err := db.brokerCommit(exclusive, false, fn)
	if err == nil && !exclusive {
		db.maybeCompact()
	}
	return err
}

// brokerCommit builds and commits one batch (see brokerWrite). async: the
// batch is not waited durable (AckAsync); exclusive operations are never
// async.
func (db *DB) brokerCommit(exclusive, async bool, fn func(w *bwrite) error) error {
	if err := db.rlockWrite("a broker write"); err != nil {
		return err
	}
	defer db.writeMu.RUnlock()
	b := &db.broker
	b.mu.Lock()
	if exclusive {
		b.drain()
	}
	w := &bwrite{db: db}
	err := db.View(func(s *Snapshot) error {
		w.s = s
		defer func() { w.s = nil }()
		if err := fn(w); err != nil {
			return err
		}
		w.flush()
		return nil
	})
	if err != nil || len(w.ops) == 0 {
		b.mu.Unlock()
		return err
	}
	if exclusive {
		err = db.commit(w.ops)
		clear(b.ov) // everything is applied; dropped trees may have left stale entries
		b.mu.Unlock()
		return err
	}
	req, err := db.submit(w.ops, async)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	b.gen++
	gen := b.gen
	if b.ov == nil {
		b.ov = map[string]ovEntry{}
	}
	keys := make([]string, 0, len(w.own))
	for k, i := range w.own {
		if o := w.ops[i]; !bytes.HasPrefix(o.tree, []byte(brokerMsgPrefix)) {
			b.ov[k] = ovEntry{gen: gen, val: o.value, del: o.kind == opDelete}
			keys = append(keys, k)
		}
	}
	b.fmu.Lock()
	b.inflight++
	b.fmu.Unlock()
	b.mu.Unlock()

	err = db.wait(req)
	b.done()
	b.mu.Lock()
	for _, k := range keys {
		if e, ok := b.ov[k]; ok && e.gen == gen {
			delete(b.ov, k)
		}
	}
	b.mu.Unlock()
	if err != nil && db.Err() == nil {
		// Later batches were computed on top of this one: the handle
		// cannot go on.
		err = db.fail(fmt.Errorf("broker batch not applied: %w", err))
	}
	return err
}

// Send appends m to the named destination (created on demand) and returns
// its sequence number, also stored in m.Seq. A message whose ID is kept in
// the destination already, or whose producer sequence is not above the
// producer's last one, is rejected with ErrDuplicate. On return (nil) the
// message is durable. Concurrent Sends share fsyncs.
//
// Bad input (a nil message, an empty or oversized ID, a ProducerSeq of
// math.MaxUint64, an unknown kind) is ErrInvalid. If
// the call fails, m is left as it was: m.Seq is set only on success.
func (db *DB) Send(kind DestKind, dest string, m *Message) (uint64, error) {
	var seq uint64
	err := db.brokerWrite(false, func(w *bwrite) error {
		var err error
		seq, err = w.send(kind, dest, m)
		return err
	})
	if err != nil {
		return 0, err
	}
	m.Seq = seq
	return seq, nil
}

// Ack removes the given messages of a queue. An unknown sequence number
// fails the whole call with ErrNotFound. On return (nil) it is durable.
func (db *DB) Ack(kind DestKind, dest string, seqs ...uint64) error {
	return db.brokerWrite(false, func(w *bwrite) error { return w.ack(kind, dest, seqs) })
}

// AckAsync removes the given messages of a queue, as Ack, but does not wait
// for them to be durable: the ack is journaled and applied (readers no
// longer see the messages) before it returns, and made durable by the next
// synced write (a Send, an Ack, any Write) or within Options.SyncInterval,
// whichever comes first. A crash before then loses the ack, not the
// message: it is delivered again (at-least-once), never acked twice, and
// every message sent and acknowledged is still there. Concurrent Sends
// carry AckAsync's records in their fsync, so a producer that sends and
// acks in a loop pays about one fsync per pair. Under Options.Sync other
// than SyncAlways it is Ack.
func (db *DB) AckAsync(kind DestKind, dest string, seqs ...uint64) error {
	err := db.brokerCommit(false, true, func(w *bwrite) error { return w.ack(kind, dest, seqs) })
	if err == nil {
		db.maybeCompact()
	}
	return err
}

// AckSub acknowledges messages for one durable subscription of a topic; a
// message is removed once every subscription acked it. On return (nil) it
// is durable.
func (db *DB) AckSub(topic, sub string, seqs ...uint64) error {
	return db.brokerWrite(false, func(w *bwrite) error { return w.ackSub(topic, sub, seqs) })
}

// CreateDestination creates a destination if it does not exist. Send
// creates destinations on demand too.
func (db *DB) CreateDestination(kind DestKind, dest string) error {
	return db.brokerWrite(false, func(w *bwrite) error {
		_, err := w.dest(kind, dest, true)
		return err
	})
}

// Subscribe creates a durable subscription on a topic (created on demand);
// it receives the messages sent from now on. Subscribing again is a no-op.
// On return (nil) it is durable.
func (db *DB) Subscribe(topic, sub string) error {
	return db.brokerWrite(true, func(w *bwrite) error {
		d, err := w.dest(Topic, topic, true)
		if err != nil {
			return err
		}
		if _, err := w.sub(d, sub); err == nil {
			return nil
		} else if !isNotFound(err) {
			return err
		}
		id, err := w.nextID()
		if err != nil {
			return err
		}
		v := binary.LittleEndian.AppendUint64(u64(id), d.nextSeq)
		w.put([]byte(brokerSubsTree), append(binary.BigEndian.AppendUint64(nil, d.id), sub...), v)
		return nil
	})
}

// Unsubscribe deletes a durable subscription, acking everything pending for
// it. A subscription with many messages pending is acked in several
// batches (a few thousand messages each, fewer with small segments); a
// crash in between leaves it with fewer messages pending, as if its
// subscriber had acked them. On return (nil) it is deleted, durably.
func (db *DB) Unsubscribe(topic, sub string) error {
	chunk := max(1, db.maxRecord/512)
	for more := true; more; {
		more = false
		err := db.brokerWrite(true, func(w *bwrite) error {
			d, err := w.dest(Topic, topic, false)
			if err != nil {
				return err
			}
			id, err := w.sub(d, sub)
			if err != nil {
				return err
			}
			pt := idTree(brokerPendPrefix, id)
			if t := w.s.tx.Tree(pt); t != nil {
				c := t.Cursor()
				n := 0
				for k, _, ok := c.First(); ok; k, _, ok = c.Next() {
					if len(k) != 8 {
						return fmt.Errorf("%w: broker pending key of %d bytes", ErrCorrupt, len(k))
					}
					if n == chunk {
						more = true
						return nil
					}
					n++
					w.del(pt, bytes.Clone(k))
					if err := w.unrefMsg(d, binary.BigEndian.Uint64(k)); err != nil {
						return err
					}
				}
				if err := c.Err(); err != nil {
					return err
				}
				w.drop(pt)
			}
			w.del([]byte(brokerSubsTree), append(binary.BigEndian.AppendUint64(nil, d.id), sub...))
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, ErrNotFound) }

// Purge removes every message of a destination (and everything pending for
// its subscriptions); their space comes back. Sequence numbers, the
// producer audit and the subscriptions stay. On return (nil) it is durable.
func (db *DB) Purge(kind DestKind, dest string) error {
	return db.brokerWrite(true, func(w *bwrite) error {
		d, err := w.dest(kind, dest, false)
		if err != nil {
			return err
		}
		if kind == Topic {
			_, ids, err := w.subs(d)
			if err != nil {
				return err
			}
			for _, id := range ids {
				w.dropIfExists(idTree(brokerPendPrefix, id))
			}
		}
		for _, p := range []string{brokerMsgPrefix, brokerHdrPrefix, brokerIDPrefix} {
			w.dropIfExists(idTree(p, d.id))
		}
		d.count, d.nbytes, d.dirty = 0, 0, true
		return nil
	})
}

func (w *bwrite) dropIfExists(tree []byte) {
	if w.s.tx.Tree(tree) != nil {
		w.drop(tree)
	}
}

// DeleteDestination removes a destination, its messages, subscriptions and
// producer audit; its space comes back. On return (nil) it is durable.
func (db *DB) DeleteDestination(kind DestKind, dest string) error {
	return db.brokerWrite(true, func(w *bwrite) error {
		d, err := w.dest(kind, dest, false)
		if err != nil {
			return err
		}
		names, ids, err := w.subs(d)
		if err != nil {
			return err
		}
		for i, id := range ids {
			w.dropIfExists(idTree(brokerPendPrefix, id))
			w.del([]byte(brokerSubsTree), append(binary.BigEndian.AppendUint64(nil, d.id), names[i]...))
		}
		for _, p := range []string{brokerMsgPrefix, brokerHdrPrefix, brokerIDPrefix, brokerProdPrefix} {
			w.dropIfExists(idTree(p, d.id))
		}
		w.del([]byte(brokerDestsTree), d.key)
		delete(w.dests, string(d.key))
		for i, o := range w.order {
			if o == d {
				w.order = append(w.order[:i], w.order[i+1:]...)
				break
			}
		}
		return nil
	})
}

// Destinations lists the destinations, queues first, each by name.
func (db *DB) Destinations() ([]DestInfo, error) {
	var out []DestInfo
	err := db.View(func(s *Snapshot) error {
		t := s.tx.Tree([]byte(brokerDestsTree))
		if t == nil {
			return nil
		}
		c := t.Cursor()
		for k, v, ok := c.First(); ok; k, v, ok = c.Next() {
			v, err := db.resolve(v)
			if err != nil {
				return err
			}
			if len(k) < 2 {
				return fmt.Errorf("%w: broker destination key %q", ErrCorrupt, k)
			}
			d, err := decodeDestRec(k, v)
			if err != nil {
				return err
			}
			out = append(out, DestInfo{Kind: DestKind(k[0]), Name: string(k[1:]), Count: d.count, Bytes: d.nbytes, NextSeq: d.nextSeq})
		}
		return c.Err()
	})
	return out, err
}

// Destination describes one destination, or returns ErrNotFound.
func (db *DB) Destination(kind DestKind, dest string) (DestInfo, error) {
	var out DestInfo
	err := db.View(func(s *Snapshot) error {
		d, err := s.destRec(kind, dest)
		if err != nil {
			return err
		}
		out = DestInfo{Kind: kind, Name: dest, Count: d.count, Bytes: d.nbytes, NextSeq: d.nextSeq}
		return nil
	})
	return out, err
}

func (s *Snapshot) destRec(kind DestKind, dest string) (*destRec, error) {
	if err := checkDest(kind, dest); err != nil {
		return nil, err
	}
	key := destKey(kind, dest)
	v, ok, err := s.rawGet([]byte(brokerDestsTree), key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s %q", ErrNotFound, kind, dest)
	}
	return decodeDestRec(key, v)
}

// rawGet returns the value of key in an engine tree, resolved.
func (s *Snapshot) rawGet(tree, key []byte) ([]byte, bool, error) {
	t, err := s.tx.OpenTree(tree)
	if err != nil || t == nil {
		return nil, false, err
	}
	v, ok, err := t.Get(key)
	if err != nil || !ok {
		return nil, false, err
	}
	r, err := s.db.resolve(v)
	return r, err == nil, err
}

// Read returns up to max messages of a destination in sequence order,
// starting at sequence number from. A negative max is ErrInvalid.
func (db *DB) Read(kind DestKind, dest string, from uint64, max int) ([]Message, error) {
	if max < 0 {
		return nil, fmt.Errorf("%w: Read of %d messages", ErrInvalid, max)
	}
	var out []Message
	err := db.View(func(s *Snapshot) error {
		d, err := s.destRec(kind, dest)
		if err != nil {
			return err
		}
		t := s.tx.Tree(idTree(brokerMsgPrefix, d.id))
		if t == nil {
			return nil
		}
		c := t.Cursor()
		for k, v, ok := c.Seek(seqKey(from)); ok && len(out) < max; k, v, ok = c.Next() {
			m, err := s.decodeMsg(k, v)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return c.Err()
	})
	return out, err
}

func (s *Snapshot) decodeMsg(k, raw []byte) (Message, error) {
	if len(k) != 8 {
		return Message{}, fmt.Errorf("%w: broker message key of %d bytes", ErrCorrupt, len(k))
	}
	v, err := s.db.resolve(raw)
	if err != nil {
		return Message{}, err
	}
	m, err := decodeMessage(v)
	m.Seq = binary.BigEndian.Uint64(k)
	return m, err
}

// GetMessage returns the message with the given ID, or ErrNotFound.
func (db *DB) GetMessage(kind DestKind, dest, id string) (*Message, error) {
	if err := checkName("message ID", id); err != nil {
		return nil, err
	}
	var out *Message
	err := db.View(func(s *Snapshot) error {
		d, err := s.destRec(kind, dest)
		if err != nil {
			return err
		}
		v, ok, err := s.rawGet(idTree(brokerIDPrefix, d.id), []byte(id))
		if err != nil {
			return err
		}
		if !ok || len(v) != 8 {
			return fmt.Errorf("%w: message %q", ErrNotFound, id)
		}
		k := bytes.Clone(v[:8])
		binary.BigEndian.PutUint64(k, binary.LittleEndian.Uint64(v))
		mt := s.tx.Tree(idTree(brokerMsgPrefix, d.id))
		if mt == nil {
			return fmt.Errorf("%w: message %q: ID index points at a missing tree", ErrCorrupt, id)
		}
		raw, ok, err := mt.Get(k)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: message %q: ID index points at missing %d", ErrCorrupt, id, binary.BigEndian.Uint64(k))
		}
		m, err := s.decodeMsg(k, raw)
		out = &m
		return err
	})
	return out, err
}

// Subscriptions lists a topic's durable subscriptions by name.
func (db *DB) Subscriptions(topic string) ([]SubInfo, error) {
	var out []SubInfo
	err := db.View(func(s *Snapshot) error {
		d, err := s.destRec(Topic, topic)
		if err != nil {
			return err
		}
		w := &bwrite{db: db, s: s}
		names, ids, err := w.subs(d)
		for i, n := range names {
			var p uint64
			if t := s.tx.Tree(idTree(brokerPendPrefix, ids[i])); t != nil {
				p = t.Len()
			}
			out = append(out, SubInfo{Name: n, Pending: p})
		}
		return err
	})
	return out, err
}

func (s *Snapshot) subID(topic, sub string) (*destRec, uint64, error) {
	d, err := s.destRec(Topic, topic)
	if err != nil {
		return nil, 0, err
	}
	if err := checkName("subscription name", sub); err != nil {
		return nil, 0, err
	}
	v, ok, err := s.rawGet([]byte(brokerSubsTree), append(binary.BigEndian.AppendUint64(nil, d.id), sub...))
	if err != nil {
		return nil, 0, err
	}
	if !ok || len(v) != 16 {
		return nil, 0, fmt.Errorf("%w: subscription %q of topic %q", ErrNotFound, sub, topic)
	}
	return d, binary.LittleEndian.Uint64(v), nil
}

// Pending returns the number of messages a subscription has not acked,
// without a scan.
func (db *DB) Pending(topic, sub string) (uint64, error) {
	var n uint64
	err := db.View(func(s *Snapshot) error {
		_, id, err := s.subID(topic, sub)
		if err != nil {
			return err
		}
		if t := s.tx.Tree(idTree(brokerPendPrefix, id)); t != nil {
			n = t.Len()
		}
		return nil
	})
	return n, err
}

// ReadSub returns up to max messages pending for a subscription, in
// sequence order, starting at sequence number from (0 or 1: its position,
// the oldest message it has not acked). A negative max is ErrInvalid.
func (db *DB) ReadSub(topic, sub string, from uint64, max int) ([]Message, error) {
	if max < 0 {
		return nil, fmt.Errorf("%w: ReadSub of %d messages", ErrInvalid, max)
	}
	var out []Message
	err := db.View(func(s *Snapshot) error {
		d, id, err := s.subID(topic, sub)
		if err != nil {
			return err
		}
		pt := s.tx.Tree(idTree(brokerPendPrefix, id))
		mt := s.tx.Tree(idTree(brokerMsgPrefix, d.id))
		if pt == nil {
			return nil
		}
		if mt == nil {
			return fmt.Errorf("%w: subscription %q has pending messages but topic %q has none", ErrCorrupt, sub, topic)
		}
		c := pt.Cursor()
		for k, _, ok := c.Seek(seqKey(from)); ok && len(out) < max; k, _, ok = c.Next() {
			raw, ok, err := mt.Get(k)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: subscription %q: pending message %x missing", ErrCorrupt, sub, k)
			}
			m, err := s.decodeMsg(k, raw)
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return c.Err()
	})
	return out, err
}

// encodeMessage: version u8, ID, producer ID (uvarint length + bytes each),
// producer seq uvarint, property count uvarint, properties (key, value) in
// key order, then the body to the end. FORMAT.md §5.6.
func encodeMessage(m *Message) []byte {
	n := 16 + len(m.ID) + len(m.ProducerID) + len(m.Body)
	keys := make([]string, 0, len(m.Properties))
	for k, v := range m.Properties {
		keys = append(keys, k)
		n += len(k) + len(v) + 4
	}
	sort.Strings(keys)
	b := make([]byte, 0, n)
	b = append(b, brokerMsgVersion)
	b = appendStr(b, m.ID)
	b = appendStr(b, m.ProducerID)
	b = binary.AppendUvarint(b, m.ProducerSeq)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendStr(appendStr(b, k), m.Properties[k])
	}
	return append(b, m.Body...)
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeMessage decodes encodeMessage's bytes; it never panics.
func decodeMessage(b []byte) (Message, error) {
	d := decoder{b: b}
	var m Message
	if v := d.byte(); d.err == nil && v != brokerMsgVersion {
		return m, fmt.Errorf("%w: broker message version %d", ErrCorrupt, v)
	}
	m.ID = string(d.bytes(d.uvarint()))
	m.ProducerID = string(d.bytes(d.uvarint()))
	m.ProducerSeq = d.uvarint()
	n := d.uvarint()
	if d.err == nil && n > uint64(len(b))/2 {
		return m, fmt.Errorf("%w: broker message: %d properties in %d bytes", ErrCorrupt, n, len(b))
	}
	if n > 0 {
		m.Properties = make(map[string]string, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := string(d.bytes(d.uvarint()))
		m.Properties[k] = string(d.bytes(d.uvarint()))
	}
	if d.err != nil {
		return m, fmt.Errorf("%w: broker message: %w", ErrCorrupt, d.err)
	}
	m.Body = bytes.Clone(b[d.off:])
	if m.Body == nil {
		m.Body = []byte{}
	}
	return m, nil
}

// checkBroker verifies the broker trees against a recount: per destination,
// the message count and bytes, every message decoding and reachable by its
// ID, the reference count of every topic message equal to the number of
// subscriptions it is pending for, and no broker tree that belongs to no
// destination or subscription. Check calls it.
func (s *Snapshot) checkBroker(names [][]byte) error {
	known := map[string]bool{brokerDestsTree: true, brokerCtrTree: true, brokerSubsTree: true, brokerTxTree: true}
	var maxID uint64
	if v, ok, err := s.rawGet([]byte(brokerCtrTree), []byte("ids")); err != nil {
		return err
	} else if ok && len(v) == 8 {
		maxID = binary.LittleEndian.Uint64(v)
	}
	var dests []*destRec
	if t := s.tx.Tree([]byte(brokerDestsTree)); t != nil {
		c := t.Cursor()
		for k, v, ok := c.First(); ok; k, v, ok = c.Next() {
			v, err := s.db.resolve(v)
			if err != nil {
				return err
			}
			d, err := decodeDestRec(k, v)
			if err != nil {
				return err
			}
			if len(k) < 2 || checkDest(DestKind(k[0]), string(k[1:])) != nil || d.id >= maxID || d.nextSeq == 0 {
				return fmt.Errorf("%w: broker destination %q: bad key or id %d (next id %d)", ErrCorrupt, k, d.id, maxID)
			}
			dests = append(dests, d)
		}
		if err := c.Err(); err != nil {
			return err
		}
	}
	w := &bwrite{db: s.db, s: s}
	for _, d := range dests {
		if err := s.checkDest(w, d, known, maxID); err != nil {
			return fmt.Errorf("broker destination %q: %w", d.key[1:], err)
		}
	}
	if t := s.tx.Tree([]byte(brokerTxTree)); t != nil {
		c := t.Cursor()
		for k, v, ok := c.First(); ok; k, v, ok = c.Next() {
			v, err := s.db.resolve(v)
			if err != nil {
				return err
			}
			if _, err := decodeTx(v); err != nil {
				return fmt.Errorf("prepared transaction %q: %w", k, err)
			}
		}
		if err := c.Err(); err != nil {
			return err
		}
	}
	for _, n := range names {
		if bytes.HasPrefix(n, []byte(brokerPrefix)) && !known[string(n)] {
			return fmt.Errorf("%w: broker tree %q belongs to no destination or subscription", ErrCorrupt, n)
		}
	}
	return nil
}

func (s *Snapshot) checkDest(w *bwrite, d *destRec, known map[string]bool, maxID uint64) error {
	mt, ht, xt := idTree(brokerMsgPrefix, d.id), idTree(brokerHdrPrefix, d.id), idTree(brokerIDPrefix, d.id)
	for _, p := range []string{brokerMsgPrefix, brokerHdrPrefix, brokerIDPrefix, brokerProdPrefix} {
		known[string(idTree(p, d.id))] = true
	}
	refs := map[uint64]uint32{}
	var count, nbytes uint64
	if t := s.tx.Tree(mt); t != nil {
		c := t.Cursor()
		for k, raw, ok := c.First(); ok; k, raw, ok = c.Next() {
			m, err := s.decodeMsg(k, raw)
			if err != nil {
				return err
			}
			if m.Seq == 0 || m.Seq >= d.nextSeq {
				return fmt.Errorf("%w: message seq %d, next %d", ErrCorrupt, m.Seq, d.nextSeq)
			}
			hv, ok, err := s.rawGet(ht, k)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: message %d has no header", ErrCorrupt, m.Seq)
			}
			r, size, id, err := decodeHdr(hv)
			if err != nil {
				return err
			}
			if string(id) != m.ID || int(size) != len(encodeMessage(&m)) || r == 0 {
				return fmt.Errorf("%w: message %d: header (refs %d, size %d, ID %q) disagrees with the message (ID %q)", ErrCorrupt, m.Seq, r, size, id, m.ID)
			}
			xv, ok, err := s.rawGet(xt, []byte(m.ID))
			if err != nil {
				return err
			}
			if !ok || len(xv) != 8 || binary.LittleEndian.Uint64(xv) != m.Seq {
				return fmt.Errorf("%w: message %d: ID %q not indexed to it", ErrCorrupt, m.Seq, m.ID)
			}
			refs[m.Seq] = r
			count++
			nbytes += uint64(size)
		}
		if err := c.Err(); err != nil {
			return err
		}
	}
	lenOf := func(name []byte) uint64 {
		if t := s.tx.Tree(name); t != nil {
			return t.Len()
		}
		return 0
	}
	if count != d.count || nbytes != d.nbytes || lenOf(mt) != count || lenOf(ht) != count || lenOf(xt) != count {
		return fmt.Errorf("%w: recorded %d messages of %d bytes, counted %d of %d (trees: %d, %d headers, %d IDs)",
			ErrCorrupt, d.count, d.nbytes, count, nbytes, lenOf(mt), lenOf(ht), lenOf(xt))
	}
	_, ids, err := w.subs(d)
	if err != nil {
		return err
	}
	if DestKind(d.key[0]) == Queue && len(ids) > 0 {
		return fmt.Errorf("%w: a queue with subscriptions", ErrCorrupt)
	}
	pending := map[uint64]uint32{}
	for _, id := range ids {
		if id >= maxID {
			return fmt.Errorf("%w: subscription id %d (next id %d)", ErrCorrupt, id, maxID)
		}
		pt := idTree(brokerPendPrefix, id)
		known[string(pt)] = true
		t := s.tx.Tree(pt)
		if t == nil {
			continue
		}
		c := t.Cursor()
		n := uint64(0)
		for k, _, ok := c.First(); ok; k, _, ok = c.Next() {
			if len(k) != 8 {
				return fmt.Errorf("%w: pending key of %d bytes", ErrCorrupt, len(k))
			}
			seq := binary.BigEndian.Uint64(k)
			if _, ok := refs[seq]; !ok {
				return fmt.Errorf("%w: subscription %d: pending message %d is missing", ErrCorrupt, id, seq)
			}
			pending[seq]++
			n++
		}
		if err := c.Err(); err != nil {
			return err
		}
		if n != t.Len() {
			return fmt.Errorf("%w: subscription %d: %d pending recorded, %d counted", ErrCorrupt, id, t.Len(), n)
		}
	}
	for seq, r := range refs {
		want := uint32(1)
		if DestKind(d.key[0]) == Topic {
			want = pending[seq]
		}
		if r != want {
			return fmt.Errorf("%w: message %d: %d references recorded, %d counted", ErrCorrupt, seq, r, want)
		}
	}
	return nil
}
