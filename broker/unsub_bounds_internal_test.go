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
// pending for it. At a crash after each batch (with some of the unsynced
// bytes kept or not), a read-only open serves the store as it is (Check
// passes, the subscription is not listed), and the next writable Open
// acks the rest: nothing is left holding the messages the other
// subscription acks.
func TestUnsubscribe_CutShortIsFinishedByOpen(t *testing.T) {
	fs := vfs.NewMem()
	db, err := kdb.Open("/db", &kdb.Options{FS: fs, SegmentSize: 64 << 10})
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
	var imgs []*vfs.MemFS
	testHookUnsubscribeBatch = func() {
		imgs = append(imgs, fs.CrashClone(vfs.CrashOptions{KeepUnsynced: float64(len(imgs)%3) / 2, Seed: int64(len(imgs))}))
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.Unsubscribe("t", "drop"); err != nil {
		t.Fatal(err)
	}
	if want := n/b.perBatch() - 1; len(imgs) < want {
		t.Fatalf("%d crash points, want %d (a batch each)", len(imgs), want)
	}
	for i, img := range imgs {
		ro, err := kdb.Open("/db", &kdb.Options{FS: img.Clone(), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := Open(ro)
		if err != nil {
			t.Fatalf("crash %d: read-only Open with an Unsubscribe to finish: %v", i, err)
		}
		if err := rb.Check(); err != nil {
			t.Fatalf("crash %d: Check of a store with an Unsubscribe cut short: %v", i, err)
		}
		if gs, err := rb.allGone(); err != nil || len(gs) != 1 {
			t.Fatalf("crash %d: gone subscriptions: %v, %v; want 1", i, gs, err)
		}
		if subs, _ := rb.Subscriptions("t"); len(subs) != 1 {
			t.Fatalf("crash %d: subscriptions listed: %+v", i, subs)
		}
		_ = ro.Close()

		db2, err := kdb.Open("/db", &kdb.Options{FS: img, SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		b2, err := Open(db2)
		if err != nil {
			t.Fatal(err)
		}
		if gs, err := b2.allGone(); err != nil || len(gs) != 0 {
			t.Fatalf("crash %d: gone subscriptions after Open: %v, %v; want none", i, gs, err)
		}
		if err := b2.Check(); err != nil {
			t.Fatalf("crash %d: %v", i, err)
		}
		ms, err := b2.ReadSub("t", "keep", 0, 2*n)
		if err != nil || len(ms) != n {
			t.Fatalf("crash %d: keep: %d messages, %v", i, len(ms), err)
		}
		seqs := make([]uint64, len(ms))
		for i, m := range ms {
			seqs[i] = m.Seq
		}
		for len(seqs) > 0 {
			k := min(len(seqs), b2.perBatch())
			if err := b2.AckSub("t", "keep", seqs[:k]...); err != nil {
				t.Fatal(err)
			}
			seqs = seqs[k:]
		}
		if d, err := b2.Destination(Topic, "t"); err != nil || d.Count != 0 {
			t.Fatalf("crash %d: after keep acked everything: %+v, %v; want no message left", i, d, err)
		}
		_ = db2.Close()
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
// Send between two of them leaves nothing behind. A crash after any batch
// leaves a store that checks, and a second call finishes the delete.
func TestDeleteDestination_ManySubscriptions(t *testing.T) {
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
	const subs = 300
	for i := range subs {
		if err := b.Subscribe("t", fmt.Sprintf("%s-%03d", strings.Repeat("s", 196), i)); err != nil {
			t.Fatal(err)
		}
	}
	sendTopic(t, b, "t", "m", 5)
	var imgs []*vfs.MemFS
	testHookUnsubscribeBatch = func() {
		imgs = append(imgs, fs.CrashClone(vfs.CrashOptions{KeepUnsynced: 0.5, Seed: int64(len(imgs))}))
		sendTopic(t, b, "t", fmt.Sprint("between-", len(imgs)), 2)
	}
	defer func() { testHookUnsubscribeBatch = nil }()
	if err := b.DeleteDestination(Topic, "t"); err != nil {
		t.Fatal(err)
	}
	if len(imgs) == 0 {
		t.Fatal("deleted in one batch: the test needs more subscriptions")
	}
	if _, err := b.Destination(Topic, "t"); !errors.Is(err, kdb.ErrNotFound) {
		t.Fatalf("after DeleteDestination: %v, want ErrNotFound", err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	testHookUnsubscribeBatch = nil
	for i, img := range imgs {
		o.FS = img
		db2, err := kdb.Open("/db", o)
		if err != nil {
			t.Fatal(err)
		}
		b2, err := Open(db2)
		if err != nil {
			t.Fatal(err)
		}
		if err := b2.Check(); err != nil {
			t.Fatalf("crash %d: %v", i, err)
		}
		if d, err := b2.Destination(Topic, "t"); err != nil || d.Count != 0 {
			t.Fatalf("crash %d: the topic: %+v, %v; want it there, purged", i, d, err)
		}
		if err := b2.DeleteDestination(Topic, "t"); err != nil {
			t.Fatalf("crash %d: the second DeleteDestination: %v", i, err)
		}
		if err := b2.Check(); err != nil {
			t.Fatalf("crash %d: after the second DeleteDestination: %v", i, err)
		}
		_ = db2.Close()
	}
}
