package broker

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// refusedOps are transaction ops the API never prepares: each with the
// call that tries to add it (nil: the API cannot even say it).
func refusedOps() []struct {
	name string
	op   txOp
	api  func(tx *Tx) error
} {
	long := strings.Repeat("n", MaxNameSize+1)
	m := func(id, prod string, pseq uint64) *Message {
		return &Message{ID: id, ProducerID: prod, ProducerSeq: pseq, Body: []byte("x")}
	}
	return []struct {
		name string
		op   txOp
		api  func(tx *Tx) error
	}{
		{"a send to a destination of kind 7", txOp{kind: txSend, dk: 7, dest: "q", msg: m("m", "", 0)},
			func(tx *Tx) error { return tx.Send(7, "q", m("m", "", 0)) }},
		{"a send to an empty name", txOp{kind: txSend, dk: Queue, dest: "", msg: m("m", "", 0)},
			func(tx *Tx) error { return tx.Send(Queue, "", m("m", "", 0)) }},
		{"a send to a name too long", txOp{kind: txSend, dk: Topic, dest: long, msg: m("m", "", 0)},
			func(tx *Tx) error { return tx.Send(Topic, long, m("m", "", 0)) }},
		{"a send of an empty message ID", txOp{kind: txSend, dk: Queue, dest: "q", msg: m("", "", 0)},
			func(tx *Tx) error { return tx.Send(Queue, "q", m("", "", 0)) }},
		{"a send of a message ID too long", txOp{kind: txSend, dk: Queue, dest: "q", msg: m(long, "", 0)},
			func(tx *Tx) error { return tx.Send(Queue, "q", m(long, "", 0)) }},
		{"a send of a producer ID too long", txOp{kind: txSend, dk: Queue, dest: "q", msg: m("m", long, 1)},
			func(tx *Tx) error { return tx.Send(Queue, "q", m("m", long, 1)) }},
		{"a send of producer sequence 2^64-1", txOp{kind: txSend, dk: Queue, dest: "q", msg: m("m", "p", math.MaxUint64)},
			func(tx *Tx) error { return tx.Send(Queue, "q", m("m", "p", math.MaxUint64)) }},
		{"a send naming a subscription", txOp{kind: txSend, dk: Topic, dest: "t", sub: "s", msg: m("m", "", 0)}, nil},
		{"an ack of a topic", txOp{kind: txAck, dk: Topic, dest: "t", seqs: []uint64{1}},
			func(tx *Tx) error { return tx.Ack(Topic, "t", 1) }},
		{"an ack of a destination of kind 0", txOp{kind: txAck, dk: 0, dest: "q", seqs: []uint64{1}},
			func(tx *Tx) error { return tx.Ack(0, "q", 1) }},
		{"an ack of an empty name", txOp{kind: txAck, dk: Queue, dest: "", seqs: []uint64{1}},
			func(tx *Tx) error { return tx.Ack(Queue, "", 1) }},
		{"an ack naming a subscription", txOp{kind: txAck, dk: Queue, dest: "q", sub: "s", seqs: []uint64{1}}, nil},
		{"a subscription ack of a queue", txOp{kind: txAckSub, dk: Queue, dest: "t", sub: "s", seqs: []uint64{1}}, nil},
		{"a subscription ack of a topic name too long", txOp{kind: txAckSub, dk: Topic, dest: long, sub: "s", seqs: []uint64{1}},
			func(tx *Tx) error { return tx.AckSub(long, "s", 1) }},
		{"a subscription ack of an empty subscription name", txOp{kind: txAckSub, dk: Topic, dest: "t", sub: "", seqs: []uint64{1}},
			func(tx *Tx) error { return tx.AckSub("t", "", 1) }},
		{"a subscription ack of a subscription name too long", txOp{kind: txAckSub, dk: Topic, dest: "t", sub: long, seqs: []uint64{1}},
			func(tx *Tx) error { return tx.AckSub("t", long, 1) }},
	}
}

