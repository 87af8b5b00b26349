package broker

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
)

// TestUnsubscribe_LeavesANewGenerationAlone: an Unsubscribe of a
// subscription with many messages pending runs in several batches. If,
// between two of them, another call deletes the subscription and a
// Subscribe makes a new one of the same name, the first call's next batch
// looked the name up again and deleted the new subscription too, with
// what was pending for it: one Unsubscribe removed two. Since the first
// batch deletes the subscription (its later ones finish a gone
// subscription, by id), the other client's Unsubscribe finds nothing, and
// the new subscription is left alone.
func TestUnsubscribe_LeavesANewGenerationAlone(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 64 << 10})
	if err := b.Subscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := b.Send(Topic, "t", &Message{ID: fmt.Sprint("m-", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var after uint64
	batches := 0
	testHookUnsubscribeBatch = func() {
		batches++
		if batches > 1 {
			return
		}
		// Another client: its own Unsubscribe (of a subscription gone
		// already), a new subscription and a message for it.
		testHookUnsubscribeBatch = nil
		if err := b.Unsubscribe("t", "s"); !errors.Is(err, kdb.ErrNotFound) {
			t.Errorf("a second Unsubscribe while the first runs: %v, want ErrNotFound", err)
		}
		if err := b.Subscribe("t", "s"); err != nil {
			t.Error(err)
		}
		m := &Message{ID: "after", Body: []byte("y")}
		if _, err := b.Send(Topic, "t", m); err != nil {
			t.Error(err)
		}
		after = m.Seq
		testHookUnsubscribeBatch = func() { batches++ }
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.Unsubscribe("t", "s"); err != nil {
		t.Fatal(err)
	}
	if batches == 0 {
		t.Fatal("the Unsubscribe ran in one batch: the test needs several (smaller segments)")
	}
	subs, err := b.Subscriptions("t")
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions after: %v, %v; want the new one", subs, err)
	}
	if n, err := b.Pending("t", "s"); err != nil || n != 1 {
		t.Fatalf("pending for the new subscription: %d, %v; want 1 (message %d)", n, err, after)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestAPI_BadInputEveryWay: the checks each entry point makes of its
// arguments agree: a bad transaction ID is ErrInvalid for CommitPrepared
// and RollbackPrepared as for Prepare; an unknown queue is ErrNotFound for
// AckAsync with no sequence numbers, as for Ack.
func TestAPI_BadInputEveryWay(t *testing.T) {
	b := openTestBroker(t, nil)
	for _, xid := range []string{"", strings.Repeat("x", 256)} {
		if err := b.CommitPrepared(xid); !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("CommitPrepared(%d bytes): %v, want ErrInvalid", len(xid), err)
		}
		if err := b.RollbackPrepared(xid); !errors.Is(err, kdb.ErrInvalid) {
			t.Errorf("RollbackPrepared(%d bytes): %v, want ErrInvalid", len(xid), err)
		}
	}
	if err := b.Ack(Queue, "nope"); !errors.Is(err, kdb.ErrNotFound) {
		t.Errorf("Ack of no messages of an unknown queue: %v, want ErrNotFound", err)
	}
	if err := b.AckAsync(Queue, "nope"); !errors.Is(err, kdb.ErrNotFound) {
		t.Errorf("AckAsync of no messages of an unknown queue: %v, want ErrNotFound", err)
	}
	if err := b.CreateDestination(Queue, "q"); err != nil {
		t.Fatal(err)
	}
	if err := b.AckAsync(Queue, "q"); err != nil {
		t.Errorf("AckAsync of no messages of a queue: %v", err)
	}
}

// TestSend_LargerThanTheStoresRecords: a message over the largest value
// the store's journal segments hold is ErrInvalid in the broker's words
// (it was the engine's "value record ...: split the batch").
func TestSend_LargerThanTheStoresRecords(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 1 << 20})
	_, err := b.Send(Queue, "q", &Message{ID: "big", Body: make([]byte, 600<<10)})
	if !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "SegmentSize") {
		t.Fatalf("Send of 600 KiB with 1 MiB segments: %v, want ErrInvalid naming SegmentSize", err)
	}
	tx := b.BeginTx()
	_ = tx.Send(Queue, "q", &Message{ID: "big", Body: make([]byte, 600<<10)})
	if err := tx.Commit(); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "SegmentSize") {
		t.Fatalf("Tx.Send of 600 KiB with 1 MiB segments: %v, want ErrInvalid naming SegmentSize", err)
	}
	tx = b.BeginTx()
	_ = tx.Send(Queue, "q", &Message{ID: "big", Body: make([]byte, 600<<10)})
	if err := tx.Prepare("x"); !errors.Is(err, kdb.ErrInvalid) || !strings.Contains(err.Error(), "SegmentSize") {
		t.Fatalf("Prepare of 600 KiB with 1 MiB segments: %v, want ErrInvalid naming SegmentSize", err)
	}
}

