package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/internal/codec"
	"math"
	"sort"
	"sync"
)

// The message store of a broker (queues, topics, durable subscriptions,
// transactions), kept in the same journal, index and checkpoints as
// everything else: each broker operation is a batch of plain puts and
// deletes on the "b/" trees (FORMAT.md §5.6), journaled, applied and
// replayed like any Write. Sequence numbers, counts and sizes are computed
// by the writer before journaling and written as absolute values, so replay
// reproduces them exactly.

// ErrDuplicate is returned by Send (and a transaction's Commit or Prepare)
// for a message whose ID is kept in its destination already, or whose
// producer sequence is not above its producer's last one; and by
// Tx.Prepare for an xid that is prepared already (the message names the
// transaction).
var ErrDuplicate = errors.New("broker: duplicate message")

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

// String returns "queue", "topic", or "DestKind(n)" for another value.
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
	ProducerSeq uint64            // see ProducerID
	Properties  map[string]string // the message's properties, by name
	Body        []byte            // the message's payload
	// Seq is the message's sequence number in its destination, set by the
	// store (1, 2, 3, ...; never reused, also across Purge).
	Seq uint64
}

// DestInfo describes a destination.
type DestInfo struct {
	Kind DestKind // queue or topic
	Name string   // the destination's name
	// Count and Bytes are the messages kept and the size of their encoding;
	// both are kept up to date on every write, no scan.
	Count, Bytes uint64
	// NextSeq is the sequence number the next message will get.
	NextSeq uint64
}

// SubInfo describes a durable subscription.
type SubInfo struct {
	Name    string // the subscription's name
	Pending uint64 // messages it has not acked
}

// Broker is a broker's message store on a kdb store: its destinations,
// messages, durable subscriptions and transactions live in namespace "b" of
// the store (docs/FORMAT.md, broker trees), written with the engine's
// ordered commits.
//
// Writers: a write runs as one ordered transaction (kdb.DB's Submit): it
// reads the state it needs (the store, overlaid by the transactions in
// flight and its own writes), computes its batch and queues it, then waits
// for the fsync without holding anything, so concurrent producers share
// fsyncs (group commit) while submission order, which is journal order and
// apply order, is the order in which their sequence numbers were assigned.
// Operations that scan trees or drop them (subscribe, purge, delete,
// two-phase) run as an Update, which waits until nothing is in flight.
//
// A Broker is safe for concurrent use: open one per DB and share it.
// Several Brokers on one DB see the same store, but each keeps its own
// AckAsyncs not yet applied: an AckAsync is checked against the other
// AckAsyncs of its own Broker only (another Broker's AckAsync of the same
// message may return nil too; the message is removed once), a Broker's
// Sync waits for its own, and reports the failures of its own. The
// destinations whose stored messages overrun their next sequence number
// (refused sends, see Open) are likewise found by each Broker at its Open.
type Broker struct {
	db *kdb.DB
	ns *kdb.Namespace
	// acks holds the AckAsyncs deferred and not yet applied (ackAsync.go).
	acks asyncAcks
	// overrun holds, for each destination found at Open holding a
	// message at or above its next sequence number, the error its sends
	// return (nil when there is none: the map is only read after Open).
	overrun map[uint64]error
}

// Namespace is the kdb namespace the broker keeps its trees in.
const Namespace = "b"

// Open returns the message store kept in db (empty until the first write).
// It writes only to finish the Unsubscribes a crash cut short (acking what
// is still pending for those subscriptions): a read-only DB serves the
// reading methods, and leaves them to the next writable open. A nil db is
// kdb.ErrInvalid.
func Open(db *kdb.DB) (*Broker, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: broker.Open: nil DB", kdb.ErrInvalid)
	}
	ns, err := db.Namespace(Namespace)
	if err != nil {
		return nil, err
	}
	b := &Broker{db: db, ns: ns}
	b.overrun = b.seqOverruns()
	gs, err := b.allGone()
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		if err := b.finishGone(g); errors.Is(err, kdb.ErrReadOnly) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("broker: finishing the Unsubscribe of subscription %d: %w", g.sub, err)
		}
	}
	return b, nil
}

