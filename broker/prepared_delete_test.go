package broker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// TestPrepared_AckOutlivesNoDeleteOfItsDestination: a prepared
// transaction acks its destination's messages by sequence number, and a
// destination deleted and made again numbers from 1 again. A
// DeleteDestination of a queue (or topic) that a prepared transaction acks
// in returned nil; once the queue was made again, CommitPrepared acked
// the new queue's message of that number, which the transaction never
// saw (silent loss). The DeleteDestination is refused now
// (kdb.ErrInvalid, naming the transaction) until the transaction is
// committed or rolled back; then it deletes.
func TestPrepared_AckOutlivesNoDeleteOfItsDestination(t *testing.T) {
	for _, kind := range []broker.DestKind{broker.Queue, broker.Topic} {
		t.Run(kind.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			b := openBroker(t, fs)
			if kind == broker.Topic {
				if err := b.Subscribe("d", "s"); err != nil {
					t.Fatal(err)
				}
			}
			seq := mustSend(t, b, kind, "d", &broker.Message{ID: "old"})
			tx := b.BeginTx()
			if kind == broker.Queue {
				_ = tx.Ack(kind, "d", seq)
			} else {
				_ = tx.AckSub("d", "s", seq)
			}
			if err := tx.Prepare("x1"); err != nil {
				t.Fatal(err)
			}
			// A transaction that only sends there does not hold it.
			tx = b.BeginTx()
			_ = tx.Send(kind, "other", &broker.Message{ID: "o"})
			if err := tx.Prepare("x2"); err != nil {
				t.Fatal(err)
			}
			b = reopen(t, b, fs) // the refusal reads the stored record
			err := b.DeleteDestination(kind, "d")
			if err == nil {
				// What the refusal prevents.
				if kind == broker.Topic {
					_ = b.Subscribe("d", "s")
				}
				mustSend(t, b, kind, "d", &broker.Message{ID: "new"})
				cerr := b.CommitPrepared("x1")
				_, gerr := b.GetMessage(kind, "d", "new")
				t.Fatalf("DeleteDestination of a %s a prepared transaction acks in: nil; made again, CommitPrepared: %v, and the new %s's message \"new\" (seq %d): %v",
					kind, cerr, kind, seq, gerr)
			}
			if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), `"x1"`) {
				t.Fatalf("DeleteDestination of a %s a prepared transaction acks in: %v, want ErrInvalid naming \"x1\"", kind, err)
			}
			if m, err := b.GetMessage(kind, "d", "old"); err != nil || m.Seq != seq {
				t.Fatalf("after the refused DeleteDestination: %+v, %v; want the message there", m, err)
			}
			if err := b.RollbackPrepared("x1"); err != nil {
				t.Fatal(err)
			}
			if err := b.DeleteDestination(kind, "d"); err != nil {
				t.Fatalf("DeleteDestination once the transaction is rolled back: %v", err)
			}
			if err := b.DeleteDestination(kind, "other"); !errors.Is(err, kdb.ErrNotFound) {
				t.Fatalf("DeleteDestination of a destination only a prepared send names (not made yet): %v", err)
			}
		})
	}
}

// TestPrepared_AckHoldsOnlyItsKindOfDestination: a queue and a topic of
// the same name are two destinations. A prepared transaction's ack of
// topic "x" (or queue "y") does not hold queue "x" (topic "y"): its
// DeleteDestination deletes, while the one the transaction acks in is
// still refused, and the transaction then commits.
func TestPrepared_AckHoldsOnlyItsKindOfDestination(t *testing.T) {
	fs := vfs.NewMem()
	b := openBroker(t, fs)
	if err := b.Subscribe("x", "s"); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe("y", "s"); err != nil {
		t.Fatal(err)
	}
	tseq := mustSend(t, b, broker.Topic, "x", &broker.Message{ID: "t"})
	qseq := mustSend(t, b, broker.Queue, "y", &broker.Message{ID: "q"})
	mustSend(t, b, broker.Queue, "x", &broker.Message{ID: "q"})
	mustSend(t, b, broker.Topic, "y", &broker.Message{ID: "t"})
	tx := b.BeginTx()
	_ = tx.AckSub("x", "s", tseq)
	_ = tx.Ack(broker.Queue, "y", qseq)
	if err := tx.Prepare("x1"); err != nil {
		t.Fatal(err)
	}
	b = reopen(t, b, fs) // the refusal reads the stored record
	for _, d := range []struct {
		kind broker.DestKind
		name string
	}{{broker.Queue, "x"}, {broker.Topic, "y"}} {
		if err := b.DeleteDestination(d.kind, d.name); err != nil {
			t.Fatalf("DeleteDestination of %s %q, which the prepared transaction does not ack in: %v", d.kind, d.name, err)
		}
	}
	for _, d := range []struct {
		kind broker.DestKind
		name string
	}{{broker.Topic, "x"}, {broker.Queue, "y"}} {
		if err := b.DeleteDestination(d.kind, d.name); !errors.Is(err, kdb.ErrInvalid) {
			t.Fatalf("DeleteDestination of %s %q, which the prepared transaction acks in: %v, want kdb.ErrInvalid", d.kind, d.name, err)
		}
	}
	if err := b.CommitPrepared("x1"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Pending("x", "s"); err != nil || n != 0 {
		t.Fatalf("topic x after the commit: %d pending, %v; want 0", n, err)
	}
	if d, err := b.Destination(broker.Queue, "y"); err != nil || d.Count != 0 {
		t.Fatalf("queue y after the commit: %+v, %v; want empty", d, err)
	}
}