// openTestBroker opens a broker on a new store in a temporary directory,
// closed when the test ends.
func openTestBroker(t *testing.T, o *kdb.Options) *Broker {
	t.Helper()
	db, err := kdb.Open(filepath.Join(t.TempDir(), "db"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAPI_BadSubscriptionNameOfAnUnknownTopic: an empty or oversized
// subscription name is kdb.ErrInvalid whether its topic exists or not, as
// Tx.AckSub and Subscribe say at once. ReadSub, Pending, AckSub and
// Unsubscribe looked the topic up first and answered kdb.ErrNotFound for a
// topic not there, hiding the bad argument.
func TestAPI_BadSubscriptionNameOfAnUnknownTopic(t *testing.T) {
	b := openTestBroker(t, nil)
	for _, sub := range []string{"", strings.Repeat("s", MaxNameSize+1)} {
		_, rerr := b.ReadSub("nope", sub, 0, 1)
		_, perr := b.Pending("nope", sub)
		for what, err := range map[string]error{
			"ReadSub":     rerr,
			"Pending":     perr,
			"AckSub":      b.AckSub("nope", sub, 1),
			"Unsubscribe": b.Unsubscribe("nope", sub),
			"Tx.AckSub":   b.BeginTx().AckSub("nope", sub, 1),
			"Subscribe":   b.Subscribe("nope", sub),
		} {
			if !errors.Is(err, kdb.ErrInvalid) {
				t.Errorf("%s of a subscription name of %d bytes on an unknown topic: %v, want kdb.ErrInvalid", what, len(sub), err)
			}
		}
	}
	if _, err := b.Destination(Topic, "nope"); !isNotFound(err) {
		t.Fatalf("the refused calls made the topic: %v", err)
	}
}

// TestUnsubscribe_DamagedGoneRecordIsCorrupt: a gone subscription's record
// (tree "gone": the topic's id and the subscription's, u64 big-endian each,
// to the topic's name) that does not hold together is damage, reported as
// kdb.ErrCorrupt by whatever finishes or drops it, and nothing is acked:
//   - a name of a topic of another id: finishing it acked the pending
//     entries' sequence numbers in that other topic, deleting messages
//     its own subscriptions still had pending;
//   - a key of 17 bytes: read as its first 16, a record that no delete
//     of those 16 removes.
func TestUnsubscribe_DamagedGoneRecordIsCorrupt(t *testing.T) {
	for _, c := range []struct {
		name string
		key  func(g goneSub) []byte
		val  string
		// Purge and DeleteDestination of the topic drop the gone records
		// under its id, whatever they name; those of a bad key they refuse.
		purgeRefused bool
	}{
		{"names a topic of another id", goneSub.key, "u", false},
		{"has a key of 17 bytes", func(g goneSub) []byte { return append(g.key(), 0) }, "t", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openTestBroker(t, nil)
			for _, s := range []struct{ topic, sub string }{{"t", "keep"}, {"t", "drop"}, {"u", "s"}} {
				if err := b.Subscribe(s.topic, s.sub); err != nil {
					t.Fatal(err)
				}
			}
			for _, topic := range []string{"t", "u"} {
				if _, err := b.Send(Topic, topic, &Message{ID: "m", Body: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			}
			// An Unsubscribe of t's "drop" cut short, its record damaged.
			if err := b.ns.Update(func(tx *kdb.Txn) error {
				w := &bwrite{b: b, tx: tx}
				d, id, err := w.topicSub("t", "drop")
				if err != nil {
					return err
				}
				if err := tx.Delete(subsTree, subKey(d.id, "drop")); err != nil {
					return err
				}
				return tx.Put(goneTree, c.key(goneSub{d.id, id}), []byte(c.val))
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(b.DB()); !errors.Is(err, kdb.ErrCorrupt) {
				t.Errorf("Open with a gone subscription record that %s: %v, want kdb.ErrCorrupt", c.name, err)
			}
			if err := b.Check(); !errors.Is(err, kdb.ErrCorrupt) {
				t.Errorf("Check with a gone subscription record that %s: %v, want kdb.ErrCorrupt", c.name, err)
			}
			if c.purgeRefused {
				if err := b.Purge(Topic, "t"); !errors.Is(err, kdb.ErrCorrupt) {
					t.Errorf("Purge of a topic with a gone subscription record that %s: %v, want kdb.ErrCorrupt", c.name, err)
				}
				if err := b.DeleteDestination(Topic, "t"); !errors.Is(err, kdb.ErrCorrupt) {
					t.Errorf("DeleteDestination of a topic with a gone subscription record that %s: %v, want kdb.ErrCorrupt", c.name, err)
				}
			}
			for _, topic := range []string{"t", "u"} {
				sub := map[string]string{"t": "keep", "u": "s"}[topic]
				if ms, err := b.ReadSub(topic, sub, 0, 10); err != nil || len(ms) != 1 {
					t.Errorf("%s's subscription %q: %d messages, %v; want its message", topic, sub, len(ms), err)
				}
			}
		})
	}
}
