package broker

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kdb-project/kdb"
)

// The writes that grow with the caller's input must fit in one journal
// batch (a quarter of kdb.Options.SegmentSize), or say so when called:
// found with small segments by an outside tester.

// sendN sends n messages to queue q and returns their sequence numbers.
func sendN(t *testing.T, b *Broker, q string, n int) []uint64 {
	t.Helper()
	seqs := make([]uint64, n)
	for i := range seqs {
		s, err := b.Send(Queue, q, &Message{ID: fmt.Sprintf("message-%06d", i), Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		seqs[i] = s
	}
	return seqs
}

// TestAckAsync_MoreThanOneBatch: an AckAsync of more messages than one
// batch removes returned nil, and so did the Sync after it, but the
// deferred transaction failed alone ("split the batch") and the ack was
// dropped: every message stayed, with no error anywhere. It is now split
// into batches that fit.
func TestAckAsync_MoreThanOneBatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	o := &kdb.Options{SegmentSize: 128 << 10}
	db, err := kdb.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	if n <= b.perBatch() {
		t.Fatalf("%d messages fit in one batch (%d): the test needs more", n, b.perBatch())
	}
	seqs := sendN(t, b, "q", n)
	if err := b.AckAsync(Queue, "q", seqs...); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after AckAsync of all %d and Sync: %+v, %v", n, d, err)
	}
	// The acks were synced: a power loss now keeps them. Reopened (a
	// clean close journals nothing more: Sync made them durable).
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = kdb.Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err = Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("reopened: %+v, %v", d, err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestAckAsync_AFailedAckIsReported: an ack that fails when its deferred
// transaction runs (here a damaged message header) answered only the
// engine's done callback, which dropped the error: the caller never knew
// the message stayed. The next Sync returns it, once.
func TestAckAsync_AFailedAckIsReported(t *testing.T) {
	b := openTestBroker(t, nil)
	seqs := sendN(t, b, "q", 3)
	d, err := b.Destination(Queue, "q")
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	if err := b.ns.Update(func(tx *kdb.Txn) error {
		v, err := tx.Get(destsTree, destKey(Queue, "q"))
		if err != nil {
			return err
		}
		var r destRec
		if err := r.decode(destKey(Queue, "q"), v); err != nil {
			return err
		}
		id = r.id
		return tx.Put(idTree(hdrPrefix, id), seqKey(seqs[1]), []byte{0xff})
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.AckAsync(Queue, "q", seqs[1]); err != nil {
		t.Fatalf("AckAsync: %v (its check reads no header)", err)
	}
	err = b.Sync()
	if !errors.Is(err, kdb.ErrCorrupt) {
		t.Fatalf("Sync after an ack that could not be applied: %v, want ErrCorrupt", err)
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("a second Sync: %v, want nil (reported once)", err)
	}
	if d2, err := b.Destination(Queue, "q"); err != nil || d2.Count != d.Count {
		t.Fatalf("after the failed ack: %+v, %v; want the %d messages still there", d2, err, d.Count)
	}
	if err := b.DB().Err(); err != nil {
		t.Fatalf("the handle: %v (a failed deferred transaction does not fail it)", err)
	}
}

// TestPrepare_RefusesATransactionTooLargeToCommit: Prepare checked that
// the stored transaction fits, not that its commit does: a transaction
// acking a thousand messages was prepared, and CommitPrepared then failed
// every time ("split the batch"). Prepare refuses it now; one that fits
// still commits.
func TestPrepare_RefusesATransactionTooLargeToCommit(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 64 << 10})
	seqs := sendN(t, b, "q", 1000)
	tx := b.BeginTx()
	if err := tx.Ack(Queue, "q", seqs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("big"); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("Prepare of an ack of %d messages: %v, want ErrInvalid", len(seqs), err)
	}
	if xs, err := b.Prepared(); err != nil || len(xs) != 0 {
		t.Fatalf("prepared after the refusal: %v, %v", xs, err)
	}
	small := seqs[:b.perBatch()]
	tx = b.BeginTx()
	if err := tx.Ack(Queue, "q", small...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Send(Queue, "q", &Message{ID: "in-tx", Body: make([]byte, 1000)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("small"); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitPrepared("small"); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != uint64(len(seqs)-len(small)+1) {
		t.Fatalf("after the commit: %+v, %v", d, err)
	}
}