// seqOverruns finds the destinations holding a message numbered at or
// above their next sequence number, which a Send would be given, silently
// replacing the message: a store imported from an export whose records
// were edited and its checksums made again passed every other check on
// the way in. Their sends are refused (ErrCorrupt); reads, Check and the
// other destinations go on. One seek per tree, at Open. An error reading
// the records is left to the calls that read them, which report it.
func (b *Broker) seqOverruns() map[uint64]error {
	var out map[uint64]error
	_ = b.view(func(s snap) error {
		it := s.s.Iter(destsTree)
		for ok := it.First(); ok; ok = it.Next() {
			d, err := decodeDestRec(it.Key(), it.Value())
			if err != nil {
				return err
			}
			for _, p := range []string{msgPrefix, hdrPrefix} {
				last := s.s.Iter(idTree(p, d.id))
				if !last.Last() || len(last.Key()) != 8 {
					continue
				}
				if seq := binary.BigEndian.Uint64(last.Key()); seq >= d.nextSeq {
					if out == nil {
						out = map[uint64]error{}
					}
					out[d.id] = fmt.Errorf("%w: broker %s %q holds message %d, but its next sequence number is %d: a send would replace that message, so sends to it are refused (the store's broker records disagree: Broker.Check names the damage; restore the store or export what it holds)", kdb.ErrCorrupt, DestKind(d.key[0]), d.key[1:], seq, d.nextSeq)
					break
				}
			}
		}
		return it.Err()
	})
	return out
}

// DB returns the store the broker is in.
func (b *Broker) DB() *kdb.DB { return b.db }

// bwrite is one broker write being built inside a transaction.
type bwrite struct {
	b   *Broker
	tx  *kdb.Txn
	err error // the first write the transaction refused
	// order holds the destination records the write read, in the order
	// read (most writes read one: first and its backing array hold it
	// without an allocation); dests indexes them once there are many.
	order []*destRec
	dests map[string]*destRec
	first destRec
	buf   [2]*destRec
}

// maxDestScan is how many destination records a write looks up by a scan
// of order before it indexes them in dests.
const maxDestScan = 8

// cached returns the record of the destination with key, if the write
// read it already.
func (w *bwrite) cached(key []byte) *destRec {
	if w.dests != nil {
		return w.dests[string(key)]
	}
	for _, d := range w.order {
		if bytes.Equal(d.key, key) {
			return d
		}
	}
	return nil
}

// keep adds d to the records the write read.
func (w *bwrite) keep(d *destRec) {
	if w.order == nil {
		w.order = w.buf[:0]
	}
	w.order = append(w.order, d)
	if w.dests != nil {
		w.dests[string(d.key)] = d
	} else if len(w.order) > maxDestScan {
		w.dests = make(map[string]*destRec, len(w.order))
		for _, o := range w.order {
			w.dests[string(o.key)] = o
		}
	}
}

// forget removes d from the records the write read.
func (w *bwrite) forget(d *destRec) {
	delete(w.dests, string(d.key))
	for i, o := range w.order {
		if o == d {
			w.order = append(w.order[:i], w.order[i+1:]...)
			break
		}
	}
}

