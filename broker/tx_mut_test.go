package broker

// Tests added by mutation testing of broker transactions (tx.go): each
// guards a step that a deliberate breakage of the code removed without
// any other test failing.

import (
	"errors"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestMut_TxIsOverAfterCommit guards Commit's "Either way the transaction
// is over" (tx.go, tx.done = true): a second Commit of the same
// transaction, or an operation added after it, is kdb.ErrInvalid and
// writes nothing; before, a second Commit ran the transaction's acks and
// sends again.
func TestMut_TxIsOverAfterCommit(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	for _, id := range []string{"a", "b"} {
		if _, err := b.Send(Queue, "in", &Message{ID: id, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	tx := b.BeginTx()
	if err := tx.Ack(Queue, "in", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("a second Commit: %v, want kdb.ErrInvalid", err)
	}
	if err := tx.Ack(Queue, "in", 2); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Ack after Commit: %v, want kdb.ErrInvalid", err)
	}
	if err := tx.Send(Queue, "out", &Message{ID: "c", Body: []byte("c")}); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Send after Commit: %v, want kdb.ErrInvalid", err)
	}
	if d, err := b.Destination(Queue, "in"); err != nil || d.Count != 1 {
		t.Fatalf("queue after: %+v, %v; want 1 message (b)", d, err)
	}
	// An empty transaction is over after its Commit too.
	empty := b.BeginTx()
	if err := empty.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := empty.Send(Queue, "out", &Message{ID: "d", Body: []byte("d")}); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Send after the Commit of an empty transaction: %v, want kdb.ErrInvalid", err)
	}
}

// TestMut_TxIsOverAfterPrepare guards Prepare's end of the transaction
// (tx.go, tx.done = true once prepared): a prepared transaction is
// finished by CommitPrepared or RollbackPrepared only; its Commit is
// kdb.ErrInvalid. Before, the Commit sent its messages at once, and
// CommitPrepared then failed as a duplicate.
func TestMut_TxIsOverAfterPrepare(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	tx := b.BeginTx()
	if err := tx.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("x1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Commit of a prepared transaction: %v, want kdb.ErrInvalid", err)
	}
	if err := tx.Prepare("x2"); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("a second Prepare: %v, want kdb.ErrInvalid", err)
	}
	if _, err := b.GetMessage(Queue, "q", "m"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("the prepared message before CommitPrepared: %v, want kdb.ErrNotFound", err)
	}
	if err := b.CommitPrepared("x1"); err != nil {
		t.Fatal(err)
	}
	if p, err := b.Prepared(); err != nil || len(p) != 0 {
		t.Fatalf("prepared after CommitPrepared: %q, %v; want none", p, err)
	}
	if m, err := b.GetMessage(Queue, "q", "m"); err != nil || m.Seq != 1 {
		t.Fatalf("the message after CommitPrepared: %+v, %v; want seq 1", m, err)
	}
}

// TestMut_RollbackPreparedOfAnUnknownXID guards RollbackPrepared's
// documented kdb.ErrNotFound (tx.go) for a transaction ID that is not
// prepared (never, or finished already), which said nil before.
func TestMut_RollbackPreparedOfAnUnknownXID(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	if err := b.RollbackPrepared("never"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("RollbackPrepared of an ID never prepared: %v, want kdb.ErrNotFound", err)
	}
	tx := b.BeginTx()
	if err := tx.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("x"); err != nil {
		t.Fatal(err)
	}
	if err := b.RollbackPrepared("x"); err != nil {
		t.Fatal(err)
	}
	if err := b.RollbackPrepared("x"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("a second RollbackPrepared: %v, want kdb.ErrNotFound", err)
	}
}

// TestMut_DecodeTxRefusesWhatEncodeTxNeverMakes guards decodeTx's checks
// (tx.go) that the fuzz test alone exercised: bytes after the last op, and
// an op of an unknown kind, are kdb.ErrCorrupt (a prepared record Check
// must report, and CommitPrepared must not run in part).
func TestMut_DecodeTxRefusesWhatEncodeTxNeverMakes(t *testing.T) {
	ops := []txOp{
		{kind: txSend, dk: Queue, dest: "q", msg: &Message{ID: "m", Body: []byte("x")}},
		{kind: txAck, dk: Queue, dest: "q", seqs: []uint64{1, 2}},
	}
	good := encodeTx(ops)
	if got, err := decodeTx(good); err != nil || len(got) != 2 {
		t.Fatalf("decodeTx of encodeTx's bytes: %d ops, %v", len(got), err)
	}
	if _, err := decodeTx(append(append([]byte(nil), good...), 0)); !errors.Is(err, kdb.ErrCorrupt) {
		t.Errorf("a byte after the last op: %v, want kdb.ErrCorrupt", err)
	}
	// One op of kind 9, with a destination and subscription, nothing else.
	unknown := []byte{txVersion, 1, 9, byte(Queue), 1, 'q', 0}
	if got, err := decodeTx(unknown); !errors.Is(err, kdb.ErrCorrupt) {
		t.Errorf("an op of kind 9: %+v, %v; want kdb.ErrCorrupt", got, err)
	}
}
