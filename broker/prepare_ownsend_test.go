package broker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
	"github.com/kdb-project/kdb/vfs"
)

// A prepared transaction's acks name messages by number, and its own sends
// are numbered only at CommitPrepared. An ack of one of its own sends:
//   - in a queue the transaction creates was refused with a false reason
//     (the queue "was deleted while it was prepared");
//   - in an existing queue was prepared, and a Send made before
//     CommitPrepared took the number: CommitPrepared then acked that other
//     message (silent loss).
//
// Both are ErrInvalid at Prepare now, saying why; Commit (no prepare) still
// takes them, and a prepared transaction acking earlier messages still
// commits beside sends made meanwhile.
func TestPrepare_AckOfItsOwnSendRefused(t *testing.T) {
	db, err := kdb.Open("/db", &kdb.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	send := func(dest, id string) uint64 {
		t.Helper()
		seq, err := b.Send(broker.Queue, dest, &broker.Message{ID: id, Body: []byte(id)})
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	ids := func(dest string) string {
		t.Helper()
		ms, err := b.Read(broker.Queue, dest, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, m := range ms {
			s = append(s, m.ID)
		}
		return strings.Join(s, ",")
	}

	// A queue the transaction creates.
	tx := b.BeginTx()
	tx.Send(broker.Queue, "new", &broker.Message{ID: "a"})
	tx.Send(broker.Queue, "new", &broker.Message{ID: "b"})
	tx.Ack(broker.Queue, "new", 1)
	if err := tx.Prepare("x1"); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "creates itself") {
		t.Errorf("Prepare acking in a queue it creates: %v, want ErrInvalid saying so", err)
	}
	tx = b.BeginTx()
	tx.Send(broker.Queue, "new", &broker.Message{ID: "a"})
	tx.Send(broker.Queue, "new", &broker.Message{ID: "b"})
	tx.Ack(broker.Queue, "new", 1)
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit of the same: %v", err)
	}
	if got := ids("new"); got != "b" {
		t.Errorf("queue new after Commit: %q, want b", got)
	}

	// An existing queue: the transaction acks the message it sends.
	send("q", "m1")
	tx = b.BeginTx()
	tx.Send(broker.Queue, "q", &broker.Message{ID: "mine"})
	tx.Ack(broker.Queue, "q", 2)
	if err := tx.Prepare("x2"); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "which it sends itself") {
		t.Errorf("Prepare acking its own send: %v, want ErrInvalid saying so", err)
		send("q", "other") // takes number 2 before CommitPrepared
		if err := b.CommitPrepared("x2"); err == nil {
			t.Errorf("and CommitPrepared then left %q (the other's message acked)", ids("q"))
		}
	}
	if p, err := b.Prepared(); err != nil || len(p) != 0 {
		t.Fatalf("Prepared after the refusals: %v, %v", p, err)
	}

	// Acks of messages sent before it: prepared, and committed beside a
	// send made meanwhile.
	tx = b.BeginTx()
	tx.Send(broker.Queue, "q", &broker.Message{ID: "mine"})
	tx.Ack(broker.Queue, "q", 1)
	if err := tx.Prepare("x3"); err != nil {
		t.Fatal(err)
	}
	send("q", "meanwhile")
	if err := b.CommitPrepared("x3"); err != nil {
		t.Fatal(err)
	}
	if got := ids("q"); got != "meanwhile,mine" {
		t.Errorf("queue q: %q, want meanwhile,mine", got)
	}
}