type destRec struct {
	key                        []byte
	id, nextSeq, count, nbytes uint64
	dirty                      bool
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// idTree returns the name of a destination's or subscription's tree.
// Names are made once (a broker names the same few trees over and over).
func idTree(prefix string, id uint64) string {
	k := idTreeKey{prefix, id}
	idTrees.RLock()
	name, ok := idTrees.m[k]
	idTrees.RUnlock()
	if ok {
		return name
	}
	name = string(binary.BigEndian.AppendUint64([]byte(prefix), id))
	idTrees.Lock()
	if len(idTrees.m) < 1<<14 {
		idTrees.m[k] = name
	}
	idTrees.Unlock()
	return name
}

type idTreeKey struct {
	prefix string
	id     uint64
}

var idTrees = struct {
	sync.RWMutex
	m map[idTreeKey]string
}{m: map[idTreeKey]string{}}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func (w *bwrite) put(tree string, key, val []byte) {
	if err := w.tx.Put(tree, key, val); err != nil && w.err == nil {
		w.err = err
	}
}

// putOwned is put for a value made for this write, which the
// transaction keeps without a copy (kdb.Txn.PutOwned).
func (w *bwrite) putOwned(tree string, key, val []byte) {
	if err := w.tx.PutOwned(tree, key, val); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *bwrite) del(tree string, key []byte) {
	if err := w.tx.Delete(tree, key); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *bwrite) drop(tree string) {
	if err := w.tx.DropIndex(tree); err != nil && w.err == nil {
		w.err = err
	}
}

// get returns key's value in tree as the write sees it: its own writes,
// then the writes in flight, then the store.
func (w *bwrite) get(tree string, key []byte) ([]byte, bool, error) {
	v, err := w.tx.Get(tree, key)
	if errors.Is(err, kdb.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func destKey(kind DestKind, name string) []byte {
	return append([]byte{byte(kind)}, name...)
}

func decodeDestRec(key, v []byte) (*destRec, error) {
	d := new(destRec)
	if err := d.decode(bytes.Clone(key), v); err != nil {
		return nil, err
	}
	return d, nil
}

// decode sets d from a destination's key (which d keeps) and record.
func (d *destRec) decode(key, v []byte) error {
	if len(v) != destRecSize {
		return fmt.Errorf("%w: broker destination %q: record of %d bytes", kdb.ErrCorrupt, key, len(v))
	}
	le := binary.LittleEndian
	*d = destRec{key: key, id: le.Uint64(v), nextSeq: le.Uint64(v[8:]), count: le.Uint64(v[16:]), nbytes: le.Uint64(v[24:])}
	return nil
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
	var buf [64]byte
	key := append(append(buf[:0], byte(kind)), name...)
	if d := w.cached(key); d != nil {
		return d, nil
	}
	key = bytes.Clone(key) // the record keeps it
	v, ok, err := w.get(destsTree, key)
	if err != nil {
		return nil, err
	}
	d := w.newRec()
	if ok {
		if err = d.decode(key, v); err != nil {
			return nil, err
		}
	} else {
		if !create {
			return nil, fmt.Errorf("%w: %s %q", kdb.ErrNotFound, kind, name)
		}
		id, err := w.nextID()
		if err != nil {
			return nil, err
		}
		*d = destRec{key: key, id: id, nextSeq: 1, dirty: true}
	}
	w.keep(d)
	return d, nil
}

// newRec returns a record to fill: the write's first is its own.
func (w *bwrite) newRec() *destRec {
	if len(w.order) == 0 && w.first.key == nil {
		return &w.first
	}
	return new(destRec)
}

func (w *bwrite) nextID() (uint64, error) {
	ctr, key := ctrTree, []byte("ids")
	v, ok, err := w.get(ctr, key)
	if err != nil {
		return 0, err
	}
	id := uint64(1)
	if ok {
		if len(v) != 8 {
			return 0, fmt.Errorf("%w: broker id counter of %d bytes", kdb.ErrCorrupt, len(v))
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
			w.put(destsTree, d.key, d.encode())
			d.dirty = false
		}
	}
	w.order = w.order[:0]
	w.dests = nil
	w.first = destRec{}
}

func checkDest(kind DestKind, name string) error {
	if kind != Queue && kind != Topic {
		return fmt.Errorf("%w: destination kind %d", kdb.ErrInvalid, kind)
	}
	return checkName("destination name", name)
}

func checkName(what, s string) error {
	if len(s) == 0 || len(s) > MaxNameSize {
		return fmt.Errorf("%w: %s of %d bytes (want 1..%d)", kdb.ErrInvalid, what, len(s), MaxNameSize)
	}
	return nil
}

// subs returns the ids of the destination's subscriptions, by name, as
// committed (subscriptions change only in Updates, after which nothing is
// in flight).
func (w *bwrite) subs(d *destRec) (names []string, ids []uint64, err error) {
	return listSubs(w.tx.Iter(subsTree), d)
}

func listSubs(it *kdb.Iter, d *destRec) (names []string, ids []uint64, err error) {
	prefix := binary.BigEndian.AppendUint64(nil, d.id)
	for ok := it.Seek(prefix); ok && bytes.HasPrefix(it.Key(), prefix); ok = it.Next() {
		k, v := it.Key(), it.Value()
		if v == nil {
			break // Err says why
		}
		if len(v) != 16 {
			return nil, nil, fmt.Errorf("%w: broker subscription %q: value of %d bytes", kdb.ErrCorrupt, k, len(v))
		}
		names = append(names, string(k[8:]))
		ids = append(ids, binary.LittleEndian.Uint64(v))
	}
	return names, ids, it.Err()
}

// topicSub returns a topic and the id of its subscription sub.
func (w *bwrite) topicSub(topic, sub string) (*destRec, uint64, error) {
	// A bad name is ErrInvalid whether the topic exists or not.
	if err := checkName("subscription name", sub); err != nil {
		return nil, 0, err
	}
	d, err := w.dest(Topic, topic, false)
	if err != nil {
		return nil, 0, err
	}
	id, err := w.sub(d, sub)
	return d, id, err
}

func (w *bwrite) sub(d *destRec, name string) (uint64, error) {
	if err := checkName("subscription name", name); err != nil {
		return 0, err
	}
	v, ok, err := w.get(subsTree, append(binary.BigEndian.AppendUint64(nil, d.id), name...))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: subscription %q", kdb.ErrNotFound, name)
	}
	if len(v) != 16 {
		return 0, fmt.Errorf("%w: broker subscription %q: value of %d bytes", kdb.ErrCorrupt, name, len(v))
	}
	return binary.LittleEndian.Uint64(v), nil
}

// checkMessage checks what the caller put in m.
func checkMessage(m *Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", kdb.ErrInvalid)
	}
	if err := checkName("message ID", m.ID); err != nil {
		return err
	}
	switch {
	case len(m.ProducerID) > MaxNameSize:
		return fmt.Errorf("%w: producer ID of %d bytes (max %d)", kdb.ErrInvalid, len(m.ProducerID), MaxNameSize)
	case m.ProducerSeq == math.MaxUint64:
		// Stored as the producer's last, it would make every later
		// message of the producer a duplicate.
		return fmt.Errorf("%w: producer %q sequence %d: the largest allowed is %d", kdb.ErrInvalid, m.ProducerID, m.ProducerSeq, uint64(math.MaxUint64-1))
	}
	// The bytes the encoding holds at least, counted before it is made:
	// an oversized body is refused without a copy of it.
	n := len(m.ID) + len(m.ProducerID) + len(m.Body)
	for k, v := range m.Properties {
		n += len(k) + len(v)
	}
	if n > kdb.MaxValueSize {
		return fmt.Errorf("%w: message of at least %d bytes (max %d)", kdb.ErrInvalid, n, kdb.MaxValueSize)
	}
	return nil
}

// send adds m to the destination and returns its sequence number. It does
// not change m: the caller sets m.Seq once the batch is committed. enc is
// m's encoding (encodeMessage), or nil: then send checks and encodes m
// (Send does both before its transaction, whose function runs while other
// writers wait).
func (w *bwrite) send(kind DestKind, dest string, m *Message, enc []byte) (uint64, error) {
	if enc == nil {
		if err := checkMessage(m); err != nil {
			return 0, err
		}
		enc = encodeMessage(m)
	}
	d, err := w.dest(kind, dest, true)
	if err != nil {
		return 0, err
	}
	if err := w.b.overrun[d.id]; err != nil {
		return 0, err
	}
	if m.ProducerID != "" {
		v, ok, err := w.get(idTree(prodPrefix, d.id), []byte(m.ProducerID))
		if err != nil {
			return 0, err
		}
		if ok {
			if len(v) != 8 {
				return 0, fmt.Errorf("%w: broker producer %q: value of %d bytes", kdb.ErrCorrupt, m.ProducerID, len(v))
			}
			if last := binary.LittleEndian.Uint64(v); m.ProducerSeq <= last {
				return 0, fmt.Errorf("%w: producer %q sequence %d (already at %d) in %s %q", ErrDuplicate, m.ProducerID, m.ProducerSeq, last, kind, dest)
			}
		}
	}
	if _, ok, err := w.get(idTree(idPrefix, d.id), []byte(m.ID)); err != nil {
		return 0, err
	} else if ok {
		return 0, fmt.Errorf("%w: message ID %q in %s %q", ErrDuplicate, m.ID, kind, dest)
	}
	if len(enc) > kdb.MaxValueSize {
		return 0, fmt.Errorf("%w: message of %d bytes (max %d)", kdb.ErrInvalid, len(enc), kdb.MaxValueSize)
	}
	if max := w.b.db.MaxBatchSize(); len(enc) > max {
		return 0, fmt.Errorf("%w: message of %d bytes: this store's largest is %d (a quarter of kdb.Options.SegmentSize, at most 16 MiB)", kdb.ErrInvalid, len(enc), max)
	}
	seq := d.nextSeq
	d.nextSeq++
	d.dirty = true
	if m.ProducerID != "" {
		w.put(idTree(prodPrefix, d.id), []byte(m.ProducerID), u64(m.ProducerSeq))
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
			w.put(idTree(pendPrefix, id), seqKey(seq), []byte{})
		}
	}
	// enc was made for this write (Send's encodeMessage, or just above).
	w.putOwned(idTree(msgPrefix, d.id), seqKey(seq), enc)
	w.put(idTree(hdrPrefix, d.id), seqKey(seq), encodeHdr(refs, uint32(len(enc)), m.ID))
	w.put(idTree(idPrefix, d.id), []byte(m.ID), u64(seq))
	if refs > 1 && w.b.topicSendSize(d, int(refs)) > w.b.db.MaxBatchSize()/2 {
		// Near the bound: say why the batch is too large (the caller
		// cannot split one send).
		if err := w.tx.Fits(); err != nil {
			return 0, fmt.Errorf("%w: a send to topic %q writes an entry for each of its %d subscriptions in one batch, which with this message (a %d-byte ID) takes more than the store's batch (%d bytes): unsubscribe some, send a smaller message, or use larger segments (kdb.Options.SegmentSize)", kdb.ErrInvalid, dest, refs, len(m.ID), w.b.db.MaxBatchSize())
		}
	}
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
		return 0, 0, nil, fmt.Errorf("%w: broker message header of %d bytes", kdb.ErrCorrupt, len(v))
	}
	return binary.LittleEndian.Uint32(v), binary.LittleEndian.Uint32(v[4:]), v[8:], nil
}

