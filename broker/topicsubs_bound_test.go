package broker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/broker"
)

// A send to a topic writes an entry for each subscription in one batch.
// Subscribe used to take subscriptions without bound, until every Send to
// the topic failed with "batch record of N bytes: split the batch", which
// no caller can do to one message (an outside tester, 2026-12-07, ~700
// subscriptions with 64 KiB segments). Now the subscription that would
// leave no room for the smallest message is refused, every one before it
// leaves that room, and a Send too large for the topic's fan-out says so.
func TestSubscribe_RefusedWhenTheTopicsSendWouldNotFit(t *testing.T) {
	db, err := kdb.Open(t.TempDir(), &kdb.Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := broker.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; n < 5000; n++ {
		err := b.Subscribe("t", fmt.Sprintf("sub-%04d", n))
		if errors.Is(err, kdb.ErrInvalid) {
			if !strings.Contains(err.Error(), "subscriptions") {
				t.Fatalf("the refusal does not say why: %v", err)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 5000 || n < 100 {
		t.Fatalf("%d subscriptions taken with 64 KiB segments", n)
	}
	// Subscribing again to one that exists is still a no-op, not refused.
	if err := b.Subscribe("t", "sub-0000"); err != nil {
		t.Fatalf("Subscribe of an existing subscription at the bound: %v", err)
	}
	// The smallest message still goes to all n.
	if _, err := b.Send(broker.Topic, "t", &broker.Message{ID: "x"}); err != nil {
		t.Fatalf("the smallest send to a topic with %d subscriptions: %v", n, err)
	}
	// A larger one is refused naming the cause, and nothing is written.
	// (Its ID is kept in the batch, unlike a body past ValueThreshold.)
	_, err = b.Send(broker.Topic, "t", &broker.Message{ID: strings.Repeat("i", 200), Body: make([]byte, 200)})
	if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "subscriptions") {
		t.Fatalf("a send with a 200-byte ID to a topic with %d subscriptions: %v, want ErrInvalid naming the subscriptions", n, err)
	}
	t.Log(err)
	subs, err := b.Subscriptions("t")
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != n {
		t.Fatalf("%d subscriptions, want %d", len(subs), n)
	}
	for _, s := range subs[:3] {
		if s.Pending != 1 {
			t.Fatalf("subscription %+v: want 1 message pending", s)
		}
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d subscriptions with 64 KiB segments (a batch of at most %d bytes)", n, db.MaxBatchSize())
}
