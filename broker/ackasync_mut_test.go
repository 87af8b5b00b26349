package broker

// Tests added by mutation testing of the broker's AckAsync: each guards a
// check that a deliberate breakage of the code removed without any other
// test failing.

import (
	"errors"
	"testing"
	"time"

	"github.com/kdb-project/kdb"
)

// TestMut_AckAsyncRefusesTopics guards AckAsync's kind check (ackasync.go,
// "AckAsync is for queues"): a topic's messages are acked per subscription
// (AckSub). Without the check, AckAsync of a topic message dropped one of
// its references while it stayed pending for its subscription: the store
// failed Broker.Check (a message whose reference count is below the
// subscriptions it is pending for).
func TestMut_AckAsyncRefusesTopics(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	if err := b.Subscribe("t", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe("t", "s2"); err != nil {
		t.Fatal(err)
	}
	seq, err := b.Send(Topic, "t", &Message{ID: "m", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AckAsync(Topic, "t", seq); !errors.Is(err, kdb.ErrInvalid) {
		t.Fatalf("AckAsync of a topic: %v, want kdb.ErrInvalid", err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if n, err := b.Pending("t", s); err != nil || n != 1 {
			t.Fatalf("pending for %s: %d, %v; want 1", s, n, err)
		}
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMut_AckDeferredSkipsAQueueMadeAgain guards ackDeferred's check of
// the queue's id (ackasync.go, "deleted and created again"): an AckAsync
// checked against one queue whose deferred transaction runs after the
// queue was deleted and made again (a race between AckAsync's check and
// its Defer) must not ack the new queue's message of the same sequence
// number. The race is not reachable deterministically, so the test runs
// the deferred transaction itself.
func TestMut_AckDeferredSkipsAQueueMadeAgain(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	old, err := b.Send(Queue, "q", &Message{ID: "old", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	var oldID uint64
	if err := b.view(func(s snap) error {
		d, err := s.destRec(Queue, "q")
		if err == nil {
			oldID = d.id
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteDestination(Queue, "q"); err != nil {
		t.Fatal(err)
	}
	seq, err := b.Send(Queue, "q", &Message{ID: "new", Body: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	if seq != old {
		t.Fatalf("the new queue's first message has seq %d, the old one's %d: the test needs them equal", seq, old)
	}
	// The old queue's AckAsync, run as its deferred transaction would.
	if err := b.ns.Update(func(tx *kdb.Txn) error {
		w := &bwrite{b: b, tx: tx}
		if err := w.ackDeferred(Queue, "q", oldID, []uint64{old}); err != nil {
			return err
		}
		w.flush()
		return w.err
	}); err != nil {
		t.Fatal(err)
	}
	if m, err := b.GetMessage(Queue, "q", "new"); err != nil || m.Seq != seq {
		t.Fatalf("the new queue's message after the old queue's ack: %v, %v; want it kept", m, err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMut_SyncRunsTheDeferredAcksAtOnce guards Broker.Sync's first step
// (ackasync.go, "The engine's Sync commits the deferred acks not yet
// run"): Sync commits the AckAsyncs still deferred itself. Without it,
// Sync waited for the engine's timer (Options.SyncInterval) to run them:
// with a long interval, Sync blocked that long.
func TestMut_SyncRunsTheDeferredAcksAtOnce(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10, SyncInterval: time.Hour})
	seq, err := b.Send(Queue, "q", &Message{ID: "m", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AckAsync(Queue, "q", seq); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Sync() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sync still waiting after 10s for an AckAsync deferred under a SyncInterval of an hour")
	}
	if d, err := b.Destination(Queue, "q"); err != nil || d.Count != 0 {
		t.Fatalf("after Sync: %+v, %v; want the message acked", d, err)
	}
}

// TestMut_AckAsyncKeepsItsOwnSeqs guards AckAsync's copy of its sequence
// numbers (ackasync.go, "the caller's may change"): the deferred ack runs
// after AckAsync returned, so a caller reusing its slice must not change
// what is acked (here it would ack a message never acked, and leave the
// acked one).
func TestMut_AckAsyncKeepsItsOwnSeqs(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10, SyncInterval: time.Hour})
	var seqs []uint64
	for _, id := range []string{"a", "c"} {
		seq, err := b.Send(Queue, "q", &Message{ID: id, Body: []byte(id)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	buf := []uint64{seqs[0]}
	if err := b.AckAsync(Queue, "q", buf...); err != nil {
		t.Fatal(err)
	}
	buf[0] = seqs[1] // the caller reuses its slice
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetMessage(Queue, "q", "a"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("the acked message after Sync: %v, want kdb.ErrNotFound", err)
	}
	if _, err := b.GetMessage(Queue, "q", "c"); err != nil {
		t.Fatalf("the message not acked after Sync: %v, want it kept", err)
	}
}

// TestMut_AppliedAcksLeavePending guards the end of an AckAsync's
// bookkeeping (ackasync.go, the done function): once its transaction is
// applied, its messages leave b.acks.pending. Before, every message ever
// acked by AckAsync stayed in the map: memory that grows with the
// broker's lifetime, with nothing to show for it but a refusal the store
// gives anyway.
func TestMut_AppliedAcksLeavePending(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 128 << 10})
	for i := 0; i < 20; i++ {
		seq, err := b.Send(Queue, "q", &Message{ID: string(rune('a' + i)), Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AckAsync(Queue, "q", seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	b.acks.mu.Lock()
	pending, out := len(b.acks.pending), len(b.acks.out)
	b.acks.mu.Unlock()
	if pending != 0 || out != 0 {
		t.Fatalf("after Sync: %d messages and %d AckAsyncs still recorded as on their way, want 0", pending, out)
	}
}
