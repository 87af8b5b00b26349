package broker

// Tests added by mutation testing of the broker's writes (broker.go),
// two-phase transactions (tx.go) and DeleteDestination (unsub.go): each
// guards a step that a deliberate breakage of the code removed without
// any other test failing.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestMut_TxOfManyDestinationsSendsTwiceToTheLast guards bwrite.keep's
// index of the destinations a write read (broker.go): once a write reads
// more than maxDestScan of them it indexes them all, the one just read
// included. Without it, a second send in the transaction to the
// destination that crossed the limit read its record again, stale (a new
// queue made twice, or an old one's sequence number handed out twice),
// and the transaction's first message to it was lost.
func TestMut_TxOfManyDestinationsSendsTwiceToTheLast(t *testing.T) {
	b := openTestBroker(t, nil)
	n := maxDestScan + 1
	old := fmt.Sprint("q-", n-1) // the last destination read; it exists already
	if _, err := b.Send(Queue, old, &Message{ID: "before", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for _, last := range []string{old, "new"} {
		tx := b.BeginTx()
		for i := range n - 1 {
			if err := tx.Send(Queue, fmt.Sprint("q-", i), &Message{ID: "a-" + last, Body: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		first := &Message{ID: "first-" + last, Body: []byte("1")}
		second := &Message{ID: "second-" + last, Body: []byte("2")}
		if err := tx.Send(Queue, last, first); err != nil {
			t.Fatal(err)
		}
		if err := tx.Send(Queue, last, second); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if second.Seq != first.Seq+1 {
			t.Errorf("queue %q: the transaction's two sends got seqs %d and %d, want consecutive", last, first.Seq, second.Seq)
		}
		ms, err := b.Read(Queue, last, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		want := "first-" + last + " second-" + last
		if last == old {
			want = "before " + want
		}
		if got := strings.Join(ids, " "); got != want {
			t.Errorf("queue %q after a transaction sending to %d destinations, twice to it: messages %q, want %q", last, n, got, want)
		}
		if err := b.Check(); err != nil {
			t.Fatalf("queue %q: %v", last, err)
		}
	}
}

// TestMut_PrepareOfAnXIDPreparedMeanwhile guards Prepare's second look at
// the xid (tx.go, in the write of the prepared record): another Prepare of
// the same xid may store it between this one's dry run and its write.
// Without the check the second record replaced the first, whose Prepare
// had returned nil: a transaction prepared durably, then lost.
func TestMut_PrepareOfAnXIDPreparedMeanwhile(t *testing.T) {
	b := openTestBroker(t, nil)
	tx := b.BeginTx()
	if err := tx.Send(Queue, "q", &Message{ID: "mine", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ran := false
	testHookPrepareWrite = func() {
		testHookPrepareWrite = nil
		ran = true
		other := b.BeginTx()
		if err := other.Send(Queue, "q", &Message{ID: "theirs", Body: []byte("y")}); err != nil {
			t.Error(err)
		}
		if err := other.Prepare("x1"); err != nil {
			t.Errorf("the other Prepare of x1: %v", err)
		}
	}
	defer func() { testHookPrepareWrite = nil }()
	if err := tx.Prepare("x1"); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Prepare of x1, prepared by another call since its dry run: %v, want ErrDuplicate", err)
	}
	if !ran {
		t.Fatal("the hook between the dry run and the write did not run")
	}
	if err := b.CommitPrepared("x1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetMessage(Queue, "q", "theirs"); err != nil {
		t.Errorf("after CommitPrepared of x1: the other Prepare's message: %v, want it there", err)
	}
	if _, err := b.GetMessage(Queue, "q", "mine"); !isNotFound(err) {
		t.Errorf("after CommitPrepared of x1: the refused Prepare's message: %v, want kdb.ErrNotFound", err)
	}
}

// TestMut_PrepareOfAnXIDPreparedAlready guards the dry run's look at the
// xid (tx.go, Prepare): a Prepare of an xid prepared already is
// ErrDuplicate whatever its operations. Without it the dry run ran them,
// and one that fails (an ack of a message not there) hid the duplicate
// behind its own error.
func TestMut_PrepareOfAnXIDPreparedAlready(t *testing.T) {
	b := openTestBroker(t, nil)
	tx := b.BeginTx()
	if err := tx.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Prepare("x1"); err != nil {
		t.Fatal(err)
	}
	again := b.BeginTx()
	if err := again.Ack(Queue, "q", 99); err != nil {
		t.Fatal(err)
	}
	if err := again.Prepare("x1"); !errors.Is(err, ErrDuplicate) {
		t.Errorf("Prepare of x1 (prepared already) acking a message not there: %v, want ErrDuplicate", err)
	}
	if ids, err := b.Prepared(); err != nil || len(ids) != 1 {
		t.Fatalf("prepared: %q, %v; want x1 once", ids, err)
	}
}

// TestMut_DeleteDestinationLeavesTheNextGeneration guards
// DeleteDestination's check, from its second batch on, that the topic it
// deletes is the one it began with (unsub.go, d.id != id): another call
// may delete the topic between two batches, and a Send make a new one of
// the same name. Without the check the first call's next batch deleted
// the new topic, its subscription and the message pending for it.
func TestMut_DeleteDestinationLeavesTheNextGeneration(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 64 << 10})
	subs := b.perBatch() + 5
	for i := range subs {
		if err := b.Subscribe("t", fmt.Sprint("s-", i)); err != nil {
			t.Fatal(err)
		}
	}
	sendTopic(t, b, "t", "m", 3)
	batches := 0
	testHookUnsubscribeBatch = func() {
		batches++
		if batches > 1 {
			return
		}
		// Another client deletes the topic, then makes a new one of
		// the name, subscribes to it and sends it a message.
		if err := b.DeleteDestination(Topic, "t"); err != nil {
			t.Errorf("the other DeleteDestination: %v", err)
		}
		if _, err := b.Send(Topic, "t", &Message{ID: "new", Body: []byte("x")}); err != nil {
			t.Error(err)
		}
		if err := b.Subscribe("t", "next"); err != nil {
			t.Error(err)
		}
		if _, err := b.Send(Topic, "t", &Message{ID: "for-next", Body: []byte("y")}); err != nil {
			t.Error(err)
		}
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.DeleteDestination(Topic, "t"); err != nil {
		t.Fatal(err)
	}
	if batches == 0 {
		t.Fatal("deleted in one batch: the test needs more subscriptions")
	}
	d, err := b.Destination(Topic, "t")
	if err != nil || d.Count != 1 {
		t.Fatalf("the new topic after the first DeleteDestination: %+v, %v; want it there with 1 message", d, err)
	}
	if n, err := b.Pending("t", "next"); err != nil || n != 1 {
		t.Errorf("the new topic's subscription: %d pending, %v; want 1", n, err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}