// TestDecodeTx_RefusesWhatTheAPIRefuses: decodeTx checked a prepared
// record's framing only, so an op the API refuses (a bad kind or name, an
// ack of a topic, a subscription ack of a queue...) decoded, and
// CommitPrepared ran it: some failed there as the caller's error
// (kdb.ErrInvalid), others ran as no API call can. The API and decodeTx
// now share one check (txOp.check): what the API refuses with
// kdb.ErrInvalid, decodeTx refuses with kdb.ErrCorrupt.
func TestDecodeTx_RefusesWhatTheAPIRefuses(t *testing.T) {
	b := openTestBroker(t, nil)
	good := []txOp{
		{kind: txSend, dk: Queue, dest: "q", msg: &Message{ID: "m", Body: []byte("x")}},
		{kind: txAck, dk: Queue, dest: "q", seqs: []uint64{1}},
		{kind: txAckSub, dk: Topic, dest: "t", sub: "s", seqs: []uint64{1}},
	}
	if ops, err := decodeTx(encodeTx(good)); err != nil || len(ops) != len(good) {
		t.Fatalf("decodeTx of the API's ops: %d ops, %v", len(ops), err)
	}
	for _, c := range refusedOps() {
		if c.api != nil {
			if err := c.api(b.BeginTx()); !errors.Is(err, kdb.ErrInvalid) {
				t.Errorf("%s, by the API: %v, want kdb.ErrInvalid", c.name, err)
			}
		}
		for at := range len(good) + 1 {
			ops := append(append(append([]txOp(nil), good[:at]...), c.op), good[at:]...)
			if got, err := decodeTx(encodeTx(ops)); !errors.Is(err, kdb.ErrCorrupt) || errors.Is(err, kdb.ErrInvalid) {
				t.Errorf("decodeTx of %s (op %d): %d ops, %v; want kdb.ErrCorrupt (and not kdb.ErrInvalid)", c.name, at, len(got), err)
				break
			}
		}
	}
}

// TestCommitPrepared_OfARecordTheAPINeverWrites: a prepared record holding
// an op the API refuses (written here through the engine, in tree "tx"
// of namespace "b") is damage: CommitPrepared applies none of it and says
// kdb.ErrCorrupt, and Check reports it; RollbackPrepared forgets it.
// Before, a subscription ack of a queue acked the topic's subscription,
// and a send naming a subscription sent.
func TestCommitPrepared_OfARecordTheAPINeverWrites(t *testing.T) {
	for _, c := range refusedOps() {
		b := openTestBroker(t, nil)
		if err := b.Subscribe("t", "s"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Send(Topic, "t", &Message{ID: "e", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Send(Queue, "q", &Message{ID: "k", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		ns, err := b.DB().Namespace(Namespace)
		if err != nil {
			t.Fatal(err)
		}
		enc := encodeTx([]txOp{{kind: txSend, dk: Queue, dest: "q2", msg: &Message{ID: "n", Body: []byte("y")}}, c.op})
		if err := ns.Update(func(tx *kdb.Txn) error { return tx.Put("tx", []byte("x1"), enc) }); err != nil {
			t.Fatal(err)
		}
		if err := b.CommitPrepared("x1"); !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("CommitPrepared of a record holding %s: %v, want kdb.ErrCorrupt", c.name, err)
		}
		if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
			t.Errorf("Check of a record holding %s: %v, want kdb.ErrCorrupt", c.name, err)
		}
		if err := b.RollbackPrepared("x1"); err != nil {
			t.Fatalf("RollbackPrepared of a record holding %s: %v", c.name, err)
		}
		if _, err := b.Destination(Queue, "q2"); !isNotFound(err) {
			t.Errorf("after CommitPrepared of a record holding %s: queue q2: %v, want kdb.ErrNotFound (nothing applied)", c.name, err)
		}
		if n, err := b.Pending("t", "s"); err != nil || n != 1 {
			t.Errorf("after CommitPrepared of a record holding %s: %d pending, %v; want 1", c.name, n, err)
		}
		if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 1 {
			t.Errorf("after CommitPrepared of a record holding %s: queue q %+v, %v; want 1 message", c.name, d, err)
		}
		if err := b.Check(); err != nil {
			t.Fatalf("Check after the rollback: %v", err)
		}
	}
}