// unrefMsg drops one reference to message seq; the last one removes it.
func (w *bwrite) unrefMsg(d *destRec, seq uint64) error {
	found, err := w.unrefIfThere(d, seq)
	if err == nil && !found {
		err = fmt.Errorf("%w: message %d", kdb.ErrNotFound, seq)
	}
	return err
}

// unrefIfThere is unrefMsg for a message that may be gone already: it
// reports whether the message was there (one lookup of its header, for
// the check and the removal both).
func (w *bwrite) unrefIfThere(d *destRec, seq uint64) (bool, error) {
	ht := idTree(hdrPrefix, d.id)
	v, ok, err := w.get(ht, seqKey(seq))
	if err != nil || !ok {
		return false, err
	}
	refs, size, id, err := decodeHdr(v)
	if err != nil {
		return true, err
	}
	if refs > 1 {
		w.put(ht, seqKey(seq), encodeHdr(refs-1, size, string(id)))
		return true, nil
	}
	w.del(idTree(msgPrefix, d.id), seqKey(seq))
	w.del(ht, seqKey(seq))
	w.del(idTree(idPrefix, d.id), bytes.Clone(id))
	if d.count == 0 || d.nbytes < uint64(size) {
		return true, fmt.Errorf("%w: broker destination %q: counts below zero", kdb.ErrCorrupt, d.key)
	}
	d.count--
	d.nbytes -= uint64(size)
	d.dirty = true
	return true, nil
}

