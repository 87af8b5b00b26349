package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kdb-project/kdb"
	"github.com/kdb-project/kdb/vfs"
)

func sendTopic(t *testing.T, b *Broker, topic, prefix string, n int) {
	t.Helper()
	for i := range n {
		if _, err := b.Send(Topic, topic, &Message{ID: fmt.Sprintf("%s-%d", prefix, i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnsubscribe_FinishesUnderTopicLoad: producers sending to the topic
// between two of an Unsubscribe's batches more than one batch acks (here
// 50 per batch, 32 acked per batch with 64 KiB segments) kept it from ever
// finishing: each batch looked the subscription up again and found more
// pending than before. Nothing is delivered to it after its first batch
// now: it takes the batches its backlog needs.
func TestUnsubscribe_FinishesUnderTopicLoad(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 64 << 10})
	for _, s := range []string{"keep", "drop"} {
		if err := b.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	const backlog, flood = 300, 50
	sendTopic(t, b, "t", "old", backlog)
	if flood <= b.perBatch() {
		t.Fatalf("%d sent between batches, %d acked per batch: the test needs more", flood, b.perBatch())
	}
	calls := 0
	testHookUnsubscribeBatch = func() {
		calls++
		if calls <= 100 { // a bounded flood: the old code finishes after it
			sendTopic(t, b, "t", fmt.Sprint("new-", calls), flood)
		}
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.Unsubscribe("t", "drop"); err != nil {
		t.Fatal(err)
	}
	if most := backlog/b.perBatch() + 1; calls > most {
		t.Fatalf("%d batches for a backlog of %d (%d per batch): the Unsubscribe chased the producers", calls+1, backlog, b.perBatch())
	}
	if subs, err := b.Subscriptions("t"); err != nil || len(subs) != 1 || subs[0].Name != "keep" {
		t.Fatalf("subscriptions: %+v, %v", subs, err)
	}
	want := uint64(backlog + flood*calls)
	if n, err := b.Pending("t", "keep"); err != nil || n != want {
		t.Fatalf("keep: %d pending, %v; want %d", n, err, want)
	}
	if d, err := b.Destination(Topic, "t"); err != nil || d.Count != want {
		t.Fatalf("topic: %+v, %v; want %d messages (those of keep)", d, err, want)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestUnsubscribe_CutShortIsFinishedByOpen: a crash between two of an
// Unsubscribe's batches leaves the subscription gone with messages still
// pending for it. A read-only open serves the store as it is (Check
// passes), and the next writable Open acks the rest: nothing is left
// holding the messages the other subscription acks.
func TestUnsubscribe_CutShortIsFinishedByOpen(t *testing.T) {
	fs := vfs.NewMem()
	o := &kdb.Options{FS: fs, SegmentSize: 64 << 10}
	db, err := kdb.Open("/db", o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := Open(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"keep", "drop"} {
		if err := b.Subscribe("t", s); err != nil {
			t.Fatal(err)
		}
	}
	const n = 200
	sendTopic(t, b, "t", "m", n)
	var img *vfs.MemFS
	testHookUnsubscribeBatch = func() {
		if img == nil {
			img = fs.CrashClone(vfs.CrashOptions{}) // the power fails after the first batch
		}
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.Unsubscribe("t", "drop"); err != nil {
		t.Fatal(err)
	}
	if img == nil {
		t.Fatal("the Unsubscribe ran in one batch: the test needs several")
	}

	ro, err := kdb.Open("/db", &kdb.Options{FS: img.Clone(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Open(ro)
	if err != nil {
		t.Fatalf("read-only Open with an Unsubscribe to finish: %v", err)
	}
	if err := rb.Check(); err != nil {
		t.Fatalf("Check of a store with an Unsubscribe cut short: %v", err)
	}
	if gs, err := rb.allGone(); err != nil || len(gs) != 1 {
		t.Fatalf("gone subscriptions after the crash: %v, %v; want 1", gs, err)
	}
	if subs, _ := rb.Subscriptions("t"); len(subs) != 1 {
		t.Fatalf("subscriptions listed after the crash: %+v", subs)
	}
	_ = ro.Close()

	db2, err := kdb.Open("/db", &kdb.Options{FS: img, SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	b2, err := Open(db2)
	if err != nil {
		t.Fatal(err)
	}
	if gs, err := b2.allGone(); err != nil || len(gs) != 0 {
		t.Fatalf("gone subscriptions after Open: %v, %v; want none", gs, err)
	}
	if err := b2.Check(); err != nil {
		t.Fatal(err)
	}
	ms, err := b2.ReadSub("t", "keep", 0, 2*n)
	if err != nil || len(ms) != n {
		t.Fatalf("keep: %d messages, %v", len(ms), err)
	}
	for _, m := range ms {
		if err := b2.AckSub("t", "keep", m.Seq); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := b2.Destination(Topic, "t"); err != nil || d.Count != 0 {
		t.Fatalf("after keep acked everything: %+v, %v; want no message left", d, err)
	}
}

// TestUnsubscribe_PurgeOrDeleteMidway: a Purge or a DeleteDestination of
// the topic between two of an Unsubscribe's batches takes what was still
// pending for the gone subscription with it; the Unsubscribe then has
// nothing left to do, and the store checks.
func TestUnsubscribe_PurgeOrDeleteMidway(t *testing.T) {
	for _, op := range []string{"purge", "delete"} {
		t.Run(op, func(t *testing.T) {
			b := openTestBroker(t, &kdb.Options{SegmentSize: 64 << 10})
			for _, s := range []string{"keep", "drop"} {
				if err := b.Subscribe("t", s); err != nil {
					t.Fatal(err)
				}
			}
			sendTopic(t, b, "t", "m", 200)
			calls := 0
			testHookUnsubscribeBatch = func() {
				if calls++; calls > 1 {
					return
				}
				var err error
				if op == "purge" {
					err = b.Purge(Topic, "t")
				} else {
					err = b.DeleteDestination(Topic, "t")
				}
				if err != nil {
					t.Error(err)
				}
			}
			defer func() { testHookUnsubscribeBatch = nil }()
			if err := b.Unsubscribe("t", "drop"); err != nil {
				t.Fatal(err)
			}
			if calls != 1 {
				t.Fatalf("%d batches after the %s, want none", calls-1, op)
			}
			if gs, err := b.allGone(); err != nil || len(gs) != 0 {
				t.Fatalf("gone subscriptions: %v, %v", gs, err)
			}
			if err := b.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeleteDestination_ManySubscriptions: a topic with more subscriptions
// than one batch deletes (300 names of 200 bytes, 64 KiB segments) failed
// with "split the batch" every time. It is deleted in batches now, and a
// Send between two of them leaves nothing behind.
func TestDeleteDestination_ManySubscriptions(t *testing.T) {
	b := openTestBroker(t, &kdb.Options{SegmentSize: 64 << 10})
	const subs = 300
	for i := range subs {
		if err := b.Subscribe("t", fmt.Sprintf("%s-%03d", strings.Repeat("s", 196), i)); err != nil {
			t.Fatal(err)
		}
	}
	sendTopic(t, b, "t", "m", 5)
	calls := 0
	testHookUnsubscribeBatch = func() {
		calls++
		sendTopic(t, b, "t", fmt.Sprint("between-", calls), 2)
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.DeleteDestination(Topic, "t"); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("deleted in one batch: the test needs more subscriptions")
	}
	if _, err := b.Destination(Topic, "t"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("after DeleteDestination: %v, want ErrNotFound", err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}