func (w *bwrite) ack(kind DestKind, dest string, seqs []uint64) error {
	if kind != Queue {
		return fmt.Errorf("%w: Ack is for queues; topics use AckSub", kdb.ErrInvalid)
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
	d, id, err := w.topicSub(topic, sub)
	if err != nil {
		return err
	}
	pt := idTree(pendPrefix, id)
	for _, s := range seqs {
		if _, ok, err := w.get(pt, seqKey(s)); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: message %d pending for subscription %q", kdb.ErrNotFound, s, sub)
		}
		w.del(pt, seqKey(s))
		if err := w.unrefMsg(d, s); err != nil {
			return err
		}
	}
	return nil
}

// write runs fn to build one atomic batch and commits it, durably.
// exclusive operations (those that scan or drop trees) run as an Update,
// after the writes in flight; the others as an ordered transaction, whose
// fsync the next writers' transactions overlap.
func (b *Broker) write(exclusive bool, fn func(w *bwrite) error) error {
	run := func(tx *kdb.Txn) error {
		w := &bwrite{b: b, tx: tx}
		if err := fn(w); err != nil {
			return err
		}
		w.flush()
		return w.err
	}
	if exclusive {
		return b.ns.Update(run)
	}
	c, err := b.ns.Submit(run)
	if err != nil {
		return err
	}
	return c.Wait()
}

// Send appends m to the named destination (created on demand) and returns
// its sequence number, also stored in m.Seq. A message whose ID is kept in
// the destination already, or whose producer sequence is not above the
// producer's last one, is rejected with ErrDuplicate. On return (nil) the
// message is durable. Concurrent Sends share fsyncs.
//
// Bad input (a nil message, an empty or oversized ID, a ProducerSeq of
// math.MaxUint64, an unknown kind) is kdb.ErrInvalid. If
// the call fails, m is left as it was: m.Seq is set only on success.
func (b *Broker) Send(kind DestKind, dest string, m *Message) (uint64, error) {
	if err := checkMessage(m); err != nil {
		return 0, err
	}
	enc := encodeMessage(m)
	var seq uint64
	err := b.write(false, func(w *bwrite) error {
		var err error
		seq, err = w.send(kind, dest, m, enc)
		return err
	})
	if err != nil {
		return 0, err
	}
	m.Seq = seq
	return seq, nil
}

// Ack removes the given messages of a queue. On return (nil) it is durable.
// It is one batch, all or nothing: an unknown queue or sequence number is
// kdb.ErrNotFound, and so is a sequence number listed twice (its second
// ack finds the message gone, though the message is there: "message N"),
// with nothing written.
//
// More messages than one batch holds are kdb.ErrInvalid ("split the
// batch"), with nothing written; AckAsync cuts such a list into several.
// Each message takes 61+len(ID) bytes of the batch record (62+len(ID) from
// 128-byte IDs on), and the call about 47+len(dest) more, out of
// kdb.DB.MaxBatchSize (a quarter of kdb.Options.SegmentSize, at most 16 MiB):
// with 45-byte IDs and a 1-byte queue name, 154 messages with 64 KiB
// segments, 79,137 with the default 32 MiB.
func (b *Broker) Ack(kind DestKind, dest string, seqs ...uint64) error {
	return b.write(false, func(w *bwrite) error { return w.ack(kind, dest, seqs) })
}

// AckSub acknowledges messages for one durable subscription of a topic; a
// message is removed once every subscription acked it. On return (nil) it
// is durable. One batch, as Ack: an unknown topic or subscription, or a
// sequence number not pending for it (or listed twice), is kdb.ErrNotFound
// with nothing written; each message takes up to 23 bytes more of the
// batch record than in Ack (its pending entry).
func (b *Broker) AckSub(topic, sub string, seqs ...uint64) error {
	return b.write(false, func(w *bwrite) error { return w.ackSub(topic, sub, seqs) })
}

// CreateDestination creates a destination if it does not exist. Send
// creates destinations on demand too.
func (b *Broker) CreateDestination(kind DestKind, dest string) error {
	return b.write(false, func(w *bwrite) error {
		_, err := w.dest(kind, dest, true)
		return err
	})
}

// Subscribe creates a durable subscription on a topic (created on demand);
// it receives the messages sent from now on. Subscribing again is a no-op.
// On return (nil) it is durable. A send to a topic writes an entry for each
// of its subscriptions in one batch, so a topic takes as many as leave room
// for the smallest message (about 676 with 64 KiB segments, some 349,000
// with the default 32 MiB ones): the next is kdb.ErrInvalid. A Send whose
// message (its ID, and its body up to kdb.Options.ValueThreshold) does not
// fit beside them is kdb.ErrInvalid, naming the subscriptions; so is the
// CommitPrepared of such a send when subscriptions were added after its
// Prepare (then RollbackPrepared it).
func (b *Broker) Subscribe(topic, sub string) error {
	return b.write(true, func(w *bwrite) error {
		d, err := w.dest(Topic, topic, true)
		if err != nil {
			return err
		}
		if _, err := w.sub(d, sub); err == nil {
			return nil
		} else if !isNotFound(err) {
			return err
		}
		// A send to the topic writes an entry for every subscription, in
		// one batch: one more must leave room for a message.
		_, ids, err := w.subs(d)
		if err != nil {
			return err
		}
		if need, max := b.topicSendSize(d, len(ids)+1), b.db.MaxBatchSize(); need > max {
			return fmt.Errorf("%w: topic %q has %d subscriptions: a send to it writes an entry for each in one batch, and with one more even the smallest message would take %d bytes (max %d, a quarter of kdb.Options.SegmentSize): unsubscribe some first, or use larger segments", kdb.ErrInvalid, topic, len(ids), need, max)
		}
		id, err := w.nextID()
		if err != nil {
			return err
		}
		v := binary.LittleEndian.AppendUint64(u64(id), d.nextSeq)
		w.put(subsTree, append(binary.BigEndian.AppendUint64(nil, d.id), sub...), v)
		return nil
	})
}

// topicSendSize returns the bytes of the batch record of a send of the
// smallest message (a 1-byte ID, no producer, no body) to topic d with n
// subscriptions.
func (b *Broker) topicSendSize(d *destRec, n int) int {
	const header = 1 + 10 // the record's version and its op count (a uvarint)
	var id0 [8]byte
	min := encodeMessage(&Message{ID: "x"})
	return header + n*b.ns.PutSize(idTree(pendPrefix, 0), id0[:], 0) +
		b.ns.PutSize(idTree(msgPrefix, 0), id0[:], len(min)) +
		b.ns.PutSize(idTree(hdrPrefix, 0), id0[:], len(encodeHdr(1, uint32(len(min)), "x"))) +
		b.ns.PutSize(idTree(idPrefix, 0), []byte("x"), 8) +
		b.ns.PutSize(destsTree, d.key, len(d.encode()))
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, kdb.ErrNotFound) }

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
	b = append(b, msgVersion)
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
	d := codec.Decoder{B: b}
	var m Message
	if v := d.Byte(); d.Err == nil && v != msgVersion {
		return m, fmt.Errorf("%w: broker message version %d", kdb.ErrCorrupt, v)
	}
	m.ID = string(d.Bytes(d.Uvarint()))
	m.ProducerID = string(d.Bytes(d.Uvarint()))
	m.ProducerSeq = d.Uvarint()
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(b))/2 {
		return m, fmt.Errorf("%w: broker message: %d properties in %d bytes", kdb.ErrCorrupt, n, len(b))
	}
	if n > 0 {
		m.Properties = make(map[string]string, n)
	}
	for i := uint64(0); i < n && d.Err == nil; i++ {
		k := string(d.Bytes(d.Uvarint()))
		m.Properties[k] = string(d.Bytes(d.Uvarint()))
	}
	if d.Err != nil {
		return m, fmt.Errorf("%w: broker message: %w", kdb.ErrCorrupt, d.Err)
	}
	m.Body = bytes.Clone(b[d.Off:])
	if m.Body == nil {
		m.Body = []byte{}
	}
	return m, nil
}
